"""The estimate sees a server's uplink carrying both the activations it sends on and the
gradients it sends back (``CostModel.link_bound_s``), and what it still misses (docs/communication.md)."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel
from pipesim.planner.iteration_time import (
    iteration_time_s,
    one_f_one_b_paths_s,
    one_f_one_b_shared_upper_s,
    shared_transfer_s,
)
from pipesim.profiles.costmodels.tied_embeddings import without_ties
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile

ONE_GBIT = {"servers": 8, "gpus_per_server": 1, "gpus_per_pcie_switch": 1, "nic_bandwidth_gbit_per_s": 1}
GPT = "gpt:layers=16,hidden=2048,heads=16,seq=1024,vocab=32000"


def chain(n: int, layers: int, m: int, schedule: str) -> Plan:
    """``n`` stages of equal layer counts (the last takes the rest), one GPU each, one sample per
    micro-batch."""
    per = layers // n
    stages = [StagePlan(first_layer=i * per, last_layer=i * per + per - 1) for i in range(n - 1)]
    stages.append(StagePlan(first_layer=(n - 1) * per, last_layer=layers - 1))
    return Plan(stages=tuple(stages), global_batch_size=m, num_microbatches=m, schedule=schedule)


def busiest_link_s(cost: CostModel, plan: Plan, cluster: Cluster) -> float:
    """Seconds per micro-batch the busiest directed link carries, both directions of every cut
    summed (from the routes and bandwidths, independently of ``link_bound_s``)."""
    placement = plan.placement(cluster.num_devices)
    load: dict[int, float] = {}
    for b in range(plan.num_stages - 1):
        (src,), (dst,) = placement[b], placement[b + 1]
        nbytes = cost.cut_bytes_per_sample[plan.stages[b].last_layer] * (
            plan.global_batch_size // plan.num_microbatches
        )
        for a, z in ((src, dst), (dst, src)):
            for link in set(cluster.route(a, z)):
                load[link] = load.get(link, 0.0) + nbytes / cluster.links[link].bandwidth_bytes_per_s
    return max(load.values())


@pytest.fixture(scope="module")
def one_gbit() -> tuple[ModelProfile, Cluster]:
    """The model without its tied output copy: these tests are about the pipeline's transfers
    (the pair all-reduce at the drain, the same in the estimate and the simulation, would add
    about 2.8 s to both: 262 MB of fp32 gradients at 0.75 of 1 Gb/s; tests/simulator/test_tied_grads.py)."""
    profile, cluster = resolve_inputs(GPT, "pcie-4x4-v100-10gbe", overrides=ONE_GBIT)
    return without_ties(profile), cluster


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zb-h1"])
def test_the_estimate_is_never_below_the_shared_link_bound(
    one_gbit: tuple[ModelProfile, Cluster], schedule: str
) -> None:
    # every middle server's uplink carries an activation and a gradient per micro-batch: M times
    # their time is a lower bound on the iteration that the simulator honours too
    profile, cluster = one_gbit
    plan = chain(8, profile.num_layers, 24, schedule)
    cost = CostModel(profile, cluster)
    estimate = cost.estimate(plan).iteration_time_s
    floor = plan.num_microbatches * busiest_link_s(cost, plan, cluster)
    assert cost.link_bound_s(plan, cost.stage_costs(plan)) >= floor
    assert estimate >= floor
    assert simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s >= floor


def test_the_shared_uplink_bound_binds_where_the_links_set_the_pace() -> None:
    # three servers, compute far below the transfers: the middle server's uplink sends 2 c per
    # micro-batch (an activation on, a gradient back), more than 1F1B's loop asks (4 c per 3
    # micro-batches in flight): the link bound binds the closed forms, and the simulator is
    # slower still (the loop leaves the uplink idle at times; the bound alone was -10.5% at
    # M = 128, measured). The walk of the two streams sharing the uplink (planner/link_walk.py)
    # is the simulation to rounding (equal flows: max-min is equal shares). The 1F1B path form
    # alone is the contention-free simulation, exactly (equal stages)
    profile = equal_profile(3, fwd_s=1e-3, bwd_s=2e-3, activation_bytes=1 << 24, parameter_bytes=0)
    overrides = {"servers": 3, "gpus_per_server": 1, "gpus_per_pcie_switch": 1}
    profile, cluster = resolve_inputs(profile, "pcie-4x4-v100-10gbe", overrides=overrides)
    m = 128
    plan = Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i) for i in range(3)),
        global_batch_size=4 * m,
        num_microbatches=m,
        schedule="1f1b",
    )
    cost = CostModel(profile, cluster)
    costs = cost.stage_costs(plan)
    per_mb = busiest_link_s(cost, plan, cluster)
    assert per_mb == pytest.approx(costs[1].send_fwd_s + costs[0].send_bwd_s, rel=0.01)  # 2 c (less latency)
    assert one_f_one_b_paths_s(plan, costs) < m * per_mb  # the loop alone would not see it
    estimate = cost.estimate(plan).iteration_time_s
    assert estimate >= cost.link_bound_s(plan, costs) >= m * per_mb
    simulated = simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert estimate == pytest.approx(simulated, rel=1e-9)
    free = SimOptions(record_trace=False, contention=False, optimizer_step=False)
    unshared = simulate(plan, profile, cluster, free).iteration_time_s
    assert one_f_one_b_paths_s(plan, costs) == pytest.approx(unshared, rel=1e-9)


def test_the_1gbit_1f1b_gap_is_closed(one_gbit: tuple[ModelProfile, Cluster]) -> None:
    # docs/communication.md's example: 8 stages, 96 micro-batches over 1 Gb/s. The uplinks are
    # not the bottleneck (2 x 89.5 ms per micro-batch, 17.6 s); the 1F1B loop's transfers are
    # slowed by the opposite stream on their uplink for part of the time. The contention-free
    # paths are 31% under (24.20 s vs 34.97 s, measured); queueing the two streams on each
    # uplink first come, first served was 24% under (26.46 s); the walk that shares each uplink
    # equally between the flows on it (planner/link_walk.py) is the simulation (34.97 s)
    profile, cluster = one_gbit
    plan = chain(8, profile.num_layers, 96, "1f1b")
    cost = CostModel(profile, cluster)
    costs = cost.stage_costs(plan)
    estimate = cost.estimate(plan).iteration_time_s
    simulated = simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert cost.link_bound_s(plan, costs) < estimate
    assert estimate == pytest.approx(simulated, rel=0.005)
    unshared = simulate(plan, profile, cluster, SimOptions(record_trace=False, contention=False))
    closed = iteration_time_s(cost, plan, costs, decomposable=False)
    assert closed / unshared.iteration_time_s - 1 == pytest.approx(0.0, abs=0.01)  # the paths' model
    assert closed / simulated - 1 == pytest.approx(-0.31, abs=0.01)


@pytest.mark.parametrize(
    ("servers", "m", "gbit_per_s", "latency_us"), [(8, 96, 1, None), (4, 32, 1, 10_000), (3, 24, 10, None)]
)
def test_the_shared_uplinks_bracket_the_1f1b_simulation(
    servers: int, m: int, gbit_per_s: int, latency_us: int | None
) -> None:
    # a chain of single-GPU servers: each middle server's uplink carries its activations on and
    # its gradients back. The estimate (contention-free paths) is a lower bound, the same paths
    # with every transfer at its worst share of its links an upper bound (one_f_one_b_shared_upper_s).
    # 8 stages over 1 Gb/s (docs/communication.md's case): 24.2 <= 35.0 <= 40.1 s (measured)
    overrides: dict[str, object] = {**ONE_GBIT, "servers": servers, "nic_bandwidth_gbit_per_s": gbit_per_s}
    if latency_us is not None:
        overrides["nic_latency_us"] = latency_us
    profile, cluster = resolve_inputs(GPT, "pcie-4x4-v100-10gbe", overrides=overrides)
    profile = without_ties(profile)  # the bounds are the transfers' (one_gbit's docstring)
    plan = chain(servers, profile.num_layers, m, "1f1b")
    cost = CostModel(profile, cluster)
    costs = cost.stage_costs(plan)
    lower = one_f_one_b_paths_s(plan, costs)
    upper = one_f_one_b_shared_upper_s(cost, plan, costs)
    simulated = simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert lower <= simulated <= upper
    assert upper <= 1.7 * lower  # at most two streams per link here: transfers at most twice as long
    # every transfer crosses a link with two streams (a middle uplink, or a downlink receiving
    # activations from one side and gradients from the other): its bytes at half the rate
    for c, (fwd, bwd) in zip(costs, shared_transfer_s(cost, plan), strict=False):
        for alone, worst in ((c.send_fwd_s, fwd), (c.send_bwd_s, bwd)):
            assert worst == pytest.approx(c.send_latency_s + 2 * (alone - c.send_latency_s), rel=1e-9)
