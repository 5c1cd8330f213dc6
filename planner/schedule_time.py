"""Iteration time of any registered schedule from its order, at a cost bounded in the micro-batch count.

The closed forms of :mod:`pipesim.planner.latency` cover the 1F1B family, GPipe, interleaved
1F1B and ZB-H1/H2. The other schedules (looped BFS, interleaved zero bubble, the V shapes ZB-V,
DualPipeV, V-Half, V-Min, the bidirectional DualPipe and Chimera, the greedy ZB-auto order and
PipeDream's flush-free orders) are timed by list-scheduling their own order with
:func:`pipesim.schedules.evaluate` (the analytic evaluator
the simulator is checked against: exact for compute and FIFO point-to-point transfers, with the
schedule's placement, no transfer between two stages on one rank):

* ``m <= EXACT_MICROBATCHES_PER_RANK * p``: the order of ``m`` micro-batches is evaluated as is
  (exact).
* larger ``m``: the order is evaluated at two counts ``m_1 = m_2 - d`` and ``m_2 = m (mod d)``
  within that bound (and ``>= 3d``), and the makespan extrapolated by whole periods ``d``:
  ``T(m) = T(m_2) + (m - m_2) / d (T(m_2) - T(m_1))``, each rank's and each stage's last action
  likewise, once a third evaluation at ``m_1 - d`` shows the same growth over the period before
  (otherwise the window doubles: far links make longer transients). ``d``
  is a period of the steady phase: ``p`` for the looped orders with ``v > 1`` (rounds of ``p``
  micro-batches; a count no multiple of ``p`` is below ``p^2`` and evaluated directly),
  ``lcm(p, 4)`` for the others (their steady phase repeats every 1, 2 or 4 micro-batches or every
  round of ``p``, as measured for the greedy V-Half, V-Min and ZB-auto orders). Exact once the
  order is periodic with period ``d`` from ``m_1`` on (with equal stages, every order here);
  checked against direct evaluation with unequal stages and slow links in
  ``tests/planner/test_schedule_plans.py``. A bottleneck that only overtakes past the window
  (a flow shop whose slowest stage's line crosses late) is caught for the makespan by taking the
  period's growth at least ``d`` times the busiest rank's compute per micro-batch (its forwards
  and backwards, less what overlapped pairs may hide: ``fb_overlap`` of the shorter side,
  :mod:`pipesim.schedules.pairs`); the ranks'
  last actions (when their all-reduces start) keep the window's growth, an approximation.

The cost is that of evaluating ``O(lcm(p, 4))`` micro-batches over ``v p`` stages, independent of ``m``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pipesim.schedules import evaluate, pair_time
from pipesim.schedules.action import Op
from pipesim.schedules.placement import stage_ranks
from pipesim.schedules.registry import make_schedule, schedule_info
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.timing import Time

__all__ = [
    "EXACT_MICROBATCHES_PER_RANK",
    "OrderTime",
    "evaluated_as_is",
    "order_time_s",
    "schedule_order",
    "valid_microbatches",
]

EXACT_MICROBATCHES_PER_RANK = 4
"""Orders of at most this many micro-batches per rank are evaluated exactly; longer ones are
extrapolated from two evaluations of at most this many."""


@dataclass(frozen=True, slots=True, kw_only=True)
class OrderTime:
    """An order's makespan, when each rank ends its last action and when each stage ends its last
    one (its last backward or weight gradient: when its gradients are complete), seconds from
    the start; with ``reduce_s`` given (:func:`order_time_s`), when each rank's reduce stream
    ends."""

    makespan_s: Time
    rank_end_s: tuple[Time, ...]
    stage_end_s: tuple[Time, ...] = ()
    stream_end_s: tuple[Time, ...] = ()


def valid_microbatches(schedule: str, num_ranks: int, num_microbatches: int, chunks: int) -> bool:
    """Whether the generator of ``schedule`` accepts ``m`` micro-batches on ``p`` ranks with ``v``
    chunks: the looped orders with ``v > 1`` need ``m`` to be a multiple of their rounds
    ``max(1, m // p)``; DualPipeV needs ``m >= 2p``; DualPipe an even ``p`` and an even
    ``m >= 2p``; Chimera an even ``p`` and ``m`` a multiple of ``p``; the others take any ``m >= 1``."""
    p, m = num_ranks, num_microbatches
    if m < 1:
        return False
    info = schedule_info(schedule)
    if info.chunks == "free" and chunks > 1 and m % max(1, m // p):
        return False
    if schedule == "dualpipe":  # two directions of m / 2 micro-batches, ranks paired r <-> p - 1 - r
        return p % 2 == 0 and m % 2 == 0 and m >= 2 * p
    if schedule == "chimera":  # basic units of p micro-batches, p / 2 each way
        return p % 2 == 0 and m % p == 0
    return not (schedule == "dualpipev" and m < 2 * p)


@functools.lru_cache(maxsize=512)
def _order(schedule: str, p: int, m: int, chunks: int, options: tuple[tuple[str, Any], ...]) -> Schedule:
    info = schedule_info(schedule)
    kwargs: dict[str, Any] = dict(options)
    return make_schedule(
        schedule, num_ranks=p, num_microbatches=m, chunks=chunks if info.chunks == "free" else None, **kwargs
    )


def _evaluate(
    schedule: str,
    p: int,
    m: int,
    chunks: int,
    options: tuple[tuple[str, Any], ...],
    costs: tuple[Sequence[Time], ...],
    reduce: Sequence[tuple[Time, Time]] = (),
) -> OrderTime:
    fwd, bwd, wgrad, c_f, c_b, l_f, l_b, inp = costs
    order = _order(schedule, p, m, chunks, options)
    timeline = evaluate(
        order,
        fwd_time_s=list(fwd),
        bwd_time_s=list(bwd),
        wgrad_time_s=list(wgrad),
        input_time_s=list(inp) if inp else None,
        fwd_comm_time_s=list(c_f),
        bwd_comm_time_s=list(c_b),
        fwd_comm_latency_s=list(l_f),
        bwd_comm_latency_s=list(l_b),
        check=False,
    )
    ends = tuple(max(row, default=0) for row in timeline.ends)
    stage_end: list[Time] = [0] * len(fwd)
    streams: list[Time] = []
    for row, row_ends, row_starts in zip(order.ranks, timeline.ends, timeline.starts, strict=True):
        for action, end in zip(row, row_ends, strict=True):
            if end > stage_end[action.stage]:
                stage_end[action.stage] = end
        if reduce:  # the rank's reduce stream: each gradient action's scatters after the ones before
            grad = Op.W if any(a.op is Op.W for a in row) else Op.B
            stream: Time = 0
            for action, start in zip(row, row_starts, strict=True):
                if action.op is grad:
                    ready, busy = reduce[action.stage]
                    stream = max(stream, start + ready) + busy
            streams.append(stream)
    return OrderTime(makespan_s=timeline.makespan, rank_end_s=ends, stage_end_s=tuple(stage_end),
                     stream_end_s=tuple(streams))


def _window(schedule: str, p: int, chunks: int) -> tuple[bool, int, int]:
    """``(looped rounds, period d, largest count evaluated as is)`` of :func:`order_time_s`."""
    looped_rounds = schedule_info(schedule).chunks == "free" and chunks > 1
    period = p if looped_rounds else math.lcm(p, 4)
    return looped_rounds, period, max(EXACT_MICROBATCHES_PER_RANK * p, 3 * period)


def evaluated_as_is(schedule: str, num_ranks: int, num_microbatches: int, chunks: int) -> bool:
    """Whether :func:`order_time_s` evaluates ``m`` micro-batches' order as is (its times,
    each rank's last action included, are the order's own), not extrapolated from shorter ones."""
    looped_rounds, _, bound = _window(schedule, num_ranks, chunks)
    return num_microbatches <= bound or (looped_rounds and num_microbatches % num_ranks != 0)


def _same_growth(t0: OrderTime, t1: OrderTime, t2: OrderTime) -> bool:
    """Whether every time grew as much from ``t1`` to ``t2`` as from ``t0`` to ``t1`` (to 1e-9)."""

    def flat(t: OrderTime) -> list[float]:
        return [float(x) for x in (t.makespan_s, *t.rank_end_s, *t.stage_end_s, *t.stream_end_s)]

    for a, b, c in zip(flat(t0), flat(t1), flat(t2), strict=True):
        if abs((c - b) - (b - a)) > abs(c) * 1e-9:
            return False
    return True


def order_time_s(
    schedule: str,
    *,
    num_ranks: int,
    num_microbatches: int,
    chunks: int,
    fwd_s: Sequence[Time],
    bwd_s: Sequence[Time],
    wgrad_s: Sequence[Time],
    send_fwd_s: Sequence[Time],
    send_bwd_s: Sequence[Time],
    options: Mapping[str, Any] | None = None,
    send_latency_s: Sequence[Time] | None = None,
    input_s: Sequence[Time] | None = None,
    reduce_s: Sequence[tuple[Time, Time]] | None = None,
) -> OrderTime:
    """The makespan of ``schedule``'s order over per-stage costs (see the module docstring).

    Args:
        schedule: a registered schedule name.
        num_ranks: pipeline ranks ``p``.
        num_microbatches: micro-batches ``m`` (valid for the schedule: :func:`valid_microbatches`).
        chunks: stages per rank ``v``.
        fwd_s, bwd_s, wgrad_s: per stage (``v p`` of them, stage order) forward, full backward and
            weight-gradient times, seconds.
        send_fwd_s, send_bwd_s: per stage boundary (``v p - 1``) the activation and gradient
            transfer times, seconds (charged only between stages on different ranks).
        options: the schedule's options (e.g. ``zb-auto``'s costs and memory limit).
        send_latency_s: per stage boundary the route latency within either transfer time (default
            0): a pipelined stream pays it once per queue, not per transfer (the evaluator's
            ``fwd_comm_latency_s``; docs/communication.md).
        input_s: per stage the input-gradient ``I`` time, seconds, where it is not
            ``bwd_s - wgrad_s`` (under TP a full ``B`` hides collectives an ``I`` exposes: the
            orders with both, DualPipe(V)); default that difference.
        reduce_s: per stage ``(ready, busy)``: ZeRO-2's reduce stream, one per rank
            (``simulator/zero_lowering.py``): each gradient-producing action (``B``, or ``W``
            where the order splits the backward) lets the stage's reduce-scatters start
            ``ready`` seconds after it starts, and they hold the rank's stream ``busy`` seconds,
            after the ones before (never holding up the compute):
            :attr:`OrderTime.stream_end_s` (:func:`~pipesim.planner.zero_ops.zero2_reduce_s`).

    Raises:
        InputError: ``m`` or ``chunks`` the schedule's generator refuses, or bad cost lists.
    """
    p, m = num_ranks, num_microbatches
    opts = tuple(sorted((options or {}).items()))
    lat: tuple[Time, ...] = tuple(send_latency_s) if send_latency_s is not None else (0,) * len(send_fwd_s)
    costs = (tuple(fwd_s), tuple(bwd_s), tuple(wgrad_s), tuple(send_fwd_s), tuple(send_bwd_s), lat, lat,
             tuple(input_s) if input_s is not None else ())
    reduce = tuple(reduce_s or ())
    looped_rounds, period, bound = _window(schedule, p, chunks)
    while True:
        if m <= bound or (looped_rounds and m % p):
            # a looped order whose m is no multiple of p has m < p^2 (its rounds divide m): direct
            return _evaluate(schedule, p, m, chunks, opts, costs, reduce)
        m2 = bound - (bound - m) % period  # the largest count <= bound with m2 = m (mod period)
        m1 = m2 - period
        t1 = _evaluate(schedule, p, m1, chunks, opts, costs, reduce)
        t2 = _evaluate(schedule, p, m2, chunks, opts, costs, reduce)
        m0 = m1 - period
        if not valid_microbatches(schedule, p, m0, chunks):
            break
        # periodic from m0 on: the same growth over two periods, or a longer transient (far
        # links hold more micro-batches back): a window twice as long
        if _same_growth(_evaluate(schedule, p, m0, chunks, opts, costs, reduce), t1, t2):
            break
        bound *= 2
    steps = Fraction(m - m2, period)  # exact with int or Fraction costs
    # no rank runs its micro-batches faster than its compute: the period's growth is at least the
    # busiest rank's, which guards against a bottleneck that only dominates past the window
    placement = schedule_info(schedule).placement
    where = stage_ranks(placement, len(fwd_s), p)
    fwd_sum: list[Time] = [0 for _ in range(p)]
    bwd_sum: list[Time] = [0 for _ in range(p)]
    for s, rank in enumerate(where):
        fwd_sum[rank] += fwd_s[s]
        bwd_sum[rank] += bwd_s[s]
    # overlapped pairs (dualpipe, dualpipev) hide at most fb_overlap of the shorter side
    overlap = (options or {}).get("fb_overlap", 0)
    busy = [pair_time(f, b, overlap) for f, b in zip(fwd_sum, bwd_sum, strict=True)]
    share = Fraction(1, 2) if placement == "dual" else 1  # dual: a micro-batch runs half the stages
    growth = max(t2.makespan_s - t1.makespan_s, period * max(busy) * share)
    return OrderTime(
        makespan_s=t2.makespan_s + steps * growth,
        # (each rank's end grows at least by its own compute per period, as the makespan does)
        rank_end_s=tuple(b + steps * max(b - a, period * x * share)
                         for a, b, x in zip(t1.rank_end_s, t2.rank_end_s, busy, strict=True)),
        stage_end_s=tuple(b + steps * (b - a) for a, b in zip(t1.stage_end_s, t2.stage_end_s, strict=True)),
        stream_end_s=tuple(b + steps * (b - a)
                           for a, b in zip(t1.stream_end_s, t2.stream_end_s, strict=True)),
    )


def schedule_order(
    schedule: str, num_ranks: int, num_microbatches: int, chunks: int, options: tuple[tuple[str, Any], ...]
) -> Schedule:
    """The order of ``schedule`` for ``m`` micro-batches on ``p`` ranks with ``chunks`` stages per
    rank and the schedule's ``options`` (sorted ``(name, value)`` pairs), as :func:`order_time_s`
    evaluates it (one cache for both: the memory estimate walks the same orders).

    Raises:
        InputError: what the schedule's generator refuses.
    """
    return _order(schedule, num_ranks, num_microbatches, chunks, options)
