"""ZeRO-2 and ZeRO-3's per-unit collectives in the 3D estimate (:mod:`pipesim.planner.three_d`),
as the simulator's ZeRO lowering issues them (``simulator/zero_lowering.py``): per stage the
chunk it runs as a :class:`~pipesim.planner.zero_ops.ZeroOp` (:func:`zero_units`), and the
stages' ops with their per-unit collectives (:func:`zero_stages`, the per-unit costs
:mod:`pipesim.planner.zero_ops`'s, on a TP ring's bottleneck link shared with them where it
carries them, :mod:`pipesim.planner.nic_sharing`).

ZeRO-2 charges each rank its last backward's reduce-scatter tail and, after the update, the
all-gather, its reduce stream pacing the end where it runs late
(:func:`~pipesim.planner.zero_ops.zero2_reduce_s`); ZeRO-3 its gathers inside the stages'
forwards and backwards (:func:`~pipesim.profiles.costmodels.sharding.zero3_op_times_s`), its
first forward's and last backward's exposed parts after the rank's last action (``t_dp`` of
:mod:`pipesim.planner.three_d`), the backwards stretched where the reduce-scatters outlast
them; with ``Plan.zero3_runtime = deepspeed-2021`` also the runtime's issue time, re-gathers
and on-demand gathers (:mod:`~pipesim.profiles.costmodels.zero3_runtime`).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from pipesim.planner.nic_sharing import fair_share
from pipesim.planner.schedule_time import OrderTime
from pipesim.planner.three_d_costs import ThreeDCosts, dp_groups
from pipesim.planner.zero_ops import ZeroOp, ZeroOps, zero_split_ops, zero_unit_ops
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.sharding import Sharding, half_time_s
from pipesim.profiles.costmodels.tensor_parallel import TpStageTimes
from pipesim.profiles.costmodels.zero3_runtime import Zero3Runtime
from pipesim.profiles.hardware.cluster import Cluster

__all__ = ["ZeroStages", "ZeroUnit", "zero_stages", "zero_units"]


class ZeroUnit(NamedTuple):
    """One stage of a ZeRO-2/3 plan as :func:`zero_stages` costs it: ``rank`` runs stage
    ``stage``'s chunk ``op``, whose forward, backward (the ``I`` in a zero-bubble schedule) and
    ``W`` take ``fwd_s``, ``bwd_s`` and ``wgrad_s`` seconds without the per-unit collectives."""

    rank: int
    stage: int
    op: ZeroOp
    fwd_s: float
    bwd_s: float
    wgrad_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ZeroStages:
    """The stages' ops with ZeRO-2/3's per-unit collectives (:func:`zero_stages`).

    Attributes:
        fwd_s, input_s, wgrad_s: per stage its ``F``, its ``I`` (the whole ``B`` outside
            zero-bubble schedules) and its ``W``, seconds.
        held_bytes: per rank the bytes its gathered units hold on top of its peak.
        head_s: ZeRO-3's first forward's unhidden gathers, seconds.
        tails_s: per rank its last backward's reduce tail, seconds.
        stage_tails_s, stage_scatters_s: per stage its last backward's reduce tail and its
            reduce-scatters' time, seconds (ZeRO-2's reduce stream,
            :func:`~pipesim.planner.zero_ops.zero2_reduce_s`).
        gathers_s: per rank ZeRO-2's all-gather after its update, seconds (0 with ZeRO-3).
        sharding: ``zero2`` or ``zero3`` (with per-unit collectives; otherwise none of them).
    """

    fwd_s: tuple[float, ...]
    input_s: tuple[float, ...]
    wgrad_s: tuple[float, ...]
    held_bytes: tuple[float, ...]
    head_s: float
    tails_s: tuple[float, ...]
    stage_tails_s: tuple[float, ...]
    stage_scatters_s: tuple[float, ...]
    gathers_s: tuple[float, ...]
    sharding: Sharding

    def after_s(self, rank: int, order: OrderTime | None) -> float:
        """What rank ``rank``'s reduce-scatters take beyond its last backward, and ZeRO-2's gather
        after the update (ZeRO-3's first gathers delay every rank), seconds; ZeRO-2's from its
        reduce stream's end in the schedule's ``order``
        (:func:`~pipesim.planner.schedule_time.order_time_s` with ``reduce_s``)."""
        if self.sharding is Sharding.ZERO3:
            return self.head_s + self.tails_s[rank]
        assert order is not None
        tail = order.stream_end_s[rank] - order.rank_end_s[rank]  # its reduce stream's end
        return float(tail) + self.gathers_s[rank]


def zero_units(
    cluster: Cluster, chunks: Sequence[tuple[int, int]], stages_of: Sequence[Sequence[int]],
    rings: Sequence[int], shared: Callable[[int], bool], times: Sequence[TpStageTimes],
    replays: Sequence[float], w_stage: Sequence[float], dp_group: Sequence[int], *, mbs: int, t: int,
    sp: bool, c: int, sh: Sharding, runtime: Zero3Runtime, full: bool, replicas: int, grad: float,
    allreduce: str, split: bool, copies: Sequence[tuple[int, float]] = (),
) -> list[ZeroUnit]:
    """Per stage its chunk as ZeRO-2/3 costs it (:class:`ZeroUnit`), rank by rank: ``chunks``
    the stages' layer ranges, ``stages_of`` per rank its stages, ``rings`` per rank its TP ring,
    ``shared(r)`` whether rank ``r``'s TP rings' bottleneck links carry its data-parallel ring,
    ``times``, ``replays`` and ``w_stage`` per stage its TP x CP times, replayed forward and
    ``W`` (seconds), ``dp_group`` rank 0's data-parallel group (the servers it spans:
    DeepSpeed's (2021) per-call ring latency); the rest :class:`~pipesim.planner.zero_ops.ZeroOp`'s
    fields (``replicas`` the group's size ``d c``, ``grad`` gradient bytes per parameter byte;
    ``copies`` per stage its tied copy's ``(copy_at, copy_bytes)``, none: no copies)."""
    servers = 1  # the servers the DP group spans: DeepSpeed's (2021) per-call ring latency
    if sh is Sharding.ZERO3 and runtime is Zero3Runtime.DEEPSPEED_2021:
        servers = len({cluster.server_of(x) for x in dp_group})
    units: list[ZeroUnit] = []
    for r in range(len(stages_of)):
        shares = shared(r)
        for k in stages_of[r]:
            first, last = chunks[k]
            op_times, replay = times[k], replays[k]
            f_op = op_times.fwd_tp_s + op_times.fwd_comm_s
            b_op = op_times.bwd_tp_s + op_times.bwd_comm_s + replay
            if split:  # the I
                b_op += op_times.bwd_split_comm_s - op_times.bwd_comm_s - w_stage[k]
            unit = ZeroOp(first=first, last=last, mbs=mbs, t=t, sp=sp, c=c, ring=rings[r], times=op_times,
                          replay=replay, sharding=sh, runtime=runtime, full=full, replicas=replicas,
                          grad=grad, allreduce=allreduce, shared=shares, servers=servers,
                          copy_at=copies[k][0] if copies else -1, copy_bytes=copies[k][1] if copies else 0.0)
            units.append(ZeroUnit(r, k, unit, f_op, b_op, w_stage[k]))
    return units


def zero_stages(
    model: ThreeDCosts, units: Sequence[ZeroUnit], f_stage: Sequence[float], i_stage: Sequence[float],
    w_stage: Sequence[float], chunks: Sequence[tuple[int, int]], stages_of: Sequence[Sequence[int]],
    dp_curves: AllReduceCurves | None, dp_group: tuple[int, ...], leads: tuple[int, ...],
    meet: Sequence[tuple[int, ...]], rank_params: Sequence[float], *, t: int, width: int, sh: Sharding,
    grad: float, allreduce: str, split: bool, copies: Sequence[float] = (),
) -> ZeroStages:
    """The stages' ``F``, ``I`` and ``W`` (``f_stage``, ``i_stage``, ``w_stage``, seconds) with
    the per-unit collectives of ``units`` (:func:`zero_units`; none: unchanged) and what else
    :class:`ZeroStages` holds. ``dp_curves`` rank 0's data-parallel curves, ``dp_group`` its
    group, ``leads`` per rank its first device (none: automatic placement), ``meet`` per rank the
    other ranks whose data-parallel rings cross a link of its own
    (:meth:`~pipesim.planner.three_d_costs.ThreeDCosts.dp_sharers`), ``rank_params`` per rank its
    parameter bytes, ``width`` the devices of a pipeline rank (``d t c``), ``grad`` gradient
    bytes per parameter byte, ``copies`` per stage its tied copy's bytes on one device (none:
    no copies; its reduce-scatters and ZeRO-2's all-gather carry them). With ZeRO-3 the ranks'
    collectives run throughout, sharing the links where their rings meet
    (:func:`~pipesim.planner.nic_sharing.fair_share`), and a rank's
    reduce-scatters, when they take longer than its backwards, stretch each backward alike."""
    p = len(stages_of)
    fwd, inp, wgrad, held = list(f_stage), list(i_stage), list(w_stage), [0.0] * p
    rank_curves = [dp_curves] * p  # ZeRO-3: the ranks' collectives run throughout, sharing links
    if units and sh is Sharding.ZERO3 and any(meet):
        groups = dp_groups(dp_group, leads, p, width)
        also = [tuple(groups[q] for q in meet[r]) for r in range(p)]
        rank_curves = [model.curves(groups[r], servers=True, ranks=t, also=also[r],
                                    share=fair_share(rank_params, r, meet[r])) for r in range(p)]
    head = 0.0  # ZeRO-3: the first forward's unhidden gathers
    tails = [0.0] * p  # ZeRO-2/3: each rank's last backward's reduce tail
    stage_tails, stage_scatters = [0.0] * len(chunks), [0.0] * len(chunks)
    memo = _ZERO_OPS.setdefault(model, {})
    for r, k, unit, f_plain, b_plain, w_plain in units:
        # chunks of the same layers cost the same (zero_unit_ops reads them by their signature)
        memo_key = (model.sig(unit.first, unit.last), replace(unit, first=0, last=0), rank_curves[r], split)
        ops = memo.get(memo_key)
        if ops is None and split:  # F, I (bwd_s) and W's reduce-scatters
            ops = memo[memo_key] = zero_split_ops(model, unit, rank_curves[r], w_plain)  # type: ignore[arg-type]
        elif ops is None:
            ops = memo[memo_key] = zero_unit_ops(model, unit, rank_curves[r])  # type: ignore[arg-type]
        fwd[k] += ops.fwd_s - f_plain
        inp[k] += ops.bwd_s - b_plain
        held[r] = max(held[r], ops.held_bytes)
        if k == r:  # the rank's first stage: its last backward
            tails[r] = ops.last_tail_s
        if k == 0:
            head = ops.first_extra_s
        stage_tails[k], stage_scatters[k] = ops.last_tail_s, ops.scatter_s
    if units and dp_curves is not None and sh is Sharding.ZERO3:  # the stream slows the gathers
        for r in range(p):
            on = rank_curves[r] or dp_curves
            scatter = sum(half_time_s(on, (model.params(*chunks[k], t) + _held(copies, k)) * grad, allreduce)
                          for k in stages_of[r])
            busy = sum(inp[k] + wgrad[k] for k in stages_of[r])
            if scatter > busy:  # the stream paces the backwards: each stretched alike
                for k in stages_of[r]:
                    inp[k] *= scatter / busy
                    wgrad[k] *= scatter / busy
    gathers = [0.0] * p  # ZeRO-2: each rank's all-gather after its update
    if units and dp_curves is not None and sh is Sharding.ZERO2:
        gathers = [half_time_s(dp_curves, sum(model.params(*chunks[k], t) + _held(copies, k)
                                              for k in stages_of[r]), allreduce)
                   for r in range(p)]
    return ZeroStages(fwd_s=tuple(fwd), input_s=tuple(inp), wgrad_s=tuple(wgrad), held_bytes=tuple(held),
                      head_s=head, tails_s=tuple(tails), stage_tails_s=tuple(stage_tails),
                      stage_scatters_s=tuple(stage_scatters), gathers_s=tuple(gathers), sharding=sh)


def _held(copies: Sequence[float], k: int) -> float:
    """Stage ``k``'s tied copy's bytes on one device (0 without copies)."""
    return copies[k] if copies else 0.0


_ZERO_OPS: weakref.WeakKeyDictionary[ThreeDCosts, dict[tuple[object, ...], ZeroOps]] = (
    weakref.WeakKeyDictionary()
)
"""Per cost model, ZeRO-2/3's chunk ops by the chunk's layer signature and the rest of its
:class:`~pipesim.planner.zero_ops.ZeroOp` (the search costs the same chunk in many
configurations)."""
