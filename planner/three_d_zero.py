"""ZeRO-2 and ZeRO-3's per-unit collectives in the 3D estimate (:mod:`pipesim.planner.three_d`),
as the simulator's ZeRO lowering issues them (``simulator/zero_lowering.py``): per stage the
chunk it runs as a :class:`~pipesim.planner.zero_ops.ZeroOp` (:func:`zero_units`), and the
stages' ops with their per-unit collectives (:func:`zero_stages`, the per-unit costs
:mod:`pipesim.planner.zero_ops`'s, on a TP ring's bottleneck link shared with them where it
carries them, :mod:`pipesim.planner.nic_sharing`).

ZeRO-2 charges each rank its last backward's reduce-scatter tail and, after the update, the
all-gather, its reduce stream pacing the end where it runs late
(:func:`~pipesim.planner.zero_ops.zero2_reduce_s`); ZeRO-3 its gathers inside the stages'
forwards and backwards (:func:`~pipesim.profiles.costmodels.zero3_timing.zero3_times_s`, the
1F1B steady cycle), its first forward's and last backward's exposed parts after the rank's last
action (``t_dp`` of :mod:`pipesim.planner.three_d`); with ``Plan.zero3_runtime =
deepspeed-2021`` also the runtime's issue time, re-gathers and on-demand gathers
(:mod:`~pipesim.profiles.costmodels.zero3_runtime`). Where a rank's links are its own and the
gating, not the links, paces its cycle (they sit idle in it: DGX's NIC per GPU), the
reduce-scatters a backward leaves queued delay the next op's gathers (the spill): charged to
that backward (``W`` where split), the last one's to its tail, the first cycle's as it settles.
With several chunks per rank (interleaved orders) on such links, the rank's chunks' ``F`` and
``B`` are timed in its steady order's period (:func:`steady_periods`,
:func:`~pipesim.profiles.costmodels.zero3_timing.zero3_order_times_s`): each ``B`` with the spill it
leaves on the ``F`` after it, the ``F`` as after a forward (the fill), the drain's ``B`` s' spill
out of the rank's tail (one chunk's cycle with each chunk's spill overshot by +5..+7%: the chunks'
ops take turns, a small chunk's forward meets a large one's reduce-scatters).
Otherwise (links that carry other ranks' rings or TP rings, links busy throughout, split or
full-``B`` orders with several chunks) ZeRO-3's ops are costed as the pipeline's fill and drain run them (the
forward after a backward with its first gather slowed, the backwards stretched where the
reduce-scatters outlast them); what the links carry bounds the iteration from below
(:meth:`ZeroStages.link_bound_s`: each rank's transfers of every micro-batch, and on a link that
several ranks' rings or a straddling TP ring cross, all of theirs) and, for ZeRO-3, each steady
cycle (:meth:`ZeroStages.steady_extra_s`).
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from pipesim.planner.nic_sharing import shared_ends_s
from pipesim.planner.schedule_time import OrderTime, schedule_order
from pipesim.planner.three_d_costs import ThreeDCosts, dp_groups
from pipesim.planner.zero_ops import ZeroOp, ZeroOps, zero_split_ops, zero_unit_ops
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.dp_rings import rank_groups, ring_links
from pipesim.profiles.costmodels.sharding import Sharding, half_time_s
from pipesim.profiles.costmodels.tensor_parallel import TpStageTimes
from pipesim.profiles.costmodels.zero3_runtime import Zero3Runtime
from pipesim.profiles.costmodels.zero3_timing import STEADY_CYCLES, zero3_order_times_s
from pipesim.profiles.hardware.cluster import Cluster

__all__ = [
    "LinkLoads", "SteadyOrder", "ZeroStages", "ZeroUnit", "dp_link_loads", "dp_weights",
    "forwards_after_backward", "steady_periods", "stream_weights", "zero_stages", "zero_units",
]

LinkLoads = tuple[tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]], ...]
"""Per shared link its pipeline ranks and per rank the share of its data-parallel transfers'
time and of its TP wire time it carries (:attr:`ZeroStages.loads`)."""


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
        gathers_s: per rank ZeRO-2's all-gather after its update, seconds (0 with ZeRO-3), as
            it runs beside the other ranks' whose rings cross a link of its own (they start
            together where a tied pair's all-reduce ends their iterations at once, GPT's
            embeddings: :func:`~pipesim.planner.nic_sharing.shared_ends_s` on :attr:`loads`).
        tp_fwd_wire_s: per rank the forward's part of :attr:`tp_wire_s`, seconds (empty: none).
        alone_gathers_s: per rank that all-gather alone on its links, seconds (empty: as
            :attr:`gathers_s`; :meth:`link_bound_s` carries the ranks' shares itself).
        full_extra_s: per stage what a full ``B``'s per-unit collectives take beyond its ``I``'s
            (``I + W`` less what a ``B`` hides), seconds, where the order has both (DualPipe(V)
            with ZeRO-3; :func:`zero_stages` ``full``); empty otherwise.
        link_s: per rank its data-parallel transfers of one micro-batch, seconds alone on its
            links (:meth:`link_bound_s`); empty without per-unit collectives.
        tp_wire_s: per rank its TP rings' wire time per micro-batch, seconds (where :attr:`loads`
            has links).
        loads: the links that carry several ranks' rings or TP rings (:data:`LinkLoads`).
        sharding: ``zero2`` or ``zero3`` (with per-unit collectives; otherwise none of them).
        cycle_extra_s: ZeRO-3: what each of the ``m - 1`` steady cycles takes beyond the order's
            (the ops costed alone on the links), seconds: the data-parallel links carry every
            transfer of a cycle, and the ranks whose rings meet share them (module docstring).
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
    full_extra_s: tuple[float, ...] = ()
    link_s: tuple[float, ...] = ()
    tp_wire_s: tuple[float, ...] = ()
    loads: LinkLoads = ()
    alone_gathers_s: tuple[float, ...] = ()
    tp_fwd_wire_s: tuple[float, ...] = ()

    def link_bound_s(
        self, m: int, sends_s: Sequence[float], steps_s: Sequence[float], pairs_s: Sequence[float] = ()
    ) -> float:
        """The least iteration time the links allow, seconds (0 without per-unit collectives).
        Rank ``r``'s links carry its ``m`` micro-batches' data-parallel transfers (:attr:`link_s`
        each, alone on its links) from its first (ZeRO-3: its first forward's gathers, when
        micro-batch 0 reaches stage ``r`` over the stage boundaries' sends ``sends_s``; ZeRO-2:
        its first backward's reduce-scatters, micro-batch 0 through every forward and back to
        it), then its update (``steps_s[r]``) and ZeRO-2's all-gather (:attr:`gathers_s`); a link
        that also carries other ranks' rings or TP rings (:attr:`loads`) carries their shares
        of :attr:`link_s`, :attr:`tp_wire_s` and the all-gathers too, from the first of its
        ranks to start (ZeRO-2: less the TP bytes of micro-batch 0's forwards, which cross it
        before), and after the last transfer of any of them comes at least the least of their
        updates and all-gathers. ``pairs_s``: per rank its tied pairs' all-reduces
        (:mod:`~pipesim.planner.tied_grads`; none: none), which wait for both ranks' reductions
        and hold their updates: on such a link after its last transfer each rank runs its pairs,
        its update and its all-gather as they run beside the others' (:attr:`gathers_s`)."""
        if not self.link_s:
            return 0.0
        p = len(self.link_s)
        sends = [*sends_s, 0.0]
        if self.sharding is Sharding.ZERO3:
            starts = [sum(self.fwd_s[k] + sends[k] for k in range(r)) for r in range(p)]
        else:
            down = sum(f + x for f, x in zip(self.fwd_s, sends, strict=False))
            single = len(self.fwd_s) == p  # one stage per rank: stage r's backward follows stage r + 1's
            starts = [down + (sum(self.input_s[k] + sends[k - 1] for k in range(r + 1, p)) if single else 0.0)
                      for r in range(p)]
        gathers = self.alone_gathers_s or self.gathers_s
        best = max(starts[r] + m * alone + steps_s[r] + gathers[r] for r, alone in enumerate(self.link_s))
        fill = self.tp_fwd_wire_s if self.sharding is Sharding.ZERO2 and self.tp_fwd_wire_s else (0.0,) * p
        for ranks, dp, tp in self.loads:
            work = sum(a * (m * self.link_s[q] + gathers[q]) + b * m * self.tp_wire_s[q] - b * fill[q]
                       for q, a, b in zip(ranks, dp, tp, strict=True))
            scatters = sum(a * m * self.link_s[q] + b * m * self.tp_wire_s[q] - b * fill[q]
                           for q, a, b in zip(ranks, dp, tp, strict=True))
            first = min(starts[q] for q in ranks)
            if any(pairs_s):  # (the pairs end the ranks' iterations at once)
                last = min(steps_s[q] + pairs_s[q] + self.gathers_s[q] for q in ranks)
            else:
                last = min(steps_s[q] + a * gathers[q] for q, a in zip(ranks, dp, strict=True))
            best = max(best, first + work, first + scatters + last)
        return best

    def stream_tp_s(self, schedule: str, m: int, v: int) -> tuple[float, ...]:
        """Per rank the TP wire time per micro-batch that meets ZeRO-2's reduce streams on the
        links of :attr:`loads`, seconds (:func:`~pipesim.planner.zero_ops.zero2_reduce_s`
        ``tp_wire_s``): every backward's, and the forwards' that ``schedule``'s order (``m``
        micro-batches, ``v`` chunks per rank) runs after the rank's first backward, when the
        streams have started (none in GPipe, all but the warm-up's in the 1F1B family); empty
        where no TP ring crosses those links."""
        if not self.tp_fwd_wire_s or not any(any(tp) for _, _, tp in self.loads):
            return ()
        late = forwards_after_backward(schedule, len(self.tp_wire_s), m, v)
        return tuple(w - f + f * x for w, f, x in zip(self.tp_wire_s, self.tp_fwd_wire_s, late, strict=True))

    def steady_extra_s(self, cycles_s: Sequence[float]) -> float:
        """What a steady cycle of the pipeline takes beyond the order's, seconds: per rank its
        ops of one micro-batch take ``cycles_s[r]`` on its links alone, while a link that
        carries several ranks' rings or TP rings (:attr:`loads`) carries all their shares of
        one micro-batch's transfers per cycle (0 where none does). ZeRO-3 only: ZeRO-2's
        reduce streams never hold up the compute (the order's own, :attr:`OrderTime.stream_end_s`,
        and :meth:`link_bound_s` carry them)."""
        if self.sharding is not Sharding.ZERO3:
            return 0.0
        carried = [sum(a * self.link_s[q] + b * self.tp_wire_s[q]
                       for q, a, b in zip(ranks, dp, tp, strict=True)) for ranks, dp, tp in self.loads]
        return max(0.0, max(carried, default=0.0) - max(cycles_s, default=0.0))

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
    memory = math.inf  # and its device's memory bandwidth: the passes around each call
    if sh is Sharding.ZERO3 and runtime is Zero3Runtime.DEEPSPEED_2021:
        servers = len({cluster.server_of(x) for x in dp_group})
        memory = cluster.device_spec(dp_group[0]).achievable_memory_bandwidth_bytes_per_s
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
                          memory_bytes_per_s=memory,
                          copy_at=copies[k][0] if copies else -1, copy_bytes=copies[k][1] if copies else 0.0)
            units.append(ZeroUnit(r, k, unit, f_op, b_op, w_stage[k]))
    return units


def zero_stages(
    model: ThreeDCosts, units: Sequence[ZeroUnit], f_stage: Sequence[float], i_stage: Sequence[float],
    w_stage: Sequence[float], chunks: Sequence[tuple[int, int]], stages_of: Sequence[Sequence[int]],
    dp_curves: AllReduceCurves | None, dp_group: tuple[int, ...], leads: tuple[int, ...],
    meet: Sequence[tuple[int, ...]], *, t: int, width: int, sh: Sharding,
    grad: float, allreduce: str, split: bool, copies: Sequence[float] = (), full: bool = False,
    looped: bool = False, periods: Sequence[SteadyOrder] = (),
) -> ZeroStages:
    """The stages' ``F``, ``I`` and ``W`` (``f_stage``, ``i_stage``, ``w_stage``, seconds) with
    the per-unit collectives of ``units`` (:func:`zero_units`; none: unchanged) and what else
    :class:`ZeroStages` holds. ``dp_curves`` rank 0's data-parallel curves, ``dp_group`` its
    group, ``leads`` per rank its first device (none: automatic placement), ``meet`` per rank the
    other ranks whose data-parallel rings cross a link of its own
    (:meth:`~pipesim.planner.three_d_costs.ThreeDCosts.dp_sharers`), ``width`` the devices of a
    pipeline rank (``d t c``), ``grad`` gradient bytes per parameter byte, ``copies`` per stage
    its tied copy's bytes on one device (none: no copies; its per-unit collectives carry them).
    ZeRO-3's ops as the module docstring says (the spill charged where the gating paces a
    rank's own links); what the links carry per micro-batch (:attr:`ZeroStages.link_s`, with the
    links that several ranks' rings cross, :attr:`ZeroStages.loads`) bounds the iteration
    (:meth:`ZeroStages.link_bound_s`). ``full``: the order runs full ``B`` passes beside split ones
    (DualPipe(V)): a ``B`` gathers and reduce-scatters its units as outside zero-bubble orders
    (:func:`~pipesim.planner.zero_ops.zero_unit_ops`; :attr:`ZeroStages.full_extra_s`); its
    gathered units and gradients are held at once. ``periods``: per rank its steady order
    (:func:`steady_periods`; none: several chunks per rank keep the fill-and-drain costing): where
    a rank runs several chunks on links of its own that sit idle in its period, its ops are
    timed in that order (:func:`~pipesim.profiles.costmodels.zero3_timing.zero3_order_times_s`: each
    ``B`` with the spill it leaves on the ``F`` after it; the drain's ``B`` s, which no ``F``
    follows, leave theirs out of the rank's tail)."""
    p = len(stages_of)
    fwd, inp, wgrad, held = list(f_stage), list(i_stage), list(w_stage), [0.0] * p
    link = [0.0] * p  # ZeRO-3: per rank its DP transfers per micro-batch, seconds alone on its links
    tp_wire = [0.0] * p  # ZeRO-3: per rank its TP rings' wire time per micro-batch, seconds
    fwd_wire = [0.0] * p  # per rank its forwards' part of it
    loads: LinkLoads = ()
    if units:
        loads = dp_link_loads(model, dp_group, leads, p, width, t)
    head = 0.0  # ZeRO-3: the first forward's unhidden gathers
    tails = [0.0] * p  # ZeRO-2/3: each rank's last backward's reduce tail
    stage_tails, stage_scatters = [0.0] * len(chunks), [0.0] * len(chunks)
    full_extra = [0.0] * len(chunks)  # full-B orders: what a B's collectives add beyond the I's
    uncharged = [False] * p  # ZeRO-3: per rank whether its ops leave the reduce-scatters' spill out
    ordered = _ordered(model, units, dp_curves, periods, loads, stages_of, split=split, full=full, sh=sh)
    for r, k, unit, f_plain, b_plain, w_plain in units:
        ops = _unit_ops(model, unit, dp_curves, split, w_plain)  # type: ignore[arg-type]
        z = ops.times
        if k in ordered:  # several chunks timed in the rank's steady order (the spill charged
            f_k, b_k, _ = ordered[k]  # to the B that leaves it)
            fwd[k] += f_k - f_plain
            inp[k] += b_k - b_plain
            held[r] = max(held[r], ops.held_bytes)
            link[r] += ops.link_s
            if k == r:  # the drain's Bs: no forward after them to delay
                tails[r] = z.last_tail_s - sum(ordered[x][2] for x in periods[r].drain)
            if k == 0:  # the first forward: its gathers unhidden
                head += z.fwd_s + z.first_extra_s - f_k
            stage_tails[k], stage_scatters[k] = z.last_tail_s, ops.scatter_s
            continue
        if split and full and sh is Sharding.ZERO3:  # (ZeRO-2's reduce stream is the order's)
            whole = _unit_ops(model, unit, dp_curves, False, w_plain)  # type: ignore[arg-type]
            x = unit.times
            i_op = z.quiet_bwd_s - b_plain  # (several chunks per rank: no spill charged)
            full_extra[k] = whole.times.bwd_s - (x.bwd_tp_s + x.bwd_comm_s + unit.replay) - i_op
            held[r] = max(held[r], whole.held_bytes)
        if loads:
            u = unit
            wire = [model.wire_s(u.first, u.last, u.mbs, u.t, u.sp, u.c, u.ring, x) for x in "FB"]
            tp_wire[r] += wire[0] * (1 + u.full) + wire[1]  # (full recomputation replays the forward)
            fwd_wire[r] += wire[0]
        link[r] += ops.link_s
        # what the reduce-scatters a B (W) leaves queued delay the op after it (Zero3Times.spill_s,
        # as far as the links sit idle in the cycle: the rest is their pace, link_bound_s):
        # charged to that B (W) where the rank's links are its own and the gating paces its
        # cycle; not with several chunks per rank (one chunk's ops timed in turn), nor where the
        # links carry other ranks' rings or TP rings (steady_extra_s, nic_sharing) or no idle time
        charged = not looped and z.idle_s > 0.0 and not any(r in x[0] for x in loads)
        uncharged[r] = not charged
        spill = min(z.spill_s, z.idle_s) if charged else 0.0
        after = 0.0 if charged else z.lead_s  # the forward after a B, beyond one after a F
        fwd[k] += z.fwd_s - f_plain + after
        inp[k] += (z.bwd_s if charged else z.quiet_bwd_s) - b_plain + (0.0 if split else spill)
        wgrad[k] += spill if split else 0.0
        held[r] = max(held[r], ops.held_bytes)
        if k == r:  # the rank's first stage: its last backward
            tails[r] = z.last_tail_s - spill
        if k == 0:
            head += z.first_extra_s - after
        elif k == r and not split:  # a later rank's last B in the drain has no op after it to
            head -= spill  # delay (rank 0's: its tail)
        if k == p - 1 and charged:  # the last rank's first B follows its first forward at once
            head += z.settle_s
        stage_tails[k], stage_scatters[k] = z.last_tail_s, ops.scatter_s
    if units and dp_curves is not None and sh is Sharding.ZERO3:  # the stream slows the gathers
        for r in range(p):
            if not uncharged[r]:  # (the spill charged: the cycle ran the stream)
                continue
            scatter = sum(half_time_s(dp_curves, (model.params(*chunks[k], t) + _held(copies, k)) * grad,
                                      allreduce) for k in stages_of[r])
            busy = sum(inp[k] + wgrad[k] for k in stages_of[r])
            if scatter > busy:  # the stream paces the backwards: each stretched alike
                for k in stages_of[r]:
                    inp[k] *= scatter / busy
                    wgrad[k] *= scatter / busy
    gathers = [0.0] * p  # ZeRO-2: each rank's all-gather after its update
    alone: tuple[float, ...] = ()
    if units and dp_curves is not None and sh is Sharding.ZERO2:
        gathers = [half_time_s(dp_curves, sum(model.params(*chunks[k], t) + _held(copies, k)
                                              for k in stages_of[r]), allreduce)
                   for r in range(p)]
        if any(meet):  # the ranks whose rings cross a link of its own gather beside it
            alone = tuple(gathers)
            weights = dp_weights(loads, p)
            for r, others in enumerate(meet):
                group = (r, *others)
                rows = None if weights is None else [[row[q] for q in group] for row in weights]
                gathers[r] = shared_ends_s([0.0] * len(group), [alone[q] for q in group], rows)[0]
    return ZeroStages(fwd_s=tuple(fwd), input_s=tuple(inp), wgrad_s=tuple(wgrad), held_bytes=tuple(held),
                      head_s=head, tails_s=tuple(tails), stage_tails_s=tuple(stage_tails),
                      stage_scatters_s=tuple(stage_scatters), gathers_s=tuple(gathers), sharding=sh,
                      full_extra_s=tuple(full_extra) if any(full_extra) else (),
                      link_s=tuple(link) if units else (), tp_wire_s=tuple(tp_wire), loads=loads,
                      alone_gathers_s=alone, tp_fwd_wire_s=tuple(fwd_wire) if loads else ())


class SteadyOrder(NamedTuple):
    """A rank's order as :func:`zero_stages` times several ZeRO-3 chunks (:func:`steady_periods`):
    ``period`` its steady period's ops, ``(stage, backward)`` each (empty: none found), and
    ``drain`` the stages of the ``B`` s after its last ``F``."""

    period: tuple[tuple[int, bool], ...]
    drain: tuple[int, ...]


@functools.lru_cache(maxsize=256)
def forwards_after_backward(schedule: str, p: int, m: int, v: int) -> tuple[float, ...]:
    """Per rank the share of its forwards that ``schedule``'s order (``p`` ranks, ``m``
    micro-batches, ``v`` chunks per rank) runs after its first backward (``B`` or ``I``).
    Memoized."""
    order = schedule_order(schedule, p, m, v, ())
    out = []
    for row in order.ranks:
        ops = [str(a.op) for a in row]
        first = next((i for i, x in enumerate(ops) if x in ("B", "I")), len(ops))
        out.append(sum(x == "F" for x in ops[first:]) / max(1, sum(x == "F" for x in ops)))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def steady_periods(schedule: str, p: int, v: int) -> tuple[SteadyOrder, ...]:
    """Per rank ``schedule``'s steady order with ``v`` chunks per rank on ``p`` ranks
    (:class:`SteadyOrder`): its period the ``2 p v`` ops from the forward before its first
    backward on, where they alternate ``F``, ``B`` (empty where they do not). Memoized: the 3D
    search asks for the same few orders in thousands of configurations."""
    order = schedule_order(schedule, p, p * v * (STEADY_CYCLES + 2), v, ())
    out: list[SteadyOrder] = []
    for row in order.ranks:
        ops = [(a.stage, str(a.op)) for a in row]
        first = next((i for i, (_, x) in enumerate(ops) if x == "B"), 0) - 1
        period = ops[first:first + 2 * p * v] if first >= 0 else []
        good = len(period) == 2 * p * v and all(x == "FB"[j % 2] for j, (_, x) in enumerate(period))
        last = max((i for i, (_, x) in enumerate(ops) if x == "F"), default=-1)
        out.append(SteadyOrder(tuple((k, x == "B") for k, x in period) if good else (),
                               tuple(k for k, x in ops[last + 1:] if x == "B")))
    return tuple(out)


def _ordered(
    model: ThreeDCosts, units: Sequence[ZeroUnit], curves: AllReduceCurves | None,
    periods: Sequence[SteadyOrder], loads: LinkLoads, stages_of: Sequence[Sequence[int]],
    *, split: bool, full: bool, sh: Sharding,
) -> dict[int, tuple[float, float, float]]:
    """Per stage of a rank that runs several ZeRO-3 chunks on links of its own (no other ranks'
    rings or TP rings on them) idle in its steady ``periods``' cycle, its forward, its backward
    with the spill it leaves and that spill timed in that order
    (:func:`~pipesim.profiles.costmodels.zero3_timing.zero3_order_times_s`), seconds;
    none elsewhere (split or full-B orders, ZeRO-2, one chunk per rank)."""
    if sh is not Sharding.ZERO3 or split or full or curves is None or not periods:
        return {}
    out: dict[int, tuple[float, float, float]] = {}
    by_stage = {u.stage: u for u in units}
    for r, stages in enumerate(stages_of):
        if len(stages) < 2 or not periods[r].period or any(r in x[0] for x in loads):
            continue
        passes = [_unit_ops(model, by_stage[k].op, curves, False, by_stage[k].wgrad_s).passes for k in stages]
        if any(x is None for x in passes):
            continue
        local = {k: j for j, k in enumerate(stages)}
        f, b, spill, idle = zero3_order_times_s([x for x in passes if x is not None],
                                         [(local[k], back) for k, back in periods[r].period])
        if idle > 0.0:  # the gating, not the links, paces the cycle
            out.update({k: (f[j], b[j], spill[j]) for k, j in local.items()})
    return out


def dp_weights(loads: LinkLoads, p: int) -> list[list[float]] | None:
    """Per link of ``loads`` that carries the data-parallel rings of two of the ``p`` ranks or
    more, per rank its share of its transfers' time there (0 where none of its rings cross it;
    :func:`~pipesim.planner.nic_sharing.shared_ends_s` ``loads``); None where on every such link
    the ranks on it carry equal shares (each rank's collective one flow of ``1/k``, the
    one-link form)."""
    return _link_weights(loads, p, with_tp=False)


def stream_weights(loads: LinkLoads, p: int) -> list[list[float]] | None:
    """:func:`dp_weights` for ZeRO-2's reduce streams (:func:`~pipesim.planner.zero_ops.zero2_reduce_s`
    ``loads``): per link that carries the data-parallel rings of two of the ``p`` ranks or more,
    per rank its share of its transfers' time there, then per rank its TP rings' (their bytes
    share the link with the streams in every micro-batch), ``2 p`` each; None where the ranks
    carry equal shares and no TP ring crosses such a link."""
    return _link_weights(loads, p, with_tp=True)


def _link_weights(loads: LinkLoads, p: int, *, with_tp: bool) -> list[list[float]] | None:
    """:func:`dp_weights`, and with ``with_tp`` :func:`stream_weights`."""
    out: list[list[float]] = []
    uneven = False
    for ranks, dp, tp in loads:
        on = [a for a in dp if a > 0]
        if len(on) < 2:
            continue
        row = [0.0] * (2 * p if with_tp else p)
        for q, a, b in zip(ranks, dp, tp, strict=True):
            row[q] = a
            if with_tp:
                row[p + q] = b
        out.append(row)
        uneven = uneven or len(set(on)) > 1 or (with_tp and any(tp))
    return out if uneven else None


def dp_link_loads(
    model: ThreeDCosts, dp_group: tuple[int, ...], leads: tuple[int, ...], p: int, width: int, t: int
) -> LinkLoads:
    """:func:`_link_loads` of the ``p`` ranks' data-parallel groups (rank 0's ``dp_group``
    shifted to each rank's first device, ``leads``; none: ``r width``), each with its ``t`` TP
    ranks' rings. Cached per cost model."""
    return _link_loads(model, tuple(dp_groups(dp_group, leads, p, width)), t)


def _link_loads(model: ThreeDCosts, groups: tuple[tuple[int, ...], ...], t: int) -> LinkLoads:
    """Per link that carries the data-parallel rings of one pipeline rank and another's rings
    (``groups`` per rank its group, each with its ``t`` TP ranks' rings,
    :func:`~pipesim.profiles.costmodels.dp_rings.rank_groups`) or some rank's TP rings (every
    replica's ``t`` devices from each member on, a flat ring): the ranks and per rank the share
    of its data-parallel transfers' time the link carries (its rings on the link over the
    link's bandwidth against the same on its most loaded link: 1 on its bottleneck, 1/2 where
    half its rings cross it) and of its TP wire time (its TP rings' hops on the link, each at
    its ring's slowest hop's bandwidth over the link's). Cached per cost model."""
    memo = _LOADS.setdefault(model, {})
    key = (groups, t)
    found = memo.get(key)
    if found is None:
        c = model.cluster
        caps = c.links
        dp: list[dict[int, float]] = []
        tp: list[dict[int, float]] = []
        for group in groups:
            count: dict[int, int] = {}
            for ring in rank_groups(group, t):
                for x in ring_links(ring, c.route, c.server_of):
                    count[x] = count.get(x, 0) + 1
            time = {x: n / caps[x].bandwidth_bytes_per_s for x, n in count.items()}
            most = max(time.values(), default=0.0)
            dp.append({x: v / most for x, v in time.items()} if most > 0 else {})
            hops: dict[int, float] = {}
            for first in group if t > 1 else ():
                tp_ring = [(x, first + (x - first + 1) % t) for x in range(first, first + t)]
                slowest = min(c.route_bandwidth_bytes_per_s(a, b) for a, b in tp_ring)
                for a, b in tp_ring:
                    for x in c.route(a, b):
                        hops[x] = hops.get(x, 0.0) + slowest / caps[x].bandwidth_bytes_per_s
            tp.append(hops)
        out: list[tuple[tuple[int, ...], tuple[float, ...], tuple[float, ...]]] = []
        for x in dict.fromkeys(x for links in dp for x in links):
            ranks = tuple(q for q in range(len(groups)) if x in dp[q] or x in tp[q])
            if len(ranks) > 1 or any(x in tp[q] for q in ranks):
                entry = (ranks, tuple(dp[q].get(x, 0.0) for q in ranks),
                         tuple(tp[q].get(x, 0.0) for q in ranks))
                if entry not in out:
                    out.append(entry)
        found = memo[key] = tuple(out)
    return found


_LOADS: weakref.WeakKeyDictionary[ThreeDCosts, dict[tuple[object, ...], LinkLoads]] = (
    weakref.WeakKeyDictionary()
)
"""Per cost model, :func:`_link_loads`'s answers."""


def _unit_ops(
    model: ThreeDCosts, op: ZeroOp, curves: AllReduceCurves, split: bool, wgrad_s: float
) -> ZeroOps:
    """One chunk's ZeRO ops on ``curves`` (:func:`~pipesim.planner.zero_ops.zero_unit_ops`, or
    :func:`~pipesim.planner.zero_ops.zero_split_ops` with its ``W`` of ``wgrad_s`` seconds where
    the order splits the backward), memoized per cost model: chunks of the same layers cost the
    same (read by their signature; a split chunk's by its ``W`` time too)."""
    memo = _ZERO_OPS.setdefault(model, {})
    w_key = wgrad_s if split else 0.0
    key = (model.sig(op.first, op.last), replace(op, first=0, last=0), curves, split, w_key)
    ops = memo.get(key)
    if ops is None:
        ops = memo[key] = (zero_split_ops(model, op, curves, wgrad_s) if split
                           else zero_unit_ops(model, op, curves))
    return ops


def _held(copies: Sequence[float], k: int) -> float:
    """Stage ``k``'s tied copy's bytes on one device (0 without copies)."""
    return copies[k] if copies else 0.0


_ZERO_OPS: weakref.WeakKeyDictionary[ThreeDCosts, dict[tuple[object, ...], ZeroOps]] = (
    weakref.WeakKeyDictionary()
)
"""Per cost model, ZeRO-2/3's chunk ops by the chunk's layer signature and the rest of its
:class:`~pipesim.planner.zero_ops.ZeroOp` (the search costs the same chunk in many
configurations)."""
