"""A lower bound on a pipeline's iteration time from the links its stage boundaries share.

DAPPLE's pseudo-stages (:mod:`pipesim.planner.latency`) see each stage-to-stage transfer alone;
:func:`link_bound_s` sees the boundaries whose transfers meet on one link (a server's NIC): every
link carries, per micro-batch, the pieces of all the transfers crossing it. The estimate
(:meth:`~pipesim.planner.estimate.CostModel.link_bound_s`) floors every schedule's time by it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from pipesim.plan import Plan
from pipesim.planner.cost_tables import StageCosts, largest_microbatch
from pipesim.planner.iteration_time import rank_of
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.schedules.placement import chain_length
from pipesim.schedules.registry import placement_of

__all__ = ["link_bound_s"]


class _Transfers(Protocol):
    cluster: Cluster
    cut_bytes_per_sample: list[float]

    def transfer_link_loads(
        self, src: tuple[int, ...], dst: tuple[int, ...]
    ) -> tuple[tuple[int, float], ...]: ...


def link_bound_s(model: _Transfers, plan: Plan, costs: Sequence[StageCosts]) -> float:
    """A lower bound on the iteration time from the links the stage-to-stage transfers share, seconds.

    Every link carries, per micro-batch, the pieces of all the transfers crossing it (of any
    stage boundary): ``L`` seconds at its bandwidth. It cannot start before the first
    micro-batch reaches the earliest boundary using it, nor finish later than the rest of the
    last micro-batch's forward and backward allows::

        T >= min_b before_b + M L + min_b after_b

    (activation of boundary ``b``: ``before = sum_{s<=b} F_s``, ``after = sum_{s>b} F_s + sum B``;
    gradient: ``before = sum F + sum_{s>b} B_s``, ``after = sum_{s<=b} B_s``). DAPPLE's
    pseudo-stages see each transfer alone; this term sees boundaries that meet on a NIC.
    It is taken per direction (activations alone, gradients alone) and for both together:
    a server's uplink carries the activations it sends to the next stage *and* the
    gradients it sends to the previous one (links are directed, full duplex: the two
    flows share the one direction they both use), so ``L`` sums both there, with the
    earliest ``before`` and ``after`` of either. Every form is a lower bound for every
    schedule, and the link's time when it is the bottleneck (links far slower than the
    compute, ``M`` large). ``O(boundaries x links)``; ``model``: the cost model
    (:meth:`~pipesim.planner.estimate.CostModel.transfer_link_loads`).

    Raises:
        Nothing of its own.
    """
    num = len(costs)
    if num < 2:
        return 0.0
    placement = plan.placement(model.cluster.num_devices)
    where = rank_of(plan)
    samples = largest_microbatch(plan)
    fwd = [c.fwd_s for c in costs]
    bwd = [c.bwd_s for c in costs]
    chain = chain_length(placement_of(plan.schedule) or "looped", num)  # dualpipe: two chains of m/2
    busy: dict[tuple[str, int], list[float]] = {}  # (direction, link) -> [L, before, after]
    total_f = total_b = pre_f = pre_b = 0.0
    for b in range(num - 1):
        if b % chain == 0:  # the sums run over the boundary's own chain
            total_f, total_b = sum(fwd[b : b + chain]), sum(bwd[b : b + chain])
            pre_f = pre_b = 0.0
        pre_f += fwd[b]
        pre_b += bwd[b]
        if where[b] == where[b + 1] or b % chain == chain - 1:
            continue  # two stages of one rank (a V's turn), or the end of a chain: no transfer
        src, dst = placement[where[b]], placement[where[b + 1]]
        nbytes = samples * model.cut_bytes_per_sample[plan.stages[b].last_layer]
        for direction, a, z, before, after in (
            ("F", src, dst, pre_f, total_f - pre_f + total_b),
            ("B", dst, src, total_f + total_b - pre_b, pre_b),
        ):
            for link, per_byte in model.transfer_link_loads(a, z):
                for key in ((direction, link), ("FB", link)):
                    entry = busy.setdefault(key, [0.0, math.inf, math.inf])
                    entry[0] += per_byte * nbytes
                    entry[1] = min(entry[1], before)
                    entry[2] = min(entry[2], after)
    m = plan.num_microbatches * chain // num  # micro-batches crossing each boundary
    return max((before + m * load + after for load, before, after in busy.values()), default=0.0)
