"""Collectives: gradient all-reduce among a stage's replicas, built from real network transfers.

Three algorithms, all made of :meth:`Network.transfer` calls over the routes the caller gives, so
link sharing (with each other and with any other traffic) shows up by itself:

* **ring** over n members (in the given order): 2(n - 1) steps; in each step every member sends a
  chunk of S/n bytes to the next member, and the step ends when all n chunks have arrived
  (reduce-scatter, then all-gather). On equal, uncontended links of bandwidth B and per-hop
  latency a it takes ``2(n - 1) a + 2 (n - 1)/n * S / B``.
* **hierarchical** over k servers of g members each (members grouped by ``server_of``, servers
  in order of first appearance, members in their given order): an intra-server ring
  reduce-scatter (g - 1 steps of S/g bytes, every server at once, each server's ring at its own
  pace), then g concurrent inter-server ring all-reduces of the S/g shard, one per local rank j
  among the members with local rank j (2(k - 1) steps of S/(g k) bytes), then an intra-server
  ring all-gather (g - 1 steps of S/g bytes). Phases are separated by a barrier (exact: each
  inter-server ring needs every server's reduce-scatter, each all-gather every ring). Uncontended::

      2 (g - 1) (a_intra + S / (g B_intra))  +  2 (k - 1) (a_inter + S / (g k B_inter))

  where B_inter is the rate one inter-server ring gets per hop (NIC bandwidth divided by the
  rings sharing the NIC). **Uneven servers** (different member counts per server) fall back to a
  ring over the members ordered by server, as do k == 1 and g == 1, where both algorithms are the
  same ring.

* **tree** (NCCL's double binary tree, built by
  :func:`pipesim.profiles.costmodels.collective.double_binary_tree`): a chain inside each
  server towards its first member, two binary trees over the servers' first members; each tree
  carries half the data. Per phase (reduce up the trees, then broadcast down): ``depth - 1``
  steps in which every edge of both trees carries one pipeline chunk c (the pipeline filling;
  :data:`~pipesim.profiles.costmodels.collective.TREE_CHUNK_BYTES`), then one step in which
  every edge carries ``S / 2`` (the stream). Uncontended, on equal links:
  ``2 [(depth - 1)(a + c / B') + a + S / (2 B')]`` with B' the rate an edge gets when the
  step's edges share links.

``auto`` chooses per call the fastest of the algorithms that apply by
:func:`estimate_allreduce_time_s`, a cheap analytic estimate on the actual routes (per step, each
chunk's rate is its route's tightest ``capacity / chunks of this step on the link``; ties go to
ring, then hierarchical): hierarchical needs ``server_of`` and even servers (more than one, with
more than one member), tree members on two servers or more. The estimate is
:mod:`pipesim.profiles.costmodels.collective`, the same curves the planner uses, so planner and
simulator pick the same algorithm.

Reduce-scatters and all-gathers (ZeRO's collectives), the all-reduce's two halves on the same
rings, are in :mod:`pipesim.simulator.scatter_gather`.

One member (or none) costs zero time. Every function here takes plain callables for routing, so it
does not depend on the cluster type: ``route(src_device, dst_device) -> tuple[int, ...]`` and
``server_of(device) -> int``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Generator, Sequence
from typing import Any

import simpy

from pipesim.errors import check_count, check_nonneg, check_positive, invalid
from pipesim.profiles.costmodels import collective as collective_cost
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.costmodels.nccl_protocol import IDEAL, Protocol, best_protocol
from pipesim.simulator.network import Network

__all__ = [
    "AllReduceAlgorithm",
    "Route",
    "ServerOf",
    "allreduce",
    "choose_allreduce_algorithm",
    "estimate_allreduce_time_s",
    "hierarchical_allreduce",
    "hierarchical_allreduce_time_s",
    "nvls_allreduce",
    "ring_allreduce",
    "ring_allreduce_time_s",
    "tree_allreduce",
]

Route = Callable[[int, int], tuple[int, ...]]
"""``route(src_device, dst_device)``: the link indices a transfer between two devices uses."""
ServerOf = Callable[[int], int]
"""``server_of(device)``: the server (node) a device sits in."""
Process = Generator[simpy.Event, Any, None]
"""A SimPy process body: run it with ``env.process(...)`` or ``yield from`` it."""


# ---------------------------------------------------------------------- closed forms
def ring_allreduce_time_s(n: int, nbytes: float, bandwidth_bytes_per_s: float, latency_s: float) -> float:
    """Ring all-reduce time on n members over equal, uncontended links, seconds.

    On ideal links (``latency_s`` 0) ``2 (n - 1) / n * nbytes / bandwidth_bytes_per_s``
    (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
    JPDC 2009: the ring's 2(n - 1) steps of S/n bytes); otherwise, with the NCCL protocol of
    least time (:mod:`pipesim.profiles.costmodels.nccl_protocol`: launch ``L``, hand-off ``h``
    per step, ``f`` wire bytes per byte),
    ``L + 2 (n - 1) (latency_s + h) + f * 2 (n - 1) / n * nbytes / bandwidth_bytes_per_s``.
    0 for n <= 1.

    Raises:
        InputError: n < 1, negative bytes or latency, or bandwidth <= 0.
    """
    check_count("n", n)
    check_nonneg("nbytes", nbytes)
    check_nonneg("latency_s", latency_s)
    check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s, allow_inf=True)
    if n <= 1:
        return 0.0

    def wire_s(x: float) -> float:
        return 2 * (n - 1) * (latency_s + x / n / bandwidth_bytes_per_s)

    return best_protocol(2 * (n - 1), wire_s, nbytes, timed=latency_s > 0)[1]


def hierarchical_allreduce_time_s(
    n_servers: int,
    gpus_per_server: int,
    nbytes: float,
    *,
    intra_bandwidth_bytes_per_s: float,
    intra_latency_s: float,
    inter_bandwidth_bytes_per_s: float,
    inter_latency_s: float,
) -> float:
    """Hierarchical all-reduce time (see the module docstring), seconds, uncontended links.

    ``2 (g - 1) (a_intra + S / (g B_intra)) + 2 (k - 1) (a_inter + S / (g k B_inter))`` with
    k = ``n_servers``, g = ``gpus_per_server``, on ideal links (both latencies 0); otherwise
    with the NCCL protocol of least time as in :func:`ring_allreduce_time_s` (its launch, its
    hand-off at each of the ``2 (g - 1) + 2 (k - 1)`` steps, ``S`` times its wire factor).
    ``inter_bandwidth_bytes_per_s`` is the rate one of the g concurrent inter-server rings gets
    per hop: divide a shared NIC's bandwidth by the number of rings crossing it.

    Raises:
        InputError: a count < 1, negative bytes or latency, or a bandwidth <= 0.
    """
    check_count("n_servers", n_servers)
    check_count("gpus_per_server", gpus_per_server)
    check_nonneg("nbytes", nbytes)
    check_nonneg("intra_latency_s", intra_latency_s)
    check_nonneg("inter_latency_s", inter_latency_s)
    check_positive("intra_bandwidth_bytes_per_s", intra_bandwidth_bytes_per_s, allow_inf=True)
    check_positive("inter_bandwidth_bytes_per_s", inter_bandwidth_bytes_per_s, allow_inf=True)
    k, g = n_servers, gpus_per_server

    def wire_s(x: float) -> float:
        shard = x / g
        intra = 2 * (g - 1) * (intra_latency_s + shard / intra_bandwidth_bytes_per_s)
        inter = 2 * (k - 1) * (inter_latency_s + shard / k / inter_bandwidth_bytes_per_s)
        return intra + inter

    steps = 2 * (g - 1) + 2 * (k - 1)
    timed = (g > 1 and intra_latency_s > 0) or (k > 1 and inter_latency_s > 0)
    return best_protocol(steps, wire_s, nbytes, timed=timed)[1] if steps else 0.0


# ---------------------------------------------------------------------- processes
def ring_allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    tag: object = None,
    protocol: Protocol | None = None,
) -> Process:
    """Ring all-reduce of ``nbytes`` among ``members`` (device ids, ring in the given order).

    Inputs are checked now; the returned generator is the SimPy process body (wrap it in
    ``env.process`` or ``yield from`` it); it waits the protocol's launch, then runs the steps,
    each after the protocol's hand-off, and ends when the last chunk of the last step arrives.

    Args:
        env: the SimPy environment.
        network: the network that carries the chunks.
        members: distinct device ids, at least one.
        nbytes: bytes each member contributes (the gradient size), >= 0.
        route: ``route(src, dst)`` link indices between two devices.
        tag: passed to every chunk transfer.
        protocol: the NCCL protocol it runs with (launch, hand-off per step, wire bytes); by
            default the one of least time (:meth:`AllReduceCurves.protocol_for
            <pipesim.profiles.costmodels.collective.AllReduceCurves.protocol_for>`).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    n = len(order)
    if n <= 1:
        return _ring_steps(env, network, [[]], 0.0, 0, tag)
    if protocol is None:
        protocol = _protocol(network, order, route, None, nbytes, AllReduceAlgorithm.RING)
    routes = _ring_routes(network, order, route)
    chunk = protocol.wire_factor * nbytes / n / len(routes)
    body = _ring_steps(env, network, routes, chunk, 2 * (n - 1), tag, protocol.ring_step_s)
    return _launched(env, protocol.ring_launch_s, body)


def _ring_routes(network: Network, order: list[int], route: Route) -> list[list[tuple[int, ...]]]:
    """Each ring's hop routes among ``order`` (two members or more)."""
    n = len(order)
    # several rings over disjoint direct links (a DGX-1) only where links are shared: without
    # contention every flow has its route's full rate and extra rings would be free bandwidth
    rings = (
        collective_cost.ring_set(order, route, network.bandwidth_bytes_per_s) if network.contention else ()
    )
    if len(rings) <= 1:
        rings = (tuple(order),)
    return [[route(r[i], r[(i + 1) % n]) for i in range(n)] for r in rings]


def hierarchical_allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    server_of: ServerOf,
    *,
    tag: object = None,
    protocol: Protocol | None = None,
) -> Process:
    """Hierarchical all-reduce (intra-server reduce-scatter, inter-server rings, intra all-gather).

    Uneven servers fall back to a ring over the members ordered by server (module docstring).
    Inputs are checked now; the returned generator is the SimPy process body.

    Args:
        env: the SimPy environment.
        network: the network that carries the chunks.
        members: distinct device ids, at least one.
        nbytes: bytes each member contributes, >= 0.
        route: ``route(src, dst)`` link indices between two devices.
        server_of: ``server_of(device)`` server id of a device.
        tag: passed to every chunk transfer.
        protocol: as in :func:`ring_allreduce` (by default the hierarchical form's).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    if protocol is None:
        protocol = _protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.HIERARCHICAL)
    groups = collective_cost.group_by_server(members, server_of)
    if not _is_even(groups):
        flat = [m for group in groups for m in group]
        return ring_allreduce(env, network, flat, nbytes, route, tag=tag, protocol=protocol)
    wire = protocol.wire_factor * nbytes
    intra, inter, k, g = _hierarchy(network, groups, wire, route)
    body = _hierarchical_body(env, network, intra, inter, wire, k, g, tag, protocol.ring_step_s)
    return _launched(env, protocol.ring_launch_s, body)


_Intra = list[tuple[list[list[tuple[int, ...]]], float]]
"""Per server: its rings' hop routes and each ring's chunk, bytes."""


def _hierarchy(
    network: Network, groups: list[list[int]], nbytes: float, route: Route
) -> tuple[_Intra, list[list[tuple[int, ...]]], int, int]:
    """``(intra-server rings and chunks, inter-server rings, k servers, g members each)`` of the
    hierarchical form over even ``groups``."""
    k, g = len(groups), len(groups[0])
    intra: _Intra = []
    if g > 1:  # per server, its rings (several over a DGX-1's NVLinks) and each ring's chunk
        for grp in groups:
            routes = _ring_routes(network, grp, route)
            intra.append((routes, nbytes / g / len(routes)))
    inter = (
        [[route(groups[s][j], groups[(s + 1) % k][j]) for s in range(k)] for j in range(g)] if k > 1 else []
    )
    return intra, inter, k, g


def tree_allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    tag: object = None,
    protocol: Protocol | None = None,
) -> Process:
    """Double binary tree all-reduce (module docstring) of ``nbytes`` among ``members``.

    Inputs are checked now; the returned generator is the SimPy process body.

    Args:
        env, network, members, nbytes, route, tag: as in :func:`ring_allreduce`.
        server_of: ``server_of(device)``: chains inside servers; without it every member is
            its own server.
        protocol: as in :func:`ring_allreduce` (by default the tree's; its tree launch and
            hand-off apply).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    shape = collective_cost.double_binary_tree(members, server_of)
    if shape.depth == 0:
        return _tree_body(env, network, [], [], 0, 0.0, tag, 0.0)
    if protocol is None:
        protocol = _protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.TREE)
    up = [route(c, p) for c, p in shape.up]
    down = [route(p, c) for c, p in shape.up]
    wire = protocol.wire_factor * nbytes
    body = _tree_body(env, network, up, down, shape.depth, wire, tag, protocol.tree_step_s)
    return _launched(env, protocol.tree_launch_s, body)


def nvls_allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    tag: object = None,
    protocol: Protocol | None = None,
) -> Process:
    """NVLink SHARP all-reduce (module docstring of :mod:`pipesim.profiles.costmodels.collective`):
    every member moves ``(1 + 1/n) nbytes / NVLS_FRACTION`` bytes into its switch port and as many
    out of it, all at once; the ring where NVLS does not apply
    (:func:`~pipesim.profiles.costmodels.collective.nvls_ports`).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    ports = collective_cost.nvls_ports(order, route, server_of)
    if ports is None:
        return ring_allreduce(env, network, order, nbytes, route, tag=tag, protocol=protocol)
    if protocol is None:
        protocol = _protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.NVLS)
    size = (1.0 + 1.0 / len(order)) * nbytes / collective_cost.NVLS_FRACTION
    body = _nvls_body(env, network, [(p,) for pair in ports for p in pair], size, tag)
    return _launched(env, protocol.ring_launch_s, body)


def allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO,
    tag: object = None,
) -> Process:
    """All-reduce with the named algorithm (``auto`` resolved by :func:`choose_allreduce_algorithm`).

    Args:
        env, network, members, nbytes, route, tag: as in :func:`ring_allreduce`.
        server_of: ``server_of(device)``; required for ``hierarchical``; without it ``auto``
            means ring.
        algorithm: ``"ring"``, ``"hierarchical"``, ``"tree"``, ``"nvls"`` or ``"auto"`` (default).

    Returns:
        The SimPy process body.

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    algo = AllReduceAlgorithm.parse(algorithm)
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    protocol = IDEAL
    if network.free_links or len(order) <= 1:
        algo = AllReduceAlgorithm.RING if algo is AllReduceAlgorithm.AUTO else algo
    else:  # one set of curves chooses the algorithm (auto) and its protocol
        curves = _curves(network, order, route, server_of)
        if algo is AllReduceAlgorithm.AUTO:
            algo = curves.algorithm_for(nbytes, algo) if server_of is not None else AllReduceAlgorithm.RING
        protocol = curves.timed_call(nbytes, algo)[0]
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is not None:
        return hierarchical_allreduce(
            env, network, order, nbytes, route, server_of, tag=tag, protocol=protocol
        )
    if algo is AllReduceAlgorithm.TREE:
        return tree_allreduce(
            env, network, order, nbytes, route, server_of=server_of, tag=tag, protocol=protocol
        )
    if algo is AllReduceAlgorithm.NVLS:
        return nvls_allreduce(
            env, network, order, nbytes, route, server_of=server_of, tag=tag, protocol=protocol
        )
    return ring_allreduce(env, network, order, nbytes, route, tag=tag, protocol=protocol)


# ---------------------------------------------------------------------- estimates
def estimate_allreduce_time_s(
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.RING,
) -> float:
    """Cheap analytic all-reduce time on the network's actual routes, seconds (for planners).

    Each step takes the slowest of its chunks, a chunk taking its route's latency (plus the
    network's overhead) plus ``chunk / min over its links of (bandwidth / chunks of this step on
    the link)``. Exact for equal chunks on a bottleneck that only they share (so for the closed
    forms); contention with other traffic is not seen. ``auto`` gives the fastest that applies.

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    algo = AllReduceAlgorithm.parse(algorithm)
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    if network.free_links or len(order) <= 1:
        return 0.0
    return _curves(network, order, route, server_of).time_s(nbytes, algo.value)


def choose_allreduce_algorithm(
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
) -> AllReduceAlgorithm:
    """The algorithm ``auto`` runs: ring, hierarchical or tree (the rule is in the module docstring).

    Raises:
        InputError: bad members or bytes.
    """
    order = _check_members(members)
    check_nonneg("nbytes", nbytes)
    if server_of is None or len(order) <= 1 or network.free_links:
        return AllReduceAlgorithm.RING
    return _curves(network, order, route, server_of).algorithm_for(nbytes, AllReduceAlgorithm.AUTO)


def _curves(
    network: Network, order: list[int], route: Route, server_of: ServerOf | None
) -> collective_cost.AllReduceCurves:
    """The shared route-based cost curves (:mod:`pipesim.profiles.costmodels.collective`) on this
    network, computed once per network, members, route and ``server_of`` (every collective call
    asks for its protocol)."""
    cache = _CURVES.get(network)
    if cache is None:
        cache = _CURVES[network] = {}
    key = (tuple(order), route, server_of)
    found = cache.get(key)
    if found is None:
        found = cache[key] = collective_cost.allreduce_curves(
            order,
            route,
            network.bandwidth_bytes_per_s,
            network.latency_s,
            server_of=server_of,
            overhead_s=network.overhead_s,
        )
    return found


_CURVES: weakref.WeakKeyDictionary[Network, dict[tuple[object, ...], collective_cost.AllReduceCurves]] = (
    weakref.WeakKeyDictionary()
)
"""Curves per live network (a network's links never change)."""


def _protocol(
    network: Network,
    order: list[int],
    route: Route,
    server_of: ServerOf | None,
    nbytes: float,
    algorithm: AllReduceAlgorithm,
) -> Protocol:
    """The NCCL protocol an all-reduce of ``nbytes`` with ``algorithm`` runs with on this
    network (:meth:`~pipesim.profiles.costmodels.collective.AllReduceCurves.protocol_for`);
    ``IDEAL`` on free links or for one member."""
    if network.free_links or len(order) <= 1:
        return IDEAL
    return _curves(network, order, route, server_of).protocol_for(nbytes, algorithm)


def _launched(env: simpy.Environment, launch_s: float, body: Process) -> Process:
    """``body`` after the call's launch of ``launch_s`` seconds."""
    if launch_s > 0:
        yield env.timeout(launch_s)
    yield from body


# ---------------------------------------------------------------------- internals
def _ring_steps(
    env: simpy.Environment,
    network: Network,
    rings: list[list[tuple[int, ...]]],
    chunk: float,
    steps: int,
    tag: object,
    step_s: float = 0.0,
) -> Process:
    """``steps`` ring steps on each ring of routes, each after a hand-off of ``step_s``
    seconds; each ring waits only for its own chunks."""
    if len(rings) == 1:
        routes = rings[0]
        for _ in range(steps):
            if step_s > 0:
                yield env.timeout(step_s)
            yield _all_of(env, [network.transfer(r, chunk, tag=tag) for r in routes])
    elif rings:
        yield _all_of(
            env, [env.process(_ring_steps(env, network, [r], chunk, steps, tag, step_s)) for r in rings]
        )


def _server_steps(
    env: simpy.Environment,
    network: Network,
    servers: list[tuple[list[list[tuple[int, ...]]], float]],
    steps: int,
    tag: object,
    step_s: float = 0.0,
) -> Process:
    """``steps`` ring steps in every server at once, each server on its own rings and chunk."""
    bodies = [_ring_steps(env, network, rings, chunk, steps, tag, step_s) for rings, chunk in servers]
    if len(bodies) == 1:
        yield from bodies[0]
    elif bodies:
        yield _all_of(env, [env.process(body) for body in bodies])


def _hierarchical_body(
    env: simpy.Environment,
    network: Network,
    intra: list[tuple[list[list[tuple[int, ...]]], float]],
    inter: list[list[tuple[int, ...]]],
    nbytes: float,
    k: int,
    g: int,
    tag: object,
    step_s: float = 0.0,
) -> Process:
    if g > 1:
        yield from _server_steps(env, network, intra, g - 1, tag, step_s)  # reduce-scatter
    if k > 1:
        yield from _ring_steps(env, network, inter, nbytes / g / k, 2 * (k - 1), tag, step_s)
    if g > 1:
        yield from _server_steps(env, network, intra, g - 1, tag, step_s)  # all-gather


def _tree_body(
    env: simpy.Environment,
    network: Network,
    up: list[tuple[int, ...]],
    down: list[tuple[int, ...]],
    depth: int,
    nbytes: float,
    tag: object,
    step_s: float,
) -> Process:
    if depth == 0:
        return
    half = nbytes / 2
    chunk = min(float(collective_cost.TREE_CHUNK_BYTES), half)
    for routes in (up, down):  # reduce towards the roots, then broadcast back
        for step in range(depth):  # the pipeline fills, one chunk per edge and step; then the rest
            if step_s > 0:
                yield env.timeout(step_s)
            size = chunk if step < depth - 1 else half
            yield _all_of(env, [network.transfer(r, size, tag=tag) for r in routes])


def _nvls_body(
    env: simpy.Environment, network: Network, routes: list[tuple[int, ...]], size: float, tag: object
) -> Process:
    yield _all_of(env, [network.transfer(r, size, tag=tag) for r in routes])


def _all_of(env: simpy.Environment, events: list[Any]) -> Any:
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


def _is_even(groups: list[list[int]]) -> bool:
    return len({len(g) for g in groups}) == 1


def _check_members(members: Sequence[int]) -> list[int]:
    order = list(members)
    if not order:
        raise invalid("members", order, "must name at least one device")
    if len(set(order)) != len(order):
        raise invalid("members", order, "must be distinct device ids")
    return order
