"""Synchronous TP collectives (``StagePlan.tp_dgrad_overlap = False``): Megatron-LM before its
asynchronous input-gradient all-reduce (commit cf7efd4f5a, 2021-08-30) exposes every backward
TP collective whole; nothing hides behind the weight-gradient GEMMs."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, Recompute, StagePlan
from pipesim.plan_file import plan_from_dict, plan_to_dict
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.context_parallel import FREE_HOP, stage_cp_times
from pipesim.profiles.costmodels.tensor_parallel import (
    collective_time_s,
    layer_collective_times_s,
    layer_collectives,
    stage_tp_times,
    tp_compute_model,
)
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import DTYPE_BYTES, ModelProfile
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.lowering import lower

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000"


def _plan(t: int, *, sp: bool = False, dgrad: bool = True, m: int = 2, c: int = 1) -> Plan:
    stage = StagePlan(first_layer=0, last_layer=5, replicas=1, tensor_parallel=t, sequence_parallel=sp,
                      tp_dgrad_overlap=dgrad, context_parallel=c)
    return Plan(stages=(stage,), global_batch_size=2 * m, num_microbatches=m, schedule="1f1b")


def _curves(t: int) -> tuple[ModelProfile, Cluster, AllReduceCurves]:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    lowered = lower(_plan(t), profile, cluster, SimOptions())
    assert lowered.tp is not None
    return profile, cluster, lowered.tp.curves(tuple(range(t)))


@pytest.mark.parametrize("sp", [False, True])
def test_a_layer_exposes_every_backward_collective_whole(sp: bool) -> None:
    profile, _, curves = _curves(4)
    elem = DTYPE_BYTES[profile.dtype]
    block = profile.layers[1]
    assert block.shape is not None
    calls = layer_collectives(block.shape, 4, sp, 2, elem)
    whole = sum(collective_time_s(curves, c) for c in calls if c.phase == "B")
    forward = sum(collective_time_s(curves, c) for c in calls if c.phase == "F")
    bwd_s = 1.0  # a weight gradient long enough to hide every input-gradient collective
    hidden = layer_collective_times_s(block, bwd_s, 4, sp, 2, elem, curves)
    sync = layer_collective_times_s(block, bwd_s, 4, sp, 2, elem, curves, dgrad_overlap=False)
    assert sync == pytest.approx((forward, whole, whole), rel=1e-12)
    assert hidden[0] == sync[0]
    assert hidden[2] == sync[2]
    # with the overlap only the collectives without a weight gradient to hide behind stay:
    # nothing of the all-reduces without SP, the row-parallel all-gathers with it
    kept = sum(collective_time_s(curves, c) for c in calls if c.phase == "B" and not c.wgrad_share)
    assert hidden[1] == pytest.approx(kept, rel=1e-12)
    assert hidden[1] < sync[1]


@pytest.mark.parametrize("sp", [False, True])
def test_a_stage_exposes_as_a_split_backward_does(sp: bool) -> None:
    profile, cluster, curves = _curves(4)
    model = tp_compute_model(profile, cluster.device)
    last = profile.num_layers - 1
    asynchronous = stage_tp_times(profile, 0, last, 2, 4, sp, curves, model)
    sync = stage_tp_times(profile, 0, last, 2, 4, sp, curves, model, dgrad_overlap=False)
    assert sync.bwd_comm_s == sync.bwd_split_comm_s == asynchronous.bwd_split_comm_s
    assert asynchronous.bwd_comm_s < sync.bwd_comm_s
    assert sync._replace(bwd_comm_s=asynchronous.bwd_comm_s) == asynchronous
    # the CP pass at c = 1 is the TP pass, and at c = 2 exposes as its split backward too
    assert stage_cp_times(profile, 0, last, 2, 4, 1, sp, curves, FREE_HOP, model, dgrad_overlap=False) == sync
    cp2 = stage_cp_times(profile, 0, last, 2, 4, 2, sp, curves, FREE_HOP, model, dgrad_overlap=False)
    assert cp2.bwd_comm_s == cp2.bwd_split_comm_s


def test_the_simulated_backward_launches_nothing_early_and_the_estimate_agrees() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    m = 2
    asynchronous, sync = _plan(4, m=m), _plan(4, m=m, dgrad=False)
    tp = lower(sync, profile, cluster, SimOptions()).tp
    tp_async = lower(asynchronous, profile, cluster, SimOptions()).tp
    assert tp is not None
    assert tp_async is not None
    assert tp.exposed_comm_s("B", 0, 2, 0) == pytest.approx(tp_async.exposed_comm_s("I", 0, 2, 0), rel=1e-12)
    extra = tp.exposed_comm_s("B", 0, 2, 0) - tp_async.exposed_comm_s("B", 0, 2, 0)
    assert extra > 0
    options = SimOptions(record_trace=False)
    sims = [simulate(p, profile, cluster, options).iteration_time_s for p in (asynchronous, sync)]
    ests = [estimate_3d(p, profile, cluster).iteration_time_s for p in (asynchronous, sync)]
    # one stage: every backward is on the critical path, each exposing ``extra`` more
    assert sims[1] - sims[0] == pytest.approx(m * extra, rel=1e-6)
    assert ests[1] - ests[0] == pytest.approx(m * extra, rel=1e-6)


def test_full_recomputation_replays_no_backward_collective() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    plans = [dataclasses.replace(_plan(4, dgrad=d), recompute=Recompute.FULL) for d in (True, False)]
    sims = [simulate(p, profile, cluster, SimOptions(record_trace=False)).iteration_time_s for p in plans]
    tp = lower(plans[1], profile, cluster, SimOptions()).tp
    tp_async = lower(plans[0], profile, cluster, SimOptions()).tp
    assert tp is not None
    assert tp_async is not None
    extra = tp.exposed_comm_s("B", 0, 2, 0) - tp_async.exposed_comm_s("B", 0, 2, 0)
    assert sims[1] - sims[0] == pytest.approx(2 * extra, rel=1e-6)


def test_the_field_is_checked_and_round_trips_the_plan_file() -> None:
    with pytest.raises(InputError, match="tp_dgrad_overlap"):
        StagePlan(first_layer=0, last_layer=1, tensor_parallel=2, tp_dgrad_overlap=1)  # type: ignore[arg-type]
    sync, default = _plan(2, dgrad=False), _plan(2)
    data = plan_to_dict(sync)
    assert data["stages"][0]["tp_dgrad_overlap"] is False
    assert "tp_dgrad_overlap" not in plan_to_dict(default)["stages"][0]
    assert plan_from_dict(data) == sync
    assert plan_from_dict(plan_to_dict(default)) == default


def test_the_3d_estimate_refuses_mixed_overlaps() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    stages = (StagePlan(first_layer=0, last_layer=2, tensor_parallel=2),
              StagePlan(first_layer=3, last_layer=5, tensor_parallel=2, tp_dgrad_overlap=False))
    plan = Plan(stages=stages, global_batch_size=4, num_microbatches=2, schedule="1f1b")
    with pytest.raises(InputError, match="mixed"):
        estimate_3d(plan, profile, cluster)
