"""V-shape schedules: ZB-V and DualPipeV (fixed orders, as torch 2.13 generates them).

Both place ``2p`` stages on ``p`` ranks in a V (:mod:`pipesim.schedules.placement`): rank ``r``
holds stage ``r`` (chunk 0, going down) and stage ``2p - 1 - r`` (chunk 1, coming back), so the
first and the last stage share rank 0 and the turn (stages ``p - 1`` and ``p``) needs no
transfer. The memory-bounded V schedules V-Half and V-Min are in :mod:`pipesim.schedules.controllable`.

The orders are written phase by phase from the papers' descriptions and checked step for step
against the orders torch 2.13 generates (``tests/schedules/golden/torch``, recorded by
``tools/gen_torch_schedules.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from fractions import Fraction

from pipesim.errors import check_count, invalid
from pipesim.schedules.action import Op
from pipesim.schedules.pairs import check_fb_overlap
from pipesim.schedules.schedule import Schedule, ScheduleStream, Step

__all__ = ["dualpipev", "dualpipev_rank", "zbv"]


def _stream(name: str, p: int, m: int, rows: object, fb_overlap: float | Fraction = 0) -> ScheduleStream:
    assert callable(rows)
    return ScheduleStream(
        name=name, num_ranks=p, num_stages=2 * p, num_microbatches=m, rows=rows, placement="v",
        fb_overlap=check_fb_overlap(fb_overlap),
    )


def zbv(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, sec. 6), torch's
    ``ScheduleZBVZeroBubble``: two stages per rank in a V, backward split into ``I`` and ``W``.

    Rank ``r`` (chunk 0 = stage ``r``, chunk 1 = stage ``2p - 1 - r``) runs ``2(p - r) - 1``
    chunk-0 forwards, then ``r`` pairs (chunk-1 F, chunk-0 F), then ``p - r`` triples
    (chunk-1 F, I, W); in the steady state it repeats (chunk-0 F, chunk-0 I, W, chunk-1 F,
    chunk-1 I, W); it drains with ``r`` pairs of ``I`` (chunk 0, chunk 1), ``p - r`` pairs
    (chunk-0 I, W) and the remaining ``W``. The order is built for ``max(m, 2p - 1)``
    micro-batches and the ones past ``m`` dropped (torch's rule). With ``T_F = T_I = T_W`` and
    ``m >= 2p - 1`` it has no bubble after the warm-up, and each rank holds at most ``2p``
    stage-micro-batches of activations (``p`` micro-batches of its layers: the same as 1F1B).
    Unit-cost slots for p=2, m=4 (F = I = W = 1; upper case chunk 0 =
    stage r, lower case chunk 1 = stage 2p - 1 - r)::

        rank 0 F0 F1 F2 f0 i0 w0 f1 i1 w1 F3 I0 W0 f2 i2 w2 I1 W1 f3 i3 w3 I2 W2 I3 W3 .
        rank 1 .  F0 f0 F1 f1 i0 w0 F2 I0 W0 f2 i1 w1 F3 I1 W1 f3 i2 w2 I2 i3 I3 W2 w3 W3

    Raises:
        InputError: a count below 1.
    """
    return _zbv(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _zbv_rank(p: int, m: int, r: int) -> Iterator[Step]:
    n = max(2 * p - 1, m)
    down, up = r, 2 * p - 1 - r
    f_op, i_op, w_op = Op.F, Op.I, Op.W
    done = {"f0": 0, "f1": 0, "b0": 0, "b1": 0}

    def take(key: str) -> int:
        value = done[key]
        done[key] = value + 1
        return value

    def steps() -> Iterator[Step]:
        for _ in range(2 * (p - r) - 1):
            yield (f_op, down, take("f0"))
        for _ in range(r):
            yield (f_op, up, take("f1"))
            yield (f_op, down, take("f0"))
        for _ in range(p - r):
            yield (f_op, up, take("f1"))
            k = take("b1")
            yield (i_op, up, k)
            yield (w_op, up, k)
        while done["f1"] < done["f0"] or done["f0"] < n:
            if done["f0"] < n:
                yield (f_op, down, take("f0"))
            k = take("b0")
            yield (i_op, down, k)
            yield (w_op, down, k)
            yield (f_op, up, take("f1"))
            k = take("b1")
            yield (i_op, up, k)
            yield (w_op, up, k)
        w0, w1 = done["b0"], done["b1"]
        for _ in range(r):
            yield (i_op, down, take("b0"))
            yield (i_op, up, take("b1"))
        for _ in range(p - r):
            yield (i_op, down, take("b0"))
            yield (w_op, down, w0)
            w0 += 1
        for k in range(w1, done["b1"]):
            yield (w_op, up, k)
        for k in range(w0, done["b0"]):
            yield (w_op, down, k)

    return (step for step in steps() if step[2] is not None and step[2] < m)


def _zbv(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    p, m = num_ranks, num_microbatches
    return _stream("zbv", p, m, lambda r: _zbv_rank(p, m, r))


def dualpipev(*, num_ranks: int, num_microbatches: int, fb_overlap: float | Fraction = 0) -> Schedule:
    """DualPipeV, torch's ``ScheduleDualPipeV``: DeepSeek's DualPipe (DeepSeek-V3 technical
    report, 2024, sec. 3.2.1) folded into a V, two stages per rank, ``m >= 2p``.

    Rank ``r`` (chunk 0 = stage ``r``, chunk 1 = stage ``2p - 1 - r``): ``2(p - r - 1)`` chunk-0
    forwards; ``r + 1`` pairs (chunk-0 F, chunk-1 F); ``p - r - 1`` triples (chunk-1 I, a pending
    W, chunk-1 F); then the main phase of ``m - 2p + r + 1`` rounds, each two overlapped
    forward-and-backward pairs (chunk-0 F with chunk-1 B, chunk-1 F with chunk-0 B; the last
    rank's first pair is not overlapped); ``p - r - 1`` times (chunk-1 B, chunk-1 F with
    chunk-0 B); ``r + 1`` backward pairs (chunk 1, chunk 0) that switch to the split ``I`` half
    way; ``p - r - 1`` times (a pending W, chunk-0 backward); and the pending ``W`` s. Each
    overlapped pair is an ``FB`` followed by its ``B`` (torch's ``OVERLAP_F_B``), run as one unit
    as DeepSeek's ``_forward_backward_chunk`` runs it: it waits for both inputs, lasts
    ``F&B = F + B - fb_overlap * min(F, B)`` (default ``fb_overlap = 0``:
    :mod:`pipesim.schedules.pairs`) and then sends both outputs. With equal stages and free
    links every rank idles ``(p - 1)(F&B + F - 2W)`` when ``W <= I <= F`` (DeepSeek's
    ``(p - 1)(F&B + B - 3W)`` at ``F = I``; ``docs/schedules.md``). Unit-cost slots for p=2,
    m=4 (F = I = W = 1, B = 2; upper case chunk 0, lower case chunk 1; a pair's forward
    is shown as its F, its backward right after it)::

        rank 0 F0 F1 F2 f0 i0 w0 f1 F3 b1--- .  f2 B0--- b2--- .  f3 B1--- b3--- I2 W2 I3 W3
        rank 1 .  F0 f0 F1 f1 F2 b0--- f2 B0--- F3 b1--- f3 B1--- b2--- B2--- .  i3 I3 w3 W3

    Raises:
        InputError: a count below 1, or ``m < 2p`` (torch's rule).
    """
    stream = _dualpipev(num_ranks=num_ranks, num_microbatches=num_microbatches, fb_overlap=fb_overlap)
    return stream.materialize()


def dualpipev_rank(p: int, m: int, r: int) -> Iterator[Step]:
    """Rank ``r``'s DualPipeV steps with ``p`` ranks and ``m`` micro-batches (see :func:`dualpipev`);
    :mod:`pipesim.schedules.dualpipe` unfolds them over twice the ranks."""
    c0, c1 = r, 2 * p - 1 - r
    f_op, fb_op, b_op, i_op, w_op = Op.F, Op.FB, Op.B, Op.I, Op.W
    forwards = {c0: 0, c1: 0}
    backwards = {c0: 0, c1: 0}
    pending: deque[tuple[int, int]] = deque()

    def forward(stage: int, paired: bool = False) -> Step:
        k = forwards[stage]
        forwards[stage] = k + 1
        return (fb_op if paired else f_op, stage, k)

    def backward(stage: int, split: bool) -> Step:
        k = backwards[stage]
        backwards[stage] = k + 1
        if split:
            pending.append((stage, k))
            return (i_op, stage, k)
        return (b_op, stage, k)

    def weight() -> Iterator[Step]:
        if pending:
            stage, k = pending.popleft()
            yield (w_op, stage, k)

    for _ in range(2 * (p - r - 1)):
        yield forward(c0)
    for _ in range(r + 1):
        yield forward(c0)
        yield forward(c1)
    for _ in range(p - r - 1):
        yield backward(c1, True)
        yield from weight()
        yield forward(c1)
    for i in range(m - 2 * p + r + 1):
        # each forward runs as one unit with the backward after it (FB), but the last rank's first
        yield forward(c0, paired=i > 0 or r < p - 1)
        yield backward(c1, False)
        yield forward(c1, paired=True)
        yield backward(c0, False)
    for _ in range(p - r - 1):
        yield backward(c1, False)
        yield forward(c1, paired=True)
        yield backward(c0, False)
    split = False
    half = (r + 1) // 2
    for i in range(r + 1):
        if i == half and r % 2 == 1:
            split = True
        yield backward(c1, split)
        if i == half and r % 2 == 0:
            split = True
        yield backward(c0, split)
    for _ in range(p - r - 1):
        yield from weight()
        yield backward(c0, split)
    while pending:
        yield from weight()


def _dualpipev(*, num_ranks: int, num_microbatches: int, fb_overlap: float | Fraction = 0) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    p, m = num_ranks, num_microbatches
    if m < 2 * p:
        raise invalid("num_microbatches", m, f"must be at least 2p = {2 * p} for dualpipev (torch's rule)")
    return _stream("dualpipev", p, m, lambda r: dualpipev_rank(p, m, r), fb_overlap)

