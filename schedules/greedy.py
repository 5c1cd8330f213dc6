"""Memory-bounded greedy schedules: zero bubble's automatic scheduler.

A list scheduler (V-Half and V-Min are built from the paper's building blocks instead:
:mod:`pipesim.schedules.controllable`). It plays the iteration forward in time on ``p`` rank
timelines with given costs; whenever a rank is free it picks, by the heuristic of Qi et al.
("Zero Bubble Pipeline Parallelism", ICLR 2024, sec. 4.1, the schedules the paper calls ZB-1p and
ZB-2p before its ILP refinement):

1. an input gradient ``I`` whose inputs are ready (smallest micro-batch first, the later stage on
   a tie): backwards shorten the critical path and free memory soonest;
2. else a forward whose input is ready, if the rank's memory allows it (the later chunk first);
3. else a pending weight gradient ``W`` when the rank would otherwise idle for at least a ``W``
   (or its memory is full): ``W`` fills bubbles;
4. else it waits for the earliest of 1 and 2.

Memory is counted in stage-micro-batches held on the rank: a forward stashes one, its ``W``
releases it. A micro-batch is admitted to a rank's first chunk only if every chunk of it that
the rank holds still fits (the later chunks' forwards are reserved), so a rank can always take
the micro-batches it already admitted to the end: the scheduler cannot deadlock for a limit of at
least ``v`` stage-micro-batches.

- ``zb-auto``: one stage per rank (looped), costs and the limit given (``memory_limit``
  micro-batches; ``p`` is ZB-1p, 1F1B's memory, ``2p`` ZB-2p); the greedy order competes with
  the ZB-H family members that fit the limit and the fastest is kept (:func:`zb_auto`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from fractions import Fraction

from pipesim.errors import check_count, check_nonneg, invalid
from pipesim.schedules.action import Op
from pipesim.schedules.generators import _single
from pipesim.schedules.placement import stage_ranks
from pipesim.schedules.schedule import Schedule, ScheduleStream, Step
from pipesim.schedules.timing import Timeline, evaluate

__all__ = ["greedy_order", "zb_auto"]

Cost = float | Fraction


def greedy_order(
    *,
    name: str,
    num_ranks: int,
    num_microbatches: int,
    placement: str,
    chunks: int,
    fwd_time_s: Cost,
    bwd_time_s: Cost,
    wgrad_time_s: Cost,
    comm_time_s: Cost,
    limit: int,
) -> list[list[tuple[Op, int, int]]]:
    """Each rank's order by the greedy list scheduler of the module doc.

    Args:
        name: the schedule's name (for messages).
        num_ranks: pipeline ranks ``p``.
        num_microbatches: micro-batches ``m``.
        placement: ``"looped"`` or ``"v"``.
        chunks: stages per rank ``v``.
        fwd_time_s: time of a stage's forward ``F``, seconds.
        bwd_time_s: time of its full backward, seconds (``I`` takes ``bwd - wgrad``).
        wgrad_time_s: time of its ``W``, seconds (``<= bwd_time_s``).
        comm_time_s: time to move an activation or a gradient between two ranks, seconds.
        limit: stage-micro-batches of activations a rank may hold at once (``>= chunks``).

    Returns:
        ``rows[r]``: rank ``r``'s ``(op, stage, microbatch)`` steps, in order.

    Raises:
        InputError: a negative cost, ``wgrad > bwd``, or ``limit < chunks``.
    """
    p, m, v = num_ranks, num_microbatches, chunks
    for field, value in (("fwd_time_s", fwd_time_s), ("bwd_time_s", bwd_time_s),
                         ("wgrad_time_s", wgrad_time_s), ("comm_time_s", comm_time_s)):
        check_nonneg(field, value)
    if wgrad_time_s > bwd_time_s:
        raise invalid("wgrad_time_s", wgrad_time_s, f"must be <= bwd_time_s ({bwd_time_s})")
    if limit < v:
        rule = f"must allow at least one micro-batch ({v} stage-micro-batches) for {name}"
        raise invalid("memory_limit", limit, rule)
    stages = v * p
    where = stage_ranks(placement, stages, p)
    mine = [[s for s in range(stages) if where[s] == r] for r in range(p)]
    first = [ss[0] for ss in mine]  # the stage at which a micro-batch enters rank r
    i_time = bwd_time_s - wgrad_time_s
    f_end: dict[tuple[int, int], Cost] = {}
    i_end: dict[tuple[int, int], Cost] = {}
    next_f = [0] * stages  # next micro-batch to run forward on each stage (in order)
    next_i = [0] * stages
    free: list[Cost] = [0] * p
    held = [0] * p  # stashed stage-micro-batches
    reserved = [0] * p  # reserved for admitted micro-batches' later chunks
    pending_w: list[deque[tuple[int, int]]] = [deque() for _ in range(p)]
    rows: list[list[tuple[Op, int, int]]] = [[] for _ in range(p)]
    left = [3 * v * m for _ in range(p)]

    def arrival(done: Cost, a: int, b: int) -> Cost:
        return done + (comm_time_s if where[a] != where[b] else 0)

    def f_ready(s: int) -> Cost | None:
        k = next_f[s]
        if k >= m:
            return None
        if s == 0:
            return 0
        end = f_end.get((s - 1, k))
        return None if end is None else arrival(end, s - 1, s)

    def i_ready(s: int) -> tuple[Cost, int] | None:
        k = next_i[s]
        if k >= m or (s, k) not in f_end:
            return None
        t = f_end[(s, k)]
        if s < stages - 1:
            end = i_end.get((s + 1, k))
            if end is None:
                return None
            t = max(t, arrival(end, s + 1, s))
        return t, k

    def choose(r: int) -> tuple[Cost, tuple[Op, int, int]] | None:
        t0 = free[r]
        backs = []
        for s in mine[r]:
            got = i_ready(s)
            if got is not None:
                backs.append((max(got[0], t0), got[1], -s))
        fwds = []
        for s in mine[r]:
            t = f_ready(s)
            if t is None:
                continue
            if s == first[r] and held[r] + reserved[r] + v > limit:
                continue
            fwds.append((max(t, t0), -s))
        best_b = min(backs) if backs else None
        best_f = min(fwds) if fwds else None
        if best_b is not None and best_b[0] <= t0:
            return best_b[0], (Op.I, -best_b[2], best_b[1])
        if best_f is not None and best_f[0] <= t0:
            s = -best_f[1]
            return best_f[0], (Op.F, s, next_f[s])
        soonest = min([x[0] for x in (best_b, best_f) if x is not None], default=None)
        if pending_w[r] and (soonest is None or soonest >= t0 + wgrad_time_s):
            s, k = pending_w[r][0]
            return t0, (Op.W, s, k)
        if best_b is not None and (best_f is None or best_b[0] <= best_f[0]):
            return best_b[0], (Op.I, -best_b[2], best_b[1])
        if best_f is not None:
            s = -best_f[1]
            return best_f[0], (Op.F, s, next_f[s])
        if pending_w[r]:
            s, k = pending_w[r][0]
            return t0, (Op.W, s, k)
        return None

    # A rank's choice depends only on its own state and on the ends of its stages' neighbours'
    # actions, so after each step only the rank that acted and the ranks of the neighbouring
    # stages choose again (the others keep their choice: same result, far fewer calls).
    choice: list[tuple[Cost, tuple[Op, int, int]] | None] = [choose(r) for r in range(p)]
    while any(left):
        picks = [(c, r) for r, c in enumerate(choice) if left[r] and c is not None]
        if not picks:
            raise AssertionError(f"{name}: the greedy scheduler found no runnable action")  # pragma: no cover
        (start, (op, s, k)), r = min(picks, key=lambda x: (x[0][0], x[1]))
        if op is Op.F:
            end = start + fwd_time_s
            f_end[(s, k)] = end
            next_f[s] += 1
            held[r] += 1
            if s == first[r]:
                reserved[r] += v - 1
            else:
                reserved[r] -= 1
        elif op is Op.I:
            end = start + i_time
            i_end[(s, k)] = end
            next_i[s] += 1
            pending_w[r].append((s, k))
        else:
            end = start + wgrad_time_s
            pending_w[r].popleft()
            held[r] -= 1
        free[r] = end
        rows[r].append((op, s, k))
        left[r] -= 1
        for q in {r, where[s - 1] if s > 0 else r, where[s + 1] if s + 1 < stages else r}:
            choice[q] = choose(q) if left[q] else None
    return rows


def _stream(
    name: str, p: int, m: int, v: int, placement: str, rows: list[list[tuple[Op, int, int]]]
) -> ScheduleStream:
    def row(r: int) -> Iterator[Step]:
        return iter(rows[r])

    return ScheduleStream(
        name=name, num_ranks=p, num_stages=v * p, num_microbatches=m, rows=row, placement=placement
    )


def zb_auto(
    *,
    num_ranks: int,
    num_microbatches: int,
    fwd_time_s: float = 1.0,
    bwd_time_s: float = 2.0,
    wgrad_time_s: float = 1.0,
    comm_time_s: float = 0.0,
    memory_limit: int | None = None,
) -> Schedule:
    """Zero bubble's automatic schedule (Qi et al., ICLR 2024, sec. 4.1; ZB-1p / ZB-2p): the best,
    under the given costs, of the greedy order of :func:`greedy_order` and the members of the
    ZB-H family that fit the memory limit.

    As zero bubble's own heuristic (``initial_solution`` in
    ``megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py`` of
    github.com/sail-sg/zero-bubble-pipeline-parallelism at 39f2c18 builds several orders with
    different rules and keeps the one its cost model times fastest), candidates are timed with
    :func:`pipesim.schedules.evaluate` and the fastest kept (the greedy order on a tie). The ZB-H
    family: rank ``i`` runs ``K_i = min(p - i + e, 2 (p - i) - 1)`` warm-up forwards (at most
    ``m``), then alternates ``I`` and ``F``, putting off its ``W`` by ``p + e - K_i``: it holds
    ``p + e`` micro-batches; ``e = 0`` is ZB-H1, ``e = p - 1`` ZB-H2, and every ``e`` with
    ``p + e <= memory_limit`` is tried. So the order is never slower than ZB-H1 when the limit is
    at least ``p``, nor than ZB-H2 when it is at least ``2p - 1`` (property test over ``p``,
    ``m`` and the F/I/W times in ``tests/schedules/test_sched_greedy.py``); below ``p`` only the
    greedy order fits.

    Args:
        num_ranks: pipeline ranks ``p``.
        num_microbatches: micro-batches ``m``.
        fwd_time_s: a stage's forward time ``T_F``, seconds (default 1).
        bwd_time_s: its full backward ``T_B + T_W``, seconds (default 2).
        wgrad_time_s: its weight-gradient time ``T_W``, seconds (default 1).
        comm_time_s: transfer time between ranks, seconds (default 0).
        memory_limit: micro-batches of activations a rank may hold (default ``p``: ZB-1p, the
            memory of 1F1B; ``2p`` gives ZB-2p).

    Unit-cost slots for p=4, m=8 with the defaults (ZB-H1's order: the greedy one idles two
    slots more here)::

        rank 0 F0 F1 F2 F3 .  .  .  I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7
        rank 1 .  F0 F1 F2 .  .  I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7
        rank 2 .  .  F0 F1 .  I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7
        rank 3 .  .  .  F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7

    Raises:
        InputError: a count below 1, a negative cost, ``wgrad > bwd`` or a limit below 1.
    """
    return _zb_auto(
        num_ranks=num_ranks,
        num_microbatches=num_microbatches,
        fwd_time_s=fwd_time_s,
        bwd_time_s=bwd_time_s,
        wgrad_time_s=wgrad_time_s,
        comm_time_s=comm_time_s,
        memory_limit=memory_limit,
    ).materialize()


def _zb_auto(
    *,
    num_ranks: int,
    num_microbatches: int,
    fwd_time_s: float = 1.0,
    bwd_time_s: float = 2.0,
    wgrad_time_s: float = 1.0,
    comm_time_s: float = 0.0,
    memory_limit: int | None = None,
) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    limit = num_ranks if memory_limit is None else memory_limit
    check_count("memory_limit", limit)
    p, m = num_ranks, num_microbatches
    rows = greedy_order(
        name="zb-auto",
        num_ranks=p,
        num_microbatches=m,
        placement="looped",
        chunks=1,
        fwd_time_s=fwd_time_s,
        bwd_time_s=bwd_time_s,
        wgrad_time_s=wgrad_time_s,
        comm_time_s=comm_time_s,
        limit=limit,
    )
    def timed(order: Schedule, check: bool) -> Timeline:
        return evaluate(order, fwd_time_s=fwd_time_s, bwd_time_s=bwd_time_s, wgrad_time_s=wgrad_time_s,
                        fwd_comm_time_s=comm_time_s, bwd_comm_time_s=comm_time_s, check=check)

    best = _stream("zb-auto", p, m, 1, "looped", rows).materialize()
    best_time = timed(best, False).makespan
    for extra in range(min(limit, 2 * p - 1) - p + 1):  # the ZB-H family that fits the limit
        # rank i: K_i warm-up forwards and W put off by p + extra - K_i (extra = 0: ZB-H1's
        # K_i = p - i, delay i; extra = p - 1: ZB-H2's 2(p - i) - 1, delay 2i)
        warmup = [min(p - i + extra, 2 * (p - i) - 1) for i in range(p)]
        delays = [p + extra - k for k in warmup]
        leading = [min(k, m) for k in warmup]
        order = _single("zb-auto", p, m, leading, split=True, w_delay=delays).materialize()
        timeline = timed(order, True)  # validated: a family member that deadlocks would raise
        if max(timeline.peak_stashed) <= limit and timeline.makespan < best_time:
            best, best_time = order, timeline.makespan
    return ScheduleStream.of(best)

