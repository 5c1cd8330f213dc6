"""Chimera: the bidirectional pipelines of Li & Hoefler (SC 2021).

Two pipelines of ``D = p`` stages run over the same ``p`` ranks (``p`` even), on the ``dual``
placement (:mod:`pipesim.schedules.placement`): the *down* pipeline places stage ``j`` on rank
``j``, the *up* pipeline places its stage ``j`` (pipesim stage ``p + j``, a copy of model stage
``j``'s layers) on rank ``p - 1 - j``. Each rank thus holds two stage replicas (model stages
``r`` and ``p - 1 - r``): twice the parameters, whose two copies' gradients are summed across the
pair of ranks once per iteration (lowered for every ``dual`` placement, see
:mod:`pipesim.simulator.dp_collectives`).

The basic unit (the paper's ``N = D``) runs ``D`` micro-batches, ``D / 2`` each way; each
direction is a 1F1B pipeline, and the two are merged slot by slot. In the paper's unit slots
(a forward and a backward one slot each) chain position ``j`` of either direction runs the
forward of its ``k``-th micro-batch (``k < D / 2``) in slot ``j + 2k`` and its backward in slot
``2D - 1 - j + 2k``: the last stage starts each backward right after its forward, and one
forward and one backward alternate per micro-batch as in 1F1B's steady phase. Rank ``r`` holds
chain positions ``r`` (down) and ``p - 1 - r`` (up); ``r`` and ``p - 1 - r`` differ in parity
when ``p`` is even, and the two directions' forwards and backwards never meet in one slot (the
paper's no-conflict argument for even ``D``), so the rank's order is its slots sorted. The unit
ends in slot ``3D - 2``: ``D - 2`` idle slots per rank against ``2(D - 1)`` for 1F1B with ``D``
micro-batches (the paper's bubble count).

Larger ``m`` (a multiple of ``p``) concatenates ``m / p`` basic units (issue 16 names this the
paper's *direct concatenation*; the authors' code overlaps them the same way: see below; unit
``u`` takes down micro-batches ``u D/2 .. (u+1) D/2 - 1`` and up micro-batches ``m/2 + u D/2 ..``,
since the ``dual`` placement sends micro-batch ``k < m/2`` down and the others
up). Unit ``u`` runs in the unit's slots shifted by ``2D u``: it starts once the first
micro-batch of unit ``u - 1`` has left rank 0, while that unit still runs. The shifted units never
meet in one slot either (each unit's forwards and backwards on a rank keep to their parities, and
the overlap is where the earlier unit's slots of the other kind end), so with ``F = B`` every
rank is busy from its first slot of unit 1 to its last of unit ``m / p`` but for the ``D - 2``
slots of one unit: ``2m + D - 2`` slots in all. The authors' implementation
(github.com/Shigangli/Chimera 6b78ac7, ``chimera_pipeline_rank.AutoGeneratePipelineRank``, which
``pipeline.py``'s ``_call_chimera_pipeline`` runs) starts a direction's next unit in the step
after one of its running units has a micro-batch back at that unit's first stage (``get_schedule``
adds a pipeline when ``next_pass`` reports a micro-batch popped), i.e. inside the running unit, as
here. The paper's *forward doubling* and *backward halving* (one forward over two micro-batches
at once, with recomputation, and backwards of half a micro-batch) are not done, nor are they in
that code: an action here is one stage on one micro-batch of a fixed size, so a forward over two
micro-batches would need a joint action in the validator, the evaluator, the lowering and the
simulator.

Sources: S. Li and T. Hoefler, "Chimera: Efficiently Training Large-Scale Neural Networks with
Bidirectional Pipelines", SC 2021 (doi 10.1145/3458817.3476145, arXiv 2107.06925). Read for this
module: the method's description on paperswithcode.com/method/chimera (two pipelines, the up one
mapping stages in the opposite order; ``N`` micro-batches split evenly between them, each
scheduled as 1F1B over ``N/2``; ``N = D`` the minimum to keep all stages active; merged with no
conflict for even ``D``). The bubble count ``D - 2``, the activations between ``D/2 + 1`` and
``D`` micro-batches, the 2x weights and direct concatenation are the paper's as issue 16 quotes
them; the paper's figure itself was not read. The order here is re-derived from that description
(the slot formulas above) and checked to give those counts. The slot formulas and the
shift of ``2D`` per unit follow what a schedule generator marked "Adapted from
https://github.com/Shigangli/Chimera" in the code index does (class ``AutoGeneratePipelineRank``;
the index did not name its repository): a micro-batch enters every second step and moves one rank
per step down and back, and a further pipeline of ``D/2`` micro-batches starts in the step in which
the first micro-batch of a running one completes (slot ``2D``).
"""

from __future__ import annotations

from collections.abc import Iterator

from pipesim.errors import check_count, invalid
from pipesim.schedules.action import Op
from pipesim.schedules.schedule import Schedule, ScheduleStream, Step

__all__ = ["chimera", "chimera_unit_slots"]


def chimera_unit_slots(num_ranks: int, rank: int) -> list[tuple[int, tuple[Op, int, int]]]:
    """Rank ``rank``'s basic unit in the paper's unit slots: ``(slot, (op, stage, k))`` sorted by
    slot, ``k`` the micro-batch's index within its direction (``0 .. p/2 - 1``).

    Raises:
        InputError: ``num_ranks`` odd or below 2, or ``rank`` outside ``0 .. p - 1``.
    """
    p = num_ranks
    _check_ranks(p)
    if not 0 <= rank < p:
        raise invalid("rank", rank, f"must be in 0..{p - 1}")
    slots: list[tuple[int, tuple[Op, int, int]]] = []
    for position, stage in ((rank, rank), (p - 1 - rank, 2 * p - 1 - rank)):
        for k in range(p // 2):
            slots.append((position + 2 * k, (Op.F, stage, k)))
            slots.append((2 * p - 1 - position + 2 * k, (Op.B, stage, k)))
    slots.sort(key=lambda item: item[0])
    return slots


def chimera(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """Chimera (Li & Hoefler, SC 2021): two 1F1B pipelines fed from both ends of ``p`` ranks
    (``p`` even), ``m / 2`` micro-batches each way in ``m / p`` basic units of ``p`` (``m`` a
    multiple of ``p``), two model stages per rank (see the module doc).

    With equal stages and free links the makespan is
    ``m (F + B) + (p - 2)(min(F, B) + (m / p)|F - B|)``: ``p - 2`` idle slots per rank in all with
    ``F = B`` (the paper's count); otherwise ``(p - 2) max(F, B)`` for the first unit and
    ``(p - 2)|F - B|`` for each further one. Rank ``r``
    holds at most ``p / 2 + 1 + min(r, p - 1 - r)`` stage-micro-batches of activations (``p/2 + 1``
    at the ends, ``p`` in the middle). Unit-cost slots for p=4, m=8 (F = 1, B = 2; upper case the
    down copy, lower case the up copy, up micro-batches numbered from ``m / 2``)::

        rank 0 F0 F1 .  f4 b4--- f5 b5--- .  B0--- F2 .  B1--- F3 f6 b6--- f7 b7--- .  B2--- .  .  B3---
        rank 1 .  F0 f4 F1 f5 .  b4--- B0--- b5--- B1--- F2 f6 .  F3 f7 .  b6--- B2--- b7--- B3--- .  .
        rank 2 .  f4 F0 f5 F1 .  B0--- b4--- B1--- b5--- f6 F2 .  f7 F3 .  B2--- b6--- B3--- b7--- .  .
        rank 3 f4 f5 .  F0 B0--- F1 B1--- .  b4--- f6 .  b5--- f7 F2 B2--- F3 B3--- .  b6--- .  .  b7---

    Raises:
        InputError: a count below 1, an odd ``p``, or ``m`` no multiple of ``p``.
    """
    return _chimera(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _check_ranks(p: int) -> None:
    check_count("num_ranks", p)
    if p % 2:
        raise invalid("num_ranks", p, "must be even for chimera (rank r pairs with rank p - 1 - r)")


def _chimera_rank(p: int, m: int, r: int) -> Iterator[Step]:
    """Rank ``r``'s order: unit ``u``'s slots shifted by ``2p u``, merged by slot. Unit ``u + 1``
    starts in slot ``2p (u + 1)``, while unit ``u`` still runs; only consecutive units overlap,
    so the merge holds one unit's slots at a time."""
    unit = chimera_unit_slots(p, r)
    half_p, half_m = p // 2, m // 2
    pending: list[tuple[int, Step]] = []
    for u in range(m // p + 1):
        if u < m // p:
            shift = 2 * p * u
            pending += [
                (slot + shift, (op, stage, u * half_p + k if stage < p else half_m + u * half_p + k))
                for slot, (op, stage, k) in unit
            ]
            pending.sort(key=lambda item: item[0])
        horizon = 2 * p * (u + 1) if u < m // p - 1 else None  # the next unit's first slot
        ready = [item for item in pending if horizon is None or item[0] < horizon]
        pending = pending[len(ready):]
        for _, step in ready:
            yield step


def _chimera(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    _check_ranks(num_ranks)
    check_count("num_microbatches", num_microbatches)
    p, m = num_ranks, num_microbatches
    if m % p:
        rule = f"must be a multiple of p = {p} for chimera (basic units of p micro-batches, p/2 each way)"
        raise invalid("num_microbatches", m, rule)
    return ScheduleStream(
        name="chimera",
        num_ranks=p,
        num_stages=2 * p,
        num_microbatches=m,
        rows=lambda r: _chimera_rank(p, m, r),
        placement="dual",
    )
