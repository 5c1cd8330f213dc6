"""Invariants every simulated iteration keeps, over random plans of every schedule.

For each random plan (stage sizes, replicas, micro-batches, layer costs, link model, all-reduce
overlap, speed factors and jitter all drawn): the iteration lasts at least as long as the busiest
device computes; the bubble fraction is in [0, 1); every device's peak memory is at least its
static memory; the same inputs give the same result; the ``simulate --json`` document is finite
JSON; and GPipe never needs less memory than 1F1B on the same plan. The default run draws a
bounded number of examples; ``pytest -m slow`` runs many more.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.cli.simulate import result_json
from pipesim.fileio import json_text
from pipesim.plan import Plan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules import schedule_names
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import random_plan

CLUSTER = get_cluster("dapple-2x8-v100")  # 16 GPUs on 2 servers: NVLink inside, 25 GbE between
SCHEDULES = sorted(schedule_names())
Case = tuple[Plan, ModelProfile, SimOptions]


@st.composite
def cases(draw: st.DrawFn, schedule: str | None = None) -> Case:
    name = schedule or draw(st.sampled_from(SCHEDULES))
    plan, profile = random_plan(draw, name, max_microbatches=8, min_op_time_s=1e-4, recompute=True)
    jitter = draw(st.sampled_from([0.0, 0.2]))
    options = SimOptions(
        free_links=draw(st.booleans()),
        contention=draw(st.booleans()),
        allreduce_overlap=draw(st.sampled_from(["after_backward", "end", "bucketed"])),
        speed_factors={0: draw(st.sampled_from([0.5, 1.0]))},
        jitter=jitter,
        seed=draw(st.integers(0, 2**32)),
    )
    return plan, profile, options


def check_invariants(case: Case) -> None:
    plan, profile, options = case
    result = simulate(plan, profile, CLUSTER, options)
    busiest = max(d.busy_time_s for d in result.devices)
    assert result.iteration_time_s >= busiest * (1 - 1e-12)
    assert 0.0 <= result.bubble_fraction < 1.0
    for device in result.devices:
        assert device.peak_memory_bytes >= device.static_memory_bytes * (1 - 1e-12)
        assert device.busy_time_s >= 0
        assert device.comm_wait_time_s >= 0
        assert device.bubble_time_s >= -1e-12
    again = simulate(plan, profile, CLUSTER, options)
    assert again.iteration_time_s == result.iteration_time_s
    assert [d.peak_memory_bytes for d in again.devices] == [d.peak_memory_bytes for d in result.devices]
    document = json_text(result_json(result), what="simulate --json")
    assert json.loads(document)["iteration_time_s"] == result.iteration_time_s
    if plan.schedule in ("1f1b", "dapple") and plan.microbatch_sizes is None:
        gpipe = simulate(dataclasses.replace(plan, schedule="gpipe"), profile, CLUSTER, options)
        by_device = {d.device: d.peak_memory_bytes for d in gpipe.devices}
        for device in result.devices:
            assert by_device[device.device] >= device.peak_memory_bytes * (1 - 1e-12)


@pytest.mark.parametrize("schedule", SCHEDULES)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_invariants_hold_for_every_schedule(schedule: str, data: st.DataObject) -> None:
    check_invariants(data.draw(cases(schedule)))


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_invariants_hold_on_many_random_simulations(case: Case) -> None:
    check_invariants(case)
