"""The analytic evaluator: list-schedule a schedule on per-rank timelines, without SimPy.

It is the fast path for planners and the reference the simulator is checked against. Costs are
generic numbers: pass ``int`` or :class:`fractions.Fraction` for exact results, ``float`` seconds
otherwise (the evaluator only adds, compares and subtracts them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from pipesim.errors import InputError, invalid
from pipesim.schedules.action import Action, Op
from pipesim.schedules.pairs import PAIR_RULE, pair_parts
from pipesim.schedules.placement import chain_bounds
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.validate import deadlock_error, validate

__all__ = ["CostSpec", "Time", "Timeline", "evaluate"]

Time = float | Fraction
"""A duration or instant in seconds: ``float``, ``int`` or ``Fraction``."""
CostSpec = Time | Sequence[Time] | Sequence[Sequence[Time]]
"""A per-action cost: one number for every stage, one per stage, or one per stage per micro-batch."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Timeline:
    """When every action of a schedule runs, from :func:`evaluate`.

    Attributes:
        schedule: the schedule evaluated.
        starts: ``starts[r][i]`` is when ``schedule.ranks[r][i]`` starts, seconds.
        ends: ``ends[r][i]`` is when it ends, seconds.
        makespan: the end of the last action (the iteration starts at 0), seconds.
        busy: seconds each rank computes.
        peak_stashed: per stage, the most micro-batches whose activations it holds at once. A
            micro-batch is stashed from the start of its ``F`` until the end of the action that
            frees it: the full backward ``B``, or ``W`` in the split form (``W`` still needs the
            stage's inputs). The count depends on the order only, never on the costs.

    An overlapped pair (``FB`` and its ``B``) runs as one unit: its two actions' spans split the
    pair's time in proportion to their costs (:func:`pipesim.schedules.pairs.pair_parts`), the
    forward's first, and both outputs leave at the end of the second.
    """

    schedule: Schedule
    starts: tuple[tuple[Time, ...], ...]
    ends: tuple[tuple[Time, ...], ...]
    makespan: Time
    busy: tuple[Time, ...]
    peak_stashed: tuple[int, ...]

    @property
    def idle(self) -> tuple[Time, ...]:
        """Seconds each rank is idle within the makespan (``makespan - busy``)."""
        return tuple(self.makespan - b for b in self.busy)

    @property
    def bubble_fraction(self) -> Time:
        """Idle share of all ranks' time: ``1 - sum(busy) / (p * makespan)`` (0 when makespan is 0).

        Exact (a ``Fraction``) when the costs are integers or fractions.
        """
        total = sum(self.busy, start=0)
        capacity = self.makespan * len(self.busy)
        if capacity == 0:
            return 0
        if isinstance(total, (int, Fraction)) and isinstance(capacity, (int, Fraction)):
            return 1 - Fraction(total) / Fraction(capacity)
        return 1 - total / capacity

    def span(self, action: Action | str) -> tuple[Time, Time]:
        """``(start, end)`` of ``action`` (an Action or a token like ``"1B0"``), seconds.

        Raises:
            InputError: the action is not in the schedule.
        """
        target = Action.parse(action) if isinstance(action, str) else action
        r = self.schedule.stage_ranks[target.stage] if target.stage < self.schedule.num_stages else 0
        for i, a in enumerate(self.schedule.ranks[r]):
            if a == target:
                return self.starts[r][i], self.ends[r][i]
        raise invalid("action", str(target), "is not in the schedule")


def _check_time(name: str, value: object) -> Time:
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise invalid(name, value, "must be a number (int, float or Fraction) >= 0")
    if value < 0 or (isinstance(value, float) and not math.isfinite(value)):
        raise invalid(name, value, "must be a finite number >= 0")
    return value


def _table(name: str, spec: CostSpec, stages: int, m: int) -> list[list[Time]]:
    """Normalize a cost spec to ``table[stage][microbatch]``."""
    if not isinstance(spec, Sequence):
        value = _check_time(name, spec)
        return [[value] * m for _ in range(stages)]
    if len(spec) != stages:
        raise invalid(name, spec, f"must be one number, or {stages} per-stage entries")
    table: list[list[Time]] = []
    for s, entry in enumerate(spec):
        if isinstance(entry, Sequence):
            if len(entry) != m:
                raise invalid(f"{name}[{s}]", entry, f"must have {m} per-micro-batch numbers")
            table.append([_check_time(f"{name}[{s}]", x) for x in entry])
        else:
            table.append([_check_time(f"{name}[{s}]", entry)] * m)
    return table


def _boundaries(name: str, spec: Time | Sequence[Time], stages: int) -> list[Time]:
    if not isinstance(spec, Sequence):
        return [_check_time(name, spec)] * max(stages - 1, 0)
    if len(spec) != stages - 1:
        raise invalid(name, spec, f"must be one number, or {stages - 1} per-boundary numbers")
    return [_check_time(f"{name}[{s}]", x) for s, x in enumerate(spec)]


def evaluate(
    schedule: Schedule,
    *,
    fwd_time_s: CostSpec,
    bwd_time_s: CostSpec,
    wgrad_time_s: CostSpec = 0,
    fwd_comm_time_s: Time | Sequence[Time] = 0,
    bwd_comm_time_s: Time | Sequence[Time] = 0,
    fwd_comm_latency_s: Time | Sequence[Time] = 0,
    bwd_comm_latency_s: Time | Sequence[Time] = 0,
    check: bool = True,
    input_time_s: CostSpec | None = None,
) -> Timeline:
    """Time a compute-only schedule by list scheduling in its own order.

    Each rank runs its actions strictly in order, one at a time; an action starts when its rank is
    free and its dependencies (see :class:`~pipesim.schedules.action.Action`) have ended, plus the
    transfer time when the dependency ran on another rank. An overlapped pair (``FB`` then its
    ``B``, :mod:`pipesim.schedules.pairs`) starts once both its actions' dependencies have ended
    and lasts ``F&B = F + B - fb_overlap * min(F, B)`` (the schedule's ``fb_overlap``); both its
    outputs leave at its end, the activation's transfer first. Transfers from one rank to another go
    one at a time in the order the sending rank produced them (a FIFO stream per ordered rank
    pair, as the simulator's point-to-point streams), pipelined: of a transfer's time ``c``, its
    latency ``l`` overlaps the pair's previous transfer, so it arrives at
    ``max(produced + l, previous arrival) + c - l`` (``l = 0``: it starts when its producer ends
    or when the previous one has arrived, whichever is later). Streams do not slow each other
    down (no link sharing); stages on the same rank exchange data at no cost.

    Args:
        schedule: a compute-only schedule (``schedule.compute_only()`` drops communication).
        fwd_time_s: time of ``F``, seconds: one number, one per stage, or per stage per
            micro-batch (``[[...m numbers...], ...]``).
        bwd_time_s: time of the full backward ``B``, seconds (same shapes). In the split form the
            input-gradient ``I`` takes ``bwd_time_s - wgrad_time_s``.
        wgrad_time_s: time of the weight gradient ``W``, seconds (default 0; same shapes); must
            not exceed ``bwd_time_s``.
        fwd_comm_time_s: time to move an activation from stage ``s`` to ``s + 1`` (``c_f``),
            seconds: one number or one per boundary (``num_stages - 1``).
        bwd_comm_time_s: time to move a gradient from stage ``s + 1`` to ``s`` (``c_b``), seconds.
        fwd_comm_latency_s: the part of ``c_f`` that is route latency (pipelined on a stream),
            seconds: one number or one per boundary; at most ``c_f`` (default 0).
        bwd_comm_latency_s: the same for ``c_b``.
        check: validate the schedule first (default); pass ``False`` to skip the check for a
            schedule known to be valid (a deadlock is still reported).
        input_time_s: time of the input-gradient ``I``, seconds (same shapes), where a split
            backward is not the full one cut in two (under tensor parallelism an ``I`` exposes
            the input-gradient collectives a full ``B`` hides behind its weight gradients);
            default ``bwd_time_s - wgrad_time_s``.

    Returns:
        The :class:`Timeline`.

    Raises:
        InputError: a negative or non-numeric cost, a cost list of the wrong length,
            ``wgrad_time_s > bwd_time_s``, a latency above its transfer time, or communication
            actions in the schedule.
        ScheduleError: the schedule is invalid or deadlocks.
    """
    if not schedule.is_compute_only:
        raise InputError("evaluate() takes a compute-only schedule; call schedule.compute_only() first")
    if check:
        validate(schedule)
    p, stages, m = schedule.num_ranks, schedule.num_stages, schedule.num_microbatches
    f_time = _table("fwd_time_s", fwd_time_s, stages, m)
    b_time = _table("bwd_time_s", bwd_time_s, stages, m)
    w_time = _table("wgrad_time_s", wgrad_time_s, stages, m)
    i_given = None if input_time_s is None else _table("input_time_s", input_time_s, stages, m)
    i_time: list[list[Time]] = []
    for s in range(stages):
        i_row: list[Time] = []
        for k in range(m):
            if w_time[s][k] > b_time[s][k]:
                rule = f"must be <= bwd_time_s ({b_time[s][k]})"
                raise invalid(f"wgrad_time_s[{s}][{k}]", w_time[s][k], rule)
            i_row.append(b_time[s][k] - w_time[s][k])
        i_time.append(i_row if i_given is None else i_given[s])
    c_f = _boundaries("fwd_comm_time_s", fwd_comm_time_s, stages)
    c_b = _boundaries("bwd_comm_time_s", bwd_comm_time_s, stages)
    l_f = _latencies("fwd_comm_latency_s", fwd_comm_latency_s, c_f)
    l_b = _latencies("bwd_comm_latency_s", bwd_comm_latency_s, c_b)
    # transfer time into stage s's forward from s - 1, and into s's backward from s + 1
    where = schedule.stage_ranks  # no transfer time between two stages on one rank
    heads, tails = chain_bounds(schedule.placement, stages)  # dual: two chains, S/2 - 1 feeds none
    into_f: list[Time] = [0 if heads[s] or where[s - 1] == where[s] else c_f[s - 1] for s in range(stages)]
    into_b: list[Time] = [0 if tails[s] or where[s + 1] == where[s] else c_b[s] for s in range(stages)]
    lat_f: list[Time] = [0 if heads[s] else l_f[s - 1] for s in range(stages)]
    lat_b: list[Time] = [0 if tails[s] else l_b[s] for s in range(stages)]
    # arrival of stage s's input activation / output gradient, set when its producer ends
    arrive_f: list[list[Time]] = [[0] * m for _ in range(stages)]
    arrive_b: list[list[Time]] = [[0] * m for _ in range(stages)]
    wire: dict[tuple[int, int], Time] = {}  # (src rank, dst rank) -> its last arrival

    ranks = schedule.ranks
    f_end: list[list[Time | None]] = [[None] * m for _ in range(stages)]
    g_end: list[list[Time | None]] = [[None] * m for _ in range(stages)]  # end of B or I
    waiting: dict[int, int] = {}  # (kind * stages + stage) * m + mb -> rank blocked on it
    starts: list[list[Time]] = [[] for _ in range(p)]
    ends: list[list[Time]] = [[] for _ in range(p)]
    free: list[Time] = [0] * p
    busy: list[Time] = [0] * p
    stashed = [0] * stages
    peak = [0] * stages
    pointer = [0] * p
    ready = list(range(p))
    op_f, op_fb, op_b, op_i = Op.F, Op.FB, Op.B, Op.I
    overlap = schedule.fb_overlap
    while ready:
        r = ready.pop()
        row, start_row, end_row = ranks[r], starts[r], ends[r]
        t_free = free[r]
        i = pointer[r]
        while i < len(row):
            a = row[i]
            op, s, mb = a.op, a.stage, a.microbatch
            assert mb is not None
            if op is op_fb:
                pair = _pair(a, row[i + 1] if i + 1 < len(row) else None, t_free, m, stages, heads, tails,
                             f_end, g_end, arrive_f, arrive_b, waiting, r)
                if pair is None:
                    break
                start, bs, bk = pair
                front, back = pair_parts(f_time[s][mb], b_time[bs][bk], overlap)
                end = start + front + back
                f_end[s][mb] = g_end[bs][bk] = end
                if not tails[s]:
                    arrive_f[s + 1][mb] = _arrival(wire, r, where[s + 1], end, into_f[s + 1], lat_f[s + 1])
                if not heads[bs]:
                    arrive_b[bs - 1][bk] = _arrival(
                        wire, r, where[bs - 1], end, into_b[bs - 1], lat_b[bs - 1]
                    )
                stashed[s] += 1
                if stashed[s] > peak[s]:
                    peak[s] = stashed[s]
                stashed[bs] -= 1
                start_row.extend((start, start + front))
                end_row.extend((start + front, end))
                busy[r] += end - start
                t_free = end
                i += 2
                for key in (s * m + mb, (stages + bs) * m + bk):
                    if waiting and key in waiting:
                        ready.append(waiting.pop(key))
                continue
            if op is op_f:
                if not heads[s]:
                    dep = f_end[s - 1][mb]
                    if dep is None:
                        waiting[(s - 1) * m + mb] = r
                        break
                    t = arrive_f[s][mb]
                    start = t if t > t_free else t_free
                else:
                    start = t_free
                end = start + f_time[s][mb]
                f_end[s][mb] = end
                if not tails[s]:
                    arrive_f[s + 1][mb] = _arrival(wire, r, where[s + 1], end, into_f[s + 1], lat_f[s + 1])
                stashed[s] += 1
                if stashed[s] > peak[s]:
                    peak[s] = stashed[s]
                key = s * m + mb
            elif op is op_b or op is op_i:
                own = f_end[s][mb]
                if own is None:
                    waiting[s * m + mb] = r
                    break
                start = own if own > t_free else t_free
                if not tails[s]:
                    dep = g_end[s + 1][mb]
                    if dep is None:
                        waiting[(stages + s + 1) * m + mb] = r
                        break
                    t = arrive_b[s][mb]
                    if t > start:
                        start = t
                if op is op_b:
                    end = start + b_time[s][mb]
                    stashed[s] -= 1
                else:
                    end = start + i_time[s][mb]
                g_end[s][mb] = end
                if not heads[s]:
                    arrive_b[s - 1][mb] = _arrival(wire, r, where[s - 1], end, into_b[s - 1], lat_b[s - 1])
                key = (stages + s) * m + mb
            else:  # W
                dep = g_end[s][mb]
                if dep is None:
                    waiting[(stages + s) * m + mb] = r
                    break
                start = dep if dep > t_free else t_free
                end = start + w_time[s][mb]
                stashed[s] -= 1
                key = -1
            start_row.append(start)
            end_row.append(end)
            busy[r] += end - start
            t_free = end
            i += 1
            if waiting and key in waiting:
                ready.append(waiting.pop(key))
        free[r] = t_free
        pointer[r] = i
    stuck: list[tuple[int, int, str | None]] = [
        (r, pointer[r], None) for r in range(p) if pointer[r] < len(ranks[r])
    ]
    if stuck:
        raise deadlock_error(ranks, stuck)
    return Timeline(
        schedule=schedule,
        starts=tuple(tuple(x) for x in starts),
        ends=tuple(tuple(x) for x in ends),
        makespan=max(free, default=0),
        busy=tuple(busy),
        peak_stashed=tuple(peak),
    )


def _pair(
    fb: Action,
    b: Action | None,
    t_free: Time,
    m: int,
    stages: int,
    heads: tuple[bool, ...],
    tails: tuple[bool, ...],
    f_end: list[list[Time | None]],
    g_end: list[list[Time | None]],
    arrive_f: list[list[Time]],
    arrive_b: list[list[Time]],
    waiting: dict[int, int],
    r: int,
) -> tuple[Time, int, int] | None:
    """When the overlapped pair ``fb`` + ``b`` on rank ``r`` (free at ``t_free``) may start, with
    its backward's stage and micro-batch; ``None`` (rank ``r`` recorded in ``waiting``) while an
    input of either is not produced yet.

    Raises:
        InputError: ``b`` is not a full backward.
    """
    if b is None or b.op is not Op.B:
        raise InputError(f"{fb} {PAIR_RULE}")
    s, mb, bs, bk = fb.stage, fb.microbatch, b.stage, b.microbatch
    assert mb is not None
    assert bk is not None
    start = t_free
    if not heads[s]:
        if f_end[s - 1][mb] is None:
            waiting[(s - 1) * m + mb] = r
            return None
        start = max(start, arrive_f[s][mb])
    own = f_end[bs][bk]
    if own is None:
        waiting[bs * m + bk] = r
        return None
    start = max(start, own)
    if not tails[bs]:
        if g_end[bs + 1][bk] is None:
            waiting[(stages + bs + 1) * m + bk] = r
            return None
        start = max(start, arrive_b[bs][bk])
    return start, bs, bk


def _arrival(
    wire: dict[tuple[int, int], Time], src: int, dst: int, produced: Time, cost: Time, latency: Time
) -> Time:
    """When a transfer produced at ``produced`` from rank ``src`` to ``dst`` arrives: it takes
    ``cost`` (none on the same rank), of which ``latency`` overlaps the pair's previous transfer
    (a pipelined FIFO stream): ``max(produced + latency, previous arrival) + cost - latency``."""
    if src == dst:
        return produced
    ready = produced + latency
    free = wire.get((src, dst), ready)
    arrival = (ready if ready > free else free) + (cost - latency)
    wire[(src, dst)] = arrival
    return arrival


def _latencies(name: str, spec: Time | Sequence[Time], comm: Sequence[Time]) -> list[Time]:
    out = _boundaries(name, spec, len(comm) + 1)
    for s, (lat, c) in enumerate(zip(out, comm, strict=True)):
        if lat > c:
            raise invalid(f"{name}[{s}]", lat, f"must be <= the transfer time {c}")
    return out
