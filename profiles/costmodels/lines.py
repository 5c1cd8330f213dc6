"""Convex piecewise-linear times of a byte count (:data:`Lines`): the algebra the route-based
collective cost models are written in (:mod:`pipesim.profiles.costmodels.collective`,
:mod:`pipesim.profiles.costmodels.double_tree`).

A collective is a sequence of *steps* in which every member sends one chunk over its route at
once. A step takes the slowest of its chunks; a chunk takes its route's latency (plus a
per-transfer ``overhead_s``) plus its bytes at ``min over its links of (bandwidth / chunks of
this step on the link)``: the step's own chunks share a link equally (the max-min fair share
when they are the only traffic), other traffic is not seen. Since every step is
``max(a + b * bytes)`` over its chunks, a whole algorithm is a convex piecewise-linear function
of the bytes, kept as its lines so a caller can evaluate it for many sizes cheaply.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipesim.profiles.costmodels.ring_topology import LinkValue

__all__ = ["Lines", "add_lines", "eval_lines", "prune_lines", "scale_lines", "step_lines"]

Lines = tuple[tuple[float, float], ...]
"""A convex piecewise-linear time of ``x`` bytes: ``max(a + b * x for a, b in lines)``, seconds
(0 for no lines)."""


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
    # steepest first, then highest (the lines as (slope, intercept), in reverse order)
    uniq = sorted({(b, a) for a, b in lines}, reverse=True)
    kept: list[tuple[float, float]] = []
    top = -math.inf  # the largest intercept kept: every kept slope is at least the next line's
    for b, a in uniq:
        if a <= top:
            continue  # a kept line is no lower at 0 and no flatter: it beats this one everywhere
        kept.append((a, b))
        top = a
    return tuple(kept)


def scale_lines(lines: Lines, factor: float) -> Lines:
    """The lines of ``factor * eval(lines)`` (``factor >= 0``)."""
    return tuple((a * factor, b * factor) for a, b in lines)


def add_lines(x: Lines, y: Lines) -> Lines:
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

