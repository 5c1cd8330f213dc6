"""Which rings and switch ports a collective runs on: NCCL's several rings over direct links
(a DGX-1's NVLink cube-mesh), the members grouped by server, and the NVSwitch ports NVLink SHARP
uses (:mod:`pipesim.profiles.costmodels.collective` times them)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

from pipesim.errors import invalid

__all__ = [
    "MAX_RING_SEARCH_MEMBERS",
    "LinkValue",
    "RouteFn",
    "disjoint_cycles",
    "group_by_server",
    "nvls_ports",
    "ring_set",
    "server_rings",
]

RouteFn = Callable[[int, int], tuple[int, ...]]
"""The directed links from one device to another (a cluster's ``route``)."""
LinkValue = Callable[[int], float]
"""A per-link figure by link index (bandwidth, bytes/s, or latency, seconds)."""

MAX_RING_SEARCH_MEMBERS = 8
"""Most members :func:`ring_set` searches cycles for (a DGX-1 server); beyond, one ring."""


def group_by_server(members: Sequence[int], server_of: Callable[[int], int]) -> list[list[int]]:
    """Members grouped by server, servers in order of first appearance, members in given order."""
    groups: dict[int, list[int]] = {}
    for m in members:
        groups.setdefault(server_of(m), []).append(m)
    return list(groups.values())


def ring_set(
    members: Sequence[int],
    route: RouteFn,
    bandwidth: LinkValue,
    server_of: Callable[[int], int] | None = None,
) -> tuple[tuple[int, ...], ...]:
    """The rings a ring all-reduce among ``members`` runs at once, each carrying an equal share.

    Where ``server_of`` puts the members on several servers of ``g > 1`` members each, the ``g``
    rings of :func:`server_rings` (NCCL's rings across servers, one per NIC). Otherwise (one
    server, uneven servers, one member per server, no ``server_of``), where 3 to
    :data:`MAX_RING_SEARCH_MEMBERS` members are joined by direct links (one-hop routes
    both ways), the most edge-disjoint Hamiltonian cycles over those links (a pair's capacity in
    units of the slowest direct link, so a doubled NVLink counts twice), each in both
    directions; otherwise (or where no cycle exists) the one ring in the given order. The search
    is exhaustive and deterministic (cycles start at the first member, in lexicographic order).

    Raises:
        InputError: no members or duplicates.
    """
    order = list(members)
    if not order or len(set(order)) != len(order):
        raise invalid("members", order, "must be distinct device ids, at least one")
    if server_of is not None:
        groups = group_by_server(order, server_of)
        if len(groups) > 1 and len({len(x) for x in groups}) == 1 and len(groups[0]) > 1:
            return server_rings(groups)
    n = len(order)
    plain = (tuple(order),)
    if n < 3 or n > MAX_RING_SEARCH_MEMBERS:
        return plain
    rate: dict[tuple[int, int], float] = {}
    for i in range(n):
        for j in range(i + 1, n):
            there, back = route(order[i], order[j]), route(order[j], order[i])
            if len(there) == 1 and len(back) == 1:
                rate[(i, j)] = min(bandwidth(there[0]), bandwidth(back[0]))
    if not rate:
        return plain
    unit = min(rate.values())
    if not 0 < unit < math.inf:
        return plain
    cap = tuple((key, max(1, round(value / unit))) for key, value in rate.items())
    best = disjoint_cycles(n, cap)
    if not best:
        return plain
    rings: list[tuple[int, ...]] = []
    for cycle in best:
        forward = tuple(order[k] for k in cycle)
        rings.append(forward)
        rings.append((forward[0], *reversed(forward[1:])))
    return tuple(rings)


def server_rings(groups: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """NCCL's rings across ``k`` servers of ``g`` members each (``groups``, servers in ring
    order): ``g`` rings, ring ``r`` visiting every server's members in their order rotated by
    ``r`` (``x[r], x[r + 1], ..., x[r - 1]``), so it enters each server at local rank ``r`` and
    leaves it from local rank ``r - 1``: every member's network port (NIC, or its rail through
    PXN) carries one ring in each direction, and each ring carries ``S / g``.

    NCCL builds its rings across servers so: each ring channel runs "NET n -> GPU a -> GPU b ->
    .. -> GPU x -> NET n" (NVIDIA/nccl ``src/graph/search.cc`` at v2.8.4-1, the comment on
    ``ncclTopoSearchParams``), and ``ncclTopoSearchRecNet`` starts each successive channel from
    a NIC that still has bandwidth left (taking the channel's speed off it), at the GPU nearest
    that NIC, so the channels spread over the NICs; all-gather and reduce-scatter run only as
    such rings (``src/graph/tuning.cc``, same tag: ``if (coll != ncclFuncAllReduce && a !=
    NCCL_ALGO_RING) continue;``). Here ring ``r``'s last member ``x[r - 1]`` sends to the next
    server's ``x[r]``, a route that (with PXN on a rail fabric) leaves through ``x[r]``'s NIC,
    the one the ring entered by. One ring through the servers in order would cross each boundary
    on one NIC: ``g`` times too slow where each GPU has its own.
    """
    g = len(groups[0])
    return tuple(tuple(x[(r + i) % g] for x in groups for i in range(g)) for r in range(g))


@functools.lru_cache(maxsize=64)
def disjoint_cycles(
    n: int, capacity: tuple[tuple[tuple[int, int], int], ...]
) -> tuple[tuple[int, ...], ...]:
    """The most edge-disjoint Hamiltonian cycles over ``n`` positions :func:`ring_set` runs on:
    ``capacity`` lists each direct pair ``((i, j), units)`` (``i < j``, the pair's capacity in
    units of the slowest direct link); each cycle starts at position 0, in lexicographic order of
    the exhaustive search (no cycle: ``()``). The answer depends only on these arguments, so it
    is kept (servers of one kind share it: a 1024-GPU run asks for it once, not per server and
    call).
    """
    cap = dict(capacity)
    neighbours = [[j for j in range(n) if (min(i, j), max(i, j)) in cap] for i in range(n)]
    cycles: list[tuple[int, ...]] = []

    def extend(path: list[int], seen: set[int]) -> None:
        if len(path) == n:
            if (0, path[-1]) in cap and path[1] < path[-1]:
                cycles.append(tuple(path))
            return
        for j in neighbours[path[-1]]:
            if j not in seen:
                path.append(j)
                seen.add(j)
                extend(path, seen)
                seen.discard(j)
                path.pop()

    extend([0], {0})
    if not cycles:
        return ()
    edges = [[(min(c[k], c[(k + 1) % n]), max(c[k], c[(k + 1) % n])) for k in range(n)] for c in cycles]
    best: list[int] = []
    budget = [20000]

    def pack(start: int, chosen: list[int], left: dict[tuple[int, int], int]) -> None:
        if len(chosen) > len(best):
            best[:] = chosen
        for c in range(start, len(cycles)):
            budget[0] -= 1
            if budget[0] < 0:
                return
            if all(left[e] > 0 for e in edges[c]):
                for e in edges[c]:
                    left[e] -= 1
                chosen.append(c)
                pack(c, chosen, left)
                chosen.pop()
                for e in edges[c]:
                    left[e] += 1

    pack(0, [], dict(cap))
    return tuple(cycles[c] for c in best)


def nvls_ports(
    members: Sequence[int], route: RouteFn, server_of: Callable[[int], int] | None = None
) -> tuple[tuple[int, int], ...] | None:
    """Each member's ``(port into the switch, port out of it)`` link indices for NVLink SHARP,
    or ``None`` where it does not apply: fewer than two members, members on different servers,
    or a route between two members that is not ``(sender's port in, receiver's port out)``
    through one switch."""
    order = list(members)
    if len(order) < 2:
        return None
    if server_of is not None and len({server_of(m) for m in order}) > 1:
        return None
    up: dict[int, int] = {}
    down: dict[int, int] = {}
    for a in order:
        for b in order:
            if a == b:
                continue
            r = route(a, b)
            if len(r) != 2 or up.setdefault(a, r[0]) != r[0] or down.setdefault(b, r[1]) != r[1]:
                return None
    return tuple((up[m], down[m]) for m in order)
