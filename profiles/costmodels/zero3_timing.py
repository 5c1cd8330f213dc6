"""ZeRO-3's ops timed with their parameter gathers and gradient reduce-scatters (one stage's
units, one micro-batch), for the 3D estimate.

A ZeRO-3 op's units each wait for their own gather, issued one unit ahead on a stream of its own
(:func:`gated_time_s`); a backward's reduce-scatters run on a second stream and outlast it
(:func:`reduce_tail_s`). In the steady state the two streams share the links half and half while
both carry a transfer, and the reduce-scatters a backward leaves delay the next op's gathers:
:func:`zero3_times_s` runs a chunk's forward and backward back to back for
:data:`STEADY_CYCLES` cycles, as the simulator runs them (``simulator/zero_lowering.py``), and
:func:`zero3_order_times_s` runs a rank's several chunks through its schedule's steady period.
Split out of :mod:`~pipesim.profiles.costmodels.sharding`, which keeps the sharding rules.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

from pipesim.errors import check_count
from pipesim.profiles.costmodels.sharding import DEFAULT_PREFETCH_DEPTH

__all__ = [
    "STEADY_CYCLES",
    "Zero3Pass",
    "Zero3Times",
    "gated_time_s",
    "reduce_tail_s",
    "zero3_chunk_passes",
    "zero3_order_times_s",
    "zero3_times_s",
]


def gated_time_s(
    compute_s: Sequence[float],
    comm_s: Sequence[float],
    depth: int,
    lead_s: float,
    on_demand_s: Sequence[float] | None = None,
) -> float:
    """Time of one op whose units each wait for their own collective (ZeRO-3's gathers), seconds.

    Unit ``j`` computes for ``compute_s[j]`` once its collective (``comm_s[j]``) has ended; the
    collectives run one after another on their own stream, collective ``j`` issued when unit
    ``j - depth`` starts, the first ``depth`` ones ``lead_s`` before the op (issued during the
    op before it). Unit ``j`` thus exposes ``max(0, comm - compute it overlaps)``; with
    ``depth = 1``: ``sum_j max(compute_s[j - 1], comm_s[j])`` after the first unit. A unit's
    ``on_demand_s`` part (default none) is a second collective issued when the unit is reached,
    after its prefetched one on the same stream, and waited for (DeepSpeed's gathers that no
    prefetch covered).

    Raises:
        InputError: ``depth < 1``.
    """
    return _gated_starts(compute_s, comm_s, depth, lead_s, on_demand_s)[-1]


def _gated_starts(
    compute_s: Sequence[float],
    comm_s: Sequence[float],
    depth: int,
    lead_s: float,
    on_demand_s: Sequence[float] | None = None,
) -> list[float]:
    """:func:`gated_time_s`'s unit starts, seconds into the op, then its end."""
    k = check_count("depth", depth)
    starts: list[float] = []
    t = 0.0
    comm_end = -lead_s
    for j, (compute, comm) in enumerate(zip(compute_s, comm_s, strict=True)):
        issued = starts[j - k] if j >= k else -lead_s
        comm_end = max(issued, comm_end) + comm
        if on_demand_s is not None and on_demand_s[j] > 0:
            comm_end = max(t, comm_end) + on_demand_s[j]
        start = max(t, comm_end)
        starts.append(start)
        t = start + compute
    return [*starts, t]


def reduce_tail_s(backward_units_s: Sequence[float], scatter_s: Sequence[float]) -> float:
    """How long the reduce-scatters of a backward's units outlast it, seconds: unit ``j``'s
    (``scatter_s[j]``, in the order the units run) is issued when the unit ends and they run one
    after another on their own stream.
    """
    t = reduce_end = 0.0
    for compute, scatter in zip(backward_units_s, scatter_s, strict=True):
        t += compute
        reduce_end = max(reduce_end, t) + scatter
    return max(0.0, reduce_end - t)


class _Stream:
    """One collective stream of :func:`_cycle_s`: its transfers ``[issue s, seconds
    left alone]`` in issue order, the index of the first unfinished, and each one's end."""

    __slots__ = ("ends", "head", "items")

    def __init__(self) -> None:
        self.items: list[list[float]] = []
        self.head = 0
        self.ends: list[float] = []

    def active(self, now: float) -> bool:
        return self.head < len(self.items) and self.items[self.head][0] <= now

    def next_issue(self) -> float:
        return self.items[self.head][0] if self.head < len(self.items) else math.inf


def _advance(streams: tuple[_Stream, _Stream], now: float, until: _Stream, count: int) -> float:
    """Run the two streams from ``now`` until ``until`` has ended ``count`` transfers, sharing the
    links half and half while both carry one (each alone at full speed); returns the time
    reached, seconds. (Written out for the two streams: the 3D search runs it ~10^5 times.)"""
    a, b = streams
    while len(until.ends) < count:
        a_on = a.head < len(a.items) and a.items[a.head][0] <= now
        b_on = b.head < len(b.items) and b.items[b.head][0] <= now
        if a_on and b_on:
            x, y = a.items[a.head], b.items[b.head]
            step = min(x[1] / 0.5, y[1] / 0.5)
            x[1] -= step * 0.5
            y[1] -= step * 0.5
            now += step
            if x[1] <= 1e-15:
                a.ends.append(now)
                a.head += 1
            if y[1] <= 1e-15:
                b.ends.append(now)
                b.head += 1
        elif a_on or b_on:
            on, off = (a, b) if a_on else (b, a)
            x = on.items[on.head]
            step = min(x[1] / 1.0, off.next_issue() - now)
            x[1] -= step * 1.0
            now += step
            if x[1] <= 1e-15:
                on.ends.append(now)
                on.head += 1
        else:
            now = min(a.next_issue(), b.next_issue())
            if math.isinf(now):
                raise AssertionError("waiting on a transfer never issued")
    return now


class _Pass(NamedTuple):
    """One op of :func:`_cycle_s`: per unit in run order its compute, its prefetched gather
    (empty: the op gathers nothing, a zero-bubble ``W``), its on-demand part and the
    reduce-scatter issued as it ends (empty: none), seconds."""

    compute_s: Sequence[float]
    gather_s: Sequence[float]
    on_demand_s: Sequence[float]
    scatter_s: Sequence[float]


def _cycle_s(passes: Sequence[_Pass], depth: int) -> tuple[list[float], float, list[float]]:
    """A rank's ZeRO-3 ops ``passes`` run back to back from 0 s, as the simulator runs them
    (``simulator/zero_lowering.py``): the gathers one after another on one stream, gather ``q``
    of the rank's sequence issued as gathered unit ``q - depth`` starts (the first ``depth`` at
    0 s), a unit's on-demand part issued as it is reached, after what the stream holds; a unit
    computes once its gathers have ended; its reduce-scatter is issued as it ends, on a second
    stream; the two streams share the links half and half while both carry a transfer (the
    max-min share of two flows on one bottleneck), each alone at full speed. Returns per pass
    its end, seconds, when the last reduce-scatter ends (the last end without any), and per pass
    when its first unit starts, seconds."""
    k = check_count("depth", depth)
    gathers, scatters = _Stream(), _Stream()
    streams = (gathers, scatters)
    sequence = [g for x in passes for g in x.gather_s]  # the rank's gathers in issue order
    for q in range(min(k, len(sequence))):
        gathers.items.append([0.0, sequence[q]])
    own: list[int] = list(range(len(gathers.items)))  # per gathered unit its place on the stream
    now = end = 0.0
    unit = 0  # gathered units reached
    ends: list[float] = []
    firsts: list[float] = []
    for x in passes:
        for j, compute in enumerate(x.compute_s):
            start = end
            if x.gather_s:
                need = own[unit] + 1
                if x.on_demand_s and x.on_demand_s[j] > 0:
                    gathers.items.append([end, x.on_demand_s[j]])
                    need = len(gathers.items)
                now = _advance(streams, now, gathers, need)
                start = max(end, gathers.ends[need - 1])
                if unit + k < len(sequence):
                    own.append(len(gathers.items))
                    gathers.items.append([start, sequence[unit + k]])
                unit += 1
            if j == 0:
                firsts.append(start)
            end = start + compute
            if x.scatter_s:
                scatters.items.append([end, x.scatter_s[j]])
        ends.append(end)
    _advance(streams, now, scatters, len(scatters.items))
    return ends, max([end, *scatters.ends]), firsts


Zero3Pass = _Pass
"""One op of a ZeRO-3 cycle (:func:`zero3_chunk_passes`, :func:`zero3_order_times_s`)."""

STEADY_CYCLES = 4
"""The cycles :func:`zero3_times_s` runs to reach the steady state (the last one is read)."""


class Zero3Times(NamedTuple):
    """A ZeRO-3 chunk's ops in the 1F1B steady state (:func:`zero3_times_s`), seconds.

    Attributes:
        fwd_s: the forward as it runs after a forward (its first gathers prefetched, no
            reduce-scatter beside them: the fill, GPipe).
        bwd_s: the backward (the ``I`` of a split one).
        first_extra_s: what the iteration's first forward, which cannot prefetch, takes beyond
            ``fwd_s``.
        last_tail_s: how long the last backward's (``W``'s) reduce-scatters outlast it.
        spill_s: what the reduce-scatters a backward (``W``) leaves queued delay the next op's
            gathers by: the forward after a backward takes ``fwd_s + spill_s``.
        settle_s: what the first backward (``I`` and ``W``) and the forward after it take
            beyond the steady ones (``bwd_s`` with what ``idle_s`` covers of ``spill_s``, and
            ``fwd_s``) where they follow the first forward at once (the last rank of a 1F1B
            order), seconds (at most 0: no reduce-scatters are queued before them).
        idle_s: how long the links sit idle in a steady cycle, seconds (0: they carry its
            transfers back to back, so the links, not the gating, pace it: the caller's bound,
            :meth:`~pipesim.planner.three_d_zero.ZeroStages.link_bound_s`; of ``spill_s`` only
            what the idle time covers is the gating's).
        lead_s: what the forward after a backward takes beyond ``fwd_s`` where only its first
            gather meets the queued reduce-scatters (at most ``spill_s``): the ops as the
            fill and drain run them, beside a bound on the links' steady cycle (0 for a split
            backward: the ``F`` and ``I`` as they run without reduce-scatters, ``fwd_s`` and
            ``quiet_bwd_s``).
        quiet_bwd_s: the backward in that view (``bwd_s`` but for a split one).
    """

    fwd_s: float
    bwd_s: float
    first_extra_s: float
    last_tail_s: float
    spill_s: float
    settle_s: float = 0.0
    idle_s: float = 0.0
    lead_s: float = 0.0
    quiet_bwd_s: float = 0.0


def zero3_times_s(
    fwd_units_s: Sequence[float],
    bwd_units_s: Sequence[float],
    gather_s: Sequence[float],
    scatter_s: Sequence[float],
    depth: int = DEFAULT_PREFETCH_DEPTH,
    bwd_gather_s: Sequence[float] | None = None,
    fwd_on_demand_s: Sequence[float] | None = None,
    bwd_on_demand_s: Sequence[float] | None = None,
    wgrad_units_s: Sequence[float] | None = None,
) -> Zero3Times:
    """ZeRO-3's forward and backward of one stage and micro-batch with their gathers, seconds
    (:func:`gated_time_s`), for units in layer order (the backward runs them in reverse).

    The ops are timed in the 1F1B steady state (a forward follows a backward and the other way
    round), :data:`STEADY_CYCLES` cycles of them run back to back as the simulator runs them
    (:func:`_cycle_s`): an op's first gathers are issued during the op before; in the backward
    the gathers and the reduce-scatters run on two streams sharing the links half and half
    while both carry a transfer, and the reduce-scatters left when a backward ends share them
    with the next forward's gathers, all of them (a forward of small units after a large
    unit's reduce-scatter waits for its gathers at half speed: it charged only the first one,
    1F1B and ZB-H1 at ``p = 2`` on two DGX A100 -5.8% to -14.9%,
    ``tests/tp/test_zero_steady_cycle.py``; before that, each unit ``gather + its own
    scatter`` and every scatter again in a tail taken against the bare compute: 1.26-1.32x the
    simulation where the gathers outlast the compute,
    ``tests/tp/test_zero3_wide_estimate.py``). ``bwd_gather_s`` gives the backward's gathers
    where they differ from the forward's (DeepSpeed's re-gathers after a replay,
    :class:`~pipesim.profiles.costmodels.zero3_runtime.UnitCalls`); default ``gather_s``. The
    ``*_on_demand_s`` parts are gathered when their unit is reached (:func:`gated_time_s`).
    ``wgrad_units_s``: the backward is split (a zero-bubble order): ``bwd_units_s`` are its
    ``I``, which gathers and reduce-scatters nothing, and each unit's reduce-scatter follows its
    ``W`` (these seconds per unit, run in reverse after the ``I``, gathering nothing); the cycle
    is ``F``, ``I``, ``W``.

    Returns:
        :class:`Zero3Times`.

    Raises:
        InputError: ``depth < 1``.
    """
    fwd_pass, bwd_pass = zero3_chunk_passes(fwd_units_s, bwd_units_s, gather_s, scatter_s, bwd_gather_s,
                                            fwd_on_demand_s, bwd_on_demand_s)
    if wgrad_units_s is None:
        cycle = [fwd_pass, bwd_pass]
    else:  # (the I reduces nothing; the W, gathering nothing, issues the reduce-scatters)
        w_pass = _Pass(list(reversed(wgrad_units_s)), [], [], bwd_pass.scatter_s)
        cycle = [fwd_pass, bwd_pass._replace(scatter_s=[]), w_pass]
    at = (STEADY_CYCLES - 1) * len(cycle)  # the last cycle's forward
    ends, last, firsts = _cycle_s(cycle * STEADY_CYCLES, depth)
    # the forward as it runs after a forward (in the fill, or when the stream has drained): what
    # the reduce-scatters queued after a backward add to it is the spill
    quiet = [x._replace(scatter_s=[0.0] * len(x.scatter_s)) for x in cycle]
    alone, _, _ = _cycle_s(quiet * STEADY_CYCLES, depth)
    fwd = alone[at] - alone[at - 1]
    spill = ends[at] - ends[at - 1] - fwd
    bwd = ends[at + 1] - ends[at]
    rest = sum(ends[at + j] - ends[at + j - 1] for j in range(2, len(cycle)))  # (a split one's W)
    carried = sum(sum(x.gather_s) + sum(x.on_demand_s) + sum(x.scatter_s) for x in cycle)
    idle = ends[-1] - ends[-1 - len(cycle)] - carried  # the links' idle time in a cycle
    idle = idle if idle > carried * 1e-9 else 0.0  # (0: busy throughout, to rounding)
    settle = min(0.0, ends[len(cycle)] - ends[0] - (fwd + bwd + min(spill, idle) + rest))
    # the forward after a backward with only its first gather slowed by the queued
    # reduce-scatters (it ends ``ready`` after the backward; the rest alone)
    ready = firsts[at] - ends[at - 1]
    first_only = gated_time_s(fwd_pass.compute_s, gather_s, depth, gather_s[0] - ready, fwd_on_demand_s)
    if wgrad_units_s is not None:  # (split: the I and F as they run without reduce-scatters)
        return Zero3Times(fwd, bwd, ends[0] - fwd, last - ends[-1], spill, settle, idle, 0.0,
                          alone[at + 1] - alone[at])
    return Zero3Times(fwd, bwd, ends[0] - fwd, last - ends[-1], spill, settle, idle, first_only - fwd, bwd)


def zero3_chunk_passes(
    fwd_units_s: Sequence[float],
    bwd_units_s: Sequence[float],
    gather_s: Sequence[float],
    scatter_s: Sequence[float],
    bwd_gather_s: Sequence[float] | None = None,
    fwd_on_demand_s: Sequence[float] | None = None,
    bwd_on_demand_s: Sequence[float] | None = None,
) -> tuple[Zero3Pass, Zero3Pass]:
    """A ZeRO-3 chunk's forward and (whole) backward as :func:`zero3_times_s` runs them (its
    arguments; units in layer order, the backward run in reverse), for
    :func:`zero3_order_times_s`."""
    n = len(fwd_units_s)
    none = [0.0] * n
    back = list(reversed(bwd_units_s))
    again = list(reversed(gather_s if bwd_gather_s is None else bwd_gather_s))
    od_b = none if bwd_on_demand_s is None else list(reversed(bwd_on_demand_s))
    od_f = none if fwd_on_demand_s is None else list(fwd_on_demand_s)
    return (_Pass(list(fwd_units_s), list(gather_s), od_f, []),
            _Pass(back, again, od_b, list(reversed(scatter_s))))


def zero3_order_times_s(
    chunks: Sequence[tuple[Zero3Pass, Zero3Pass]], period: Sequence[tuple[int, bool]],
    depth: int = DEFAULT_PREFETCH_DEPTH,
) -> tuple[list[float], list[float], list[float], float]:
    """A rank's ZeRO-3 ops over several chunks (``chunks``: per chunk its forward and backward,
    :func:`zero3_chunk_passes`) in its steady order's ``period`` (``(chunk, backward)`` per op,
    alternating ``F`` and ``B``: an interleaved 1F1B's chunks take turns in groups of ``p``),
    :data:`STEADY_CYCLES` periods run back to back as :func:`_cycle_s` runs them: the
    reduce-scatters a backward leaves queued share the links with the next forward's gathers,
    whichever chunk that forward runs (the spill).

    Returns:
        Per chunk its forward's mean time in the last period as it runs after a forward (the
        period run without reduce-scatters: the fill), its backward's mean with the spill it
        leaves on the forward after it (charged to the backward: the fill's forwards meet none),
        and that spill's mean, seconds; and how long the links sit idle in a period, seconds
        (0: they carry its transfers back to back, the links pace it).

    Raises:
        InputError: ``depth < 1``.
    """
    ops = [chunks[c][int(b)] for c, b in period]
    n = len(period)
    ends, _, _ = _cycle_s(ops * STEADY_CYCLES, depth)
    quiet = [x._replace(scatter_s=[0.0] * len(x.scatter_s)) for x in ops]
    alone, _, _ = _cycle_s(quiet * STEADY_CYCLES, depth)
    at = (STEADY_CYCLES - 1) * n
    took = [ends[at + j] - ends[at + j - 1] for j in range(n)]
    plain = [alone[at + j] - alone[at + j - 1] for j in range(n)]
    fwd, bwd, spill = [0.0] * len(chunks), [0.0] * len(chunks), [0.0] * len(chunks)
    count_f, count_b = [0] * len(chunks), [0] * len(chunks)
    for j, (c, back) in enumerate(period):
        if back:  # the forward after it (the period's first, cyclically) meets its spill
            nxt = (j + 1) % n
            extra = took[nxt] - plain[nxt] if not period[nxt][1] else 0.0
            bwd[c] += took[j] + extra
            spill[c] += extra
            count_b[c] += 1
        else:
            fwd[c] += plain[j]
            count_f[c] += 1
    carried = sum(sum(x.gather_s) + sum(x.on_demand_s) + sum(x.scatter_s) for x in ops)
    idle = ends[-1] - ends[-1 - n] - carried
    return ([x / max(1, k) for x, k in zip(fwd, count_f, strict=True)],
            [x / max(1, k) for x, k in zip(bwd, count_b, strict=True)],
            [x / max(1, k) for x, k in zip(spill, count_b, strict=True)],
            idle if idle > carried * 1e-9 else 0.0)
