"""Collectives: gradient all-reduce among a stage's replicas, built from real network transfers.

Three algorithms, all made of flows over the routes the caller gives, so link sharing (with each
other and with any other traffic) shows up by itself. The steps are described one by one below;
each ring's steps run as one lock-step flow over all its hops
(:func:`~pipesim.simulator.collective_steps.ring_flow`), which takes exactly as long as the steps
alone and differs under sharing only as that function says:

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
  :func:`pipesim.profiles.costmodels.double_tree.double_binary_tree`): a chain inside each
  server towards its first member, two binary trees over the servers' first members; each tree
  carries half the data. Per phase (reduce up the trees, then broadcast down): ``depth - 1``
  steps in which every edge of both trees carries one pipeline chunk c (the pipeline filling;
  :data:`~pipesim.profiles.costmodels.double_tree.TREE_CHUNK_BYTES`), then one step in which
  every edge carries ``S / 2`` (the stream). Uncontended, on equal links:
  ``2 [(depth - 1)(a + c / B') + a + S / (2 B')]`` with B' the rate an edge gets when the
  step's edges share links.

``auto`` chooses per call the fastest of the algorithms that apply by
:func:`~pipesim.simulator.collective_costs.estimate_allreduce_time_s`, a cheap analytic
estimate on the actual routes (per step, each chunk's rate is its route's tightest
``capacity / chunks of this step on the link``; ties go to ring, then hierarchical):
hierarchical needs ``server_of`` and even servers (more than one, with more than one member),
tree members on two servers or more. The estimate is
:mod:`pipesim.profiles.costmodels.collective`, the same curves the planner uses, so planner and
simulator pick the same algorithm.

Reduce-scatters and all-gathers (ZeRO's collectives), the all-reduce's two halves on the same
rings, are in :mod:`pipesim.simulator.scatter_gather`.

Their closed forms and the route-based estimate are in :mod:`pipesim.simulator.collective_costs`,
the steps they are made of in :mod:`pipesim.simulator.collective_steps`.

One member (or none) costs zero time. Every function here takes plain callables for routing, so it
does not depend on the cluster type: ``route(src_device, dst_device) -> tuple[int, ...]`` and
``server_of(device) -> int``.
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from pipesim.errors import check_nonneg
from pipesim.profiles.costmodels import collective as collective_cost
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.costmodels.double_tree import TREE_CHUNK_BYTES, double_binary_tree
from pipesim.profiles.costmodels.nccl_protocol import IDEAL, Protocol
from pipesim.profiles.costmodels.ring_topology import group_by_server, nvls_ports
from pipesim.simulator.collective_costs import call_protocol, network_curves
from pipesim.simulator.collective_steps import (
    Process,
    Route,
    ServerOf,
    all_of,
    check_allreduce,
    check_members,
    hierarchy,
    is_even,
    launched,
    ring_routes,
    ring_steps,
    server_steps,
    step_handoff_s,
)
from pipesim.simulator.network import Network

__all__ = [
    "allreduce",
    "hierarchical_allreduce",
    "nvls_allreduce",
    "ring_allreduce",
    "tree_allreduce",
]


def ring_allreduce(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    tag: object = None,
    protocol: Protocol | None = None,
    server_of: ServerOf | None = None,
) -> Process:
    """Ring all-reduce of ``nbytes`` among ``members`` (device ids, ring in the given order, or
    NCCL's ring per NIC across even servers by ``server_of``).

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
        server_of: ``server_of(device)``: across even servers of two members or more, one ring
            per NIC (:func:`~pipesim.profiles.costmodels.ring_topology.ring_set`).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    n = len(order)
    if n <= 1:
        return ring_steps(env, network, [[]], 0.0, 0, tag)
    if protocol is None:
        protocol = call_protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.RING)
    routes = ring_routes(network, order, route, server_of)
    chunk = protocol.wire_factor * nbytes / n / len(routes)
    step_s = step_handoff_s(network, protocol, [r for ring in routes for r in ring])
    body = ring_steps(env, network, routes, chunk, 2 * (n - 1), tag, step_s, classed=True)
    return launched(env, protocol.ring_launch_s, body)


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
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if protocol is None:
        protocol = call_protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.HIERARCHICAL)
    groups = group_by_server(members, server_of)
    if not is_even(groups):
        flat = [m for group in groups for m in group]
        return ring_allreduce(env, network, flat, nbytes, route, tag=tag, protocol=protocol)
    wire = protocol.wire_factor * nbytes
    intra, inter, k, g = hierarchy(network, groups, wire, route)
    intra_s = step_handoff_s(network, protocol, [r for rings, _ in intra for ring in rings for r in ring])
    inter_s = step_handoff_s(network, protocol, [r for ring in inter for r in ring])
    body = _hierarchical_body(env, network, intra, inter, wire, k, g, tag, intra_s, inter_s)
    return launched(env, protocol.ring_launch_s, body)


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
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    shape = double_binary_tree(members, server_of)
    if shape.depth == 0:
        return _tree_body(env, network, [], [], 0, 0.0, tag, 0.0)
    if protocol is None:
        protocol = call_protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.TREE)
    up = [route(c, p) for c, p in shape.up]
    down = [route(p, c) for c, p in shape.up]
    wire = protocol.wire_factor * nbytes
    step_s = step_handoff_s(network, protocol, up + down, tree=True)
    body = _tree_body(env, network, up, down, shape.depth, wire, tag, step_s)
    return launched(env, protocol.tree_launch_s, body)


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
    (:func:`~pipesim.profiles.costmodels.ring_topology.nvls_ports`).

    Raises:
        InputError: no members, duplicate members, or bad ``nbytes``.
    """
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    ports = nvls_ports(order, route, server_of)
    if ports is None:
        return ring_allreduce(env, network, order, nbytes, route, tag=tag, protocol=protocol,
                              server_of=server_of)
    if protocol is None:
        protocol = call_protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.NVLS)
    size = (1.0 + 1.0 / len(order)) * nbytes / collective_cost.NVLS_FRACTION
    body = _nvls_body(env, network, [(p,) for pair in ports for p in pair], size, tag)
    return launched(env, protocol.ring_launch_s, body)


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
    algo, order = check_allreduce(algorithm, members, nbytes, server_of)
    protocol = IDEAL
    if network.free_links or len(order) <= 1:
        algo = AllReduceAlgorithm.RING if algo is AllReduceAlgorithm.AUTO else algo
    else:  # one set of curves chooses the algorithm (auto) and its protocol
        curves = network_curves(network, order, route, server_of)
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
    return ring_allreduce(env, network, order, nbytes, route, tag=tag, protocol=protocol, server_of=server_of)


def _hierarchical_body(
    env: simpy.Environment,
    network: Network,
    intra: list[tuple[list[list[tuple[int, ...]]], float]],
    inter: list[list[tuple[int, ...]]],
    nbytes: float,
    k: int,
    g: int,
    tag: object,
    intra_s: float = 0.0,
    inter_s: float = 0.0,
) -> Process:
    if g > 1:
        yield from server_steps(env, network, intra, g - 1, tag, intra_s, classed=True)  # reduce-scatter
    if k > 1:
        yield from ring_steps(env, network, inter, nbytes / g / k, 2 * (k - 1), tag, inter_s, classed=True)
    if g > 1:
        yield from server_steps(env, network, intra, g - 1, tag, intra_s, classed=True)  # all-gather


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
    chunk = min(float(TREE_CHUNK_BYTES), half)
    for routes in (up, down):  # reduce towards the roots, then broadcast back
        latencies = [network.collective_latency_s(r) for r in routes]
        for step in range(depth):  # the pipeline fills, one chunk per edge and step; then the rest
            if step_s > 0:
                yield env.timeout(step_s)
            size = chunk if step < depth - 1 else half
            yield all_of(
                env,
                [
                    network.transfer(r, size, tag=tag, latency_s=a)
                    for r, a in zip(routes, latencies, strict=True)
                ],
            )


def _nvls_body(
    env: simpy.Environment, network: Network, routes: list[tuple[int, ...]], size: float, tag: object
) -> Process:
    # NCCL's NVLS latency (the protocol's launch) is the call's whole latency where the network
    # knows its links' classes: each port then pays only its network links' (none), not its own
    yield all_of(
        env, [network.transfer(r, size, tag=tag, latency_s=network.collective_latency_s(r)) for r in routes]
    )
