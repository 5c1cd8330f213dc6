"""The data-parallel rings of a stage's tensor-parallel ranks, and the links they share.

Megatron-LM gives every TP rank a data-parallel group of its own: rank ``r``'s holds rank ``r`` of
every replica (and, with context parallelism, of every CP rank), and each reduces that rank's
whole gradient shard. Where every rank's group runs on links of its own (a NIC per GPU, rails)
the ``t`` collectives take the same time and one stands for all; where a server has fewer NICs
than GPUs (dapple-2x8-v100: one per 8 V100; BLOOM's 4 per 8 A100) the ``t`` rings of a stage
cross the same NIC and each gets a share of it. The simulator then runs every rank's collective
(:class:`~pipesim.simulator.dp_collectives.Collective` ``rings``), the 3D estimate divides each
link's bandwidth by the rings on it (:func:`link_loads`); both decide where they share here.

The links compared are those of each group's ring steps: the ring in the group's order and,
grouped by server, each local rank's inter-server ring (the hierarchical form's). Every function
takes plain callables: ``route(src, dst) -> tuple[int, ...]`` and ``server_of(device) -> int``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["link_loads", "rank_groups", "ring_links"]

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
    loads: dict[int, int] = {}
    for group in groups:
        for link in ring_links(group, route, server_of):
            loads[link] = loads.get(link, 0) + 1
    return loads if any(n > 1 for n in loads.values()) else None
