"""DualPipe: the bidirectional pipeline of the DeepSeek-V3 technical report (2024, sec. 3.2.1, fig. 5).

Two pipelines run over the same ``p`` ranks (``p`` even), fed from both ends, on the ``dual``
placement (:mod:`pipesim.schedules.placement`): the first ``m / 2`` micro-batches enter at rank 0
and run the down chain (stage ``j`` on rank ``j``), the other ``m / 2`` enter at rank ``p - 1``
and run the up chain (stage ``p + j``, a copy of model stage ``j``'s layers, on rank
``p - 1 - j``). Each rank therefore holds two model stages (``r`` and ``p - 1 - r``): twice the
parameters of 1F1B, and the two copies' weight gradients are summed between ranks ``r`` and
``p - 1 - r`` once per iteration (DeepSeek's ``examples/example_dualpipe.py`` adds the partner's
gradient, gathered from rank ``p - 1 - r``; pipesim charges an all-reduce among the devices of
both copies, see the lowering in :mod:`pipesim.simulator.program`).

The order is DeepSeek's reference ``DualPipe.step`` (github.com/deepseek-ai/DualPipe,
``dualpipe/dualpipe.py`` at commit 3da1bbe), re-derived, not copied: its eight phases per rank
are those of DualPipeV (:func:`pipesim.schedules.vshape.dualpipev`, "cut-in-half" of DualPipe)
with ``p / 2`` ranks, ``m / 2`` micro-batches and the rank's *half rank* ``h = min(r, p - 1 - r)``.
A DualPipeV rank's chunk 0 / chunk 1 are, for DualPipe rank ``r < p / 2``, its down stage
(micro-batch ``k``) / its up stage (micro-batch ``m / 2 + k``); for ``r >= p / 2`` the two swap
(the reference's ``phase ^= is_in_second_half``). A down micro-batch thus runs the DualPipeV chain
unfolded over ``p`` ranks, and each up micro-batch its mirror image.
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

from pipesim.errors import check_count, invalid
from pipesim.schedules.pairs import check_fb_overlap
from pipesim.schedules.schedule import Schedule, ScheduleStream, Step
from pipesim.schedules.vshape import dualpipev_rank

__all__ = ["dualpipe"]


def dualpipe(*, num_ranks: int, num_microbatches: int, fb_overlap: float | Fraction = 0) -> Schedule:
    """DualPipe (DeepSeek-V3 technical report, sec. 3.2.1): two pipelines fed from both ends of
    ``p`` ranks (``p`` even), ``m / 2`` micro-batches each way (``m`` even, ``m >= 2p``: the
    reference's rules), two model stages per rank (see the module doc).

    Each overlapped forward-and-backward pair of the main phase is an ``FB`` followed by its
    ``B``, run as one unit as DeepSeek's ``_forward_backward_chunk`` runs it: it waits for both
    inputs (the forward's activation and the backward's gradient), lasts
    ``F&B = F + B - fb_overlap * min(F, B)`` (default ``fb_overlap = 0``, ``F&B = F + B``:
    :mod:`pipesim.schedules.pairs`) and then sends both outputs. With equal stages and free links
    the busiest rank idles ``(p/2 - 1)(F&B + F - 2W)`` when ``W <= I <= F`` (every rank when
    ``fb_overlap = 0``, the makespan ``m(F + I + W)`` plus it): DeepSeek's bubble
    ``(p/2 - 1)(F&B + B - 3W)`` when ``F = I``; for any ``W <= I`` it is
    ``max((p/2 - 1)(F&B + F - 2W), (p/2 - 1)(F&B + I - 2W) - F)`` (``docs/schedules.md``). Each rank
    holds at most ``p + 1`` stage-micro-batches of activations. Unit-cost slots for p=4, m=8
    (F = I = W = 1, B = 2; upper case the down copy, lower case the up copy, up micro-batches
    numbered from ``m / 2``; a pair's forward is shown as its F, its backward right after it)::

        rank 0 F0 F1 F2 f4 i4 w4 f5 F3 b5--- .  f6 B0--- b6--- .  f7 B1--- b7--- I2 W2 I3 W3
        rank 1 .  F0 f4 F1 f5 F2 b4--- f6 B0--- F3 b5--- f7 B1--- b6--- B2--- .  i7 I3 w7 W3
        rank 2 .  f4 F0 f5 F1 f6 B0--- F2 b4--- f7 B1--- F3 b5--- B2--- b6--- .  I3 i7 W3 w7
        rank 3 f4 f5 f6 F0 I0 W0 F1 f7 B1--- .  F2 b4--- B2--- .  F3 b5--- B3--- i6 w6 i7 w7

    Raises:
        InputError: a count below 1, an odd ``p`` or ``m``, or ``m < 2p``.
    """
    stream = _dualpipe(num_ranks=num_ranks, num_microbatches=num_microbatches, fb_overlap=fb_overlap)
    return stream.materialize()


def _dualpipe_rank(p: int, m: int, r: int) -> Iterator[Step]:
    half_p, half_m = p // 2, m // 2
    h = min(r, p - 1 - r)
    down_first = r < half_p  # DualPipeV's chunk 0 is this rank's down stage
    down, up = r, 2 * p - 1 - r  # this rank's stages under the dual placement
    for op, v_stage, k in dualpipev_rank(half_p, half_m, h):
        assert k is not None
        chunk0 = v_stage == h
        if chunk0 == down_first:
            yield (op, down, k)
        else:
            yield (op, up, half_m + k)


def _dualpipe(*, num_ranks: int, num_microbatches: int, fb_overlap: float | Fraction = 0) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    p, m = num_ranks, num_microbatches
    if p % 2:
        raise invalid("num_ranks", p, "must be even for dualpipe (rank r pairs with rank p - 1 - r)")
    if m % 2 or m < 2 * p:
        rule = f"must be even and at least 2p = {2 * p} for dualpipe (DeepSeek's rule)"
        raise invalid("num_microbatches", m, rule)
    return ScheduleStream(
        name="dualpipe",
        num_ranks=p,
        num_stages=2 * p,
        num_microbatches=m,
        rows=lambda r: _dualpipe_rank(p, m, r),
        placement="dual",
        fb_overlap=check_fb_overlap(fb_overlap),
    )
