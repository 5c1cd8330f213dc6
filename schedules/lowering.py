"""Lowering passes: pure functions from a schedule to a schedule with more (or fewer) actions.

``add_communication`` derives the point-to-point transfers; ``add_allreduce`` adds each replicated
stage's gradient all-reduce; ``lower`` does both at once. ``merge_backward`` and ``split_backward``
convert between the full backward ``B`` and its zero-bubble split ``I`` + ``W``. Every pass
validates what it returns.

``lowered_blocks`` is the one place communication is derived: it walks one rank's compute steps
and yields, lazily, each compute step with the receive before it, the send after it and whether
the stage's all-reduce follows, so that the simulator (:mod:`pipesim.simulator.program`) can
stream a lowered program of any length without building it; ``lowered_units`` groups those
blocks into the units a rank runs (an overlapped pair, ``FB`` and its ``B``, is one unit: both
receives before it, both sends after it; ``lowered_blocks`` checks the pairing rule as it
walks, so a pair is an ``FB`` block and the next one, for the simulator's program too);
``lowered_steps`` flattens the units into plain ``(op, stage, microbatch)`` steps, and
``add_communication`` and ``lower`` are that generator, materialized and validated.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from pipesim.errors import InputError, invalid
from pipesim.schedules.action import Action, Op
from pipesim.schedules.pairs import PAIR_RULE
from pipesim.schedules.placement import chain_bounds, stage_ranks
from pipesim.schedules.schedule import Schedule, Step
from pipesim.schedules.validate import validate

__all__ = [
    "Block",
    "Step",
    "add_allreduce",
    "add_communication",
    "last_backwards",
    "lower",
    "lowered_blocks",
    "lowered_steps",
    "lowered_units",
    "merge_backward",
    "split_backward",
]



def _rebuilt(schedule: Schedule, rows: list[list[Action]]) -> Schedule:
    result = replace(schedule, ranks=tuple(tuple(row) for row in rows))
    validate(result)
    return result


Block = tuple[Op | None, Op, int, int, Op | None, bool]
"""One compute action with its communication: ``(receive op or None, op, stage, microbatch,
send op or None, whether the stage's ALL_REDUCE follows)``; it stands for the lowered steps
``RECV, op, SEND, ALL_REDUCE`` (those present), in that order, all of the same stage and micro-batch."""


def last_backwards(steps: Iterable[Step], stages: Iterable[int]) -> dict[int, int]:
    """For each of ``stages``, the index in ``steps`` of its last ``B`` or ``W`` (absent if none)."""
    wanted = set(stages)
    found: dict[int, int] = {}
    if wanted:
        op_b, op_w = Op.B, Op.W
        for i, (op, s, _) in enumerate(steps):
            if (op is op_b or op is op_w) and s in wanted:
                found[s] = i
    return found


def lowered_blocks(
    steps: Iterable[Step],
    *,
    num_ranks: int,
    num_stages: int,
    allreduce_after: Mapping[int, int] | None = None,
    placement: str = "looped",
) -> Iterator[Block]:
    """The lowered steps of one rank's compute steps, one :data:`Block` per compute step, lazily.

    Rules (the communication of :func:`add_communication`, the all-reduce of
    :func:`add_allreduce`): ``RECV_F(s, m)`` just before ``F(s, m)`` (or ``FB(s, m)``) when
    ``s > 0``; ``SEND_F(s, m)`` just after it when ``s`` is not the last stage;
    ``RECV_B(s, m)`` just before ``B(s, m)`` or
    ``I(s, m)`` when ``s`` is not the last stage and ``SEND_B(s, m)`` just after it when
    ``s > 0``; each only between stages on different ranks (stages on one rank exchange nothing:
    one rank, or the turn of a V-shape placement) and within a chain (``dual``: stage ``S/2 - 1``
    ends one, ``S/2`` begins the other; :func:`~pipesim.schedules.placement.chain_bounds`).
    ``ALL_REDUCE(s)`` right after the stage's last ``B`` or ``W`` on this rank and the send that
    follows it, for each stage in ``allreduce_after``.

    Args:
        steps: one rank's compute steps ``(op, stage, microbatch)``, in order.
        num_ranks: pipeline ranks of the schedule.
        num_stages: stages of the schedule.
        allreduce_after: stage -> index in ``steps`` of its last ``B`` or ``W``
            (:func:`last_backwards`), for the stages that get an ``ALL_REDUCE``.
        placement: the stage-to-rank placement (:mod:`pipesim.schedules.placement`).

    Yields:
        One block per compute step, in order.

    Raises:
        InputError: a communication step in ``steps``, or an ``FB`` not followed at once by a
            ``B`` (the pairing rule of :mod:`pipesim.schedules.pairs`: an overlapped pair is an
            ``FB`` block and the next one); raised when it is reached.
    """
    where = stage_ranks(placement, num_stages, num_ranks)
    starts, ends = chain_bounds(placement, num_stages)  # a chain's first stage receives no activation
    # whether stage s exchanges with s - 1 (cross_prev) / s + 1 (cross_next) over a link
    cross_prev = [not starts[s] and where[s - 1] != where[s] for s in range(num_stages)]
    cross_next = [not ends[s] and where[s + 1] != where[s] for s in range(num_stages)]
    # per stage, the receive before and the send after a forward / a backward (None: none)
    forward = [(Op.RECV_F if cross_prev[s] else None, Op.SEND_F if cross_next[s] else None)
               for s in range(num_stages)]
    backward = [(Op.RECV_B if cross_next[s] else None, Op.SEND_B if cross_prev[s] else None)
                for s in range(num_stages)]
    reduce = allreduce_after or {}
    reducing = bool(reduce)
    op_f, op_fb, op_b, op_i, op_w = Op.F, Op.FB, Op.B, Op.I, Op.W
    pair: tuple[int, int] | None = None  # (stage, micro-batch) of an FB: its B must come next
    for i, (op, s, mb) in enumerate(steps):
        if pair is not None:  # the pairing rule (pipesim.schedules.pairs)
            if op is not op_b:
                raise InputError(f"{pair[0]}FB{pair[1]} {PAIR_RULE}")
            pair = None
        if op is op_f:
            recv, send = forward[s]
        elif op is op_b or op is op_i:
            recv, send = backward[s]
        elif op is op_fb:
            recv, send = forward[s]
            assert mb is not None
            pair = (s, mb)
        elif op is op_w:
            recv = send = None
        else:
            text = f"{s}{op.value}{'' if mb is None else mb}"
            raise InputError(f"lowering takes compute actions only; {text} is communication")
        assert mb is not None
        yield (recv, op, s, mb, send, reducing and reduce.get(s) == i)
    if pair is not None:
        raise InputError(f"{pair[0]}FB{pair[1]} {PAIR_RULE}")


def lowered_units(
    steps: Iterable[Step],
    *,
    num_ranks: int,
    num_stages: int,
    allreduce_after: Mapping[int, int] | None = None,
    placement: str = "looped",
) -> Iterator[tuple[Block, ...]]:
    """The blocks of :func:`lowered_blocks` grouped into the units the rank runs, lazily: one
    block, or the two blocks of an overlapped pair (``FB`` and the ``B`` after it, run as one:
    :mod:`pipesim.schedules.pairs`). A unit's lowered steps are its receives, its compute steps,
    its sends and its all-reduce, each in the unit's order (for a pair ``RECV_F``, ``RECV_B``,
    ``FB``, ``B``, ``SEND_F``, ``SEND_B``, ``ALL_REDUCE``, those present).

    Same arguments and errors as :func:`lowered_blocks` (which checks the pairing rule).
    """
    op_fb = Op.FB
    blocks = lowered_blocks(
        steps, num_ranks=num_ranks, num_stages=num_stages, allreduce_after=allreduce_after,
        placement=placement,
    )
    for block in blocks:
        # an FB's partner is the next block (lowered_blocks checks that it is the B)
        yield (block,) if block[1] is not op_fb else (block, next(blocks))


def lowered_steps(
    row: Sequence[Action],
    *,
    num_ranks: int,
    num_stages: int,
    allreduce_stages: Iterable[int] = (),
    placement: str = "looped",
) -> Iterator[Step]:
    """The lowered steps of one rank's compute actions, generated lazily (:func:`lowered_units`,
    flattened).

    Args:
        row: one rank's compute actions, in order (communication actions are refused).
        num_ranks: pipeline ranks of the schedule.
        num_stages: stages of the schedule.
        allreduce_stages: stages that get an ``ALL_REDUCE`` (those of this rank; others ignored).
        placement: the stage-to-rank placement.

    Yields:
        ``(op, stage, microbatch)`` per lowered step, in order.

    Raises:
        InputError: a communication action in ``row`` (raised when it is reached).
    """
    steps = [(a.op, a.stage, a.microbatch) for a in row]
    after = last_backwards(steps, allreduce_stages)
    for unit in lowered_units(
        steps, num_ranks=num_ranks, num_stages=num_stages, allreduce_after=after, placement=placement
    ):
        for recv, _, s, mb, _, _ in unit:
            if recv is not None:
                yield (recv, s, mb)
        for _, op, s, mb, _, _ in unit:
            yield (op, s, mb)
        for _, _, s, mb, send, _ in unit:
            if send is not None:
                yield (send, s, mb)
        for _, _, s, _, _, reduce in unit:
            if reduce:
                yield (Op.ALL_REDUCE, s, None)


def _materialized(schedule: Schedule, allreduce_stages: Iterable[int]) -> Schedule:
    stages = sorted(set(allreduce_stages))
    for s in stages:
        if type(s) is not int or not 0 <= s < schedule.num_stages:
            raise invalid("stages", s, f"must be stage indices in 0..{schedule.num_stages - 1}")
    rows = [
        [
            Action(stage=s, op=op, microbatch=mb)
            for op, s, mb in lowered_steps(
                row,
                num_ranks=schedule.num_ranks,
                num_stages=schedule.num_stages,
                allreduce_stages=stages,
                placement=schedule.placement,
            )
        ]
        for row in schedule.ranks
    ]
    return _rebuilt(schedule, rows)


def add_communication(schedule: Schedule) -> Schedule:
    """Add the sends and receives between stages on different ranks.

    After ``F(s, m)`` the stage sends its activation (``SEND_F(s, m)``, peer ``s + 1``) and stage
    ``s + 1`` receives it (``RECV_F(s + 1, m)``, peer ``s``) just before ``F(s + 1, m)``. After
    ``B(s, m)`` or ``I(s, m)`` it sends the input gradient (``SEND_B(s, m)``, peer ``s - 1``),
    received by ``RECV_B(s - 1, m)`` just before the backward of ``s - 1``. Stages on the same rank
    (one rank) exchange nothing. Sends are asynchronous: a rank goes on after posting one; a
    receive waits for its data. (The rules live in :func:`lowered_steps`.)

    Raises:
        InputError: the schedule already has communication actions.
    """
    if not schedule.is_compute_only:
        raise InputError("add_communication() takes a compute-only schedule; it already has communication")
    return _materialized(schedule, ())


def lower(schedule: Schedule, allreduce_stages: Iterable[int] = ()) -> Schedule:
    """``add_allreduce(add_communication(schedule), allreduce_stages)`` in one pass (validated).

    Raises:
        InputError: the schedule already has communication actions, or a stage out of range.
        ScheduleError: the lowered schedule breaks a rule of :func:`pipesim.schedules.validate`.
    """
    if not schedule.is_compute_only:
        raise InputError("lower() takes a compute-only schedule; it already has communication")
    return _materialized(schedule, allreduce_stages)


def _after_sends(row: list[Action], i: int) -> int:
    """The index just past ``row[i]`` and the sends of the same (stage, micro-batch) right after it
    (a pair's ``B``: and those of its ``FB``)."""
    a = row[i]
    own = {(a.stage, a.microbatch)}
    if a.op is Op.B and i > 0 and row[i - 1].op is Op.FB:
        own.add((row[i - 1].stage, row[i - 1].microbatch))
    j = i + 1
    while j < len(row) and row[j].op in (Op.SEND_F, Op.SEND_B) and (row[j].stage, row[j].microbatch) in own:
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
        row = rows[schedule.stage_ranks[s]]
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
    equals the original's when ``I`` and ``W`` together cost what ``B`` did. The ``B`` of an
    overlapped pair (after an ``FB``) stays whole: the pair runs as one unit.
    """
    rows: list[list[Action]] = []
    for row in schedule.ranks:
        split = [a.op is Op.B and not (i > 0 and row[i - 1].op is Op.FB) for i, a in enumerate(row)]
        out = [Action(stage=a.stage, op=Op.I, microbatch=a.microbatch) if cut else a
               for a, cut in zip(row, split, strict=True)]
        for i in reversed(range(len(row))):
            a = row[i]
            if split[i]:
                out.insert(_after_sends(out, i), Action(stage=a.stage, op=Op.W, microbatch=a.microbatch))
        rows.append(out)
    return _rebuilt(schedule, rows)
