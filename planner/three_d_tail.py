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
(``tests/tp/test_zbv_estimate.py``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.sharding import Sharding, half_time_s

__all__ = ["GradCollectives", "after_backward_s", "chained_tail_s", "dp_parts_s"]


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
