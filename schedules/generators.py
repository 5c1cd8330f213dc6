"""Schedule generators: GPipe, DAPPLE / 1F1B, interleaved 1F1B, ZB-H1 and ZB-H2, as pure functions.

Every generator returns a compute-only :class:`~pipesim.schedules.schedule.Schedule` that is valid by
construction: the test suite runs :func:`~pipesim.schedules.validate` on every generator over a grid
of (p, m, v), so the generators skip that linear-time check at run time (it is a third of the
simulator's time on a 16 x 1024 pipeline). Only user-given DAPPLE warm-up lists, which can
deadlock, are validated here.

Each order is defined once, as a :class:`~pipesim.schedules.schedule.ScheduleStream` whose rows
are generated lazily (:func:`stream_of` gives a generator's streaming sibling, which the
simulator lowers in memory that does not grow with the micro-batch count); the public
generators return that stream, materialized.
They share one shape, written here once: each rank runs ``K`` leading forwards, then alternates one
backward and one forward until its forwards run out, then drains its backwards. Schedules differ
only in ``K`` per rank, in which (stage, micro-batch) the n-th forward or backward of a rank is,
and (zero-bubble) in where the weight-gradient actions ``W`` go. The docstring grids are time
slots with unit costs (every action takes one slot); ``.`` is idle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from pipesim.errors import check_count, invalid
from pipesim.schedules.action import Op
from pipesim.schedules.schedule import Schedule, ScheduleStream, Step
from pipesim.schedules.validate import validate

__all__ = [
    "dapple",
    "gpipe",
    "interleaved",
    "interleaved_zb",
    "looped_bfs",
    "one_f_one_b",
    "stream_of",
    "zb_h1",
    "zb_h2",
]

_Pick = Callable[[int], tuple[int, int]]
"""Maps a rank's n-th forward (or backward) to its (stage, micro-batch)."""


def _check_counts(num_ranks: int, num_microbatches: int, chunks: int = 1) -> None:
    counts = (("num_ranks", num_ranks), ("num_microbatches", num_microbatches), ("chunks", chunks))
    for field, value in counts:
        check_count(field, value)


def _rank_steps(
    leading: int,
    total: int,
    forward: _Pick,
    backward: _Pick,
    *,
    split: bool = False,
    w_delay: int = 0,
) -> Iterator[Step]:
    """One rank's order: ``leading`` forwards, then (backward, forward) pairs, then the backwards.

    With ``split`` the backward is ``I`` and the rank's ``W`` actions follow their ``I`` in the
    same order: after its j-th ``I`` the rank runs the oldest pending ``W`` when ``j >= w_delay``,
    and runs the rest at the end. Yields ``(op, stage, microbatch)``, lazily.
    """
    op_f, op_w = Op.F, Op.W
    op_back = Op.I if split else Op.B
    leading = max(1, min(leading, total))
    for n in range(leading):
        stage, mb = forward(n)
        yield (op_f, stage, mb)
    pending = 0
    for j in range(total):
        stage, mb = backward(j)
        yield (op_back, stage, mb)
        if split and j >= w_delay:
            stage, mb = backward(pending)
            yield (op_w, stage, mb)
            pending += 1
        if leading + j < total:
            stage, mb = forward(leading + j)
            yield (op_f, stage, mb)
    while split and pending < total:
        stage, mb = backward(pending)
        yield (op_w, stage, mb)
        pending += 1


def _single(name: str, p: int, m: int, leading: Sequence[int], *, split: bool = False,
            w_delay: Sequence[int] | None = None) -> ScheduleStream:
    """Stage ``r`` on rank ``r``; the n-th forward and backward of a rank are micro-batch ``n``."""
    leading = tuple(leading)
    delays = (0,) * p if w_delay is None else tuple(w_delay)

    def rows(r: int) -> Iterator[Step]:
        def pick(n: int) -> tuple[int, int]:
            return r, n

        return _rank_steps(leading[r], m, pick, pick, split=split, w_delay=delays[r])

    return ScheduleStream(name=name, num_ranks=p, num_stages=p, num_microbatches=m, rows=rows)


def gpipe(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """GPipe (Huang et al., NeurIPS 2019): every stage runs all forwards, then all backwards.

    Stage ``i`` on rank ``i``; backwards in micro-batch order. Peak stashed activations: ``m`` on
    every stage. Unit-cost slots for p=4, m=8 (digit = micro-batch; F forward, B backward)::

        rank 0 F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  .  .  B0 B1 B2 B3 B4 B5 B6 B7
        rank 1 .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  .  .  B0 B1 B2 B3 B4 B5 B6 B7 .
        rank 2 .  .  F0 F1 F2 F3 F4 F5 F6 F7 .  .  B0 B1 B2 B3 B4 B5 B6 B7 .  .
        rank 3 .  .  .  F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7 .  .  .

    Raises:
        InputError: a count below 1.
    """
    return _gpipe(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _gpipe(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches)
    return _single("gpipe", num_ranks, num_microbatches, [num_microbatches] * num_ranks)


def dapple(
    *,
    num_ranks: int,
    num_microbatches: int,
    warmup: str | Sequence[int] = "default",
) -> Schedule:
    """DAPPLE's early-backward schedule (Fan et al., PPoPP 2021).

    Stage ``i`` (0-based, of ``p``) runs ``K_i`` warm-up forwards, then alternates one backward
    and one forward, then drains its backwards. ``warmup`` picks ``K_i``:

    - ``"default"``: ``K_i = min(p - i, m)``, the same order as PipeDream-flush / Megatron 1F1B
      (and torch's ``Schedule1F1B``);
    - ``"slow-link"``: ``K_i = min(2 (p - i) - 1, m)``, DAPPLE's variant for slow links, which
      keeps more forwards in flight to hide transfer time (the order torch's
      ``ScheduleInterleaved1F1B`` runs with one stage per rank);
    - a list of ``p`` integers ``K_i`` in ``1..m``.

    Peak stashed activations on stage ``i``: ``K_i``. Unit-cost slots for p=4, m=8, default::

        rank 0 F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7
        rank 1 .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .
        rank 2 .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .
        rank 3 .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .

    Raises:
        InputError: a count below 1, an unknown ``warmup`` name, or a list of the wrong length or
            with values outside ``1..m``; ScheduleError when an explicit list deadlocks (a stage
            needs ``K_i >= K_{i+1}``).
    """
    return _dapple(num_ranks=num_ranks, num_microbatches=num_microbatches, warmup=warmup).materialize()


def _dapple(
    *, num_ranks: int, num_microbatches: int, warmup: str | Sequence[int] = "default"
) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    if isinstance(warmup, str):
        if warmup == "default":
            counts = [min(p - i, m) for i in range(p)]
        elif warmup == "slow-link":
            counts = [min(2 * (p - i) - 1, m) for i in range(p)]
        else:
            raise invalid("warmup", warmup, "must be 'default', 'slow-link' or a list of per-stage counts")
    else:
        counts = list(warmup)
        if len(counts) != p or any(type(k) is not int or not 1 <= k <= m for k in counts):
            raise invalid("warmup", warmup, f"must be {p} integers in 1..{m} (one per stage)")
    # Built-in warm-up rules are valid by construction (the test suite validates them over a grid
    # of p and m); a user's list may deadlock, so only it is checked here.
    stream = _single("dapple", p, m, counts)
    if not isinstance(warmup, str):
        validate(stream.materialize())
    return stream


def one_f_one_b(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """1F1B, i.e. PipeDream-flush (Narayanan et al., ICML 2021) and Megatron's non-interleaved schedule.

    The same order as :func:`dapple` with its default warm-up ``K_i = min(p - i, m)`` (torch's
    ``Schedule1F1B``); only the name differs. Peak stashed activations on stage ``i``:
    ``min(p - i, m)``. Unit-cost slots for p=4, m=8::

        rank 0 F0 F1 F2 F3 .  .  .  B0 F4 B1 F5 B2 F6 B3 F7 B4 .  B5 .  B6 .  B7
        rank 1 .  F0 F1 F2 .  .  B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 .  B6 .  B7 .
        rank 2 .  .  F0 F1 .  B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 .  B7 .  .
        rank 3 .  .  .  F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7 .  .  .

    Raises:
        InputError: a count below 1.
    """
    return _one_f_one_b(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _one_f_one_b(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    return _single("1f1b", p, m, [min(p - i, m) for i in range(p)])


def _round_size(num_ranks: int, num_microbatches: int) -> int:
    """Micro-batches per round for the looped schedules (torch's rule), or raise."""
    rounds = max(1, num_microbatches // num_ranks)
    if num_microbatches % rounds:
        raise invalid(
            "num_microbatches",
            num_microbatches,
            f"must be a multiple of the number of rounds max(1, m // p) = {rounds} for "
            f"p={num_ranks} (e.g. a multiple of p, or less than 2p)",
        )
    return num_microbatches // rounds


def _looped(name: str, p: int, m: int, v: int, extra: int, *, split: bool) -> ScheduleStream:
    """Megatron's looped order with ``v`` stages per rank; ``extra`` warm-up forwards per hop.

    Rounds only matter with ``v > 1``; torch checks its round rule for ``v = 1`` too, pipesim does not.
    """
    group = _round_size(p, m) if v > 1 else m
    total = v * m

    def rows(r: int) -> Iterator[Step]:
        # The n-th forward of rank r: rounds of `group` micro-batches go through chunk 0, then 1, ...
        def forward(n: int) -> tuple[int, int]:
            return ((n // group) % v) * p + r, (n // (group * v)) * group + n % group

        def backward(n: int) -> tuple[int, int]:
            return (v - 1 - (n // group) % v) * p + r, (n // (group * v)) * group + n % group

        # forwards before the first backward: all of chunks 0..v-2 for the first round, plus
        # `extra` per hop to the last rank, plus the forward that starts the steady state
        leading = min((v - 1) * group + extra * (p - 1 - r) + 1, total)
        return _rank_steps(leading, total, forward, backward, split=split, w_delay=r)

    return ScheduleStream(name=name, num_ranks=p, num_stages=v * p, num_microbatches=m, rows=rows)


def interleaved(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> Schedule:
    """Megatron's interleaved 1F1B (Narayanan et al., SC 2021, sec. 2.2), torch's ``ScheduleInterleaved1F1B``.

    Rank ``r`` holds ``v = chunks`` stages ``r, r + p, ..., r + (v - 1) p``. Micro-batches go in
    rounds of ``g`` (``g = p`` when ``p`` divides ``m``; torch's rule ``g = m / max(1, m // p)``
    otherwise): a rank runs the forwards of a round on chunk 0, then chunk 1, ..., and its
    backwards likewise from the last chunk down. Rank ``r`` runs ``(v - 1) g + 2 (p - 1 - r) + 1``
    forwards (at most ``v m``) before its first backward. With ``v = 1`` this is DAPPLE's
    slow-link order. Unit-cost slots for p=4, m=8, v=2 (upper case chunk 0, lower case chunk 1)::

        rank 0 F0 F1 F2 F3 f0 f1 f2 f3 F4 F5 F6 b0 F7 b1 .  .  f4 b2 f5
        rank 1 .  F0 F1 F2 F3 f0 f1 f2 f3 F4 b0 F5 b1 F6 b2 F7 b3 f4 B0
        rank 2 .  .  F0 F1 F2 F3 f0 f1 f2 b0 f3 b1 F4 b2 F5 b3 F6 B0 F7
        rank 3 .  .  .  F0 F1 F2 F3 f0 b0 f1 b1 f2 b2 f3 b3 F4 B0 F5 B1
        (slots 19..37)
        rank 0 b3 f6 B0 f7 B1 B2 B3 .  b4 .  b5 .  b6 .  b7 B4 B5 B6 B7
        rank 1 f5 B1 f6 B2 f7 B3 .  b4 .  b5 .  b6 .  b7 B4 B5 B6 B7 .
        rank 2 B1 f4 B2 f5 B3 f6 b4 f7 b5 .  b6 .  b7 B4 B5 B6 B7 .  .
        rank 3 F6 B2 F7 B3 f4 b4 f5 b5 f6 b6 f7 b7 B4 B5 B6 B7 .  .  .

    Raises:
        InputError: a count below 1, or ``m`` not a multiple of ``max(1, m // p)``.
    """
    return _interleaved(num_ranks=num_ranks, num_microbatches=num_microbatches, chunks=chunks).materialize()


def _interleaved(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches, chunks)
    return _looped("interleaved", num_ranks, num_microbatches, chunks, 2, split=False)


def zb_h1(*, num_ranks: int, num_microbatches: int, chunks: int = 1) -> Schedule:
    """ZB-H1 (Qi et al., ICLR 2024, sec. 3.1): 1F1B with the backward split into ``I`` then ``W``.

    Stage ``i`` runs the 1F1B order with ``I`` in place of ``B`` and puts off its ``W`` actions:
    after its j-th ``I`` it runs the oldest pending ``W`` once ``j >= i``, and the rest at the end.
    Peak activations (held until ``W``): ``min(p, m)`` per stage when ``m >= p``. This is torch's
    ``ScheduleInterleavedZeroBubble`` (ZB1P), which with ``chunks > 1`` also loops over ``v``
    stages per rank (``(v - 1) g + (p - 1 - r) + 1`` forwards before the first ``I``).
    Unit-cost slots for p=4, m=8 (F forward, I input gradient, W weight gradient)::

        rank 0 F0 F1 F2 F3 .  .  .  I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7
        rank 1 .  F0 F1 F2 .  .  I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7
        rank 2 .  .  F0 F1 .  I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7
        rank 3 .  .  .  F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7

    Raises:
        InputError: a count below 1, or (``chunks > 1``) ``m`` not a multiple of ``max(1, m // p)``.
    """
    return _zb_h1(num_ranks=num_ranks, num_microbatches=num_microbatches, chunks=chunks).materialize()


def _zb_h1(*, num_ranks: int, num_microbatches: int, chunks: int = 1) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches, chunks)
    return _looped("zb-h1", num_ranks, num_microbatches, chunks, 1, split=True)


def zb_h2(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-H2 (Qi et al., ICLR 2024, sec. 3.2, fig. 3 bottom): zero bubble for more memory.

    Stage ``i`` runs ``K_i = min(2 (p - i) - 1, m)`` warm-up forwards, then alternates ``I`` and
    ``F``, with ``W`` put off: after its j-th ``I`` the stage runs the oldest pending ``W`` once
    ``j >= 2 i``, and the rest at the end. Every stage holds up to ``2 p - 1`` micro-batches'
    activations (until ``W``). With ``T_F = T_I = T_W`` each rank works without a gap from its
    first action to its last (the paper's parallelogram); torch has no ZB-H2 class. Unit-cost slots
    for p=4, m=8::

        rank 0 F0 F1 F2 F3 F4 F5 F6 I0 W0 F7 I1 W1 I2 W2 I3 W3 I4 W4 I5 W5 I6 W6 I7 W7 .  .  .
        rank 1 .  F0 F1 F2 F3 F4 I0 F5 I1 F6 I2 W0 F7 I3 W1 I4 W2 I5 W3 I6 W4 I7 W5 W6 W7 .  .
        rank 2 .  .  F0 F1 F2 I0 F3 I1 F4 I2 F5 I3 F6 I4 W0 F7 I5 W1 I6 W2 I7 W3 W4 W5 W6 W7 .
        rank 3 .  .  .  F0 I0 F1 I1 F2 I2 F3 I3 F4 I4 F5 I5 F6 I6 W0 F7 I7 W1 W2 W3 W4 W5 W6 W7

    Raises:
        InputError: a count below 1.
    """
    return _zb_h2(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _zb_h2(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    leading = [min(2 * (p - i) - 1, m) for i in range(p)]
    return _single("zb-h2", p, m, leading, split=True, w_delay=[2 * i for i in range(p)])


def looped_bfs(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> Schedule:
    """Breadth-first looped pipeline (Lamy-Poirier, "Breadth-First Pipeline Parallelism",
    MLSys 2023), torch's ``ScheduleLoopedBFS``.

    Rank ``r`` holds the ``v = chunks`` stages ``r, r + p, ..., r + (v - 1) p`` (looped
    placement) and runs every micro-batch's forward on its first stage, then on its second, ...;
    then the backwards from its last stage down, each stage's micro-batches in reverse order
    (``m - 1`` first: the last forward is the first whose gradient is ready). It is GPipe looped
    ``v`` times: every stage holds all ``m`` micro-batches' activations (``v m``
    stage-micro-batches per rank, i.e. ``m`` micro-batches of the rank's layers). With equal
    stages of ``t_f / v`` and ``t_b / v`` the makespan is ``(m + (p - 1) / v)(t_f + t_b)`` for
    ``m >= p`` (the bubble of interleaved 1F1B with GPipe's memory). Unit-cost slots for p=2,
    m=4, v=2 (F=1, B=2; upper case chunk 0, lower case chunk 1)::

        rank 0 F0 F1 F2 F3 f0 f1 f2 f3 .  .  .  b3--- b2--- b1--- b0--- B3--- B2--- B1--- B0---
        rank 1 .  F0 F1 F2 F3 f0 f1 f2 f3 b3--- b2--- b1--- b0--- B3--- B2--- B1--- B0--- .  .

    Raises:
        InputError: a count below 1.
    """
    return _looped_bfs(num_ranks=num_ranks, num_microbatches=num_microbatches, chunks=chunks).materialize()


def _looped_bfs(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches, chunks)
    p, m, v = num_ranks, num_microbatches, chunks

    def rows(r: int) -> Iterator[Step]:
        for c in range(v):
            for mb in range(m):
                yield (Op.F, c * p + r, mb)
        for c in reversed(range(v)):
            for mb in reversed(range(m)):
                yield (Op.B, c * p + r, mb)

    return ScheduleStream(name="looped-bfs", num_ranks=p, num_stages=v * p, num_microbatches=m, rows=rows)


def interleaved_zb(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> Schedule:
    """Interleaved zero bubble, torch's ``ScheduleInterleavedZeroBubble`` (ZB1P of Qi et al.,
    ICLR 2024, looped over ``v = chunks`` stages per rank): the order of :func:`zb_h1` with
    ``chunks`` stages per rank, default 2 (``zb-h1`` is its ``v = 1`` case).

    Rank ``r`` runs ``(v - 1) g + (p - 1 - r) + 1`` forwards before its first ``I`` (``g`` the
    round size of :func:`interleaved`) and puts off its ``W`` s by ``r``. Unit-cost slots for
    p=2, m=4, v=2 (F = I = W = 1; upper case chunk 0, lower case chunk 1)::

        rank 0 F0 F1 f0 f1 .  i0 w0 F2 i1 w1 F3 I0 W0 f2 I1 W1 f3 i2 w2 i3 w3 I2 W2 I3 W3
        rank 1 .  F0 F1 f0 i0 f1 i1 w0 F2 I0 w1 F3 I1 W0 f2 i2 W1 f3 i3 w2 I2 w3 I3 W2 W3

    Raises:
        InputError: a count below 1, or ``m`` not a multiple of ``max(1, m // p)``.
    """
    stream = _interleaved_zb(num_ranks=num_ranks, num_microbatches=num_microbatches, chunks=chunks)
    return stream.materialize()


def _interleaved_zb(*, num_ranks: int, num_microbatches: int, chunks: int = 2) -> ScheduleStream:
    _check_counts(num_ranks, num_microbatches, chunks)
    return _looped("interleaved-zb", num_ranks, num_microbatches, chunks, 1, split=True)


_STREAMS: dict[Callable[..., Schedule], Callable[..., ScheduleStream]] = {
    gpipe: _gpipe,
    dapple: _dapple,
    one_f_one_b: _one_f_one_b,
    interleaved: _interleaved,
    zb_h1: _zb_h1,
    zb_h2: _zb_h2,
    looped_bfs: _looped_bfs,
    interleaved_zb: _interleaved_zb,
}


def stream_of(generator: Callable[..., Schedule]) -> Callable[..., ScheduleStream]:
    """The streaming sibling of a generator of this module: same arguments, same checks, same
    order, but a :class:`~pipesim.schedules.schedule.ScheduleStream` whose rows are generated
    lazily (the generator is that stream, materialized).

    Raises:
        InputError: ``generator`` is not one of this module's generators.
    """
    found = _STREAMS.get(generator)
    if found is None:
        name = getattr(generator, "__name__", generator)
        raise invalid("generator", name, "must be a generator of this module")
    return found
