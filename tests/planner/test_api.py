"""The planner API: registry, ranking, estimates, errors (HPGO compatibility: tests/compat)."""

from __future__ import annotations

import itertools
import math

import pytest

import pipesim
from pipesim.errors import Infeasible, InputError, UnknownNameError
from pipesim.plan import Plan, StagePlan
from pipesim.planner import SHORTLIST, plan, planner_names
from pipesim.planner.placement import Placement, device_order, parse_placement, stage_start
from pipesim.planner.search_space import cut_positions, device_unit, replica_candidates
from pipesim.profiles import get_cluster, zoo_model
from pipesim.profiles.models.profile import Layer, ModelProfile

CLUSTER = get_cluster("dapple-2x8-v100")


def test_registry() -> None:
    assert planner_names() == ("dapple", "dp", "gpipe", "megatron", "pipedream")
    with pytest.raises(UnknownNameError, match="valid planner names: dapple, dp, gpipe, megatron, pipedream"):
        plan(zoo_model("gnmt16"), CLUSTER, 64, planner="alpa")
    with pytest.raises(UnknownNameError, match="placement"):
        parse_placement("random-first")


def test_ranked_plans_with_estimates() -> None:
    plans = plan(zoo_model("gnmt16"), CLUSTER, 64, top=4, schedule="dapple")
    times = [p.estimate.iteration_time_s for p in plans if p.estimate]
    assert len(times) == len(plans) >= 2
    assert times == sorted(times)
    for p in plans:
        assert p.planner == "dapple"
        assert p.schedule == "dapple"
        assert p.estimate is not None
        assert p.estimate.throughput_samples_per_s == pytest.approx(64 / p.estimate.iteration_time_s)
        assert p.estimate.peak_memory_bytes <= CLUSTER.device.memory_bytes
        assert all(s.devices is not None for s in p.stages)
    best = plans[0].estimate
    assert best is not None
    assert best.speedup_vs_dp is not None
    assert best.speedup_vs_dp >= 1.0
    dp = plan(zoo_model("gnmt16"), CLUSTER, 64, planner="dp")[0]
    assert dp.estimate is not None
    assert dp.estimate.speedup_vs_dp == pytest.approx(1.0)
    assert len(dp.stages) == 1


def test_gpipe_has_no_replication() -> None:
    for p in plan(zoo_model("gnmt16"), CLUSTER, 64, planner="gpipe", top=3):
        assert p.schedule == "gpipe"
        assert all(s.replicas == 1 for s in p.stages)


def test_memory_limit_infeasible() -> None:
    with pytest.raises(Infeasible, match="fits in"):
        plan(zoo_model("bert48"), CLUSTER, 64, memory_limit_bytes=2**30)
    with pytest.raises(InputError, match="global_batch_size"):
        plan(zoo_model("bert48"), CLUSTER, 0)
    with pytest.raises(InputError, match="microbatch_counts"):
        plan(zoo_model("bert48"), CLUSTER, 64, microbatch_counts=[3])


def test_placement_policies() -> None:
    assert device_order(CLUSTER, Placement.SCATTER_FIRST)[:4] == (0, 8, 1, 9)
    assert device_order(CLUSTER, Placement.APPEND_FIRST)[:4] == (0, 1, 2, 3)
    assert stage_start(3, Placement.FRESH_FIRST, 8) == 8
    assert stage_start(8, Placement.FRESH_FIRST, 8) == 8
    assert stage_start(3, Placement.APPEND_FIRST, 8) == 3
    assert replica_candidates(12, 16, 8) == list(range(1, 13))  # uneven shares included
    assert replica_candidates(64, 16, 8) == list(range(1, 17))


def test_big_clusters_use_whole_server_units() -> None:
    assert device_unit(16, 8) == 1
    assert device_unit(64, 8) == 1
    assert device_unit(128, 8) == 8
    assert device_unit(1024, 8) == 16  # 64 units of two servers
    assert replica_candidates(4096, 1024, 8) == [16, 32, 64, 128, 256, 512, 1024]
    assert replica_candidates(48, 1024, 8) == [16]
    assert replica_candidates(8, 1024, 8) == []


def test_long_models_are_cut_at_cheap_block_boundaries() -> None:
    n = 200
    layers = tuple(
        Layer(name=f"l{i}", fwd_time_s=1e-3, bwd_time_s=2e-3, activation_bytes=2**20, parameter_bytes=0)
        for i in range(n)
    )
    chain = ModelProfile(name="chain", layers=layers, profile_batch_size=1)
    positions = cut_positions(chain)  # 48 blocks of 4 or 5 equal layers
    assert len(positions) == 49
    assert positions[0] == 0
    assert positions[-1] == n
    assert {b - a for a, b in itertools.pairwise(positions)} == {4, 5}
    # residual blocks of 5 layers: a skip edge around each block makes every inner cut dearer
    edges = {(i, i + 1) for i in range(n - 1)} | {(i, i + 5) for i in range(0, n - 5, 5)}
    dag = ModelProfile(name="dag", layers=layers, profile_batch_size=1, edges=tuple(sorted(edges)))
    positions = cut_positions(dag)
    assert len(positions) > 30
    assert all(p % 5 == 1 for p in positions[1:-1])  # right after a block's entry layer i = 5k
    assert cut_positions(zoo_model("bert48")) == tuple(range(51))


def test_verify_api() -> None:
    profile = zoo_model("gnmt16")
    best = plan(profile, CLUSTER, 64, top=1)[0]
    report = pipesim.verify(best, CLUSTER, profile=profile)
    assert abs(report.relative_error) < 0.05
    assert report.peak_memory_relative_error == pytest.approx(0.0, abs=1e-9)


def test_names_overrides_and_retargeting() -> None:
    by_name = plan("gnmt16", "dapple-2x8-v100", 64, top=1)[0]
    by_object = plan(zoo_model("gnmt16"), CLUSTER, 64, top=1)[0]
    assert by_name == by_object
    faster = plan("gnmt16", "dapple-2x8-v100", 64, top=1, overrides={"nic": "100GbE"})[0]
    assert faster.estimate is not None
    assert by_name.estimate is not None
    assert faster.estimate.iteration_time_s < by_name.estimate.iteration_time_s
    # the profile is re-targeted to the cluster's device: an A100 plans faster than a V100
    a100 = plan("gnmt16", "dapple-2x8-v100", 64, top=1, overrides={"device": "A100-40GB"})[0]
    assert a100.estimate is not None
    assert a100.estimate.iteration_time_s < by_name.estimate.iteration_time_s
    with pytest.raises(UnknownNameError, match="cluster"):
        plan("gnmt16", "no-such-cluster", 64)


def test_rerank_reorders_the_shortlist() -> None:
    plain = plan("gnmt16", CLUSTER, 64, top=SHORTLIST)
    seen: list[int] = []

    def fewest_stages(p: Plan) -> float:
        seen.append(p.num_stages)
        return float(p.num_stages)

    reranked = plan("gnmt16", CLUSTER, 64, top=SHORTLIST, rerank=fewest_stages)
    assert len(seen) == len(plain)
    assert [p.num_stages for p in reranked] == sorted(p.num_stages for p in plain)
    top1 = plan("gnmt16", CLUSTER, 64, top=1, rerank=fewest_stages)
    assert top1[0].num_stages == min(p.num_stages for p in plain)
    with pytest.raises(InputError, match="rerank"):
        plan("gnmt16", CLUSTER, 64, rerank=lambda p: math.nan)


def test_finish_keeps_every_field() -> None:
    from pipesim.planner.estimate import CostModel
    from pipesim.planner.search import _finish

    profile = zoo_model("bert48")
    stages = tuple(
        StagePlan(first_layer=a, last_layer=b, replicas=1) for a, b in ((0, 12), (13, 25), (26, 37), (38, 49))
    )
    p = Plan(
        stages=stages,
        global_batch_size=12,
        num_microbatches=4,
        schedule="interleaved",
        chunks=2,
        microbatch_sizes=(3, 2, 4, 3),
        optimizer="sgd",
        planner="test",
    )
    done = _finish(p, CostModel(profile, CLUSTER, optimizer="sgd"), 2.0, 1.0)
    assert done.chunks == 2
    assert done.microbatch_sizes == (3, 2, 4, 3)
    assert done.schedule == "interleaved"
    assert done.optimizer == "sgd"
    assert done.planner == "test"
    assert done.stages[2].devices == done.stages[0].devices  # virtual stages on their rank's devices
    assert done.estimate is not None
    assert done.estimate.speedup_vs_dp is not None
