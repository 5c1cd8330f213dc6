"""The action: one step of a pipeline schedule, with a text form that round-trips.

The text form is the token torch's ``torch.distributed.pipelining`` prints for its schedule IR:
``{stage}{op}{microbatch}``, e.g. ``0F1`` (stage 0 runs the forward of micro-batch 1), ``3I0``
(stage 3 computes the input gradient of micro-batch 0), ``1SEND_F2`` (stage 1 sends the activation
of micro-batch 2 to stage 2) and ``2ALL_REDUCE`` (stage 2 all-reduces its gradients; no
micro-batch). ``stage`` is always the global (virtual) stage index; with ``p`` ranks, stage ``s``
runs on rank ``s % p``. ``Action.parse(str(a)) == a`` for every action.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import InputError, invalid

__all__ = ["BACKWARD_OPS", "COMM_OPS", "COMPUTE_OPS", "FORWARD_OPS", "Action", "Op"]


class Op(str, Enum):
    """What an action does. The values are the tokens of the text form (torch's names).

    Compute ops: ``F`` forward, ``B`` full backward (input and weight gradients together), ``I``
    input gradient only, ``W`` weight gradient only (zero-bubble schedules split ``B`` into ``I``
    then ``W``). ``FB`` is the forward of an overlapped forward-and-backward pair (DualPipe's
    ``F&B``, torch's ``OVERLAP_F_B``): ``sFBk`` runs the forward of micro-batch ``k`` on stage
    ``s`` as one unit with the full backward ``B`` that immediately follows it in the rank's
    order; the unit waits for both inputs (the forward's activation and the backward's
    gradient), runs for the pair's time and then releases both outputs (DeepSeek's
    ``DualPipe._forward_backward_chunk``; the pair's time is the schedule's ``fb_overlap`` rule,
    :func:`~pipesim.schedules.pairs.pair_time`). As a dependency ``FB`` is the forward it runs.
    Communication ops, added by :mod:`pipesim.schedules.lowering`: ``SEND_F``/``RECV_F``
    move a micro-batch's activation from stage ``s`` to ``s + 1``; ``SEND_B``/``RECV_B`` move its
    gradient from ``s`` to ``s - 1``; ``ALL_REDUCE`` all-reduces a replicated stage's weight
    gradients among its replicas once per iteration (torch calls it ``REDUCE_GRAD``).
    """

    F = "F"
    FB = "FB"
    B = "B"
    I = "I"  # noqa: E741 - torch's name for the input-gradient action
    W = "W"
    SEND_F = "SEND_F"
    RECV_F = "RECV_F"
    SEND_B = "SEND_B"
    RECV_B = "RECV_B"
    ALL_REDUCE = "ALL_REDUCE"

    def __str__(self) -> str:
        return self.value


COMPUTE_OPS: frozenset[Op] = frozenset({Op.F, Op.FB, Op.B, Op.I, Op.W})
"""Ops that occupy the rank's compute unit."""
FORWARD_OPS: frozenset[Op] = frozenset({Op.F, Op.FB})
"""Ops that run a forward (``FB``: the forward of an overlapped pair)."""
COMM_OPS: frozenset[Op] = frozenset({Op.SEND_F, Op.RECV_F, Op.SEND_B, Op.RECV_B, Op.ALL_REDUCE})
"""Ops added by the lowering passes."""
BACKWARD_OPS: frozenset[Op] = frozenset({Op.B, Op.I})
"""Ops that produce the input gradient a previous stage waits for."""

_PEER_OFFSET: dict[Op, int] = {Op.SEND_F: 1, Op.RECV_F: -1, Op.SEND_B: -1, Op.RECV_B: 1}
# REDUCE_GRAD is torch's spelling of ALL_REDUCE; it is accepted when parsing, never emitted.
_ALIASES: dict[str, Op] = {"REDUCE_GRAD": Op.ALL_REDUCE}
_TOKEN = re.compile(
    r"\s*([0-9]{1,18})(SEND_F|RECV_F|SEND_B|RECV_B|ALL_REDUCE|REDUCE_GRAD|FB|F|B|I|W)([0-9]{0,18})\s*\Z"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """One step a rank performs: ``op`` on ``stage`` for ``microbatch``.

    Attributes:
        stage: the global (virtual) stage index, ``>= 0``.
        op: what to do.
        microbatch: the micro-batch index (``>= 0``); ``None`` only for ``ALL_REDUCE``, which
            covers the whole iteration.

    Dependencies the simulator and the evaluator honour (``S`` stages, the rank order aside):
    ``F(s, m)`` (or ``FB(s, m)``) needs ``F(s - 1, m)``; ``B(s, m)`` and ``I(s, m)`` need ``F(s, m)`` and the
    input gradient of ``(s + 1, m)`` (its ``B`` or ``I``); ``W(s, m)`` needs ``I(s, m)``; an
    ``FB`` and the ``B`` after it start together, once both have what they need.

    Raises:
        InputError: a negative or non-integer stage or micro-batch, a missing micro-batch on an op
            that needs one, or a micro-batch on ``ALL_REDUCE``.
    """

    stage: int
    op: Op
    microbatch: int | None = None

    def __post_init__(self) -> None:
        if type(self.stage) is not int or self.stage < 0:
            raise invalid("stage", self.stage, "must be an integer >= 0")
        if not isinstance(self.op, Op):
            raise invalid("op", self.op, f"must be one of {', '.join(o.value for o in Op)}")
        if self.op is Op.ALL_REDUCE:
            if self.microbatch is not None:
                raise invalid("microbatch", self.microbatch, "must be None for ALL_REDUCE")
        elif type(self.microbatch) is not int or self.microbatch < 0:
            raise invalid("microbatch", self.microbatch, f"must be an integer >= 0 for {self.op.value}")

    def __str__(self) -> str:
        if self.microbatch is None:
            return f"{self.stage}{self.op.value}"
        return f"{self.stage}{self.op.value}{self.microbatch}"

    @property
    def is_compute(self) -> bool:
        """Whether the action is computation (``F``, ``FB``, ``B``, ``I``, ``W``)."""
        return self.op in COMPUTE_OPS

    @property
    def peer(self) -> int | None:
        """The stage at the other end of a send or receive, or ``None`` for other ops.

        ``SEND_F``/``RECV_B`` talk to ``stage + 1``; ``RECV_F``/``SEND_B`` to ``stage - 1``.
        """
        offset = _PEER_OFFSET.get(self.op)
        return None if offset is None else self.stage + offset

    @classmethod
    def parse(cls, text: str) -> Action:
        """Parse one token of the text form, e.g. ``"0F1"``, ``"3I0"``, ``"1SEND_F2"``, ``"0FB3"``.

        ``REDUCE_GRAD`` (torch's name) is read as ``ALL_REDUCE``.

        Raises:
            InputError: the text is not a token of the form ``{stage}{op}{microbatch}`` (indices
                are ASCII digits, at most 18 of them).
        """
        match = _TOKEN.match(text) if isinstance(text, str) else None
        if match is None:
            raise InputError(
                f"action={text!r}: must be {{stage}}{{op}}{{microbatch}} with op one of "
                f"{', '.join(o.value for o in Op)}, e.g. '0F1' or '3I0'"
            )
        stage_text, op_text, mb_text = match.groups()
        op = _ALIASES.get(op_text) or Op(op_text)
        if op is not Op.ALL_REDUCE and not mb_text:
            raise InputError(f"action={text!r}: {op.value} needs a micro-batch index, e.g. '0{op.value}0'")
        return cls(stage=int(stage_text), op=op, microbatch=int(mb_text) if mb_text else None)
