"""Issue 15's plan bullet, "per stage, a tensor-parallel degree": stages of one plan with
different TP degrees and sharding simulate, each stage with its own groups, collectives and
shards; the pipeline send between them carries ``1 / min(t)`` of the activation (the
lowering's rule, simulator/tp_lowering.py); the 3D estimate refuses such a plan by name."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner.three_d import estimate_3d
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.lowering import lower
from pipesim.simulator.trace import EventKind

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=50257"


def _plan() -> Plan:
    stages = (StagePlan(first_layer=0, last_layer=2, tensor_parallel=2, replicas=2),
              StagePlan(first_layer=3, last_layer=5, tensor_parallel=4, replicas=2, sharding="zero1"))
    return Plan(stages=stages, global_batch_size=16, num_microbatches=4, schedule="1f1b")


def test_stages_of_different_tp_degrees_simulate_with_their_own_groups() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    plan = _plan()
    assert plan.num_devices == 2 * 2 + 2 * 4
    assert plan.tp_groups(cluster.num_devices) == (((0, 1), (2, 3)), ((4, 5, 6, 7), (8, 9, 10, 11)))
    result = simulate(plan, profile, cluster, SimOptions(optimizer_step=False, record_trace=True))
    tp = [e for e in result.events if e.kind is EventKind.TP_COLLECTIVE]
    assert {e.device for e in tp if e.stage == 0} == {0, 2}
    assert {e.device for e in tp if e.stage == 1} == {4, 8}
    # each replica's share of a micro-batch: 16 / 4 / 2 = 2 samples of s h fp16 activations
    act = 2 * 1024 * 1024 * 2
    sends = [e for e in result.events if e.kind in (EventKind.SEND_ACTIVATION, EventKind.SEND_GRADIENT)]
    assert sends
    assert {e.nbytes for e in sends} == {act / 2}  # 1 / min(2, 4)
    # the blocks' parameters split by each stage's own degree, ZeRO-1's optimizer state over 2
    program = lower(plan, profile, cluster, SimOptions())
    first, second = (program.static_memory_bytes[s.devices[0]] for s in program.stages)
    second_t2 = StagePlan(first_layer=3, last_layer=5, tensor_parallel=2, replicas=2, sharding="zero1")
    narrow = Plan(stages=(plan.stages[0], second_t2), global_batch_size=16, num_microbatches=4)
    same = lower(narrow, profile, cluster, SimOptions())
    first_same, second_same = (same.static_memory_bytes[s.devices[0]] for s in same.stages)
    assert first == first_same  # stage 0 is the same stage
    assert 0 < second < second_same  # t = 4 keeps less of the same layers than t = 2


def test_the_3d_estimate_refuses_mixed_degrees_by_name() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    with pytest.raises(InputError, match="mixed per-stage parallelism"):
        estimate_3d(_plan(), profile, cluster)
