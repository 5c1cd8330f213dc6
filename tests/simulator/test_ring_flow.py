"""A ring collective's steps as one lock-step flow (collective_steps.ring_flow) against the steps one
by one (stepwise_ring_steps): exactly equal when nothing else shares the ring's links, the
step-by-step form kept where two hops of one ring cross a link, and the documented difference
under sharing."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import simpy

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.costmodels.nccl_protocol import LinkClass
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.collective_steps import ring_flow, ring_steps, server_steps, stepwise_ring_steps
from pipesim.simulator.network import Network
from pipesim.simulator.scatter_gather import collective
from tests.simulator.builders import equal_profile

# 6 devices: link 2i is device i's way out, 2i + 1 its way in; unequal bandwidths and latencies
CAPS = [4e9, 9e9, 2.5e9, 7e9, 6e9, 3e9, 8e9, 1e9, 5e9, 4.5e9, 6.5e9, 2e9]
LATS = [1e-6, 3e-6, 0.0, 2e-5, 5e-6, 1e-6, 4e-6, 0.0, 7e-6, 2e-6, 1e-5, 3e-6]
CLASSES = [LinkClass.NVLINK, LinkClass.NET] * 6


def _route(a: int, b: int) -> tuple[int, ...]:
    return (2 * a, 2 * b + 1)


def _network(
    *, contention: bool = True, free: bool = False, classes: bool = False
) -> tuple[simpy.Environment, Network]:
    env = simpy.Environment()
    return env, Network(env, CAPS, LATS, contention=contention, free_links=free,
                        link_classes=CLASSES if classes else None)


def _ring(order: list[int]) -> list[tuple[int, ...]]:
    return [_route(order[i], order[(i + 1) % len(order)]) for i in range(len(order))]


def _time(body_of: Any, **kwargs: Any) -> float:
    env, net = _network(**kwargs)
    env.process(body_of(env, net))
    env.run()
    return float(env.now)


@pytest.mark.parametrize("order", [[0, 1], [0, 1, 2], [3, 0, 5, 1], [0, 1, 2, 3, 4, 5], [5, 2, 4, 0, 1, 3]])
@pytest.mark.parametrize(
    ("chunk", "steps", "step_s"), [(3e6, 5, 2e-6), (1.0, 1, 0.0), (0.0, 4, 1e-6), (7e7, 9, 0.0)]
)
@pytest.mark.parametrize("classed", [False, True])
@pytest.mark.parametrize("contention", [True, False])
def test_one_flow_equals_the_steps_when_alone(
    order: list[int], chunk: float, steps: int, step_s: float, classed: bool, contention: bool
) -> None:
    """Hops of different bandwidths and latencies: the step ends with its slowest hop's chunk;
    the lock-step flow's fixed part makes the whole call exactly as long."""
    rings = [_ring(order)]
    kwargs = {"contention": contention, "classes": classed}
    one = _time(lambda env, net: ring_steps(env, net, rings, chunk, steps, None, step_s, classed=classed),
                **kwargs)
    stepwise = _time(
        lambda env, net: stepwise_ring_steps(env, net, rings, chunk, steps, None, step_s, classed=classed),
        **kwargs,
    )
    assert one == pytest.approx(stepwise, rel=1e-12, abs=1e-18)
    assert stepwise > 0


def test_several_rings_and_servers_each_at_their_own_pace() -> None:
    rings = [_ring([0, 1, 2]), _ring([3, 4, 5])]
    for runner in (ring_steps, stepwise_ring_steps):
        env, net = _network()
        ends: list[float] = []

        def one(
            env: simpy.Environment, net: Network, routes: list[tuple[int, ...]], runner: Any, ends: list[Any]
        ) -> Any:
            yield from runner(env, net, [routes], 4e6, 6, None, 1e-6)
            ends.append(env.now)

        for routes in rings:
            env.process(one(env, net, routes, runner, ends))
        env.run()
        if runner is ring_steps:
            flow_ends = sorted(ends)
        else:
            assert sorted(ends) == pytest.approx(flow_ends, rel=1e-12)
    servers = [(rings[:1], 4e6), (rings[1:], 2e6)]
    one = _time(lambda env, net: server_steps(env, net, servers, 3, None, 1e-6))
    env, net = _network()
    env.process(stepwise_ring_steps(env, net, rings[:1], 4e6, 3, None, 1e-6))
    env.process(stepwise_ring_steps(env, net, rings[1:], 2e6, 3, None, 1e-6))
    env.run()
    assert one == pytest.approx(env.now, rel=1e-12)


def test_free_links_pay_only_the_hand_offs() -> None:
    rings = [_ring([0, 1, 2, 3])]
    got = _time(lambda env, net: ring_steps(env, net, rings, 5e6, 7, None, 2e-6), free=True)
    assert got == pytest.approx(7 * 2e-6, rel=1e-12)
    assert _time(lambda env, net: stepwise_ring_steps(env, net, rings, 5e6, 7, None, 2e-6), free=True) == (
        pytest.approx(got, rel=1e-12)
    )


def test_a_ring_whose_hops_cross_one_link_runs_its_steps_one_by_one() -> None:
    """Two hops on one link share it within each step: the lock-step flow (each link once) would
    not see it, so such a ring keeps its steps (and a network without sharing does not care)."""
    shared = [(0, 2), (0, 4), (6,)]  # hops 0 and 1 both leave on link 0
    _, net = _network()
    assert ring_flow(net, shared, 1e6) is None
    _, net_free = _network(contention=False)
    assert ring_flow(net_free, shared, 1e6) is not None
    got = _time(lambda env, net: ring_steps(env, net, [shared], 1e6, 3, None, 1e-6))
    want = _time(lambda env, net: stepwise_ring_steps(env, net, [shared], 1e6, 3, None, 1e-6))
    assert got == want
    # link 0 carries both hops' chunks in each step: slower than with every hop on its own links
    unshared = _time(lambda env, net: ring_steps(env, net, [shared], 1e6, 3, None, 1e-6), contention=False)
    assert got > unshared * 1.2


def test_under_sharing_the_ring_moves_at_its_busiest_hop_pace() -> None:
    """A long flow shares one hop's link: stepwise, that hop's chunk gets half the link in every
    step and ends the step; the lock-step flow moves every hop at that half. The ring ends at the
    same time; the long flow gets the whole link in the ring's fixed parts (paid together before
    the bytes instead of between the steps), so it ends at the same time too here, where it
    outlasts the ring."""
    rings = [[(0,), (2,), (4,)]]  # three hops over links of 4, 2.5 and 6 GB/s
    ends = {}
    for runner in (ring_steps, stepwise_ring_steps):
        env, net = _network()
        done: dict[str, float] = {}

        def ring(
            env: simpy.Environment, net: Network, runner: Any = runner, done: dict[str, float] = done
        ) -> Any:
            yield from runner(env, net, rings, 2e6, 4, None, 1e-6)
            done["ring"] = env.now

        def other(env: simpy.Environment, net: Network, done: dict[str, float] = done) -> Any:
            yield net.transfer((2,), 4e7)
            done["other"] = env.now

        env.process(ring(env, net))
        env.process(other(env, net))
        env.run()
        ends[runner.__name__] = done
    flow, steps = ends["ring_steps"], ends["stepwise_ring_steps"]
    assert flow["ring"] == pytest.approx(4 * (1e-6 + LATS[2] + 2e6 / (CAPS[2] / 2)), rel=1e-12)
    assert flow["ring"] == pytest.approx(steps["ring"], rel=1e-12)
    assert flow["other"] == pytest.approx(steps["other"], rel=1e-12)


def test_a_zero3_plan_runs_its_collectives_as_lockstep_flows_and_agrees_with_the_fast_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """ZeRO-3 on 8 replicas over two servers: every ring collective is one flow per ring (not
    (n - 1) n transfers); without link sharing the engine equals the fast path (1e-9) and the
    steps one by one."""
    import pipesim.simulator.collective_steps as steps_module

    cluster = get_cluster("dapple-2x8-v100")
    profile = equal_profile(8)
    stage = StagePlan(first_layer=0, last_layer=7, replicas=8, sharding="zero3")
    plan = Plan(stages=(stage,), global_batch_size=32, num_microbatches=2, schedule="1f1b", allreduce="ring")
    options = SimOptions(contention=False)
    engine = simulate(plan, profile, cluster, options, executor="simpy")
    fast = simulate(plan, profile, cluster, options, executor="fast")
    assert engine.iteration_time_s == pytest.approx(fast.iteration_time_s, rel=1e-9)
    monkeypatch.setattr(steps_module, "ring_flow", lambda *args, **kwargs: None)
    stepwise = simulate(plan, profile, cluster, options, executor="simpy")
    assert engine.iteration_time_s == pytest.approx(stepwise.iteration_time_s, rel=1e-9)


@pytest.mark.parametrize(("kind", "algorithm"), list(itertools.product(
    ("all-reduce", "reduce-scatter", "all-gather"), ("ring", "hierarchical"))))
def test_collectives_on_a_cluster_equal_their_steps(
    kind: str, algorithm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every collective of a 2-server cluster (NVLink rings inside, NICs between; hierarchical
    phases) takes as long as a lock-step flow per ring as with its steps one by one."""
    cluster = get_cluster("dapple-2x8-v100")
    members = [0, 3, 5, 8, 9, 14]

    def timed() -> float:
        env = simpy.Environment()
        net = Network.over_links(env, cluster.links)
        env.process(collective(env, net, kind, members, 3.2e7, cluster.route, server_of=cluster.server_of,
                               algorithm=algorithm))
        env.run()
        return float(env.now)

    one = timed()
    import pipesim.simulator.collective_steps as steps_module

    monkeypatch.setattr(steps_module, "ring_flow", lambda *args, **kwargs: None)
    assert one == pytest.approx(timed(), rel=1e-12)


@pytest.mark.parametrize("allreduce", ["ring", "hierarchical"])
def test_an_all_reduce_alone_after_the_drain_is_the_same_with_link_sharing_on(
    allreduce: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With max-min sharing on, a stage's all-reduce after the drain (nothing else on the links)
    ends exactly as its steps one by one do."""
    import pipesim.simulator.collective_steps as steps_module

    cluster = get_cluster("dapple-2x8-v100")
    profile = equal_profile(8)
    stage = StagePlan(first_layer=0, last_layer=7, replicas=16)  # both servers: rings on NVLink, NICs
    plan = Plan(stages=(stage,), global_batch_size=32, num_microbatches=2, schedule="1f1b",
                allreduce=allreduce)
    options = SimOptions(allreduce_overlap="end")
    flows = simulate(plan, profile, cluster, options, executor="simpy")
    monkeypatch.setattr(steps_module, "ring_flow", lambda *args, **kwargs: None)
    steps = simulate(plan, profile, cluster, options, executor="simpy")
    assert flows.iteration_time_s == pytest.approx(steps.iteration_time_s, rel=1e-12)
    assert [d.allreduce_time_s for d in flows.devices] == pytest.approx(
        [d.allreduce_time_s for d in steps.devices], rel=1e-9)
    assert max(d.allreduce_time_s for d in flows.devices) > 0
