"""The building blocks of the simulator's collectives: chunk transfers in ring steps.

Every collective (:mod:`pipesim.simulator.collectives`, :mod:`pipesim.simulator.scatter_gather`)
is a sequence of *steps* in which each member sends one chunk over its route at once
(:meth:`~pipesim.simulator.network.Network.transfer`), the step ending when every chunk of it
has arrived; a call first waits its NCCL protocol's launch
(:mod:`pipesim.profiles.costmodels.nccl_protocol`) and each step its hand-off. Here are those
steps on one or several rings, per server, the rings a ring collective runs on (several over a
DGX-1's direct NVLinks, :func:`~pipesim.profiles.costmodels.ring_topology.ring_set`) and the
hierarchical form's intra- and inter-server rings (one ring per NIC across even servers: the
ring form there).

Every function takes plain callables for routing, so nothing here depends on the cluster type:
``route(src_device, dst_device) -> tuple[int, ...]`` and ``server_of(device) -> int``.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any, TypeVar

import simpy

from pipesim.errors import check_nonneg, invalid
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.costmodels.nccl_protocol import LinkClass, Protocol, route_class
from pipesim.profiles.costmodels.ring_topology import ring_set
from pipesim.simulator.network import Network

__all__ = [
    "Intra",
    "Process",
    "Route",
    "ServerOf",
    "all_of",
    "check_members",
    "hierarchy",
    "is_even",
    "launched",
    "memoized",
    "ring_flow",
    "ring_routes",
    "ring_steps",
    "server_steps",
    "step_handoff_s",
    "stepwise_ring_steps",
]

Route = Callable[[int, int], tuple[int, ...]]
"""``route(src_device, dst_device)``: the link indices a transfer between two devices uses."""
ServerOf = Callable[[int], int]
"""``server_of(device)``: the server (node) a device sits in."""
Process = Generator[simpy.Event, Any, None]
"""A SimPy process body: run it with ``env.process(...)`` or ``yield from`` it."""


_T = TypeVar("_T")

_MEMO: weakref.WeakKeyDictionary[Network, dict[object, Any]] = weakref.WeakKeyDictionary()
"""Collective set-ups per live network (a network's links never change)."""


def memoized(network: Network, key: object, make: Callable[[], _T]) -> _T:
    """``make()``, made once per live ``network`` and ``key``: the set-up of a collective (its
    algorithm, protocol, rings and their lock-step flows), which ZeRO's per-unit gathers and
    reduce-scatters repeat call after call with the same members and bytes. ``key`` must name
    everything ``make`` reads besides the network."""
    memo = _MEMO.get(network)
    if memo is None:
        memo = _MEMO[network] = {}
    try:
        return memo[key]  # type: ignore[no-any-return]
    except KeyError:
        found = memo[key] = make()
        return found


def check_members(members: Sequence[int]) -> list[int]:
    """``members`` as a list, checked.

    Raises:
        InputError: no members, or duplicate members.
    """
    order = list(members)
    if not order:
        raise invalid("members", order, "must name at least one device")
    if len(set(order)) != len(order):
        raise invalid("members", order, "must be distinct device ids")
    return order


def check_allreduce(
    algorithm: str, members: Sequence[int], nbytes: float, server_of: ServerOf | None
) -> tuple[AllReduceAlgorithm, list[int]]:
    """An all-reduce's algorithm and members, checked (the simulated all-reduce and its
    contention-free time take the same arguments).

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    algo = AllReduceAlgorithm.parse(algorithm)
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    return algo, order


def is_even(groups: list[list[int]]) -> bool:
    """Whether every server group holds the same number of members."""
    return len({len(g) for g in groups}) == 1


def ring_routes(
    network: Network, order: list[int], route: Route, server_of: ServerOf | None = None
) -> list[list[tuple[int, ...]]]:
    """Each ring's hop routes among ``order`` (two members or more): the rings of
    :func:`~pipesim.profiles.costmodels.ring_topology.ring_set` (one per NIC across even
    servers by ``server_of``, several over a DGX-1's NVLinks), as the cost curves run them."""
    n = len(order)
    # several rings only where links are shared: without contention every flow has its route's
    # full rate and extra rings would be free bandwidth
    rings = ring_set(order, route, network.bandwidth_bytes_per_s, server_of) if network.contention else ()
    if len(rings) <= 1:
        rings = (tuple(order),)
    return [[route(r[i], r[(i + 1) % n]) for i in range(n)] for r in rings]


Intra = list[tuple[list[list[tuple[int, ...]]], float]]
"""Per server: its rings' hop routes and each ring's chunk, bytes."""


def hierarchy(
    network: Network, groups: list[list[int]], nbytes: float, route: Route
) -> tuple[Intra, list[list[tuple[int, ...]]], int, int]:
    """``(intra-server rings and chunks, inter-server rings, k servers, g members each)`` of the
    hierarchical form over even ``groups``."""
    k, g = len(groups), len(groups[0])
    intra: Intra = []
    if g > 1:  # per server, its rings (several over a DGX-1's NVLinks) and each ring's chunk
        for grp in groups:
            routes = ring_routes(network, grp, route)
            intra.append((routes, nbytes / g / len(routes)))
    inter = (
        [[route(groups[s][j], groups[(s + 1) % k][j]) for s in range(k)] for j in range(g)] if k > 1 else []
    )
    return intra, inter, k, g


def launched(env: simpy.Environment, launch_s: float, body: Process) -> Process:
    """``body`` after the call's launch of ``launch_s`` seconds."""
    if launch_s > 0:
        yield env.timeout(launch_s)
    yield from body


def step_handoff_s(
    network: Network, protocol: Protocol, routes: Sequence[tuple[int, ...]], *, tree: bool = False
) -> float:
    """Seconds of the hand-off before each step over ``routes`` with ``protocol``: NCCL's figure
    for the routes' slowest link class where the network knows its links' classes, else the
    protocol's NVLink figure (added to the routes' latencies)."""
    if not network.has_link_classes:
        return protocol.step_s(tree=tree)
    cls = max((route_class(r, network.link_class) for r in routes), default=LinkClass.NVLINK)
    return protocol.handoff_s(cls, tree=tree)


def ring_steps(
    env: simpy.Environment,
    network: Network,
    rings: list[list[tuple[int, ...]]],
    chunk: float,
    steps: int,
    tag: object,
    step_s: float = 0.0,
    *,
    classed: bool = False,
) -> Process:
    """``steps`` ring steps on each ring of routes, each after a hand-off of ``step_s``
    seconds; each ring waits only for its own chunks. ``classed``: every chunk pays
    :meth:`~pipesim.simulator.network.Network.collective_latency_s` (its network links' latency
    where the network knows link classes) instead of its route's latency.

    Each ring's steps run as **one flow** (:func:`ring_flow`): after ``steps`` times the hand-off
    and the step's fixed part, ``steps * chunk`` bytes flow over the union of the ring's hops,
    every hop at the ring's pace (its slowest hop's max-min rate). When nothing else shares the
    ring's links this takes exactly as long as the steps one by one (each step: hand-off, then
    every hop's chunk, ending with the last to arrive); see :func:`ring_flow` for where it
    differs under sharing. A ring two of whose hops cross one link (with ``contention``) runs its
    steps one by one (:func:`stepwise_ring_steps`)."""
    flows = _lockstep(network, [(routes, chunk) for routes in rings], classed)
    if flows is None:
        yield from stepwise_ring_steps(env, network, rings, chunk, steps, tag, step_s, classed=classed)
        return
    yield from _lockstep_body(env, network, flows, steps, tag, step_s)


def _lockstep(
    network: Network, rings: list[tuple[list[tuple[int, ...]], float]], classed: bool
) -> list[tuple[list[tuple[int, ...]], float, float]] | None:
    """``(routes, chunk, fixed part s)`` of each ``(routes, chunk)`` ring as a lock-step flow
    (:func:`ring_flow`, memoized per network), or ``None`` if one of them cannot be."""
    out = []
    for routes, chunk in rings:
        fixed = memoized(network, ("ring_flow", tuple(routes), chunk, classed),
                         lambda routes=routes, chunk=chunk: ring_flow(  # type: ignore[misc]
                             network, routes, chunk, classed=classed))
        if fixed is None:
            return None
        out.append((routes, chunk, fixed))
    return out


def _lockstep_body(
    env: simpy.Environment,
    network: Network,
    flows: list[tuple[list[tuple[int, ...]], float, float]],
    steps: int,
    tag: object,
    step_s: float,
) -> Process:
    """``steps`` steps of each ring of ``flows`` as one lock-step flow each, all started
    together after the steps' hand-offs; ends when the last one has."""
    if steps <= 0 or not flows:
        return
    if step_s > 0:
        yield env.timeout(steps * step_s)
    transfer = network.lockstep_transfer
    yield all_of(
        env,
        [transfer(routes, steps * chunk, tag=tag, latency_s=steps * fixed) for routes, chunk, fixed in flows],
    )


def ring_flow(
    network: Network, routes: list[tuple[int, ...]], chunk: float, *, classed: bool = False
) -> float | None:
    """A ring's steps as one flow (:meth:`~pipesim.simulator.network.Network.lockstep_transfer`
    over its hops' ``routes``): the fixed part of a step, seconds; ``None`` where two of its hops
    cross one link and the network shares links (the steps then run one by one).

    The flow is on every link of the ring and its rate is the ring's pace: the max-min share of
    its most loaded hop (NCCL's ring moves in lock step, each step ending with its last chunk).
    A step alone takes ``max_h(a_h + chunk / B_h)`` (hop
    ``h``: latency ``a_h`` as the steps pay it, bandwidth ``B_h`` of its slowest link); the fixed
    part is that minus ``chunk / min_h B_h``, the bytes' time at the slowest hop's bandwidth, so a
    ring alone on its links takes exactly as long as its steps (``latency_s = steps * fixed``,
    bytes ``steps * chunk``).

    Under sharing it differs from the steps one by one in two ways: the fixed parts are paid
    together before the bytes (the steps interleave them, leaving the links idle meanwhile), and
    every hop moves at the ring's pace throughout, so another flow on a hop that is not the
    slowest gets that hop's spare bandwidth for the whole collective rather than all of it between
    the hop's chunks. Total bytes per link, and the ring's time when one hop is the bottleneck
    throughout, are the same.

    Raises:
        InputError: a link index is out of range.
    """
    if not routes:
        return 0.0
    latency = network.collective_latency_s if classed else network.route_latency_s
    if network.contention and not network.free_links:
        seen: set[int] = set()
        count = 0
        for r in routes:
            links = network.route_links(r)
            seen.update(links)
            count += len(links)
        if len(seen) != count:
            return None
    alone = 0.0  # a step alone: its slowest hop's latency plus chunk
    pace = math.inf
    for r in routes:
        bandwidth = network.route_bandwidth_bytes_per_s(r)
        pace = min(pace, bandwidth)
        hop = latency(r) + (chunk / bandwidth if chunk > 0 and math.isfinite(bandwidth) else 0.0)
        alone = max(alone, hop)
    moving = chunk / pace if chunk > 0 and math.isfinite(pace) else 0.0
    return max(0.0, alone - moving)


def stepwise_ring_steps(
    env: simpy.Environment,
    network: Network,
    rings: list[list[tuple[int, ...]]],
    chunk: float,
    steps: int,
    tag: object,
    step_s: float = 0.0,
    *,
    classed: bool = False,
) -> Process:
    """:func:`ring_steps` one step at a time: in each step, after the hand-off, every hop's
    chunk is a transfer of its own, and the step ends when the last one arrived (the reference
    :func:`ring_flow` equals when nothing else shares the ring's links)."""
    if len(rings) == 1:
        routes = rings[0]
        transfer = network.transfer
        latencies = [network.collective_latency_s(r) for r in routes] if classed else None
        for _ in range(steps):
            if step_s > 0:
                yield env.timeout(step_s)
            if latencies is None:
                yield all_of(env, [transfer(r, chunk, tag=tag) for r in routes])
            else:
                yield all_of(
                    env,
                    [
                        transfer(r, chunk, tag=tag, latency_s=a)
                        for r, a in zip(routes, latencies, strict=True)
                    ],
                )
    elif rings:
        yield all_of(
            env,
            [
                env.process(
                    stepwise_ring_steps(env, network, [r], chunk, steps, tag, step_s, classed=classed)
                )
                for r in rings
            ],
        )


def server_steps(
    env: simpy.Environment,
    network: Network,
    servers: list[tuple[list[list[tuple[int, ...]]], float]],
    steps: int,
    tag: object,
    step_s: float = 0.0,
    *,
    classed: bool = False,
) -> Process:
    """``steps`` ring steps in every server at once, each server on its own rings and chunk
    (every ring a lock-step flow, as in :func:`ring_steps`)."""
    flows = _lockstep(network, [(routes, chunk) for rings, chunk in servers for routes in rings], classed)
    if flows is not None:
        yield from _lockstep_body(env, network, flows, steps, tag, step_s)
        return
    bodies = [
        ring_steps(env, network, rings, chunk, steps, tag, step_s, classed=classed)
        for rings, chunk in servers
    ]
    if len(bodies) == 1:
        yield from bodies[0]
    elif bodies:
        yield all_of(env, [env.process(body) for body in bodies])


def all_of(env: simpy.Environment, events: list[Any]) -> Any:
    """An event that succeeds once every event in ``events`` has (lighter than ``simpy.AllOf``)."""
    done = simpy.Event(env)
    left = [len(events)]
    if not events:
        done.succeed()
        return done

    def count(_ev: Any) -> None:
        left[0] -= 1
        if left[0] == 0:
            done.succeed()

    for ev in events:
        if ev.callbacks is None:  # already processed
            count(ev)
        else:
            ev.callbacks.append(count)
    return done
