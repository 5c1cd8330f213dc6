"""The 3D estimate charges ZeRO's collectives as the simulator runs them (docs/parallelism.md)."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.zero3_timing import gated_time_s, reduce_tail_s, zero3_times_s
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate

GPT = "gpt:layers=8,hidden=2048,heads=16,seq=1024,vocab=32000"


def _plan(sharding: str, d: int, m: int, layers: int) -> Plan:
    stage = StagePlan(first_layer=0, last_layer=layers - 1, replicas=d, sharding=sharding)
    return Plan(stages=(stage,), global_batch_size=2 * d * m, num_microbatches=m, schedule="1f1b")


@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2", "zero3", "distributed"])
@pytest.mark.parametrize(("d", "m"), [(16, 1), (16, 4), (8, 2)])
def test_estimate_follows_the_simulation(sharding: str, d: int, m: int) -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    plan = _plan(sharding, d, m, profile.num_layers)
    est = estimate_3d(plan, profile, cluster).iteration_time_s
    sim = simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert est == pytest.approx(sim, rel=0.03)


def test_zero1_estimate_is_the_allreduce_halves() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    # without the optimizer step (a sharded one updates 1/d of the parameters)
    none = estimate_3d(_plan("none", 16, 2, profile.num_layers), profile, cluster, optimizer_step=False)
    for sharding in ("zero1", "distributed"):
        plan = _plan(sharding, 16, 2, profile.num_layers)
        est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
        assert est == pytest.approx(none.iteration_time_s, rel=1e-9)  # auto: the rings for both


def test_gated_time_closed_forms() -> None:
    # depth 1: the first gather exposed, then each unit waits max(compute before, its gather)
    assert gated_time_s([1.0, 1.0, 1.0], [2.0, 2.0, 2.0], 1, 0.0) == 2.0 + 2.0 + 2.0 + 1.0
    assert gated_time_s([3.0, 3.0, 3.0], [1.0, 1.0, 1.0], 1, 0.0) == 1.0 + 9.0
    assert gated_time_s([3.0, 3.0, 3.0], [1.0, 1.0, 1.0], 1, 3.0) == 9.0  # prefetched during the op before
    # depth 2 issues gathers two units ahead: gathers of 2 s behind units of 1.5 s
    assert gated_time_s([1.5] * 4, [2.0] * 4, 2, 0.0) == pytest.approx(2.0 + 2.0 + 2.0 + 2.0 + 1.5)
    assert reduce_tail_s([1.0, 1.0], [0.5, 0.5]) == 0.5
    assert reduce_tail_s([1.0, 1.0], [2.0, 2.0]) == 3.0
    x = zero3_times_s([1.0, 1.0], [2.0, 2.0], [0.5, 0.5], [0.5, 0.5])  # gathers hidden, no spill
    assert (x.fwd_s, x.bwd_s, x.first_extra_s, x.last_tail_s, x.spill_s) == (2.0, 4.0, 0.5, 0.5, 0.0)
