"""The overlapped forward-and-backward pair (``FB`` then ``B``): its time and its parts.

DualPipe (DeepSeek-V3 technical report, 2024, sec. 3.2.1) runs the forward of one micro-batch
and the backward of another as one unit, ``F&B``: DeepSeek's ``DualPipe._forward_backward_chunk``
(github.com/deepseek-ai/DualPipe, ``dualpipe/dualpipe.py`` at 3da1bbe) posts the receives of
both inputs, waits for both, runs the two computations (overlapped when the module provides
``overlapped_forward_backward``, one after the other otherwise) and then sends both outputs. In
a schedule the pair is an ``FB`` action (its forward) immediately followed by the full backward
``B`` it runs with (:class:`~pipesim.schedules.action.Op`).

The pair's time (:func:`pair_time`) is ``F + B - fb_overlap * min(F, B)``: what the overlap gains
is the part of the shorter computation that runs hidden under the other (DeepSeek hides each
chunk's expert-parallel all-to-all and pipeline sends under the other chunk's computation).
pipesim's compute costs hold no all-to-all to hide and a device runs one computation at a time,
so the default ``fb_overlap = 0`` gives ``F&B = F + B`` (DeepSeek's own code without
``overlapped_forward_backward``); ``fb_overlap = 1`` gives the bound ``F&B = max(F, B)``.
The executors record the pair as its forward then its backward, the pair's time split between
them in proportion to ``F`` and ``B`` (:func:`pair_parts`); both outputs leave at its end.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from fractions import Fraction

from pipesim.errors import invalid
from pipesim.schedules.action import Op

__all__ = ["FB_OVERLAP_RULE", "PAIR_RULE", "check_fb_overlap", "pair_parts", "pair_time", "unpaired"]

PAIR_RULE = "must be followed at once by the full backward B it runs with (an overlapped pair)"
"""What an ``FB`` needs, as error messages state it."""

FB_OVERLAP_RULE = "must be a number in [0, 1] (the share of the shorter of F and B hidden in F&B)"
"""The rule of the ``fb_overlap`` schedule option, as error messages state it."""


def check_fb_overlap(value: object) -> float | Fraction:
    """``value`` (an ``int``, ``float`` or ``Fraction``, kept as given) after checking
    ``0 <= value <= 1``.

    Raises:
        InputError: a non-number, a bool, NaN or a value outside ``[0, 1]``, naming ``fb_overlap``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, Fraction)):
        raise invalid("fb_overlap", value, FB_OVERLAP_RULE)
    if isinstance(value, float) and not math.isfinite(value):
        raise invalid("fb_overlap", value, FB_OVERLAP_RULE)
    if not 0 <= value <= 1:
        raise invalid("fb_overlap", value, FB_OVERLAP_RULE)
    return value


def pair_time(fwd: float | Fraction, bwd: float | Fraction, overlap: float | Fraction) -> float | Fraction:
    """``F&B``, the time of an overlapped pair whose forward takes ``fwd`` and whose full
    backward takes ``bwd`` seconds alone: ``fwd + bwd - overlap * min(fwd, bwd)`` (exact with
    ``int`` or ``Fraction`` arguments; ``overlap = 0`` gives ``fwd + bwd``)."""
    if not overlap:
        return fwd + bwd
    return fwd + bwd - overlap * min(fwd, bwd)


def pair_parts(
    fwd: float | Fraction, bwd: float | Fraction, overlap: float | Fraction
) -> tuple[float | Fraction, float | Fraction]:
    """The pair's time (:func:`pair_time`) split into its forward's and its backward's parts, in
    proportion to ``fwd`` and ``bwd`` (what the executors and the evaluator record), seconds."""
    if not overlap:
        return fwd, bwd
    total = fwd + bwd
    if not total:
        return fwd, bwd
    if isinstance(total, int):  # exact with integer costs
        total = Fraction(total)
    pair = pair_time(fwd, bwd, overlap)
    front = fwd * pair / total
    return front, pair - front


def unpaired(steps: Iterable[tuple[Op, int, int | None]]) -> Iterator[tuple[Op, int, int | None]]:
    """``steps`` with each pair's ``FB`` read as the forward ``F`` it runs (for passes that
    need only which computation runs, not how the pair is timed)."""
    op_fb, op_f = Op.FB, Op.F
    for op, s, mb in steps:
        yield (op_f if op is op_fb else op, s, mb)
