"""The schedule validator: completeness, per-stage order, matched communication, no deadlock."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from pipesim.schedules.action import Action, Op
from pipesim.schedules.pairs import PAIR_RULE
from pipesim.schedules.placement import chain_bounds, microbatch_chain
from pipesim.schedules.schedule import Schedule, ScheduleError

__all__ = ["deadlock_error", "validate"]

_Key = tuple[Op, int, int | None]


def _key(action: Action) -> _Key:
    """The action's key; an overlapped pair's ``FB`` is the forward it runs."""
    op = Op.F if action.op is Op.FB else action.op
    return (op, action.stage, action.microbatch)


def validate(schedule: Schedule) -> None:
    """Check that ``schedule`` can run and computes every gradient exactly once.

    Rules, for every stage ``s`` and micro-batch ``m``:

    1. exactly one ``F(s, m)`` (or ``FB(s, m)``, the forward of an overlapped pair), and either
       exactly one full backward ``B(s, m)`` or exactly one
       ``I(s, m)`` and one ``W(s, m)`` (never both forms);
    2. on the stage's rank, ``F`` comes before ``B``/``I``, and ``I`` before ``W``;
    3. communication, where present (a lowered schedule), is matched and local-order consistent:
       each ``SEND_F(s, m)`` has one ``RECV_F(s + 1, m)`` and follows ``F(s, m)``, each
       ``RECV_F(s, m)`` precedes ``F(s, m)`` (likewise ``SEND_B``/``RECV_B`` around the
       backward), sends and receives only cross ranks, and ``ALL_REDUCE(s)`` appears at most once,
       after the stage's last ``B``/``W``;
    4. each ``FB`` is immediately followed, on its rank, by the full backward ``B`` it runs with
       (an overlapped pair, :mod:`pipesim.schedules.pairs`);
    5. no deadlock: running every rank's list strictly in order, with the dependencies of
       :class:`~pipesim.schedules.action.Action` (and each receive waiting for its send), every
       action eventually runs (a pair starts once both its actions may). Order alone decides
       this, so it holds for any positive costs.

    Raises:
        ScheduleError: the first broken rule, with the whole grid and the offending step marked.
    """
    ranks = schedule.ranks
    where: dict[_Key, tuple[int, int]] = {}
    for r, row in enumerate(ranks):
        for i, action in enumerate(row):
            key = _key(action)
            if key in where:
                pr, pi = where[key]
                message = f"{action} appears twice (first at rank {pr} step {pi})"
                raise ScheduleError(message, ranks, rank=r, step=i)
            where[key] = (r, i)
    _check_complete(schedule, where)
    _check_local_order(schedule, where)
    _check_comm(schedule, where)
    _check_pairs(schedule)
    _check_progress(schedule, where)


def _check_complete(schedule: Schedule, where: dict[_Key, tuple[int, int]]) -> None:
    ranks = schedule.ranks
    dual = schedule.placement == "dual"  # micro-batch m runs stage s only on its own chain
    num_stages, num_microbatches = schedule.num_stages, schedule.num_microbatches
    for s in range(num_stages):
        for m in range(num_microbatches):
            if dual and s not in microbatch_chain("dual", num_stages, num_microbatches, m):
                continue
            if (Op.F, s, m) not in where:
                raise ScheduleError(f"forward {s}F{m} is missing", ranks)
            full = (Op.B, s, m) in where
            split_i, split_w = (Op.I, s, m) in where, (Op.W, s, m) in where
            if full and (split_i or split_w):
                r, i = where[(Op.I, s, m)] if split_i else where[(Op.W, s, m)]
                raise ScheduleError(
                    f"stage {s} micro-batch {m} has both a full backward {s}B{m} and a split one",
                    ranks,
                    rank=r,
                    step=i,
                )
            if not full and not (split_i and split_w):
                missing = f"{s}B{m} (or {s}I{m} and {s}W{m})"
                if split_i or split_w:
                    missing = f"{s}W{m}" if split_i else f"{s}I{m}"
                raise ScheduleError(f"backward {missing} is missing", ranks)


def _check_local_order(schedule: Schedule, where: dict[_Key, tuple[int, int]]) -> None:
    ranks = schedule.ranks
    last_backward: dict[int, int] = {}
    reduces = []
    for (op, s, m), (r, i) in where.items():
        if op is Op.B or op is Op.I:
            if where[(Op.F, s, m)][1] > i:
                message = f"{s}{op.value}{m} runs before its forward {s}F{m}"
                raise ScheduleError(message, ranks, rank=r, step=i)
        elif op is Op.W and where[(Op.I, s, m)][1] > i:
            raise ScheduleError(f"{s}W{m} runs before its input gradient {s}I{m}", ranks, rank=r, step=i)
        elif op is Op.ALL_REDUCE:
            reduces.append((s, r, i))
        if (op is Op.B or op is Op.W) and i > last_backward.get(s, -1):
            last_backward[s] = i
    for s, r, i in reduces:
        if i < last_backward.get(s, -1):
            raise ScheduleError(f"{s}ALL_REDUCE runs before the stage's last backward", ranks, rank=r, step=i)


def _check_comm(schedule: Schedule, where: dict[_Key, tuple[int, int]]) -> None:
    ranks = schedule.ranks
    pairs = {Op.SEND_F: Op.RECV_F, Op.RECV_F: Op.SEND_F, Op.SEND_B: Op.RECV_B, Op.RECV_B: Op.SEND_B}
    for (op, s, m), (r, i) in where.items():
        if op not in pairs:
            continue
        action = ranks[r][i]
        peer = action.peer
        assert peer is not None  # every send and receive has a peer
        if not 0 <= peer < schedule.num_stages or schedule.stage_ranks[peer] == r:
            raise ScheduleError(f"{action} has no peer stage {peer} on another rank", ranks, rank=r, step=i)
        if (pairs[op], peer, m) not in where:
            raise ScheduleError(f"{action} has no matching {peer}{pairs[op].value}{m}", ranks, rank=r, step=i)
        compute = (Op.F, s, m) if op in (Op.SEND_F, Op.RECV_F) else _backward_key(where, s, m)
        before = op in (Op.RECV_F, Op.RECV_B)
        ci = where[compute][1]
        if (before and i > ci) or (not before and i < ci):
            verb = "precede" if before else "follow"
            raise ScheduleError(
                f"{action} must {verb} {compute[1]}{compute[0].value}{m} on its rank", ranks, rank=r, step=i
            )


def _check_pairs(schedule: Schedule) -> None:
    ranks = schedule.ranks
    for r, row in enumerate(ranks):
        for i, action in enumerate(row):
            if action.op is Op.FB and (i + 1 == len(row) or row[i + 1].op is not Op.B):
                raise ScheduleError(f"{action} {PAIR_RULE}", ranks, rank=r, step=i)


def _backward_key(where: dict[_Key, tuple[int, int]], s: int, m: int | None) -> _Key:
    return (Op.B, s, m) if (Op.B, s, m) in where else (Op.I, s, m)


def _dependencies(
    action: Action, starts: tuple[bool, ...], ends: tuple[bool, ...]
) -> tuple[_Key, ...]:
    """What must have run (anywhere) before ``action`` may start; a ``B`` key stands for B or I.
    ``starts``/``ends``: which stages begin and end a chain
    (:func:`~pipesim.schedules.placement.chain_bounds`)."""
    op, s, m = action.op, action.stage, action.microbatch
    if op is Op.F or op is Op.FB:
        return ((Op.F, s - 1, m),) if not starts[s] else ()
    if op is Op.B or op is Op.I:
        return ((Op.F, s, m), (Op.B, s + 1, m)) if not ends[s] else ((Op.F, s, m),)
    if op is Op.W:
        return ((Op.I, s, m),)
    if op is Op.RECV_F:
        return ((Op.SEND_F, s - 1, m),)
    if op is Op.RECV_B:
        return ((Op.SEND_B, s + 1, m),)
    return ()


def _check_progress(schedule: Schedule, where: dict[_Key, tuple[int, int]]) -> None:
    """Run every rank in order on dependencies alone; a state where no rank can move is a deadlock.

    A dependency at ``(rank q, step j)`` is met once rank ``q`` has moved past step ``j``. A blocked
    rank waits in a heap of rank ``q`` keyed by ``j`` and is woken when ``q`` gets past it.
    """
    ranks = schedule.ranks
    starts, ends = chain_bounds(schedule.placement, schedule.num_stages)
    pointer = [0] * len(ranks)
    waiters: list[list[tuple[int, int]]] = [[] for _ in ranks]
    blocked_on: dict[int, _Key] = {}
    ready = list(range(len(ranks)))
    while ready:
        r = ready.pop()
        row = ranks[r]
        i = pointer[r]
        while i < len(row):
            blocker = None
            deps = _dependencies(row[i], starts, ends)
            if row[i].op is Op.FB:  # the pair starts once its backward may too
                deps += _dependencies(row[i + 1], starts, ends)
            for dep in deps:
                pos = where.get(dep)
                if pos is None and dep[0] is Op.B:
                    pos = where.get((Op.I, dep[1], dep[2]))
                if pos is None or pointer[pos[0]] <= pos[1]:
                    blocker = dep
                    if pos is not None:
                        heapq.heappush(waiters[pos[0]], (pos[1], r))
                    break
            if blocker is not None:
                blocked_on[r] = blocker
                break
            i += 1
            pointer[r] = i
        heap = waiters[r]
        while heap and heap[0][0] < i:
            other = heapq.heappop(heap)[1]
            del blocked_on[other]
            ready.append(other)
    stuck = [(r, pointer[r], _name(blocked_on[r])) for r in range(len(ranks)) if pointer[r] < len(ranks[r])]
    if stuck:
        raise deadlock_error(ranks, stuck)


def deadlock_error(
    ranks: tuple[tuple[Action, ...], ...], stuck: Sequence[tuple[int, int, str | None]]
) -> ScheduleError:
    """The one deadlock error (validator, analytic evaluator and simulator engine alike).

    Args:
        ranks: the per-rank actions that were run.
        stuck: ``(rank, step, what it waits for or None)`` of every rank that never finished.

    Returns:
        A :class:`ScheduleError` naming every stuck rank, with the first one's step marked.
    """
    heads = "; ".join(
        f"rank {r} waits at step {i} ({ranks[r][i]})" + (f" for {waits}" if waits else "")
        for r, i, waits in stuck
    )
    first_rank, first_step, _ = stuck[0]
    return ScheduleError(f"deadlock, no rank can proceed: {heads}", ranks, rank=first_rank, step=first_step)


def _name(key: _Key) -> str:
    op, s, m = key
    text = f"{s}{op.value}{'' if m is None else m}"
    return f"{text} (or {s}I{m})" if op is Op.B else text
