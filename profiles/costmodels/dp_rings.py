"""The data-parallel rings and pipeline sends of a stage's tensor-parallel ranks, and the links
they share.

Megatron-LM gives every TP rank a data-parallel group of its own: rank ``r``'s holds rank ``r`` of
every replica (and, with context parallelism, of every CP rank), and each reduces that rank's
whole gradient shard. Where every rank's group runs on links of its own (a NIC per GPU, rails)
the ``t`` collectives take the same time and one stands for all; where a server has fewer NICs
than GPUs (dapple-2x8-v100: one per 8 V100; BLOOM's 4 per 8 A100) the ``t`` rings of a stage
cross the same NIC and each gets a share of it. The simulator then runs every rank's collective
(:class:`~pipesim.simulator.dp_collectives.Collective` ``rings``), the 3D estimate divides each
link's bandwidth by the rings on it (:func:`link_loads`); both decide where they share here.

The links compared are those of each group's ring steps: the ring in the group's order and,
grouped by server, each local rank's inter-server ring (the hierarchical form's).

The same holds for the pipeline's point-to-point transfers: each TP (and CP) rank sends its
``1/t`` share of an activation or gradient to its peer in the next stage (Megatron-LM's
scatter-gather, or the sequence shard under SP), rank ``r`` of a replica from its first device
plus ``r`` to the peer replica's first device plus ``r``. Where those ``t`` routes have links of
their own, or share only links wide enough for all of them, one send stands for all; where they
cross a link that slows them (the servers' shared NICs) the simulator runs every rank's send and
the 3D estimate counts them on the links they cross; :func:`replica_sends` decides for both,
over every replica's sends at once (:func:`shared_sends`: one pair alone).

The same holds inside a replica of ``t x c`` devices (Megatron-LM's ``tp-cp`` order, consecutive
TP ranks): the ``c`` CP ranks each run the replica's TP collectives on a TP group of their own
(the first one's shifted by ``k t``), and the ``t`` TP ranks each run the ring attention's K/V
exchange on a CP ring of their own (the first one's shifted by ``r``). The simulator runs the
first of them and mirrors the others where every flow gets its own rate anyway; where their
routes meet on a link that cannot carry them all (a TP group or CP ring that leaves its server
through a NIC another one's crosses) it runs them all, and the 3D estimate divides such a link's
bandwidth by the rings on it; :func:`ranks_apart` decides for both, over every replica's
ranks at once (replicas run in lock step: a fabric link wide enough for one replica's ranks
but not for every replica's is tight too).

Every function takes plain callables: ``route(src, dst) -> tuple[int, ...]`` and
``server_of(device) -> int``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

__all__ = [
    "Apart",
    "hop_links",
    "link_loads",
    "rank_groups",
    "ranks_apart",
    "replica_sends",
    "ring_links",
    "route_bandwidth",
    "shared_bandwidth",
    "shared_sends",
    "tight_links",
    "unit_ring_loads",
]

Route = Callable[[int, int], tuple[int, ...]]
ServerOf = Callable[[int], int]


def rank_groups(first: Sequence[int], t: int) -> list[tuple[int, ...]]:
    """Every TP rank's group from the first rank's ``first`` (rank ``r``'s: each device plus
    ``r``; TP ranks are consecutive devices, :meth:`~pipesim.plan.Plan.tp_groups`)."""
    return [tuple(x + r for x in first) for r in range(t)]


def ring_links(group: Sequence[int], route: Route, server_of: ServerOf) -> set[int]:
    """The links ``group``'s ring steps cross (module docstring); empty for one member."""
    n = len(group)
    if n < 2:
        return set()
    links = {link for i in range(n) for link in route(group[i], group[(i + 1) % n])}
    by_server: dict[int, list[int]] = {}
    for x in group:
        by_server.setdefault(server_of(x), []).append(x)
    servers = list(by_server.values())
    k = len(servers)
    if k > 1 and len({len(s) for s in servers}) == 1:
        for j in range(len(servers[0])):
            for s in range(k):
                links.update(route(servers[s][j], servers[(s + 1) % k][j]))
    return links


def link_loads(groups: Sequence[Sequence[int]], route: Route, server_of: ServerOf) -> dict[int, int] | None:
    """Per link, how many of ``groups``' rings (one group per TP rank) cross it, where some
    link carries two or more; ``None`` where every group's rings have links of their own."""
    return _shared_loads(ring_links(group, route, server_of) for group in groups)


def shared_sends(
    src: int, dst: int, ranks: int, route: Route, bandwidth: Callable[[int], float]
) -> tuple[tuple[int, int], ...]:
    """Every rank's ``(sender, receiver)`` of a pipeline send between replicas whose first
    devices are ``src`` and ``dst`` split over ``ranks`` TP (and CP) ranks, rank ``r``'s
    ``(src + r, dst + r)`` (module docstring), where their routes cross a link that cannot carry
    them all at once at their own routes' rates (``bandwidth(link)`` bytes/s below the sum of
    the bottlenecks of the sends crossing it: a server's shared NIC); ``()`` where each rank's
    send runs at its route's rate beside the others (links of its own, or a fabric link wide
    enough for all: a rail-optimised fabric's aggregated spine and core links), or for one
    rank."""
    return replica_sends(((src, dst),), ranks, route, bandwidth)[0]


def replica_sends(
    pairs: Sequence[tuple[int, int]], ranks: int, route: Route, bandwidth: Callable[[int], float]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per pair of ``pairs`` (every replica's ``(src, dst)`` first devices of one pipeline
    transfer, issued together: the replicas run in lock step) its ranks' sends as
    :func:`shared_sends` gives them, decided over every pair's ranks at once
    (:func:`ranks_apart`): a pair's ranks run apart where one of its other ranks' sends crosses
    a link that cannot carry all the sends crossing it, its own and the other replicas'; ``()``
    for a pair whose first rank's send stands for all."""
    if ranks < 2 or not pairs:
        return tuple(() for _ in pairs)
    units = [[set(route(a + r, b + r)) for r in range(ranks)] for a, b in pairs]
    apart = ranks_apart(units, bandwidth).units
    return tuple(tuple((a + r, b + r) for r in range(ranks)) if on else ()
                 for (a, b), on in zip(pairs, apart, strict=True))


class Apart(NamedTuple):
    """What :func:`ranks_apart` decides.

    Attributes:
        units: per unit, whether one of its other ranks' flows (not its first rank's) crosses
            a shared link: the unit's ranks must run apart, the first rank's flow cannot stand
            for them.
        loads: per unit, per shared link its ranks' flows cross, how many of them cross it
            (empty: each of its ranks' flows has its own rate).
    """

    units: tuple[bool, ...]
    loads: tuple[dict[int, int], ...]


def ranks_apart(units: Sequence[Sequence[set[int]]], bandwidth: Callable[[int], float]) -> Apart:
    """Where the ranks of a lock-step flow set must run apart (module docstring).

    Args:
        units: per unit (a replica's pipeline send, its TP collectives, its ring exchange), per
            rank (the first is the one the simulator's stream runs), the links of that rank's
            flow (:func:`hop_links` of a ring, a send's route); all run at once.
        bandwidth: ``bandwidth(link)`` bytes/s.

    A link is shared where two ranks' flows (of any units) cross it and its bandwidth is below
    the sum of their own rates (:func:`tight_links`: a NIC that several GPUs' flows leave by,
    not a fabric link wide enough for all of them, nor a link one ring crosses twice, which the
    first rank's flows already show).
    """
    flows = [links for ranks in units for links in ranks]
    holders = _shared_loads(flows)
    if holders is None:
        return Apart(units=tuple(False for _ in units), loads=tuple({} for _ in units))
    shared = {link for link, n in holders.items() if n > 1}
    crossing = [links for links in flows if not shared.isdisjoint(links)]
    tight = tight_links([links & shared for links in crossing], bandwidth,
                        rates=[_rate(links, bandwidth) for links in crossing])
    loads: list[dict[int, int]] = []
    for ranks in units:
        own: dict[int, int] = {}
        for links in ranks:
            for link in links & tight:
                own[link] = own.get(link, 0) + 1
        loads.append(own)
    return Apart(units=tuple(any(not tight.isdisjoint(links) for links in ranks[1:]) for ranks in units),
                 loads=tuple(loads))


def unit_ring_loads(
    units: Sequence[Sequence[Sequence[int]]], route: Route, bandwidth: Callable[[int], float],
    *, every: bool = False,
) -> tuple[dict[int, int], ...]:
    """:attr:`Apart.loads` of rings: ``units[i][r]`` rank ``r``'s ring of unit ``i`` (a
    replica's CP ranks' TP groups, its TP ranks' CP rings), each one flow over its hops' links
    (:func:`hop_links`), as the simulator's lowering decides
    (``simulator/tp_lowering.py``, ``TpLowering._ranks_apart``). The 3D estimate divides a
    ring's links by its unit's loads (:func:`shared_bandwidth`): the max-min share of its
    unit's rings while all run together; ``every``: by every unit's rings on them (the
    replicas' rings, in lock step, where nothing else counts them)."""
    loads = ranks_apart([[hop_links(ring, route) for ring in unit] for unit in units], bandwidth).loads
    if not every:
        return loads
    total: dict[int, int] = {}
    for own in loads:
        for link, n in own.items():
            total[link] = total.get(link, 0) + n
    return tuple(total if own else {} for own in loads)


def hop_links(ring: Sequence[int], route: Route) -> set[int]:
    """The links of ``ring``'s hops (``ring[0] -> ring[1] -> .. -> ring[0]``, each on its
    route): what one flow of a ring crosses; empty for one member."""
    n = len(ring)
    return set() if n < 2 else {link for i in range(n) for link in route(ring[i], ring[(i + 1) % n])}


def shared_bandwidth(loads: dict[int, int], bandwidth: Callable[[int], float]) -> Callable[[int], float]:
    """``bandwidth`` with each link of ``loads`` (one unit's :attr:`Apart.loads`) divided by the
    flows on it: each ring's max-min share while all run together, bytes/s."""
    if not loads:
        return bandwidth

    def shared(link: int) -> float:
        return bandwidth(link) / loads.get(link, 1)

    return shared


def route_bandwidth(route: Route, bandwidth: Callable[[int], float]) -> Callable[[int, int], float]:
    """``(src, dst) ->`` the smallest ``bandwidth(link)`` of the route, bytes/s (``inf`` for
    an empty route), as ``Cluster.route_bandwidth_bytes_per_s`` gives it on the links'
    bandwidths."""

    def rate(src: int, dst: int) -> float:
        return min((bandwidth(link) for link in route(src, dst)), default=math.inf)

    return rate


def _rate(links: set[int], bandwidth: Callable[[int], float]) -> float:
    """A flow's own rate: the smallest bandwidth of its links, bytes/s."""
    return min((bandwidth(link) for link in links), default=math.inf)


def tight_links(
    link_sets: Sequence[set[int]], bandwidth: Callable[[int], float], rates: Sequence[float] | None = None
) -> set[int]:
    """The links that cannot carry every flow of ``link_sets`` crossing them at once at the
    flow's own rate (each flow's rate: the smallest ``bandwidth(link)``, bytes/s, of its links,
    or ``rates``' where given; a link is tight where its bandwidth is below the sum of the
    rates through it: a server's NIC shared by several GPUs' flows, not a fabric link wide
    enough for all of them)."""
    demand: dict[int, float] = {}  # per link, the flows' own rates through it, bytes/s
    for k, links in enumerate(link_sets):
        rate = _rate(links, bandwidth) if rates is None else rates[k]
        for link in links:
            demand[link] = demand.get(link, 0.0) + rate
    return {link for link, rate in demand.items() if bandwidth(link) < rate * (1.0 - 1e-12)}


def _shared_loads(link_sets: Iterable[set[int]]) -> dict[int, int] | None:
    """Per link, how many of ``link_sets`` hold it, where one is held by two or more; else ``None``."""
    loads: dict[int, int] = {}
    for links in link_sets:
        for link in links:
            loads[link] = loads.get(link, 0) + 1
    return loads if any(n > 1 for n in loads.values()) else None
