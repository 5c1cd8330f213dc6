"""The registry of schedule names: ``make_schedule("1f1b", num_ranks=4, num_microbatches=8)``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Any

from pipesim.errors import invalid, parse_name
from pipesim.schedules import generators
from pipesim.schedules.schedule import Schedule, ScheduleStream

__all__ = ["ScheduleName", "lookup", "make_schedule", "schedule_names", "stream_schedule"]


class ScheduleName(str, Enum):
    """The schedules a plan may name (matched case-insensitively).

    All but ``memory-aware`` come from :func:`make_schedule`; ``memory-aware`` depends on the
    micro-batches' memory sizes and is built by ``pipesim.planner.dynamic.memory_aware``.
    """

    GPIPE = "gpipe"
    DAPPLE = "dapple"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    ZB_H1 = "zb-h1"
    ZB_H2 = "zb-h2"
    MEMORY_AWARE = "memory-aware"

    def __str__(self) -> str:
        return self.value


_Maker = Callable[..., Schedule]
# name -> (generator, whether it takes `chunks`, the options it accepts besides the counts)
_REGISTRY: dict[ScheduleName, tuple[_Maker, bool, frozenset[str]]] = {
    ScheduleName.GPIPE: (generators.gpipe, False, frozenset()),
    ScheduleName.DAPPLE: (generators.dapple, False, frozenset({"warmup"})),
    ScheduleName.ONE_F_ONE_B: (generators.one_f_one_b, False, frozenset()),
    ScheduleName.INTERLEAVED: (generators.interleaved, True, frozenset()),
    ScheduleName.ZB_H1: (generators.zb_h1, True, frozenset()),
    ScheduleName.ZB_H2: (generators.zb_h2, False, frozenset()),
}


def schedule_names() -> tuple[str, ...]:
    """The names :func:`make_schedule` generates, in registry order."""
    return tuple(name.value for name in _REGISTRY)


def lookup(name: object) -> ScheduleName:
    """The :class:`ScheduleName` for ``name`` (case-insensitive, surrounding blanks ignored).

    Raises:
        UnknownNameError: no schedule has that name; the message lists the valid names.
    """
    return parse_name("schedule", ScheduleName, name)


def make_schedule(
    name: str | ScheduleName,
    *,
    num_ranks: int,
    num_microbatches: int,
    chunks: int | None = None,
    microbatch_sizes: Sequence[int] | None = None,
    **options: Any,
) -> Schedule:
    """Generate the named schedule.

    Args:
        name: one of :func:`schedule_names` (case-insensitive).
        num_ranks: pipeline ranks ``p >= 1``.
        num_microbatches: micro-batches ``m >= 1``.
        chunks: stages per rank ``v`` (``interleaved``, default 2, and ``zb-h1``, default 1;
            the others take only 1). ``None`` means the schedule's default.
        microbatch_sizes: samples per micro-batch, carried on the schedule (the order does not
            depend on them), or ``None`` for equal micro-batches.
        **options: schedule options: ``dapple`` takes ``warmup`` (``"default"``, ``"slow-link"``
            or a list of per-stage warm-up counts).

    Returns:
        The validated, compute-only schedule.

    Raises:
        UnknownNameError: an unknown name.
        InputError: a count below 1, ``chunks`` for a schedule without chunks, an unknown option,
            ``m`` not divisible as a looped schedule needs, or bad ``microbatch_sizes``.
        ScheduleError: options that give a schedule that cannot run (e.g. a DAPPLE warm-up list
            that deadlocks).
    """
    maker, kwargs = _resolve(name, chunks, options)
    schedule = maker(num_ranks=num_ranks, num_microbatches=num_microbatches, **kwargs)
    if microbatch_sizes is not None:
        schedule = schedule.with_microbatch_sizes(tuple(microbatch_sizes))
    return schedule


def _resolve(
    name: str | ScheduleName, chunks: int | None, options: dict[str, Any]
) -> tuple[_Maker, dict[str, Any]]:
    """The generator ``name`` picks and its keyword arguments, or raise (see :func:`make_schedule`)."""
    key = lookup(name)
    if key not in _REGISTRY:
        rule = "depends on micro-batch memory sizes: build it with pipesim.planner.dynamic.memory_aware"
        raise invalid("schedule", key.value, rule)
    maker, takes_chunks, allowed = _REGISTRY[key]
    unknown = sorted(set(options) - allowed)
    if unknown:
        accepted = ", ".join(sorted(allowed)) or "none"
        raise invalid("options", unknown, f"unknown for schedule {key.value!r} (accepted: {accepted})")
    kwargs: dict[str, Any] = dict(options)
    if takes_chunks:
        if chunks is not None:
            kwargs["chunks"] = chunks
    elif chunks not in (None, 1):
        rule = f"must be 1 for schedule {key.value!r} (only interleaved and zb-h1 take chunks)"
        raise invalid("chunks", chunks, rule)
    return maker, kwargs


def stream_schedule(
    name: str | ScheduleName,
    *,
    num_ranks: int,
    num_microbatches: int,
    chunks: int | None = None,
    **options: Any,
) -> ScheduleStream:
    """The named schedule as a :class:`ScheduleStream`: the order :func:`make_schedule` gives,
    with rows generated lazily (memory that does not grow with ``num_microbatches``).

    Same arguments (but no micro-batch sizes) and errors as :func:`make_schedule`.
    """
    maker, kwargs = _resolve(name, chunks, options)
    return generators.stream_of(maker)(num_ranks=num_ranks, num_microbatches=num_microbatches, **kwargs)
