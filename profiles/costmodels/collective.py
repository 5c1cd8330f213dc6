"""Collective cost: route-based time estimates of a gradient all-reduce, shared by planner and simulator.

The estimate runs on the routes a cluster gives, so it sees two-hop NVLink paths, PCIe switches
and NICs shared by several members. Both algorithms are sequences of *steps* in which every
member sends one chunk over its route at once:

* **ring** over ``n`` members (in the given order): ``2 (n - 1)`` steps of ``S / n`` bytes
  (reduce-scatter, then all-gather; Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms
  for clusters of workstations", JPDC 2009).
* **hierarchical** over ``k`` servers of ``g`` members each (members grouped by ``server_of``,
  servers in order of first appearance): ``g - 1`` intra-server ring steps of ``S / g`` bytes
  (reduce-scatter), ``2 (k - 1)`` steps of ``S / (g k)`` bytes on ``g`` concurrent inter-server
  rings (one per local rank), ``g - 1`` intra-server steps of ``S / g`` (all-gather). Uneven
  servers fall back to a ring over the members ordered by server; one server or one member per
  server is the plain ring.

A step takes the slowest of its chunks; a chunk takes its route's latency (plus a per-transfer
``overhead_s``) plus its bytes at ``min over its links of (bandwidth / chunks of this step on the
link)``: the collective's own chunks share a link equally (the max-min fair share when they are
the only traffic), other traffic is not seen. Since every step is ``max(a + b * bytes)`` over
its chunks, a whole algorithm is a convex piecewise-linear function of the gradient bytes,
returned as :data:`Lines` so a caller can evaluate it for many sizes cheaply.

``auto`` picks hierarchical when it applies and is strictly faster, else ring (the simulator's
rule). Everything here is pure: routes, bandwidths and latencies come in as callables, so this
module serves the planner (on a :class:`~pipesim.profiles.hardware.cluster.Cluster`) and the simulator
(on its network) alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import check_nonneg, invalid, parse_name

__all__ = [
    "AllReduceAlgorithm",
    "AllReduceCurves",
    "AllReduceOverlap",
    "Lines",
    "allreduce_curves",
    "allreduce_time_s",
    "eval_lines",
    "group_by_server",
    "prune_lines",
    "step_lines",
]

Lines = tuple[tuple[float, float], ...]
"""A convex piecewise-linear time of ``x`` bytes: ``max(a + b * x for a, b in lines)``, seconds
(0 for no lines)."""


class AllReduceAlgorithm(str, Enum):
    """How a stage's replicas all-reduce their gradients (see the module docstring)."""

    RING = "ring"
    HIERARCHICAL = "hierarchical"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> AllReduceAlgorithm:
        """The algorithm called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: ``name`` is not ``ring``, ``hierarchical`` or ``auto``.
        """
        return parse_name("all-reduce algorithm", cls, name)


class AllReduceOverlap(str, Enum):
    """When a stage's gradient all-reduce starts (the simulator's ``allreduce_overlap``).

    ``after_backward``: as soon as all its replicas finished their last backward (DAPPLE);
    ``end``: after the whole pipeline drained; ``bucketed``: per gradient bucket, in backward
    order, as soon as every replica's last backward produced it (PyTorch DDP).
    """

    AFTER_BACKWARD = "after_backward"
    END = "end"
    BUCKETED = "bucketed"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> AllReduceOverlap:
        """The overlap mode called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: ``name`` is not ``after_backward``, ``end`` or ``bucketed``.
        """
        return parse_name("all-reduce overlap mode", cls, name)


RouteFn = Callable[[int, int], tuple[int, ...]]
LinkValue = Callable[[int], float]


def eval_lines(lines: Lines, x: float) -> float:
    """``max(a + b * x)`` over ``lines``, seconds; 0 for no lines."""
    best = 0.0
    for a, b in lines:
        t = a + b * x
        if t > best:
            best = t
    return best


def prune_lines(lines: Sequence[tuple[float, float]]) -> Lines:
    """Drop the lines another one beats everywhere on ``x >= 0`` (the maximum is unchanged)."""
    uniq = sorted(set(lines), key=lambda ab: (-ab[1], -ab[0]))
    kept: list[tuple[float, float]] = []
    for a, b in uniq:
        if any(a2 >= a and b2 >= b for a2, b2 in kept):
            continue
        kept.append((a, b))
    return tuple(kept)


def _scale(lines: Lines, factor: float) -> Lines:
    return tuple((a * factor, b * factor) for a, b in lines)


def _add(x: Lines, y: Lines) -> Lines:
    """The lines of ``eval(x) + eval(y)`` (a sum of maxima is the maximum of pairwise sums)."""
    if not x:
        return y
    if not y:
        return x
    return prune_lines([(a1 + a2, b1 + b2) for a1, b1 in x for a2, b2 in y])


def step_lines(
    routes: Sequence[tuple[int, ...]],
    scale: float,
    bandwidth: LinkValue,
    latency: LinkValue,
    *,
    overhead_s: float = 0.0,
) -> Lines:
    """One step in which a chunk of ``scale * x`` bytes crosses each route at once.

    Args:
        routes: one route (link indices) per chunk; an empty route (same device) costs nothing.
        scale: the chunk's share of ``x``.
        bandwidth: ``bandwidth(link)`` bytes/s (``inf`` never limits).
        latency: ``latency(link)`` seconds.
        overhead_s: fixed time added to every chunk over a non-empty route, seconds.
    """
    uses: dict[int, int] = {}
    for r in routes:
        for link in set(r):
            uses[link] = uses.get(link, 0) + 1
    lines: list[tuple[float, float]] = []
    for r in routes:
        if not r:
            continue
        rate = min(bandwidth(link) / uses[link] for link in set(r))
        lat = overhead_s + sum(latency(link) for link in r)
        lines.append((lat, scale / rate if rate < math.inf else 0.0))
    return prune_lines(lines)


def group_by_server(members: Sequence[int], server_of: Callable[[int], int]) -> list[list[int]]:
    """Members grouped by server, servers in order of first appearance, members in given order."""
    groups: dict[int, list[int]] = {}
    for m in members:
        groups.setdefault(server_of(m), []).append(m)
    return list(groups.values())


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceCurves:
    """The time of an all-reduce among fixed members as functions of the gradient bytes.

    Attributes:
        ring: the ring all-reduce, :data:`Lines` of the bytes.
        hierarchical: the hierarchical all-reduce (the server-ordered ring for uneven servers),
            or ``None`` where it is the plain ring (one member, one server, one member per server).
        even: whether the servers hold equal member counts (``auto`` considers hierarchical only then).
    """

    ring: Lines
    hierarchical: Lines | None
    even: bool

    def time_s(self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO) -> float:
        """Estimated time of an all-reduce of ``nbytes`` per member with ``algorithm``, seconds."""
        ring = eval_lines(self.ring, nbytes)
        if self.hierarchical is None or algorithm == AllReduceAlgorithm.RING:
            return ring
        hier = eval_lines(self.hierarchical, nbytes)
        if algorithm == AllReduceAlgorithm.HIERARCHICAL:
            return hier
        return hier if self.even and hier < ring else ring

    def uses_hierarchical(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO
    ) -> bool:
        """Whether ``algorithm`` runs the hierarchical (or server-ordered) form for ``nbytes``."""
        if self.hierarchical is None or algorithm == AllReduceAlgorithm.RING:
            return False
        if algorithm == AllReduceAlgorithm.HIERARCHICAL:
            return True
        return self.even and eval_lines(self.hierarchical, nbytes) < eval_lines(self.ring, nbytes)


def allreduce_curves(
    members: Sequence[int],
    route: RouteFn,
    bandwidth: LinkValue,
    latency: LinkValue,
    *,
    server_of: Callable[[int], int] | None = None,
    overhead_s: float = 0.0,
) -> AllReduceCurves:
    """Ring and hierarchical all-reduce time curves among ``members`` (see the module docstring).

    Args:
        members: distinct device ids in ring order.
        route: ``route(src, dst)`` link indices.
        bandwidth: ``bandwidth(link)`` bytes/s.
        latency: ``latency(link)`` seconds.
        server_of: ``server_of(device)``; without it there is no hierarchical form.
        overhead_s: fixed time per chunk transfer, seconds.

    Raises:
        InputError: no members or duplicates.
    """
    order = list(members)
    if not order or len(set(order)) != len(order):
        raise invalid("members", order, "must be distinct device ids, at least one")
    n = len(order)
    if n == 1:
        return AllReduceCurves(ring=(), hierarchical=None, even=True)

    def ring_of(seq: Sequence[int]) -> Lines:
        steps = step_lines(
            [route(seq[i], seq[(i + 1) % n]) for i in range(n)],
            1.0 / n,
            bandwidth,
            latency,
            overhead_s=overhead_s,
        )
        return _scale(steps, 2.0 * (n - 1))

    ring = ring_of(order)
    if server_of is None:
        return AllReduceCurves(ring=ring, hierarchical=None, even=True)
    groups = group_by_server(order, server_of)
    even = len({len(x) for x in groups}) == 1
    if len(groups) == 1 or (even and len(groups[0]) == 1):
        return AllReduceCurves(ring=ring, hierarchical=None, even=even)
    if not even:
        return AllReduceCurves(ring=ring, hierarchical=ring_of([m for x in groups for m in x]), even=False)
    k, g = len(groups), len(groups[0])
    intra = step_lines(
        [route(x[i], x[(i + 1) % g]) for x in groups for i in range(g)],
        1.0 / g,
        bandwidth,
        latency,
        overhead_s=overhead_s,
    )
    inter = step_lines(
        [route(groups[s][j], groups[(s + 1) % k][j]) for j in range(g) for s in range(k)],
        1.0 / (g * k),
        bandwidth,
        latency,
        overhead_s=overhead_s,
    )
    hier = _add(_scale(intra, 2.0 * (g - 1)), _scale(inter, 2.0 * (k - 1)))
    return AllReduceCurves(ring=ring, hierarchical=hier, even=True)


def allreduce_time_s(
    members: Sequence[int],
    nbytes: float,
    route: RouteFn,
    bandwidth: LinkValue,
    latency: LinkValue,
    *,
    server_of: Callable[[int], int] | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO,
    overhead_s: float = 0.0,
) -> float:
    """Estimated all-reduce time of ``nbytes`` per member among ``members``, seconds.

    ``algorithm``: ``auto`` (hierarchical when it applies and is strictly faster), ``ring`` or
    ``hierarchical`` (uneven servers: the ring ordered by server). One member costs 0.

    Raises:
        InputError: unknown algorithm (:class:`~pipesim.errors.UnknownNameError`), bad members,
            negative or non-finite ``nbytes``, or ``hierarchical`` without ``server_of``.
    """
    algorithm = AllReduceAlgorithm.parse(algorithm)
    check_nonneg("nbytes", nbytes)
    if algorithm is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    curves = allreduce_curves(members, route, bandwidth, latency, server_of=server_of, overhead_s=overhead_s)
    return curves.time_s(nbytes, algorithm)
