"""DAPPLE's search space: uneven replica counts (its VGG-19 15:1 plan) and one row per plan."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.errors import UnknownNameError
from pipesim.plan import Plan, StagePlan
from pipesim.planner import plan
from pipesim.planner import search as planner_search
from pipesim.planner.dapple import dapple_search
from pipesim.planner.estimate import CostModel
from pipesim.planner.search import plan_identity
from pipesim.planner.search_space import replica_candidates
from pipesim.profiles import get_cluster, zoo_model
from pipesim.profiles.models.profile import Layer, ModelProfile

CLUSTER = get_cluster("dapple-2x8-v100")  # 2 servers x 8 V100


def _merged(name: str, layers: tuple[Layer, ...]) -> Layer:
    return Layer(
        name=name,
        fwd_time_s=sum(lay.fwd_time_s for lay in layers),
        bwd_time_s=sum(lay.bwd_time_s for lay in layers),
        activation_bytes=layers[-1].activation_bytes,
        parameter_bytes=sum(lay.parameter_bytes for lay in layers),
    )


def _vgg19_two_blocks() -> ModelProfile:
    """The zoo's VGG-19 as DAPPLE's 15:1 plan cuts it: the convolutional features (compute heavy,
    80 MB of parameters) and the fully connected classifier (cheap, 495 MB of parameters)."""
    vgg = zoo_model("vgg19")
    names = [lay.name for lay in vgg.layers]
    fc = names.index("fc1")
    return ModelProfile(
        name="vgg19-two-blocks",
        layers=(_merged("features", vgg.layers[:fc]), _merged("classifier", vgg.layers[fc:])),
        profile_batch_size=vgg.profile_batch_size,
    )


def test_vgg19_fifteen_to_one_is_produced() -> None:
    # DAPPLE's VGG-19 plan (run_15_1_pipeline.sh): 15 replicas of the features, 1 of the
    # classifier; 15 replicas split a micro-batch unevenly, which the old candidates (powers of two
    # or multiples of the server size dividing the micro-batch) left out
    assert 15 in replica_candidates(1024, 16, 8)
    model = CostModel(_vgg19_two_blocks(), CLUSTER, optimizer="sgd")
    best = dapple_search(model, 2048, top=1)[0]
    assert [len(d) for _, _, d in best.stages] == [15, 1]
    assert 2048 // best.num_microbatches % 15 != 0  # uneven shares
    # it beats every plan whose replica counts divide the micro-batch
    for m in (1, 2, 4, 8, 16):
        b = 2048 // m
        even = [r for r in range(1, 17) if b % r == 0]
        for r0 in even:
            for r1 in even:
                if r0 + r1 > 16:
                    continue
                two = Plan(
                    stages=(
                        StagePlan(first_layer=0, last_layer=0, replicas=r0, devices=tuple(range(r0))),
                        StagePlan(
                            first_layer=1, last_layer=1, replicas=r1, devices=tuple(range(16 - r1, 16))
                        ),
                    ),
                    global_batch_size=2048,
                    num_microbatches=m,
                )
                est = model.estimate(two, decomposable=True)
                if est.peak_memory_bytes <= CLUSTER.device.memory_bytes:
                    assert est.iteration_time_s > best.time_s


def test_top_lists_each_plan_once() -> None:
    for model, gbs in (("gnmt16", 64), ("vgg19", 256), ("bert48", 32)):
        plans = plan(model, CLUSTER, gbs, top=12)
        keys = [plan_identity(p) for p in plans]
        assert len(keys) == len(set(keys)), model


def test_duplicate_proposals_are_merged(monkeypatch: pytest.MonkeyPatch) -> None:
    # a planner that proposes one plan three times (once with its replicas listed in another
    # order) and a second plan: plan() returns two rows
    one = Plan(
        stages=(StagePlan(first_layer=0, last_layer=18, replicas=16, devices=tuple(range(16))),),
        global_batch_size=64,
        num_microbatches=2,
    )
    permuted = replace(
        one,
        stages=(replace(one.stages[0], devices=tuple(s * 8 + j for j in range(8) for s in range(2))),),
    )
    other = replace(one, num_microbatches=4)
    proposals = [one, permuted, one, other]
    monkeypatch.setitem(
        planner_search._PLANNERS, "dapple", lambda model, gbs, limit, top, pl, ms, full: list(proposals)
    )
    plans = plan("gnmt16", CLUSTER, 64, top=5, schedule="dapple")
    assert [p.num_microbatches for p in plans] == [2, 4]
    assert plan_identity(one) == plan_identity(permuted)
    assert plan_identity(one) != plan_identity(other)


def test_planner_replica_space_is_full_by_default_and_structured_on_request() -> None:
    """``pipesim.planner.plan`` searches DAPPLE's full space unless asked for the structured counts;
    the full space finds the 15:1 plan, the structured one cannot hold 15 replicas."""
    profile = _vgg19_two_blocks()
    default = plan(profile, CLUSTER, 2048, optimizer="sgd", top=1)[0]
    assert [s.replicas for s in default.stages] == [15, 1]
    full = plan(profile, CLUSTER, 2048, optimizer="sgd", top=1, replica_space="full")[0]
    assert plan_identity(full) == plan_identity(default)
    structured = plan(profile, CLUSTER, 2048, optimizer="sgd", top=1, replica_space="structured")[0]
    assert all(r & (r - 1) == 0 or r % 8 == 0 for r in (s.replicas for s in structured.stages))
    assert default.estimate is not None
    assert structured.estimate is not None
    assert default.estimate.iteration_time_s <= structured.estimate.iteration_time_s
    with pytest.raises(UnknownNameError, match="unknown replica space 'all'; valid replica space names"):
        plan(profile, CLUSTER, 2048, replica_space="all")
