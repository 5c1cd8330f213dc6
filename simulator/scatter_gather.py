"""Reduce-scatter and all-gather among a stage's replicas (ZeRO's collectives), from real transfers.

They are the all-reduce's two halves on the same rings (nccl-tests ``doc/PERFORMANCE.md``, commit
a0b82b2260cf: an all-gather's or reduce-scatter's bus bandwidth is ``algbw x (n - 1)/n``, an
all-reduce's ``algbw x 2 (n - 1)/n``, ``S`` the whole array), made of
flows as in :mod:`pipesim.simulator.collectives` (each ring's steps one lock-step flow,
:func:`~pipesim.simulator.collective_steps.ring_flow`; its set-up memoized per network and call
shape, :func:`~pipesim.simulator.collective_steps.memoized`):

* **ring**: ``n - 1`` steps of ``S / n`` bytes (several rings over a direct-link mesh, or one
  per NIC across even servers, NCCL's rings there; each carrying its share);
* **hierarchical**: the reduce-scatter's ``g - 1`` intra-server ring steps of ``S / g``, then
  ``k - 1`` inter-server steps of ``S / (g k)`` on the ``g`` rings (one per local rank); the
  all-gather the same in reverse order. Uneven servers: the ring ordered by server.

NCCL runs these collectives on rings, so ``tree`` and ``nvls`` mean the ring and ``auto`` takes
the faster of ring and hierarchical
(:func:`pipesim.profiles.costmodels.sharding.half_algorithm`, the planner's rule too).
Uncontended, each takes half the time of its all-reduce: the all-reduce's NCCL protocol on the
same algorithm (:mod:`pipesim.profiles.costmodels.nccl_protocol`), its hand-off at each of the
half's steps and half its launch (a reduce-scatter and all-gather pair pays one launch; NCCL
launches each, a few microseconds more).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from pipesim.errors import check_nonneg, invalid
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.costmodels.ring_topology import group_by_server
from pipesim.profiles.costmodels.sharding import CollectiveKind, half_algorithm
from pipesim.simulator.collective_costs import call_protocol, network_curves
from pipesim.simulator.collective_steps import (
    Intra,
    Process,
    Route,
    ServerOf,
    check_members,
    hierarchy,
    is_even,
    launched,
    memoized,
    ring_routes,
    ring_steps,
    server_steps,
    step_handoff_s,
)
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network

__all__ = ["CollectiveKind", "all_gather", "choose_half_algorithm", "collective", "reduce_scatter"]


def reduce_scatter(
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
    """Reduce-scatter of a buffer of ``nbytes`` per member among ``members`` (module docstring):
    each member ends with its reduced ``1 / n`` share.

    Args:
        env, network, members, nbytes, route, server_of, algorithm, tag: as in :func:`allreduce`.

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    return _half(env, network, members, nbytes, route, server_of, algorithm, tag, gather=False)


def all_gather(
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
    """All-gather into a buffer of ``nbytes`` per member (each member holds ``1 / n`` of it)
    among ``members`` (module docstring).

    Args:
        env, network, members, nbytes, route, server_of, algorithm, tag: as in :func:`allreduce`.

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    return _half(env, network, members, nbytes, route, server_of, algorithm, tag, gather=True)


def collective(
    env: simpy.Environment,
    network: Network,
    kind: str | CollectiveKind,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO,
    tag: object = None,
) -> Process:
    """The collective of ``kind`` (:class:`CollectiveKind`): :func:`allreduce`,
    :func:`reduce_scatter` or :func:`all_gather`.

    Raises:
        UnknownNameError: unknown kind or algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    what = CollectiveKind(kind) if not isinstance(kind, CollectiveKind) else kind
    if what is CollectiveKind.ALL_REDUCE:
        return allreduce(
            env, network, members, nbytes, route, server_of=server_of, algorithm=algorithm, tag=tag
        )
    return _half(env, network, members, nbytes, route, server_of, algorithm, tag,
                 gather=what is CollectiveKind.ALL_GATHER)


def choose_half_algorithm(
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO,
) -> AllReduceAlgorithm:
    """The algorithm a reduce-scatter or all-gather runs: ``ring`` or ``hierarchical``
    (:func:`~pipesim.profiles.costmodels.sharding.half_algorithm` on this network's routes).

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes.
    """
    algo = AllReduceAlgorithm.parse(algorithm)
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if server_of is None or len(order) <= 1 or network.free_links:
        return AllReduceAlgorithm.RING
    if algo not in (AllReduceAlgorithm.AUTO, AllReduceAlgorithm.HIERARCHICAL):
        return AllReduceAlgorithm.RING
    return half_algorithm(network_curves(network, order, route, server_of), nbytes, algo)


def _half(
    env: simpy.Environment,
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    server_of: ServerOf | None,
    algorithm: str | AllReduceAlgorithm,
    tag: object,
    *,
    gather: bool,
) -> Process:
    """A reduce-scatter (``gather`` false) or all-gather: the all-reduce's first or second half."""
    algo = AllReduceAlgorithm.parse(algorithm)
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    if len(order) <= 1:
        return ring_steps(env, network, [[]], 0.0, 0, tag)
    launch, hier, ring = memoized(
        network,
        ("half", tuple(order), nbytes, algo, route, server_of),
        lambda: _half_setup(network, order, nbytes, route, server_of, algo),
    )
    if hier is not None:
        intra, inter, wire, k, g, step_s = hier
        body = _half_body(env, network, intra, inter, wire, k, g, tag, step_s, gather=gather)
        return launched(env, launch, body)
    assert ring is not None
    routes, chunk, ring_s = ring
    return launched(env, launch, ring_steps(env, network, routes, chunk, len(order) - 1, tag, ring_s,
                                            classed=True))


_Hierarchical = tuple[Intra, list[list[tuple[int, ...]]], float, int, int, tuple[float, float]]
"""The hierarchical form's ``(intra-server rings, inter-server rings, wire bytes, k, g, (intra,
inter) hand-off s)``."""
_Ring = tuple[list[list[tuple[int, ...]]], float, float]
"""The ring form's ``(rings' hop routes, chunk bytes, hand-off s)``."""


def _half_setup(
    network: Network,
    order: list[int],
    nbytes: float,
    route: Route,
    server_of: ServerOf | None,
    algorithm: AllReduceAlgorithm,
) -> tuple[float, _Hierarchical | None, _Ring | None]:
    """A reduce-scatter's or all-gather's ``(launch s, hierarchical form or None, ring form or
    None)`` among ``order`` (two members or more): the algorithm, the all-reduce's protocol on it
    (half its launch, its hand-off per step) and the rings (made once per network and call shape:
    :func:`~pipesim.simulator.collective_steps.memoized`)."""
    n = len(order)
    algo = choose_half_algorithm(network, order, nbytes, route, server_of=server_of, algorithm=algorithm)
    # the all-reduce's protocol on the same algorithm: half its launch, its hand-off per step
    protocol = call_protocol(network, order, route, server_of, nbytes, algo)
    wire = protocol.wire_factor * nbytes
    launch = protocol.ring_launch_s / 2
    if algo is AllReduceAlgorithm.HIERARCHICAL and server_of is not None:
        groups = group_by_server(order, server_of)
        if is_even(groups):
            intra, inter, k, g = hierarchy(network, groups, wire, route)
            intra_routes = [r for rings, _ in intra for ring in rings for r in ring]
            intra_s = step_handoff_s(network, protocol, intra_routes)
            inter_s = step_handoff_s(network, protocol, [r for ring in inter for r in ring])
            return launch, (intra, inter, wire, k, g, (intra_s, inter_s)), None
        order = [m for group in groups for m in group]
    routes = ring_routes(network, order, route, server_of)
    step_s = step_handoff_s(network, protocol, [r for ring in routes for r in ring])
    return launch, None, (routes, wire / n / len(routes), step_s)


def _half_body(
    env: simpy.Environment,
    network: Network,
    intra: Intra,
    inter: list[list[tuple[int, ...]]],
    nbytes: float,
    k: int,
    g: int,
    tag: object,
    step_s: tuple[float, float],
    *,
    gather: bool,
) -> Process:
    """The hierarchical reduce-scatter (intra-server, then inter-server) or all-gather (reversed),
    each step after its hand-off (``step_s``: the intra-server steps', the inter-server steps')."""
    phases = ("inter", "intra") if gather else ("intra", "inter")
    for phase in phases:
        if phase == "intra" and g > 1:
            yield from server_steps(env, network, intra, g - 1, tag, step_s[0], classed=True)
        elif phase == "inter" and k > 1:
            yield from ring_steps(env, network, inter, nbytes / g / k, k - 1, tag, step_s[1], classed=True)
