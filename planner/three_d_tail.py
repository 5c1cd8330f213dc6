"""What follows a 3D configuration's last backward on a rank: its gradient collectives with
sharding ``none``, ZeRO-1 or the distributed optimizer (ZeRO-2/3 reduce per unit:
:mod:`pipesim.planner.zero_ops`), before the optimizer step and after it, read by
:func:`pipesim.planner.three_d.prepare_config`.

As the simulator's lowering posts them (:mod:`pipesim.simulator.dp_collectives`), each stage
reduces its gradients once its own last backward (or ``W``) has ended, and a rank of several
stages (interleaved, the V shapes) runs its stages' collectives one after another on its stream;
the update waits for all of them, and ZeRO-1's and the distributed optimizer's all-gathers
follow it (:func:`chained_tail_s`). Charging a rank's whole reduction after its last action,
as the estimate did, was 1.5-2.5% above the simulation on two-stage ranks with 8 replicas
(``tests/tp/test_zbv_estimate.py``). Where a stage's reduction, posted before its rank's
cool-down, crosses the rank's TP rings' bottleneck (servers of one NIC), it slows the cool-down's
TP blocks and through them every rank before it (:func:`cooldown_ends_s`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pipesim.planner.nic_sharing import RingSharers
from pipesim.planner.schedule_time import OrderTime, schedule_order
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.sharding import Sharding, half_time_s
from pipesim.schedules.action import Op
from pipesim.schedules.registry import placement_of
from pipesim.schedules.timing import Time

__all__ = ["GradCollectives", "after_backward_s", "chained_tail_s", "cooldown_delays_s", "cooldown_ends_s",
           "dp_parts_s"]


def dp_parts_s(
    curves: AllReduceCurves | None, sh: Sharding, nbytes: float, g: float, allreduce: str,
    zero1_all_reduce: bool, *, gather: bool = True,
) -> tuple[float, float]:
    """The gradient collectives over ``nbytes`` parameter bytes (``g`` gradient bytes per
    parameter byte; sharding ``none``, ``zero1`` or ``distributed``; ``zero1_all_reduce``:
    ZeRO-1 all-reduces, DeepSpeed's BF16_Optimizer) before the optimizer step and after it,
    seconds; ``(0, 0)`` without data parallelism (``curves`` ``None``). ``gather=False``: the
    distributed optimizer's parameter all-gather is not after the step (Megatron-LM's
    ``--overlap-param-gather``: it overlaps the next forward, :mod:`pipesim.planner.param_gather`)."""
    if curves is None:
        return 0.0, 0.0
    if sh is Sharding.NONE:
        return curves.time_s(nbytes * g, allreduce), 0.0
    if sh is Sharding.ZERO1 and zero1_all_reduce:  # DeepSpeed's BF16_Optimizer: all-reduce
        return curves.time_s(nbytes * g, allreduce), half_time_s(curves, nbytes, allreduce)
    # ZeRO-1, distributed optimizer: reduce-scatter, optimizer step, all-gather
    scatter = half_time_s(curves, nbytes * g, allreduce)
    return scatter, half_time_s(curves, nbytes, allreduce) if gather else 0.0


def after_backward_s(
    curves: AllReduceCurves | None, sh: Sharding, nbytes: float, g: float, allreduce: str,
    zero1_all_reduce: bool,
) -> float:
    """All of :func:`dp_parts_s` (a rank's gradient collectives after its last backward, one
    stage's worth of ``nbytes``), seconds."""
    before, after = dp_parts_s(curves, sh, nbytes, g, allreduce, zero1_all_reduce)
    return before + after


def chained_tail_s(end_s: float, stages: Iterable[tuple[float, float, float]]) -> float:
    """What a rank's gradient collectives take beyond its last action (at ``end_s``), seconds:
    ``stages`` per stage of the rank ``(end of its last backward or W, collectives before the
    update, after it)``, seconds; each stage's start at its end or when the one before has
    ended (in the order the stages end), the update after the last and the ``after`` parts
    after the update."""
    done = post = 0.0
    for stage_end, before, after in sorted(stages):
        done = max(done, stage_end) + before
        post += after
    return max(0.0, done - end_s) + post


@dataclass(frozen=True, slots=True, kw_only=True)
class GradCollectives:
    """One configuration's gradient collectives (:func:`dp_parts_s`'s arguments but the bytes),
    memoised in ``memo`` (what the search's configurations share) under ``key`` (the rest of
    what they depend on: the group and the degrees)."""

    curves: AllReduceCurves | None
    sharding: Sharding
    grad_factor: float
    allreduce: str
    zero1_all_reduce: bool
    memo: dict[tuple[object, ...], Any]
    key: tuple[object, ...]
    gather: bool = True

    def parts_s(self, nbytes: float) -> tuple[float, float]:
        """:func:`dp_parts_s` of ``nbytes`` parameter bytes, seconds."""
        key = ("parts", *self.key, self.sharding, nbytes, self.grad_factor, self.allreduce,
               self.zero1_all_reduce, self.gather)
        found = self.memo.get(key)
        if found is None:
            found = self.memo[key] = dp_parts_s(self.curves, self.sharding, nbytes, self.grad_factor,
                                                self.allreduce, self.zero1_all_reduce, gather=self.gather)
        return found

    def total_s(self, nbytes: float) -> float:
        """:func:`after_backward_s` of ``nbytes`` parameter bytes, seconds."""
        before, after = self.parts_s(nbytes)
        return before + after

    def chained_s(self, end_s: float, stages: Iterable[tuple[float, float]]) -> float:
        """:func:`chained_tail_s` of a rank's stages given as ``(end of its last backward or W,
        parameter bytes)``, seconds."""
        return chained_tail_s(end_s, ((end, *self.parts_s(nbytes)) for end, nbytes in stages))


def cooldown_delays_s(
    tails: Sequence[Sequence[tuple[float, float]]], idle_s: Sequence[float], flows: Sequence[int]
) -> list[float]:
    """How much later each rank of a looped order ends because a stage's gradient collective
    on its TP rings' bottleneck link runs beside the rank's last TP blocks, seconds.

    As the simulator's lowering posts them (:mod:`pipesim.simulator.dp_collectives`), a stage
    reduces its gradients once its last backward (or ``W``) has ended; a rank of several
    stages (interleaved) then still runs the cool-down backwards of its other stages, whose TP
    blocks share the link with that reduction where its rings cross it (a TP ring across servers
    of one NIC): ``k`` gradient rings (every TP rank's) and the block's ring each get ``1 / (k +
    1)`` of it (max-min, the fluid share of :mod:`pipesim.planner.nic_sharing`), so a block of
    ``w`` seconds on the link alone takes ``k w`` more while the reduction lasts, and the
    reduction has ``k w`` less left after it. The reduction runs alone while the rank computes or
    waits (its waits counted first: the cool-down's backwards wait for the next rank's gradients).

    Args:
        tails: per rank, from its first stage whose last gradient action ends before the
            rank's last action, each action after it in order as ``(seconds, seconds of TP
            bytes on the bottleneck alone)``, and where another stage's last gradient action
            is, ``(-1, seconds of that stage's reduction alone)``, the first entry the first
            stage's; empty where no stage ends before the rank's last action.
        idle_s: per rank, the time it waits in that stretch (its end less the first such
            stage's end less its actions' seconds), seconds.
        flows: per rank ``k`` (:attr:`~pipesim.planner.nic_sharing.RingSharers.own_dp`).

    Returns:
        Per rank the delay of its last action: its own blocks' and every later rank's (each
        rank's cool-down waits for the next rank's gradients, so a delay there reaches every
        rank before it, and lengthens its waits), seconds.
    """
    p = len(tails)
    out = [0.0] * p
    later = 0.0
    for r in range(p - 1, -1, -1):
        k, left, wait, own = flows[r], 0.0, idle_s[r] + later, 0.0
        for op_s, wire_s in tails[r]:
            if op_s < 0:  # a stage's last gradient action: its reduction joins the link
                left = max(0.0, left + wire_s - wait)
                wait = 0.0
                continue
            left = max(0.0, left - (op_s - wire_s))  # alone during the op's compute and latency
            got = min(k * wire_s, left)
            own += got
            left -= got
        later += own
        out[r] = later
    return out


def cooldown_ends_s(
    schedule: str, m: int, order: OrderTime, sharers: RingSharers | None,
    times: tuple[Sequence[float], Sequence[float], Sequence[float], Sequence[float]],
    wires: Callable[[int], tuple[float, float]], reduce_s: Callable[[int], float],
) -> tuple[Time, ...]:
    """Each rank's last action's end in ``schedule``'s order of ``m`` micro-batches (``order``:
    its times, links free) with the cool-down delays of :func:`cooldown_delays_s`, seconds; the
    order's own where no rank's gradient rings cross its TP rings' bottleneck
    (:attr:`~pipesim.planner.nic_sharing.RingSharers.own_dp`) or the placement is not looped
    (the V shapes end on rank 0). ``times``: per stage its ``F``, ``B``, ``I`` and ``W``
    seconds; ``wires(stage)`` its ``F``'s and backward's TP bytes on the bottleneck alone,
    seconds; ``reduce_s(stage)`` its gradient collective before the update alone, seconds."""
    flows = sharers.own_dp if sharers is not None else ()
    p = len(order.rank_end_s)
    if not any(flows) or (placement_of(schedule) or "looped") != "looped":
        return order.rank_end_s
    rows = schedule_order(schedule, p, m, len(order.stage_end_s) // p, ()).ranks
    column = {Op.F: 0, Op.B: 1, Op.I: 2, Op.W: 3}
    tails: list[list[tuple[float, float]]] = []
    idle: list[float] = []
    for r, row in enumerate(rows):
        grad = Op.W if any(a.op is Op.W for a in row) else Op.B
        last = {a.stage: i for i, a in enumerate(row) if a.op is grad}  # per stage its last gradient action
        early = {i for i in last.values() if i < len(row) - 1}
        tail: list[tuple[float, float]] = []
        busy = 0.0
        if early and flows[r]:
            first = min(early)
            for i in range(first, len(row)):
                k, op = row[i].stage, row[i].op
                if i > first and op in column:  # (looped orders run F, B, I and W only)
                    wire = 0.0 if op is Op.W else wires(k)[0 if op is Op.F else 1]
                    tail.append((times[column[op]][k], wire))
                    busy += tail[-1][0]
                if i in early:
                    tail.append((-1.0, reduce_s(k)))
            waited = float(order.rank_end_s[r]) - float(order.stage_end_s[row[first].stage]) - busy
            idle.append(max(0.0, waited))
        else:
            idle.append(0.0)
        tails.append(tail)
    delays = cooldown_delays_s(tails, idle, flows)
    return tuple(float(e) + x for e, x in zip(order.rank_end_s, delays, strict=True))
