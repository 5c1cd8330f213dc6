"""Schedules and execution orders for variable-sized micro-batches.

:func:`memory_aware` is a 1F1B-shaped schedule for micro-batches of different sizes: before its
k-th backward a rank runs forwards only while the activations it would hold stay within its
memory limit, and at most ``lookahead`` micro-batches ahead (default ``2 (p - r) - 1`` on rank
``r``, DAPPLE's slow-link warm-up, which keeps more small micro-batches in flight to smooth out
their different times). Large micro-batches therefore hold back forwards; small ones let a rank
run further ahead. Unit-cost example, p=3, m=5, no memory pressure::

    rank 0 F0 F1 F2 F3 F4 B0 .  B1 .  B2 .  B3 .  B4
    rank 1 .  F0 F1 F2 B0 F3 B1 F4 B2 .  B3 .  B4 .
    rank 2 .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 .  .

:func:`best_order` picks the execution order of a plan's micro-batches (ascending, descending,
alternating long and short, or as planned) with the analytic evaluator
(:func:`pipesim.schedules.evaluate`) under the chosen schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pipesim.errors import invalid
from pipesim.schedules import Action, Op, Schedule, ScheduleName, evaluate, make_schedule, validate

__all__ = ["MEMORY_AWARE", "best_order", "forward_counts", "memory_aware", "variable_schedule"]

log = logging.getLogger(__name__)

MEMORY_AWARE = ScheduleName.MEMORY_AWARE.value
"""The name of :func:`memory_aware` (accepted wherever a schedule name is)."""


def forward_counts(
    stash_bytes: Sequence[Sequence[float]],
    limit_bytes: Sequence[float],
    *,
    lookahead: Sequence[int] | None = None,
) -> list[list[int]]:
    """``F[r][k]``: forwards rank ``r`` has run before its backward of micro-batch ``k``.

    Rank ``r`` (stage ``r``) adds the forward of its next micro-batch ``f`` before backward ``k``
    while ``f < k + lookahead[r]`` and the stashed bytes of micro-batches ``k .. f`` fit
    ``limit_bytes[r]``. Then ``F[r][k] >= k + 1`` (the micro-batch itself), ``F[r][k]`` does not
    decrease with ``k``, and ``F[r][k] >= F[r + 1][k]`` (a rank must have sent every activation
    the next rank needs before its backward, else they wait on each other) even where that
    exceeds the limit.

    Args:
        stash_bytes: ``[stage][microbatch]`` bytes a micro-batch keeps on the stage.
        limit_bytes: per stage, the activation bytes it may hold.
        lookahead: per stage, the most micro-batches ahead of the oldest in flight (default
            ``2 (p - r) - 1``).

    Raises:
        InputError: tables of the wrong shape, or a lookahead below 1.
    """
    p = len(stash_bytes)
    if p < 1 or len(limit_bytes) != p:
        raise invalid("limit_bytes", list(limit_bytes), f"must have one entry per stage ({p})")
    m = len(stash_bytes[0])
    ahead = [2 * (p - r) - 1 for r in range(p)] if lookahead is None else list(lookahead)
    if len(ahead) != p or any(a < 1 for a in ahead):
        raise invalid("lookahead", ahead, f"must be {p} integers >= 1")
    counts = [[0] * m for _ in range(p)]
    for r in range(p - 1, -1, -1):
        row = stash_bytes[r]
        held = 0.0  # bytes of micro-batches k .. f-1
        f = 0
        for k in range(m):
            if k:
                held -= row[k - 1]
            while f < k + 1:
                held += row[f]
                f += 1
            cap = min(m, k + ahead[r])
            while f < cap and held + row[f] <= limit_bytes[r]:
                held += row[f]
                f += 1
            if r < p - 1:
                while f < counts[r + 1][k]:
                    held += row[f]
                    f += 1
            counts[r][k] = f
    return counts


def memory_aware(
    stash_bytes: Sequence[Sequence[float]],
    limit_bytes: Sequence[float],
    *,
    lookahead: Sequence[int] | None = None,
) -> Schedule:
    """The memory-aware schedule (see the module docstring and :func:`forward_counts`).

    Returns:
        A validated, compute-only :class:`~pipesim.schedules.Schedule` named ``memory-aware``,
        one stage per rank.

    Raises:
        InputError: see :func:`forward_counts`.
    """
    counts = forward_counts(stash_bytes, limit_bytes, lookahead=lookahead)
    p, m = len(counts), len(counts[0])
    ranks = []
    for r in range(p):
        row: list[Action] = []
        done = 0
        for k in range(m):
            while done < counts[r][k]:
                row.append(Action(stage=r, op=Op.F, microbatch=done))
                done += 1
            row.append(Action(stage=r, op=Op.B, microbatch=k))
        ranks.append(tuple(row))
    schedule = Schedule(name=MEMORY_AWARE, num_ranks=p, num_stages=p, num_microbatches=m, ranks=tuple(ranks))
    validate(schedule)
    return schedule


def variable_schedule(
    name: str, stash_bytes: Sequence[Sequence[float]], limit_bytes: Sequence[float]
) -> Schedule:
    """The schedule ``name`` for these micro-batches: :func:`memory_aware` for ``memory-aware``,
    else the registry's generator (one stage per rank; the order ignores the sizes).

    Raises:
        UnknownNameError: an unknown schedule name.
        InputError: a schedule that needs more than one stage per rank.
    """
    if name.strip().lower() == MEMORY_AWARE:
        return memory_aware(stash_bytes, limit_bytes)
    return make_schedule(name, num_ranks=len(stash_bytes), num_microbatches=len(stash_bytes[0]))


def _alternate(order: Sequence[int]) -> list[int]:
    out = []
    lo, hi = 0, len(order) - 1
    while lo <= hi:
        out.append(order[hi])
        if lo != hi:
            out.append(order[lo])
        lo, hi = lo + 1, hi - 1
    return out


def best_order(
    fwd_time_s: Sequence[Sequence[float]],
    bwd_time_s: Sequence[Sequence[float]],
    schedule_for: Callable[[Sequence[int]], Schedule],
) -> tuple[list[int], float]:
    """The execution order of the micro-batches with the shortest evaluated iteration.

    Candidates: as planned, ascending and descending by slowest-stage time, and alternating
    longest and shortest. Each is timed with :func:`pipesim.schedules.evaluate` under
    ``schedule_for(order)`` (the schedule may depend on the order, as the memory-aware one does);
    ties keep the earlier candidate.

    Args:
        fwd_time_s: ``[stage][microbatch]`` forward times in planned order, seconds.
        bwd_time_s: backward times, seconds.
        schedule_for: builds the schedule for an order (micro-batch ``i`` of the schedule is
            planned micro-batch ``order[i]``).

    Returns:
        ``(order, estimated iteration time in seconds)``.
    """
    p, m = len(fwd_time_s), len(fwd_time_s[0])
    slowest = [max(fwd_time_s[s][k] + bwd_time_s[s][k] for s in range(p)) for k in range(m)]
    ascending = sorted(range(m), key=lambda k: (slowest[k], k))
    candidates = [list(range(m)), ascending, ascending[::-1], _alternate(ascending)]
    best: tuple[list[int], float] | None = None
    seen: set[tuple[int, ...]] = set()
    for order in candidates:
        if tuple(order) in seen:
            continue
        seen.add(tuple(order))
        schedule = schedule_for(order)
        timeline = evaluate(
            schedule,
            fwd_time_s=[[fwd_time_s[s][k] for k in order] for s in range(p)],
            bwd_time_s=[[bwd_time_s[s][k] for k in order] for s in range(p)],
            check=False,
        )
        span = float(timeline.makespan)
        if best is None or span < best[1]:
            best = (order, span)
    assert best is not None
    log.debug("best micro-batch order: %.6g s", best[1])
    return best
