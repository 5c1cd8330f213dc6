"""Simulating per-layer strategies: closed forms of the neutral simulator and the PaSE lowering."""

from __future__ import annotations

import pytest

from pipesim.errors import Infeasible, InputError
from pipesim.profiles.costmodels.nccl_protocol import LinkClass
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.simulator.collective_costs import ring_allreduce_time_s
from pipesim.simulator.strategy import CollectiveSpec, StrategyStep, TransferSpec, simulate_strategy
from pipesim.strategy import estimate_seconds, lower_strategy, plan_strategy, simulate_plan

CLUSTER = get_cluster("dgx-a100-x2")


def test_compute_only_step_is_slowest_device() -> None:
    steps = [StrategyStep(name="a", compute_s={0: 1.0, 1: 2.5}), StrategyStep(name="b", compute_s={3: 0.5})]
    res = simulate_strategy(steps, CLUSTER)
    assert res.step_time_s == pytest.approx(3.0)
    assert res.compute_s == pytest.approx(3.0)
    assert res.communication_s == 0.0


def test_transfer_then_compute() -> None:
    nbytes = 1e9
    step = StrategyStep(name="t", compute_s={1: 0.25}, transfers=(TransferSpec(src=0, dst=1, nbytes=nbytes),))
    res = simulate_strategy([step], CLUSTER)
    expected = CLUSTER.route_latency_s(0, 1) + nbytes / CLUSTER.route_bandwidth_bytes_per_s(0, 1)
    assert res.steps[0].transfer_s == pytest.approx(expected, rel=1e-9)
    assert res.step_time_s == pytest.approx(expected + 0.25, rel=1e-9)


def test_ring_allreduce_matches_closed_form() -> None:
    # two GPUs on one NVSwitch: every hop the same bandwidth and latency
    nbytes = 4e8
    step = StrategyStep(
        name="ar", collectives=(CollectiveSpec(kind="allreduce", members=(0, 1), nbytes=nbytes),)
    )
    res = simulate_strategy([step], CLUSTER)
    bw = CLUSTER.route_bandwidth_bytes_per_s(0, 1)
    lat = CLUSTER.route_latency_s(0, 1)
    # NVLink: NCCL's hand-off per step is the whole hop (its latency inside it)
    want = ring_allreduce_time_s(2, nbytes, bw, lat, link_class=LinkClass.NVLINK)
    assert res.step_time_s == pytest.approx(want, rel=1e-9)


def test_bad_device_and_spec() -> None:
    with pytest.raises(InputError, match="device"):
        simulate_strategy([StrategyStep(name="x", compute_s={99: 1.0})], CLUSTER)
    with pytest.raises(InputError, match="kind"):
        CollectiveSpec(kind="gather", members=(0, 1), nbytes=1.0)


def test_plan_lowering_and_estimate_agree_roughly() -> None:
    plan = plan_strategy("alexnet", 8, 64)
    steps = lower_strategy(plan.graph, plan.result.choice, CLUSTER.device)
    assert [s.name for s in steps[: len(plan.graph.vertices)]] == [v.name for v in plan.graph.vertices]
    # data-parallel convolutions need no re-distribution: conv2's step has no transfers
    assert steps[2].name == "conv2"
    assert steps[2].transfers == ()
    sim = simulate_plan(plan, CLUSTER)
    bw = CLUSTER.route_bandwidth_bytes_per_s(0, 1)
    est = estimate_seconds(plan.graph, plan.result.choice, CLUSTER.device, bw)
    assert sim.step_time_s == pytest.approx(est, rel=0.5)
    dp = simulate_plan(plan, CLUSTER, data_parallel=True)
    assert dp.step_time_s > sim.step_time_s


def test_cluster_too_small() -> None:
    plan = plan_strategy("rnnlm", 32, 128)
    with pytest.raises(Infeasible, match="needs p=32"):
        simulate_plan(plan, CLUSTER)
