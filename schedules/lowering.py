"""Lowering passes: pure functions from a schedule to a schedule with more (or fewer) actions.

``add_communication`` derives the point-to-point transfers; ``add_allreduce`` adds each replicated
stage's gradient all-reduce; ``merge_backward`` and ``split_backward`` convert between the full
backward ``B`` and its zero-bubble split ``I`` + ``W``. Every pass validates what it returns.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pipesim.errors import InputError, invalid
from pipesim.schedules.action import Action, Op
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.validate import validate

__all__ = ["add_allreduce", "add_communication", "merge_backward", "split_backward"]


def _rebuilt(schedule: Schedule, rows: list[list[Action]]) -> Schedule:
    result = replace(schedule, ranks=tuple(tuple(row) for row in rows))
    validate(result)
    return result


def add_communication(schedule: Schedule) -> Schedule:
    """Add the sends and receives between stages on different ranks.

    After ``F(s, m)`` the stage sends its activation (``SEND_F(s, m)``, peer ``s + 1``) and stage
    ``s + 1`` receives it (``RECV_F(s + 1, m)``, peer ``s``) just before ``F(s + 1, m)``. After
    ``B(s, m)`` or ``I(s, m)`` it sends the input gradient (``SEND_B(s, m)``, peer ``s - 1``),
    received by ``RECV_B(s - 1, m)`` just before the backward of ``s - 1``. Stages on the same rank
    (one rank) exchange nothing. Sends are asynchronous: a rank goes on after posting one; a
    receive waits for its data.

    Raises:
        InputError: the schedule already has communication actions.
    """
    if not schedule.is_compute_only:
        raise InputError("add_communication() takes a compute-only schedule; it already has communication")
    p, last = schedule.num_ranks, schedule.num_stages - 1
    rows: list[list[Action]] = []
    for row in schedule.ranks:
        out: list[Action] = []
        for a in row:
            s, mb = a.stage, a.microbatch
            crosses_prev = s > 0 and p > 1
            crosses_next = s < last and p > 1
            if a.op is Op.F and crosses_prev:
                out.append(Action(stage=s, op=Op.RECV_F, microbatch=mb))
            elif a.op in (Op.B, Op.I) and crosses_next:
                out.append(Action(stage=s, op=Op.RECV_B, microbatch=mb))
            out.append(a)
            if a.op is Op.F and crosses_next:
                out.append(Action(stage=s, op=Op.SEND_F, microbatch=mb))
            elif a.op in (Op.B, Op.I) and crosses_prev:
                out.append(Action(stage=s, op=Op.SEND_B, microbatch=mb))
        rows.append(out)
    return _rebuilt(schedule, rows)


def _after_sends(row: list[Action], i: int) -> int:
    """The index just past ``row[i]`` and the sends of the same (stage, micro-batch) right after it."""
    a = row[i]
    j = i + 1
    while j < len(row) and row[j].op in (Op.SEND_F, Op.SEND_B) and row[j].stage == a.stage \
            and row[j].microbatch == a.microbatch:
        j += 1
    return j


def add_allreduce(schedule: Schedule, stages: Iterable[int]) -> Schedule:
    """Add ``ALL_REDUCE(s)`` for each replicated stage ``s`` after its last ``B`` or ``W``.

    The all-reduce of a stage's weight gradients among its data-parallel replicas can start once
    the stage's last weight gradient is ready, so it goes right after that action (and after the
    gradient send that follows it, if any, so the previous stage is not kept waiting).

    Args:
        schedule: any schedule (compute-only or lowered).
        stages: the replicated stages (replica count > 1); stages not listed get nothing.

    Raises:
        InputError: a stage outside ``0 .. num_stages - 1``, or a stage that already has one.
    """
    wanted = sorted(set(stages))
    for s in wanted:
        if type(s) is not int or not 0 <= s < schedule.num_stages:
            raise invalid("stages", s, f"must be stage indices in 0..{schedule.num_stages - 1}")
    rows = [list(row) for row in schedule.ranks]
    for s in wanted:
        row = rows[s % schedule.num_ranks]
        if any(a.op is Op.ALL_REDUCE and a.stage == s for a in row):
            raise invalid("stages", s, "already has an ALL_REDUCE")
        last = max(i for i, a in enumerate(row) if a.stage == s and a.op in (Op.B, Op.W))
        row.insert(_after_sends(row, last), Action(stage=s, op=Op.ALL_REDUCE))
    return _rebuilt(schedule, rows)


def merge_backward(schedule: Schedule) -> Schedule:
    """Replace each ``I(s, m)`` by a full ``B(s, m)`` in its place and drop ``W(s, m)``.

    A schedule without split backwards comes back unchanged (validated).
    """
    rows = [
        [Action(stage=a.stage, op=Op.B, microbatch=a.microbatch) if a.op is Op.I else a
         for a in row if a.op is not Op.W]
        for row in schedule.ranks
    ]
    return _rebuilt(schedule, rows)


def split_backward(schedule: Schedule) -> Schedule:
    """Replace each ``B(s, m)`` by ``I(s, m)`` followed at once by ``W(s, m)``.

    ``W`` goes after the gradient send that follows the backward, if any. The timing of the result
    equals the original's when ``I`` and ``W`` together cost what ``B`` did.
    """
    rows: list[list[Action]] = []
    for row in schedule.ranks:
        out = [Action(stage=a.stage, op=Op.I, microbatch=a.microbatch) if a.op is Op.B else a for a in row]
        for i in reversed(range(len(row))):
            a = row[i]
            if a.op is Op.B:
                out.insert(_after_sends(out, i), Action(stage=a.stage, op=Op.W, microbatch=a.microbatch))
        rows.append(out)
    return _rebuilt(schedule, rows)
