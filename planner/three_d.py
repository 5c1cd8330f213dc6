"""The 3D estimate: the analytic iteration time and memory of a tensor x context x pipeline x
data-parallel plan of a shaped transformer (:func:`estimate_3d`), which the Megatron planner
(:mod:`pipesim.planner.megatron`) ranks its search by.

A rank's per-micro-batch forward and backward times (the sum over its ``v`` chunks of
:func:`~pipesim.profiles.costmodels.context_parallel.stage_cp_times`, compute plus exposed TP
collectives and ring exchange; in the backward the replayed forward of recomputation,
:func:`~pipesim.profiles.costmodels.tensor_parallel.tp_replay_s`) give the estimate

    T = (m + (p - 1) / v) (t_f + t_b) + 2 (p v - 1) t_hop + t_dp + t_opt

with ``t_f``, ``t_b`` the slowest rank's, ``t_hop`` one activation transfer between ranks (each
TP and CP rank sends ``1/(t c)`` of it), ``t_dp`` the first rank's gradient collective over its
``d c`` data- and context-parallel ranks (exposed: it finishes last in 1F1B) and ``t_opt`` its
optimizer step after it (:func:`~pipesim.profiles.costmodels.optimizer.stage_optimizer_step_s`; 0
with ``optimizer_step=False``). With ZeRO the collectives are charged per unit as the
simulator's lowering emits them (docs/parallelism.md): ZeRO-1 and the distributed optimizer a
reduce-scatter and an all-gather as ``t_dp``; ZeRO-2 the last backward's reduce-scatter tail and
the all-gather; ZeRO-3's gathers inside ``t_f`` and ``t_b``
(:func:`~pipesim.profiles.costmodels.sharding.zero3_op_times_s`), its first forward's and last
backward's exposed parts as ``t_dp``; with ``Plan.zero3_runtime = deepspeed-2021`` also the
runtime's issue time, re-gathers and on-demand gathers
(:mod:`~pipesim.profiles.costmodels.zero3_runtime`). Memory per rank: TP-sharded weights, gradients
and optimizer state (:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`) plus
the in-flight micro-batches' stashes (:func:`~pipesim.profiles.costmodels.memory.in_flight_microbatches`) and
the backward's working set.

**TP groups across servers.** A rank's TP collectives are timed on the ring of the slowest of its
TP groups (:meth:`ThreeDCosts.ring`): each group's ring all-reduce curves on the cluster's routes
(:func:`~pipesim.profiles.costmodels.collective.allreduce_curves`, members in group order, the
ring the simulator's lowering runs), whose every step takes its slowest hop, so a group that spans
servers is charged its NIC hops (latency and bandwidth of the inter-server route). Where the
ring's bottleneck link also carries the rank's data-parallel ring, ZeRO-2's and ZeRO-3's per-unit
collectives share it with the op's TP block as in the simulation (:mod:`~pipesim.planner.nic_sharing`,
:mod:`~pipesim.planner.zero_ops`; ``tests/tp/test_nic_sharing_estimate.py``, within 6%); gradient
collectives after the backward and pipeline sends that share a NIC with it are not seen
(``tests/tp/test_cross_server_estimate.py`` bounds the difference; exact where nothing shares
the ring's links). :func:`estimate_3d` takes the groups,
rank 0's data-parallel group and the pipeline hop's devices from the plan's placement
(:class:`Placed3d`); the planner's search, which places automatically, from that placement.

**CP rings as placed.** A rank's ring exchange is timed on the slowest hop of its replicas'
context-parallel rings as the plan places them (:meth:`~pipesim.plan.Plan.cp_groups`,
:meth:`ThreeDCosts.cp_hop`), the ring the simulator's lowering times for each replica, so a CP
ring across servers pays its NIC hop (``tests/tp/test_cp_placement_estimate.py``: exact on
one-rank plans).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from pipesim.errors import invalid
from pipesim.plan import Estimate, Plan
from pipesim.planner.nic_sharing import shares_ring_link
from pipesim.planner.zero_ops import ZeroOp, zero_unit_ops
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.context_parallel import (
    RingHop,
    check_context_parallel,
    cp_activation_split,
    cp_stage_activation_bytes,
    ring_hop,
    stage_cp_times,
)
from pipesim.profiles.costmodels.memory import (
    Recompute,
    in_flight_microbatches,
    layer_recompute_times_s,
)
from pipesim.profiles.costmodels.nccl_protocol import link_classes
from pipesim.profiles.costmodels.optimizer import stage_optimizer_step_s
from pipesim.profiles.costmodels.sharding import (
    GradCollective,
    Sharding,
    grad_bytes_factor,
    grad_reduce_dtype,
    half_time_s,
    sharded_memory_multiplier,
    zero_units,
)
from pipesim.profiles.costmodels.tensor_parallel import (
    TpCollective,
    TpStageTimes,
    collective_time_s,
    stage_collectives,
    tp_compute_model,
    tp_parameter_bytes,
    tp_replay_s,
)
from pipesim.profiles.costmodels.zero3_runtime import (
    UnitCalls,
    Zero3Runtime,
    unit_calls,
)
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import DTYPE_BYTES, ModelProfile
from pipesim.profiles.models.shape import LayerKind

__all__ = [
    "THREE_D_SCHEDULES",
    "Placed3d",
    "ThreeDCosts",
    "chunk_ranges",
    "estimate_3d",
    "estimate_config",
    "is_3d",
]

THREE_D_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved")
"""Schedules :func:`estimate_3d` models (GPipe, DAPPLE and 1F1B share the time
``(m + p - 1)(t_f + t_b)`` of equal stages; their memory differs by the in-flight count)."""


class Placed3d(NamedTuple):
    """Where a plan's ranks sit, as :func:`estimate_config` costs them: ``rings`` per rank its TP
    ring (:meth:`ThreeDCosts.ring`), ``dp_group`` rank 0's gradient collective's members (every
    replica's CP ranks' first devices, replica by replica, as the simulator's lowering groups
    them), ``hop`` the first devices of ranks 0 and 1 (the pipeline transfer), ``cp_hops``
    per rank its context-parallel ring's hop (:meth:`ThreeDCosts.cp_hop`) and ``shared`` per
    rank whether its TP rings' bottleneck links carry its data-parallel ring too
    (:func:`~pipesim.planner.nic_sharing.shares_ring_link`; ``None``: automatic placement's,
    :meth:`ThreeDCosts.auto_shared`)."""

    rings: tuple[int, ...]
    dp_group: tuple[int, ...]
    hop: tuple[int, int]
    cp_hops: tuple[int, ...]
    shared: tuple[bool, ...] | None = None


def is_3d(plan: Plan) -> bool:
    """Whether ``plan`` uses tensor or context parallelism or sharding (so :func:`estimate_3d`
    estimates it)."""
    return any(s.replica_width > 1 or s.sharding is not Sharding.NONE for s in plan.stages)


class ThreeDCosts:
    """Cached per-layer TP times and memory of one profile on one cluster (the 3D estimate's and
    the Megatron planner's).

    Raises:
        InputError: the profile is not a transformer whose every layer has a shape and whose
            blocks are contiguous.
    """

    def __init__(self, profile: ModelProfile, cluster: Cluster, recompute: Recompute) -> None:
        self.profile, self.cluster = profile, cluster
        kinds = [None if layer.shape is None else layer.shape.kind for layer in profile.layers]
        blocks = [i for i, k in enumerate(kinds) if k is LayerKind.BLOCK]
        if not blocks or any(k is None for k in kinds) or blocks != list(range(blocks[0], blocks[-1] + 1)):
            raise invalid(
                "planner",
                "megatron",
                f"needs a transformer whose every layer has a shape and whose blocks are contiguous; "
                f"{profile.name!r} is not one (see docs/parallelism.md)",
            )
        self.first_block, self.last_block = blocks[0], blocks[-1]
        shape = profile.layers[blocks[0]].shape
        assert shape is not None
        self.shape = shape
        self.elem = DTYPE_BYTES[profile.dtype]
        self._bw = cluster.links.bandwidths_bytes_per_s()
        self._lat = cluster.links.latencies_s()
        self._cls = link_classes(cluster.links)
        self.compute = tp_compute_model(profile, cluster.device)
        self._curves: dict[tuple[int, ...], AllReduceCurves] = {}
        self._times: dict[tuple[tuple[int, ...], int, int, bool, bool, int, int, int], TpStageTimes] = {}
        self._acts: dict[tuple[tuple[int, ...], int, int, bool, Recompute], tuple[float, float]] = {}
        self._params: dict[tuple[tuple[int, ...], int], float] = {}
        self._hops: list[RingHop] = []  # distinct CP ring hops, by hop index
        self._hop_index: dict[RingHop, int] = {}
        self._hop_of: dict[tuple[tuple[int, ...], ...], int] = {}
        self._auto_hops: dict[tuple[int, int, int, int], int] = {}
        self._auto_shared: dict[tuple[int, int, int, int], bool] = {}
        self._ring_bw: list[float] = []  # per ring index, its bottleneck hop's bandwidth, bytes/s
        self._wires: dict[tuple[tuple[int, ...], int, int, bool, int, int, str], float] = {}
        self._recs: dict[tuple[int, Recompute], list[float]] = {}
        self._classes = _layer_classes(profile)
        self._sigs: dict[tuple[int, int], tuple[int, ...]] = {}
        self._replays: dict[tuple[tuple[int, ...], int, int, bool, Recompute, bool, int, int, int],
                            float] = {}
        self.recompute = recompute
        self._rings: list[AllReduceCurves] = []  # distinct TP ring curves, by ring index
        self._ring_index: dict[AllReduceCurves, int] = {}
        self._ring_of: dict[tuple[tuple[int, ...], ...], int] = {}
        self._auto_rings: dict[tuple[int, int, int, int], int] = {}

    def sig(self, first: int, last: int) -> tuple[int, ...]:
        """A key equal for two layer ranges whose costs are equal: the classes of their layers
        (:func:`_layer_classes`) and of the layer before (whose output is the stage's input);
        the range itself for graph profiles."""
        found = self._sigs.get((first, last))
        if found is None:
            classes = self._classes
            if classes is None:
                found = (first, last)
            else:
                found = (classes[first - 1] if first else -1, *classes[first : last + 1])
            self._sigs[(first, last)] = found
        return found

    @property
    def num_blocks(self) -> int:
        return self.last_block - self.first_block + 1

    def curves(self, members: tuple[int, ...], *, servers: bool = False) -> AllReduceCurves:
        found = self._curves.get(members)
        if found is None:
            c = self.cluster
            found = self._curves[members] = allreduce_curves(
                members, c.route, self._bw.__getitem__, self._lat.__getitem__,
                server_of=c.server_of if servers else None,
                link_class=self._cls.__getitem__ if servers else None,
            )
        return found

    def ring(self, groups: Sequence[tuple[int, ...]]) -> int:
        """The TP ring a rank's collectives are timed on: the index of the ring curves of the
        slowest of ``groups`` (the rank's TP groups, each in ring order), compared by
        :func:`~pipesim.profiles.costmodels.tensor_parallel.collective_time_s` of one sample's
        block all-reduce (``s h`` activations). Groups with equal curves share an index, and
        so their stage times."""
        key = tuple(groups)
        found = self._ring_of.get(key)
        if found is None:
            probe = TpCollective("F", "all-reduce", float(self.shape.seq * self.shape.hidden * self.elem))
            candidates = {self.curves(g): g for g in dict.fromkeys(key)}
            slowest = max(candidates, key=lambda c: collective_time_s(c, probe))
            found = self._ring_index.setdefault(slowest, len(self._rings))
            if found == len(self._rings):
                self._rings.append(slowest)
                group = candidates[slowest]
                n = len(group)
                hops = [(group[k], group[(k + 1) % n]) for k in range(n)] if n > 1 else []
                self._ring_bw.append(min((self.cluster.route_bandwidth_bytes_per_s(a, b) for a, b in hops),
                                         default=math.inf))
            self._ring_of[key] = found
        return found

    def auto_ring(self, t: int, c: int, d: int, rank: int) -> int:
        """:meth:`ring` of rank ``rank``'s TP groups under automatic placement: ``d c`` groups of
        ``t`` consecutive devices from ``rank d t c`` on."""
        key = (t, c, d, rank)
        found = self._auto_rings.get(key)
        if found is None:
            start = rank * d * t * c
            groups = ((start,),) if t == 1 else tuple(
                tuple(range(s, s + t)) for s in range(start, start + d * t * c, t))
            found = self._auto_rings[key] = self.ring(groups)
        return found

    def cp_hop(self, rings: Sequence[tuple[int, ...]]) -> int:
        """The CP ring hop a rank's ring exchange is timed on: the index of the slowest hop
        (:func:`~pipesim.profiles.costmodels.context_parallel.ring_hop` on the cluster's routes)
        of ``rings`` (the rank's replicas' CP rings, as :meth:`~pipesim.plan.Plan.cp_groups`
        gives them and the simulator's lowering times them), compared at one sample's keys and
        values of a block (``2 s h`` elements). A ring that spans servers pays its NIC hop."""
        key = tuple(rings)
        found = self._hop_of.get(key)
        if found is None:
            cl = self.cluster
            probe = 2.0 * self.shape.seq * self.shape.hidden * self.elem
            hops = [ring_hop(r, cl.route_latency_s, cl.route_bandwidth_bytes_per_s)
                    for r in dict.fromkeys(key)]
            slowest = max(hops, key=lambda h: h.time_s(probe))
            found = self._hop_index.setdefault(slowest, len(self._hops))
            if found == len(self._hops):
                self._hops.append(slowest)
            self._hop_of[key] = found
        return found

    def auto_cp_hop(self, t: int, c: int, d: int, rank: int) -> int:
        """:meth:`cp_hop` of rank ``rank``'s CP rings under automatic placement: per replica
        ``lead, lead + t, .., lead + (c - 1) t`` with ``lead`` from ``rank d t c`` on, ``t c`` apart."""
        key = (t, c, d, rank)
        found = self._auto_hops.get(key)
        if found is None:
            start = rank * d * t * c
            leads = range(start, start + d * t * c, t * c)
            rings = tuple(tuple(lead + k * t for k in range(c)) for lead in leads)
            found = self._auto_hops[key] = self.cp_hop(rings)
        return found

    def auto_shared(self, t: int, c: int, d: int, rank: int) -> bool:
        """:func:`~pipesim.planner.nic_sharing.shares_ring_link` of rank ``rank``'s replicas'
        TP groups and data-parallel ring under automatic placement (as :meth:`auto_cp_hop`)."""
        key = (t, c, d, rank)
        found = self._auto_shared.get(key)
        if found is None:
            start = rank * d * t * c
            leads = range(start, start + d * t * c, t * c)
            groups = [tuple(range(lead, lead + t)) for lead in leads]
            dp_ring = [lead + k * t for lead in leads for k in range(c)]
            found = self._auto_shared[key] = t > 1 and shares_ring_link(self.cluster, groups, dp_ring)
        return found

    def wire_s(
        self, first: int, last: int, mbs: int, t: int, sp: bool, c: int, ring: int, phase: str
    ) -> float:
        """Seconds the TP collectives of phase ``phase`` (``F``, ``B``) of layers ``first..last``
        for ``mbs`` samples hold ring ``ring``'s bottleneck link: their hop bytes,
        ``(t - 1) / t`` of each call's wire bytes (2 units per all-reduce, 1 per half, its NCCL
        protocol's wire factor), at the link's bandwidth (the rest of the op's block is the
        calls' latencies, during which the link is free: ``simulator/tp_collectives.py``)."""
        key = (self.sig(first, last), mbs, t, sp, c, ring, phase)
        found = self._wires.get(key)
        if found is None:
            curves, bandwidth = self._rings[ring], self._ring_bw[ring]
            layers = self.profile.layers[first : last + 1]
            calls = stage_collectives(layers, t, sp, mbs / c, self.profile.dtype)
            weighted = sum((2 if x.kind == "all-reduce" else 1) * x.nbytes
                           * curves.protocol_for(x.nbytes, AllReduceAlgorithm.RING).wire_factor
                           for x in calls if x.phase == phase)
            found = self._wires[key] = (t - 1) / t * weighted / bandwidth if bandwidth < math.inf else 0.0
        return found

    def times(
        self, first: int, last: int, mbs: int, t: int, sp: bool, overlap: bool, c: int, ring: int,
        cp_hop: int,
    ) -> TpStageTimes:
        """Layers ``first..last``'s times for ``mbs`` samples under TP x CP, the TP collectives on
        ring ``ring`` (:meth:`ring`), the ring exchange on hop ``cp_hop`` (:meth:`cp_hop`),
        seconds (``stage_cp_times``)."""
        key = (self.sig(first, last), mbs, t, sp, overlap, c, ring, cp_hop)
        found = self._times.get(key)
        if found is None:
            curves = self._rings[ring]
            found = self._times[key] = stage_cp_times(self.profile, first, last, mbs, t, c, sp, curves,
                                                     self._hops[cp_hop], self.compute, overlap)
        return found

    def replay(
        self, first: int, last: int, mbs: int, t: int, sp: bool, rc: Recompute, overlap: bool, c: int,
        ring: int, cp_hop: int,
    ) -> float:
        """The forward replayed before a chunk's backward under TP x CP, seconds (``tp_replay_s``)."""
        if rc is Recompute.NONE:
            return 0.0
        key = (self.sig(first, last), mbs, t, sp, rc, overlap, c, ring, cp_hop)
        found = self._replays.get(key)
        if found is None:
            rec = self._recs.get((mbs, rc))
            if rec is None:
                rec = self._recs[(mbs, rc)] = layer_recompute_times_s(self.profile, mbs, rc)
            times = self.times(first, last, mbs, t, sp, overlap, c, ring, cp_hop)
            ratio = times.fwd_tp_s / times.fwd_s if times.fwd_s > 0 else 1.0
            found = self._replays[key] = tp_replay_s(rc, sum(rec[first : last + 1]), ratio, times.fwd_comm_s,
                                                     t * c)
        return found

    def activations(
        self, first: int, last: int, mbs: int, t: int, sp: bool, rc: Recompute, c: int = 1
    ) -> tuple[float, float]:
        key = (self.sig(first, last), mbs, t, sp, rc)
        found = self._acts.get(key)  # without CP (cp_stage_activation_bytes), split below
        if found is None:
            found = self._acts[key] = cp_stage_activation_bytes(self.profile, first, last, mbs, rc, t, sp, 1)
        return cp_activation_split(*found, c)

    def zero_units(
        self, first: int, last: int, t: int
    ) -> tuple[list[float], list[float], list[float], list[UnitCalls]]:
        """ZeRO's units of layers ``first..last`` (:func:`~pipesim.profiles.costmodels.sharding.zero_units`,
        as the simulator groups them): parameter bytes per device, forward and backward time shares,
        ZeRO-3's runtime calls (:func:`~pipesim.profiles.costmodels.zero3_runtime.unit_calls`)."""
        layers = self.profile.layers[first : last + 1]
        sizes = [tp_parameter_bytes(layer, t, self.elem) for layer in layers]
        groups = zero_units(sizes)
        fwd = [sum(layers[i].fwd_time_s for i in g) for g in groups]
        bwd = [sum(layers[i].bwd_time_s for i in g) for g in groups]
        return (
            [float(sum(sizes[i] for i in g)) for g in groups],
            [x / sum(fwd) if sum(fwd) > 0 else 1.0 / len(fwd) for x in fwd],
            [x / sum(bwd) if sum(bwd) > 0 else 1.0 / len(bwd) for x in bwd],
            [unit_calls([layers[i] for i in g], self.elem, t) for g in groups],
        )

    def params(self, first: int, last: int, t: int) -> float:
        key = (self.sig(first, last), t)
        found = self._params.get(key)
        if found is None:
            layers = self.profile.layers[first : last + 1]
            found = self._params[key] = sum(tp_parameter_bytes(layer, t, self.elem) for layer in layers)
        return found


def _layer_classes(profile: ModelProfile) -> list[int] | None:
    """Per layer, the index of the first layer equal to it but for its name, batch points
    included (the zoo's blocks are all alike), or ``None`` for a graph profile (whose cuts
    depend on more than the layer before)."""
    if profile.edges is not None:
        return None
    seen: dict[object, int] = {}
    out = []
    for i, layer in enumerate(profile.layers):
        points = tuple(
            (bp.batch_size, bp.fwd_time_s[i], bp.bwd_time_s[i], bp.activation_bytes[i],
             None if bp.saved_activation_bytes is None else bp.saved_activation_bytes[i])
            for bp in profile.batch_points
        )
        out.append(seen.setdefault((replace(layer, name="layer"), points), i))
    return out


def chunk_ranges(model: ThreeDCosts, p: int, v: int) -> list[tuple[int, int]]:
    """Layer ranges of the ``p v`` virtual stages: equal block counts, the embedding (and any
    layers before the blocks) with the first, the head with the last."""
    n = model.num_blocks // (p * v)
    out = []
    for k in range(p * v):
        first = model.first_block + k * n
        last = first + n - 1
        if k == 0:
            first = 0
        if k == p * v - 1:
            last = model.profile.num_layers - 1
        out.append((first, last))
    return out


def estimate_3d(
    plan: Plan, profile: ModelProfile, cluster: Cluster, *, optimizer_step: bool = True
) -> Estimate:
    """The estimate (module docstring) of a plan with one tensor- and context-parallel degree,
    replica count, sequence parallelism, TP overlap and sharding on every stage, equal
    micro-batches and a ``1f1b`` or ``interleaved`` schedule (any layer split);
    ``optimizer_step=False`` leaves out the optimizer step (as
    :class:`~pipesim.simulator.SimOptions` ``optimizer_step=False`` does).

    Raises:
        InputError: the plan is not of that form, or its model is not a shaped transformer.
        Infeasible: the plan needs more devices than the cluster has.
    """
    first = plan.stages[0]
    form = (first.tensor_parallel, first.replicas, first.sequence_parallel, first.sharding)
    if len({(s.tensor_parallel, s.replicas, s.sequence_parallel, s.sharding, s.tp_comm_overlap,
             s.context_parallel) for s in plan.stages}) > 1:
        raise invalid("plan", "mixed per-stage parallelism", "the 3D estimate needs the same t, c, d, sp and "
                      "sharding on every stage")
    if plan.microbatch_sizes is not None or plan.schedule.value not in THREE_D_SCHEDULES:
        names = ", ".join(THREE_D_SCHEDULES)
        rule = f"the 3D estimate models {names} with equal micro-batches"
        raise invalid("plan.schedule", plan.schedule.value, rule)
    t, d, sp, sh = form
    c = first.context_parallel
    check_context_parallel(profile, 0, profile.num_layers - 1, c, "stages[0].context_parallel")
    m, v, p = plan.num_microbatches, plan.chunks, plan.num_ranks
    samples = plan.global_batch_size // m
    if samples % d:
        raise invalid("plan.global_batch_size", plan.global_batch_size,
                      f"the 3D estimate needs micro-batches of a multiple of the {d} replicas")
    model = ThreeDCosts(profile, cluster, plan.recompute)
    cp_groups = plan.cp_groups(cluster.num_devices)  # per rank, per replica, its CP ranks' first devices
    placed = Placed3d(
        # per rank, the slowest of its TP groups: every replica's and every CP rank's
        rings=tuple(model.ring(tuple(tuple(range(lead, lead + t)) for ring in cp for lead in ring))
                    for cp in cp_groups),
        dp_group=tuple(x for ring in cp_groups[0] for x in ring),
        hop=(cp_groups[0][0][0], cp_groups[min(1, p - 1)][0][0]),
        cp_hops=tuple(model.cp_hop(cp) for cp in cp_groups),  # per rank, its replicas' CP rings
        shared=tuple(t > 1 and shares_ring_link(cluster, groups, [x for ring in cp for x in ring])
                     for groups, cp in zip(plan.tp_groups(cluster.num_devices), cp_groups, strict=True)),
    )
    chunks = [(s.first_layer, s.last_layer) for s in plan.stages]
    opt, ar, gbs = plan.optimizer.value, plan.allreduce.value, plan.global_batch_size
    rc = plan.recompute
    est = estimate_config(model, cluster, opt, ar, gbs, chunks, t, p, d, samples // d, m, v, sp, rc, sh,
                          math.inf, schedule=plan.schedule.value, overlap=first.tp_comm_overlap, c=c,
                          optimizer_step=optimizer_step, grad=plan.grad_reduce_dtype,
                          zero1_all_reduce=plan.zero1_grad_collective is GradCollective.ALL_REDUCE,
                          placed=placed, zero3_runtime=plan.zero3_runtime)
    assert est is not None  # no memory limit
    return est


def estimate_config(
    model: ThreeDCosts, cluster: Cluster, optimizer: str, allreduce: str, gbs: int,
    chunks: list[tuple[int, int]], t: int, p: int, d: int, mbs: int, m: int, v: int, sp: bool,
    rc: Recompute, sh: Sharding, limit: float,
    schedule: str | None = None, overlap: bool = False, c: int = 1, optimizer_step: bool = True,
    grad: str | None = None, zero1_all_reduce: bool = False, placed: Placed3d | None = None,
    zero3_runtime: Zero3Runtime = Zero3Runtime.FSDP,
) -> Estimate | None:
    """The estimate (module docstring) of one configuration: ``chunks`` the ``p v`` chunks' layer
    ranges (rank ``k mod p`` runs chunk ``k``), ``t``, ``p``, ``d``, ``c`` the degrees, ``mbs``
    samples per micro-batch and replica, ``m`` micro-batches, ``v`` chunks per rank, ``sp``,
    ``rc``, ``sh`` sequence parallelism, recomputation and sharding; ``placed`` where the ranks
    sit (:class:`Placed3d`; default: automatic placement, :meth:`ThreeDCosts.auto_ring`);
    ``zero3_runtime`` how ZeRO-3's gathers are issued
    (:class:`~pipesim.profiles.costmodels.zero3_runtime.Zero3Runtime`).
    ``None`` when a rank's peak memory exceeds ``limit`` bytes."""
    schedule = schedule or ("1f1b" if v == 1 else "interleaved")
    if schedule == "dapple":
        schedule = "1f1b"  # the same in-flight count (DAPPLE's K_i = min(p - i, m))
    multiplier = sharded_memory_multiplier(model.profile.dtype, optimizer, sh, d * c, grad)
    g = grad_bytes_factor(model.profile.dtype, grad)  # gradient bytes per parameter byte
    per_unit = d * c > 1 and sh in (Sharding.ZERO2, Sharding.ZERO3)
    if placed is None:  # automatic placement: rank r from device r d t c on, TP ranks fastest
        placed = Placed3d(rings=tuple(model.auto_ring(t, c, d, r) for r in range(p)),
                          dp_group=tuple(k * t for k in range(d * c)), hop=(0, d * t * c),
                          cp_hops=tuple(model.auto_cp_hop(t, c, d, r) for r in range(p)))
    rings, cp_hops = placed.rings, placed.cp_hops

    def shared(rank: int) -> bool:
        if placed.shared is None:
            return model.auto_shared(t, c, d, rank)
        return placed.shared[rank]

    # every replica's CP ranks (tp-cp order) reduce the gradients together
    dp_curves = model.curves(placed.dp_group, servers=True) if d * c > 1 else None
    tf = tb = 0.0
    peaks: list[float] = []
    head = tail = 0.0  # ZeRO: the first forward's unhidden gathers, the last backward's reduce tail
    for r in range(p):
        fr = br = 0.0
        static = 0.0
        stash = work = held = 0.0
        for k in range(r, p * v, p):
            first, last = chunks[k]
            times = model.times(first, last, mbs, t, sp, overlap, c, rings[r], cp_hops[r])
            f_op = times.fwd_tp_s + times.fwd_comm_s
            replay = model.replay(first, last, mbs, t, sp, rc, overlap, c, rings[r], cp_hops[r])
            b_op = times.bwd_tp_s + times.bwd_comm_s + replay
            if per_unit and dp_curves is not None:  # ZeRO-2/3: per-unit collectives (zero_lowering)
                unit = ZeroOp(first=first, last=last, mbs=mbs, t=t, sp=sp, c=c, ring=rings[r], times=times,
                              replay=replay, sharding=sh, runtime=zero3_runtime, full=rc is Recompute.FULL,
                              replicas=d * c, grad=g, allreduce=allreduce, shared=shared(r))
                ops = zero_unit_ops(model, unit, dp_curves)
                f_op, b_op, first_extra, last_tail = ops.fwd_s, ops.bwd_s, ops.first_extra_s, ops.last_tail_s
                held = max(held, ops.held_bytes)
                if k == 0:
                    head, tail = first_extra, last_tail
            fr += f_op
            br += b_op
            static += model.params(first, last, t) * multiplier
            s_bytes, w_bytes = model.activations(first, last, mbs, t, sp, rc, c)
            stash, work = max(stash, s_bytes), max(work, w_bytes)
        in_flight = in_flight_microbatches(schedule, r, p, m, chunks=v)
        peak = static + in_flight * stash + work + held
        if peak > limit:
            return None
        peaks.append(peak)
        tf, tb = max(tf, fr), max(tb, br)
    hop = 0.0
    if p > 1:
        act = mbs * model.shape.seq * model.shape.hidden * model.elem / (t * c)
        src, dst = placed.hop  # rank 0's and rank 1's first devices
        bw = cluster.route_bandwidth_bytes_per_s(src, dst)
        hop = cluster.route_latency_s(src, dst) + (act / bw if bw < math.inf else 0.0)
    dp = 0.0
    if dp_curves is not None:  # rank 0's data-parallel collectives after its last backward
        nbytes = sum(model.params(*chunks[k], t) for k in range(0, p * v, p))
        if sh is Sharding.NONE:
            dp = dp_curves.time_s(nbytes * g, allreduce)
        elif sh is Sharding.ZERO3:  # the first gathers and the last reduce-scatters
            dp = head + tail
        elif sh is Sharding.ZERO2:  # the last reduce-scatters, the gather after the optimizer step
            dp = tail + half_time_s(dp_curves, nbytes, allreduce)
        elif sh is Sharding.ZERO1 and zero1_all_reduce:  # DeepSpeed's BF16_Optimizer: all-reduce
            dp = dp_curves.time_s(nbytes * g, allreduce) + half_time_s(dp_curves, nbytes, allreduce)
        else:  # ZeRO-1, distributed optimizer: reduce-scatter, optimizer step, all-gather
            dp = half_time_s(dp_curves, nbytes * g, allreduce) + half_time_s(dp_curves, nbytes, allreduce)
    opt = 0.0
    if optimizer_step:  # rank 0's update, after its gradient collective (it finishes last)
        for k in range(0, p * v, p):
            opt += stage_optimizer_step_s(
                model.params(*chunks[k], t), cluster.device_spec(0), optimizer, model.profile.dtype, sh,
                d * c, grad_reduce_dtype(model.profile.dtype, grad),
            )
    time_s = (m + (p - 1) / v) * (tf + tb) + 2 * (p * v - 1) * hop + dp + opt
    return Estimate(
        iteration_time_s=time_s,
        throughput_samples_per_s=gbs / time_s,
        peak_memory_bytes=max(peaks),
    )


