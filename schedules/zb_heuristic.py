"""Zero bubble's automatic scheduling heuristic (ZB-1p / ZB-2p before the ILP), as its authors
build it.

Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv:2401.10241), sec. 4.1; the
released scheduler is ``Graph.manual_order`` and ``initial_solution`` in
``megatron/core/pipeline_parallel/auto_schedule.py`` of
github.com/sail-sg/zero-bubble-pipeline-parallelism (tag zero-bubble-v0.1.0, commit 93af65c6;
its ``auto_schedule`` there runs only this heuristic: the ILP branch is disabled). Written here
from that description, not copied.

One stage per rank, ``F`` / ``I`` (the paper's ``B``, input gradient) / ``W`` costs equal on every
stage, a transfer of ``comm`` between neighbours. Memory in micro-batches held: ``F`` adds one,
``I`` frees ``1 - h`` of it and ``W`` the rest ``h`` (``h``, ``wgrad_memory_fraction``, is 1 by
default: pipesim's activation model keeps a micro-batch whole until its ``W``; the authors feed
their scheduler profiled bytes per ``F``, ``B`` and ``W``). The order is built round by
round, the stages timed as they go (an action starts when its stage is free and its input has
arrived):

- round 0: every stage runs ``F0``; then the warm-up: walking from the last stage up, each stage
  adds extra forwards while its memory allows and while (rule ``bubble_before_first_b``) they
  still end before, or (otherwise) start before, the moment its first ``I`` can start (the next
  stage's first ``I`` end plus ``comm``); each stage's extra count is then cut to below the
  previous stage's (unless it runs out of micro-batches); then every stage runs ``I0``, last
  stage first.
- round ``i >= 1``: each stage with forwards left wants one. With rule ``backward_first`` a stage
  already two forwards ahead of the next one skips it when it would end after the next stage's
  next ``F + I`` plus ``comm`` could, unless the gap it leaves is within the largest idle any stage
  has taken beyond its own. A stage runs ``F`` only if every later stage does. Before an ``F``
  (and before each ``I``) a stage runs ``W``s: as many as memory needs, those that end before the
  input arrives, and one more that spans the arrival when the wait exceeds the largest idle any
  stage has taken beyond its own or (rule ``fill_small_gaps``) when it does not. Then ``I_i`` on
  every stage, last first (stage 0 runs all its ``W``s first once its forwards are done).
- the end: every stage runs its remaining ``W``s.

Eight candidates, one per combination of the three rules (in the authors' order, all true
first); the kept one has the shortest longest stage span (a stage's span: first ``F`` start to
last ``W`` end; the paper's stages do not synchronise, so its cost is the slowest stage), the
first on a tie. A candidate that cannot fit the memory limit drops out.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from fractions import Fraction

from pipesim.schedules.action import Op

__all__ = ["RULES", "Candidate", "candidates", "heuristic_order"]

Cost = float | Fraction

RULES: tuple[tuple[bool, bool, bool], ...] = tuple(
    (a, b, c) for a, b, c in itertools.product((True, False), repeat=3)
)
"""``(bubble_before_first_b, backward_first, fill_small_gaps)`` of each candidate, in the authors'
order (``allow_bubble_before_first_b``, ``prioritize_b``, ``no_bubble_greedy``)."""


class _NoFit(Exception):
    """A candidate needs a ``W`` that is not there to free memory (the authors' "Cannot fit
    memory")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One order of the heuristic, as its own timing plays it.

    Attributes:
        rules: ``(bubble_before_first_b, backward_first, fill_small_gaps)``.
        rows: ``rows[r]``: rank ``r``'s ``(op, stage, microbatch)`` steps, in order.
        spans_s: each stage's span, first ``F`` start to last action end, seconds.
    """

    rules: tuple[bool, bool, bool]
    rows: tuple[tuple[tuple[Op, int, int], ...], ...]
    spans_s: tuple[Cost, ...]

    @property
    def cost_s(self) -> Cost:
        """The selection criterion: the longest stage span, seconds."""
        return max(self.spans_s)


class _Builder:
    """The state of one candidate while it is built (see the module doc)."""

    def __init__(
        self, p: int, m: int, f: Cost, i: Cost, w: Cost, comm: Cost, limit: int, kept: Fraction
    ) -> None:
        # memory in units of 1 / q micro-batch, q the denominator of ``kept`` (exact integers:
        # the same comparisons as with fractions of a micro-batch, at integer speed)
        n, q = kept.numerator, kept.denominator
        self.p, self.m, self.comm, self.limit = p, m, comm, limit * q
        self.one = q  # a micro-batch
        self.change = {Op.F: q, Op.I: n - q, Op.W: -n}
        self.cost = {Op.F: f, Op.I: i, Op.W: w}
        self.done = {op: [0] * p for op in (Op.F, Op.I, Op.W)}
        self.ends: dict[tuple[Op, int, int], Cost] = {}
        self.free: list[Cost] = [0] * p
        self.held = [0] * p
        self.idle: list[Cost] = [0] * p  # waits after the stage's first F
        self.rows: list[list[tuple[Op, int, int]]] = [[] for _ in range(p)]

    def put(self, s: int, op: Op) -> None:
        k = self.done[op][s]
        if op is Op.F and self.held[s] + self.one > self.limit:
            raise AssertionError("forward over the memory limit")  # pragma: no cover
        start = self.free[s]
        if op is Op.F and s > 0:
            start = max(start, self.ends[(Op.F, s - 1, k)] + self.comm)
        elif op is Op.I and s < self.p - 1:
            start = max(start, self.ends[(Op.I, s + 1, k)] + self.comm)
        if self.done[Op.F][s] > 0:
            self.idle[s] += start - self.free[s]
        self.free[s] = self.ends[(op, s, k)] = start + self.cost[op]
        self.held[s] += self.change[op]
        self.done[op][s] += 1
        self.rows[s].append((op, s, k))

    def w_left(self, s: int) -> bool:
        return self.done[Op.W][s] < self.done[Op.I][s]

    def slack(self, s: int) -> Cost:
        """How much more idle stage ``s`` may take: the largest idle of any stage beyond its own."""
        return max(self.idle) - self.idle[s]

    def make_room(self, s: int) -> None:
        while self.held[s] + self.one > self.limit:
            if not self.w_left(s):
                raise _NoFit
            self.put(s, Op.W)

    def fill(self, s: int, arrival: Cost, fill_small_gaps: bool) -> None:
        """``W``s on stage ``s`` while its next input arrives at ``arrival``."""
        w = self.cost[Op.W]
        while self.w_left(s) and self.free[s] + w <= arrival:
            self.put(s, Op.W)
        gap = arrival - self.free[s]
        if self.w_left(s) and gap > 0 and (gap > self.slack(s) or fill_small_gaps):
            self.put(s, Op.W)

    def warm_up(self, bubble_before_first_b: bool) -> None:
        p, m, f, comm = self.p, self.m, self.cost[Op.F], self.comm
        for s in range(p):
            self.put(s, Op.F)
        extra = [0] * p
        i_end = self.ends[(Op.F, p - 1, 0)] + self.cost[Op.I]  # the next stage's first I end
        for s in range(p - 2, -1, -1):
            held, t = self.held[s], self.free[s]
            while self.done[Op.F][s] + extra[s] < m and held + self.one <= self.limit:
                if (t + f > i_end + comm) if bubble_before_first_b else (t >= i_end + comm):
                    break
                held, t, extra[s] = held + self.one, t + f, extra[s] + 1
            i_end = max(t, i_end + comm) + self.cost[Op.I]
        for s in range(1, p):
            while extra[s] > 0 and extra[s] >= extra[s - 1] and self.done[Op.F][s] + extra[s] < m:
                extra[s] -= 1
        for s in range(p):
            for _ in range(extra[s]):
                self.put(s, Op.F)
        for s in range(p - 1, -1, -1):
            self.put(s, Op.I)

    def round(self, k: int, backward_first: bool, fill_small_gaps: bool) -> None:
        p, m, comm = self.p, self.m, self.comm
        nf = self.done[Op.F]
        wants = [False] * p
        for s in range(p):
            if nf[s] >= m:
                continue
            if backward_first and s + 1 < p and nf[s] >= nf[s + 1] + 2:
                next_pair = self.free[s + 1] + self.cost[Op.F] + self.cost[Op.I] + comm
                if self.free[s] >= next_pair:
                    continue
                freeing, after = 0, self.held[s] + self.one  # the W's this F needs first
                while after > self.limit and self.done[Op.W][s] + freeing < self.done[Op.I][s]:
                    freeing, after = freeing + 1, after + self.change[Op.W]
                if self.free[s] + self.cost[Op.F] + freeing * self.cost[Op.W] <= next_pair:
                    wants[s] = True
                    continue
                if next_pair - self.free[s] <= self.slack(s):
                    continue
            wants[s] = True
        for s in range(p - 2, -1, -1):
            wants[s] = wants[s] and wants[s + 1]
        for s in range(p):
            if not wants[s]:
                continue
            self.make_room(s)
            if s > 0:
                self.fill(s, self.ends[(Op.F, s - 1, nf[s])] + comm, fill_small_gaps)
            self.put(s, Op.F)
        for s in range(p - 1, -1, -1):
            if s + 1 < p:
                self.fill(s, self.ends[(Op.I, s + 1, k)] + comm, fill_small_gaps)
            if s == 0 and nf[s] == m:
                while self.w_left(s):
                    self.put(s, Op.W)
            self.put(s, Op.I)

    def spans(self) -> tuple[Cost, ...]:
        f = self.cost[Op.F]
        return tuple(self.free[s] - (self.ends[(Op.F, s, 0)] - f) for s in range(self.p))


def heuristic_order(
    *,
    num_ranks: int,
    num_microbatches: int,
    fwd_time_s: Cost,
    input_grad_time_s: Cost,
    wgrad_time_s: Cost,
    comm_time_s: Cost,
    limit: int,
    rules: tuple[bool, bool, bool],
    wgrad_memory_fraction: Fraction = Fraction(1),
) -> Candidate | None:
    """One candidate of the heuristic (module doc), or None where it cannot fit ``limit``.

    Args:
        num_ranks: pipeline ranks ``p`` (one stage each).
        num_microbatches: micro-batches ``m``.
        fwd_time_s: a stage's forward ``T_F``, seconds.
        input_grad_time_s: its input gradient ``T_B`` (pipesim's ``I``), seconds.
        wgrad_time_s: its weight gradient ``T_W``, seconds.
        comm_time_s: a transfer between neighbouring stages, seconds.
        limit: micro-batches of activations a rank may hold (``>= 1``).
        rules: ``(bubble_before_first_b, backward_first, fill_small_gaps)``.
        wgrad_memory_fraction: the share of a micro-batch's activations its stage still holds
            from its ``I`` to its ``W`` (``I`` frees the rest; 1: all held until ``W``).

    Returns:
        The candidate, or None where a forward needs memory no ``W`` can free.
    """
    bubble_before_first_b, backward_first, fill_small_gaps = rules
    b = _Builder(num_ranks, num_microbatches, fwd_time_s, input_grad_time_s, wgrad_time_s, comm_time_s, limit,
                 wgrad_memory_fraction)
    try:
        b.warm_up(bubble_before_first_b)
        for k in range(1, num_microbatches):
            b.round(k, backward_first, fill_small_gaps)
    except _NoFit:
        return None
    for s in range(num_ranks):
        while b.done[Op.W][s] < num_microbatches:
            b.put(s, Op.W)
    return Candidate(rules=rules, rows=tuple(tuple(r) for r in b.rows), spans_s=b.spans())


def candidates(
    *,
    num_ranks: int,
    num_microbatches: int,
    fwd_time_s: Cost,
    input_grad_time_s: Cost,
    wgrad_time_s: Cost,
    comm_time_s: Cost,
    limit: int,
    wgrad_memory_fraction: Fraction = Fraction(1),
) -> list[Candidate]:
    """The heuristic's candidates that fit ``limit``, in the order of :data:`RULES` (arguments as
    :func:`heuristic_order`); the authors keep the first with the smallest
    :attr:`Candidate.cost_s`."""
    out = []
    for rules in RULES:
        got = heuristic_order(num_ranks=num_ranks, num_microbatches=num_microbatches, fwd_time_s=fwd_time_s,
                              input_grad_time_s=input_grad_time_s, wgrad_time_s=wgrad_time_s,
                              comm_time_s=comm_time_s, limit=limit, rules=rules,
                              wgrad_memory_fraction=wgrad_memory_fraction)
        if got is not None:
            out.append(got)
    return out
