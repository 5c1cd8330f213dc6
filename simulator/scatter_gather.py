"""Reduce-scatter and all-gather among a stage's replicas (ZeRO's collectives), from real transfers.

They are the all-reduce's two halves on the same rings (nccl-tests ``doc/PERFORMANCE.md``, commit
a0b82b2260cf: an all-gather's or reduce-scatter's bus bandwidth is ``algbw x (n - 1)/n``, an
all-reduce's ``algbw x 2 (n - 1)/n``, ``S`` the whole array), made of
flows as in :mod:`pipesim.simulator.collectives` (each ring's steps one lock-step flow,
:func:`~pipesim.simulator.collective_steps.ring_flow`; its set-up memoized per network and call
shape, :func:`~pipesim.simulator.collective_steps.memoized`):

``n - 1`` steps of ``S / n`` bytes on the rings (several rings over a direct-link mesh, or one per
NIC across even servers, NCCL's rings there; each carrying its share), whatever algorithm is
asked for: NCCL runs these collectives only on rings
(:func:`pipesim.profiles.costmodels.sharding.half_algorithm`, the planner's rule too), so
``tree``, ``nvls`` and ``hierarchical`` name the all-reduce's forms and mean the ring here.
Uncontended, each takes half the time of its ring all-reduce: the all-reduce's NCCL protocol on
the ring (:mod:`pipesim.profiles.costmodels.nccl_protocol`), its hand-off at each of the half's
steps and half its launch (a reduce-scatter and all-gather pair pays one launch; NCCL launches
each, a few microseconds more).
"""

from __future__ import annotations

from collections.abc import Sequence

import simpy

from pipesim.errors import check_nonneg
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.costmodels.sharding import CollectiveKind, half_algorithm
from pipesim.simulator.collective_costs import call_protocol
from pipesim.simulator.collective_steps import (
    Process,
    Route,
    ServerOf,
    check_members,
    launched,
    memoized,
    ring_routes,
    ring_steps,
    step_handoff_s,
)
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network

__all__ = ["CollectiveKind", "all_gather", "collective", "reduce_scatter"]


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
        InputError: bad members or bytes.
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
        InputError: bad members or bytes.
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
        InputError: bad members or bytes, or a ``hierarchical`` all-reduce without ``server_of``.
    """
    what = CollectiveKind(kind) if not isinstance(kind, CollectiveKind) else kind
    if what is CollectiveKind.ALL_REDUCE:
        return allreduce(
            env, network, members, nbytes, route, server_of=server_of, algorithm=algorithm, tag=tag
        )
    return _half(env, network, members, nbytes, route, server_of, algorithm, tag,
                 gather=what is CollectiveKind.ALL_GATHER)


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
    half_algorithm(algorithm)  # the ring, whatever is asked for; an unknown name raises
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if len(order) <= 1:
        return ring_steps(env, network, [[]], 0.0, 0, tag)
    launch, routes, chunk, ring_s = memoized(
        network,
        ("half", tuple(order), nbytes, route, server_of),
        lambda: _ring_setup(network, order, nbytes, route, server_of),
    )
    return launched(env, launch, ring_steps(env, network, routes, chunk, len(order) - 1, tag, ring_s,
                                            classed=True))


def _ring_setup(
    network: Network,
    order: list[int],
    nbytes: float,
    route: Route,
    server_of: ServerOf | None,
) -> tuple[float, list[list[tuple[int, ...]]], float, float]:
    """A reduce-scatter's or all-gather's ``(launch s, rings' hop routes, chunk bytes, hand-off s)``
    among ``order`` (two members or more): the ring all-reduce's protocol (half its launch, its
    hand-off per step) and the rings (made once per network and call shape:
    :func:`~pipesim.simulator.collective_steps.memoized`)."""
    protocol = call_protocol(network, order, route, server_of, nbytes, AllReduceAlgorithm.RING)
    wire = protocol.wire_factor * nbytes
    routes = ring_routes(network, order, route, server_of)
    step_s = step_handoff_s(network, protocol, [r for ring in routes for r in ring])
    return protocol.ring_launch_s / 2, routes, wire / len(order) / len(routes), step_s
