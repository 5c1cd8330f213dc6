"""Text rendering of a timed schedule: one row per rank, one column per unit time slot."""

from __future__ import annotations

from pipesim.errors import InputError
from pipesim.schedules.action import Action, Op
from pipesim.schedules.timing import Timeline

__all__ = ["format_timeline"]


def _compact(action: Action, num_ranks: int) -> str:
    op = Op.F if action.op is Op.FB else action.op  # an overlapped pair's forward: its F
    text = f"{op.value}{action.microbatch}"
    return text.lower() if (action.stage // num_ranks) % 2 else text


def format_timeline(timeline: Timeline, *, compact: bool = False) -> str:
    """Draw a timeline whose starts and ends are whole numbers (unit-cost time slots).

    Each slot is one column; an action that lasts several slots shows its token once, followed by
    ``-`` to its end; ``.`` is an idle slot. Tokens are torch's (``1B0``); with ``compact`` they drop
    the stage (``B0``) and odd chunks are lower case (``b0``), for small docstring grids; the
    forward of an overlapped pair is its ``F0`` there (``0FB0`` in full), its backward right
    after it.

    Raises:
        InputError: a start or end that is not a whole number of slots.
    """
    schedule = timeline.schedule
    p = schedule.num_ranks
    slots = timeline.makespan
    if int(slots) != slots or any(int(x) != x for row in timeline.starts + timeline.ends for x in row):
        raise InputError("format_timeline() needs whole-number starts and ends (unit-cost time slots)")
    n = int(slots)
    texts = [[_compact(a, p) if compact else str(a) for a in row] for row in schedule.ranks]
    width = max((len(t) for row in texts for t in row), default=2) + 1
    label = len(f"rank {p - 1}")
    idle = " " + ".".ljust(width - 1)
    lines = []
    for r, row in enumerate(schedule.ranks):
        spans: list[tuple[int, int, str]] = []
        for i in range(len(row)):
            start, end = int(timeline.starts[r][i]), int(timeline.ends[r][i])
            if end > start:
                spans.append((start, end, texts[r][i]))
        parts: list[str] = []
        t = 0
        for start, end, text in spans:
            parts.extend(idle for _ in range(t, start))
            parts.append(" " + text.ljust((end - start) * width - 1, "-" if end - start > 1 else " "))
            t = end
        parts.extend(idle for _ in range(t, n))
        lines.append(f"rank {r}".ljust(label) + "".join(parts))
    return "\n".join(lines)
