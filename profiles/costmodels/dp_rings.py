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
the 3D estimate counts them on the links they cross; :func:`shared_sends` decides for both.

Every function takes plain callables: ``route(src, dst) -> tuple[int, ...]`` and
``server_of(device) -> int``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

__all__ = ["link_loads", "rank_groups", "ring_links", "shared_sends", "tight_links"]

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
    if ranks < 2:
        return ()
    pairs = tuple((src + r, dst + r) for r in range(ranks))
    routes = [set(route(a, b)) for a, b in pairs]
    if _shared_loads(routes) is None:
        return ()
    return pairs if tight_links(routes, bandwidth) else ()


def tight_links(link_sets: Sequence[set[int]], bandwidth: Callable[[int], float]) -> set[int]:
    """The links that cannot carry every flow of ``link_sets`` crossing them at once at the
    flow's own rate (each flow's rate: the smallest ``bandwidth(link)``, bytes/s, of its links;
    a link is tight where its bandwidth is below the sum of the rates through it: a server's
    NIC shared by several GPUs' flows, not a fabric link wide enough for all of them)."""
    demand: dict[int, float] = {}  # per link, the flows' own rates through it, bytes/s
    for links in link_sets:
        rate = min((bandwidth(link) for link in links), default=math.inf)
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
