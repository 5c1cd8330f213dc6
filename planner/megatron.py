"""The Megatron-LM planner: 3D parallelism (tensor x pipeline x data) for shaped transformers.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21), Sec. 3 give the space and its rules of thumb; this planner searches it
exhaustively and ranks by an analytic estimate:

* ``t``: tensor-parallel degree, a power of two up to the server size dividing the heads and
  the MLP width (TP inside a server, Sec. 3.3 "takeaway #1");
* ``c``: context-parallel degree, a power of two dividing the sequence length (Megatron-LM's
  ``--context-parallel-size``, ring attention:
  :mod:`~pipesim.profiles.costmodels.context_parallel`);
* ``p``: pipeline ranks dividing the number of blocks, ``d = N / (t c p)`` data-parallel
  replicas (every device used);
* the micro-batch size ``b`` per replica (``m = B / (d b)`` micro-batches), ``v`` model chunks
  per rank (``1f1b`` for ``v = 1``, ``interleaved`` otherwise, with ``m`` a multiple of ``p``);
* recomputation ``none``, ``full`` or ``selective`` (when the blocks have an attention core to
  drop: not with flash attention); sequence parallelism with TP or not, and with it the TP
  communication overlap (``tp_comm_overlap``) or not; sharding ``none`` or the distributed
  optimizer (any sharding when pinned).

Stages are uniform: the blocks are cut into ``p v`` equal chunks; the embedding goes with the
first chunk and the head with the last (as in Megatron-LM). A rank's per-micro-batch forward and
backward times (the sum over its ``v`` chunks of
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
(:mod:`~pipesim.profiles.costmodels.zero3_runtime`). Memory per rank: TP-sharded weights,
gradients and optimizer state (:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`)
plus the in-flight micro-batches' stashes
(:func:`~pipesim.profiles.costmodels.memory.in_flight_microbatches`) and the backward's working set.
Plans must fit the device memory.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace

from pipesim.errors import Infeasible, invalid
from pipesim.plan import Estimate, Plan, StagePlan
from pipesim.profiles.costmodels.collective import AllReduceCurves, allreduce_curves
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
    check_recompute,
    in_flight_microbatches,
    layer_recompute_times_s,
)
from pipesim.profiles.costmodels.optimizer import stage_optimizer_step_s
from pipesim.profiles.costmodels.sharding import (
    GradCollective,
    Sharding,
    grad_bytes_factor,
    grad_reduce_dtype,
    half_time_s,
    reduce_tail_s,
    sharded_memory_multiplier,
    zero3_op_times_s,
    zero_units,
)
from pipesim.profiles.costmodels.tensor_parallel import (
    TpStageTimes,
    check_tp_group_in_server,
    tp_compute_model,
    tp_parameter_bytes,
    tp_replay_s,
)
from pipesim.profiles.costmodels.zero3_runtime import (
    UnitCalls,
    Zero3Runtime,
    unit_calls,
    unit_gathers,
    unit_issue_s,
)
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import DTYPE_BYTES, ModelProfile
from pipesim.profiles.models.shape import LayerKind

__all__ = [
    "MAX_CHUNKS",
    "MEGATRON_SHORTLIST",
    "THREE_D_SCHEDULES",
    "MegatronPins",
    "estimate_3d",
    "is_3d",
    "megatron_plans",
]

log = logging.getLogger(__name__)

MAX_CHUNKS = 8
"""Most model chunks per rank tried (Megatron-LM's interleaving uses a few; Narayanan et al. Fig. 12)."""

_MICROBATCH_SIZES = (1, 2, 4, 8, 16)

MEGATRON_SHORTLIST = 4
"""Plans the megatron planner keeps for a rerank (or ``top``, when larger). Smaller than the
other planners' 8: its estimate is the simulated time for single-rank plans and within about 7%
of it with pipelines (GPT-3 175B on 1024 A100), and one simulation of a 1024-GPU interleaved plan
costs seconds (``benchmarks/bench_tp.py``)."""

_Config = tuple[int, int, int, int, int, bool, Recompute, int, bool, Sharding]
"""``(t, p, d, m, v, sequence parallel, recompute, c, tp_comm_overlap, sharding)``."""

MAX_CONTEXT_PARALLEL = 16
"""Largest context-parallel degree searched (a power of two dividing the sequence length)."""

THREE_D_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved")
"""Schedules :func:`estimate_3d` models (GPipe, DAPPLE and 1F1B share the time
``(m + p - 1)(t_f + t_b)`` of equal stages; their memory differs by the in-flight count)."""


def is_3d(plan: Plan) -> bool:
    """Whether ``plan`` uses tensor or context parallelism or sharding (so :func:`estimate_3d`
    estimates it)."""
    return any(s.replica_width > 1 or s.sharding is not Sharding.NONE for s in plan.stages)


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronPins:
    """Dimensions the user fixed (``None``: searched).

    Raises:
        InputError: ``tensor_parallel`` or ``context_parallel < 1``; sequence parallelism pinned
            on without TP > 1.
        UnknownNameError: an unknown sharding.
    """

    tensor_parallel: int | None = None
    sequence_parallel: bool | None = None
    sharding: Sharding | str | None = None
    context_parallel: int | None = None

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "context_parallel"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise invalid(name, value, "must be an integer >= 1")
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise invalid("sequence_parallel", True, "needs tensor_parallel > 1")
        if self.sharding is not None:
            object.__setattr__(self, "sharding", Sharding.parse(self.sharding))


class _Model:
    """Cached per-layer TP times and memory of one profile on one cluster."""

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
        self.compute = tp_compute_model(profile, cluster.device)
        self._curves: dict[tuple[int, ...], AllReduceCurves] = {}
        self._times: dict[tuple[tuple[int, ...], int, int, bool, bool, int], TpStageTimes] = {}
        self._acts: dict[tuple[tuple[int, ...], int, int, bool, Recompute], tuple[float, float]] = {}
        self._params: dict[tuple[tuple[int, ...], int], float] = {}
        self._hops: dict[tuple[int, int], RingHop] = {}
        self._recs: dict[tuple[int, Recompute], list[float]] = {}
        self._classes = _layer_classes(profile)
        self._sigs: dict[tuple[int, int], tuple[int, ...]] = {}
        self._replays: dict[tuple[tuple[int, ...], int, int, bool, Recompute, bool, int], float] = {}
        self.recompute = recompute

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
            )
        return found

    def hop(self, t: int, c: int) -> RingHop:
        """The CP ring of the first replica under automatic placement: devices ``0, t, .., (c-1) t``."""
        found = self._hops.get((t, c))
        if found is None:
            ring = tuple(k * t for k in range(c))
            cl = self.cluster
            found = self._hops[(t, c)] = ring_hop(ring, cl.route_latency_s, cl.route_bandwidth_bytes_per_s)
        return found

    def times(
        self, first: int, last: int, mbs: int, t: int, sp: bool, overlap: bool = False, c: int = 1
    ) -> TpStageTimes:
        key = (self.sig(first, last), mbs, t, sp, overlap, c)
        found = self._times.get(key)
        if found is None:
            group = tuple(range(t))
            curves = self.curves(group)
            found = self._times[key] = stage_cp_times(self.profile, first, last, mbs, t, c, sp, curves,
                                                     self.hop(t, c), self.compute, overlap)
        return found

    def replay(
        self, first: int, last: int, mbs: int, t: int, sp: bool, rc: Recompute, overlap: bool = False,
        c: int = 1,
    ) -> float:
        """The forward replayed before a chunk's backward under TP x CP, seconds (``tp_replay_s``)."""
        if rc is Recompute.NONE:
            return 0.0
        key = (self.sig(first, last), mbs, t, sp, rc, overlap, c)
        found = self._replays.get(key)
        if found is None:
            rec = self._recs.get((mbs, rc))
            if rec is None:
                rec = self._recs[(mbs, rc)] = layer_recompute_times_s(self.profile, mbs, rc)
            times = self.times(first, last, mbs, t, sp, overlap, c)
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


def _chunks(model: _Model, p: int, v: int) -> list[tuple[int, int]]:
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


def _candidates(values: list[int], pinned: int | None) -> list[int]:
    return [pinned] if pinned is not None else values


def megatron_plans(
    profile: ModelProfile,
    cluster: Cluster,
    global_batch_size: int,
    *,
    memory_limit_bytes: float,
    top: int,
    optimizer: str = "adam",
    allreduce: str = "auto",
    recompute: Recompute | str | bool | None = None,
    pins: MegatronPins | None = None,
    grad_reduce_dtype: str | None = None,
    zero1_grad_collective: str = "reduce-scatter",
) -> list[Plan]:
    """The best 3D-parallel plans by the estimate (module docstring), best first, at most ``top``.

    Args:
        profile: a transformer profile with shaped layers.
        cluster: the cluster; every device is used.
        global_batch_size: samples per iteration.
        memory_limit_bytes: per-device limit, bytes.
        top: most plans returned.
        optimizer: optimizer name (state memory).
        allreduce: data-parallel all-reduce algorithm.
        recompute: a recomputation mode to pin, or ``None`` to search ``none``, ``full`` and
            ``selective`` (the last where the blocks have attention cores).
        pins: tensor, sequence or context parallelism or sharding the user fixed.
        grad_reduce_dtype, zero1_grad_collective: the plans' gradient collectives
            (:class:`~pipesim.plan.Plan`).

    Raises:
        InputError: the profile is not a shaped transformer, or a bad pin.
        Infeasible: no plan fits (the message says why).
    """
    pins = pins or MegatronPins()
    zero1 = GradCollective.parse(zero1_grad_collective)
    zero1_all_reduce = zero1 is GradCollective.ALL_REDUCE
    n_dev, g = cluster.num_devices, cluster.gpus_per_server
    shape_model = _Model(profile, cluster, Recompute.NONE)
    shape = shape_model.shape
    blocks = shape_model.num_blocks
    ts = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= g and shape.heads % t == 0 and shape.ffn % t == 0]
    ts = _candidates(ts, pins.tensor_parallel)
    rcs = [check_recompute(profile, recompute)] if recompute is not None else [Recompute.NONE, Recompute.FULL]
    if recompute is None and any(layer.attention_core_saved_bytes for layer in profile.layers):
        rcs.append(Recompute.SELECTIVE)  # blocks with an attention core to drop (not flash attention)
    shardings = [Sharding.NONE, Sharding.DISTRIBUTED]
    if pins.sharding is not None:
        shardings = [Sharding.parse(pins.sharding)]
    cs = [c for c in (1, 2, 4, 8, 16) if c <= MAX_CONTEXT_PARALLEL and shape.seq % c == 0]
    cs = _candidates(cs, pins.context_parallel)
    found: list[tuple[float, float, int, _Config, Estimate]] = []
    tried = 0
    for t, c in ((t, c) for t in ts for c in cs):
        if n_dev % (t * c) or shape.heads % t:
            continue
        sps = [False, True] if t > 1 else [False]
        if pins.sequence_parallel is not None:
            sps = [pins.sequence_parallel]
        for p in (q for q in range(1, blocks + 1) if blocks % q == 0 and (n_dev // (t * c)) % q == 0):
            d = n_dev // (t * c * p)
            for mbs in _MICROBATCH_SIZES:
                if global_batch_size % (d * mbs):
                    continue
                m = global_batch_size // (d * mbs)
                for v in range(1, MAX_CHUNKS + 1):
                    if blocks % (p * v) or (v > 1 and (p == 1 or m % p)):
                        continue
                    for sp, ov in ((s, o) for s in sps for o in ((False, True) if s else (False,))):
                        for rc in rcs:
                            for sh in shardings:
                                tried += 1
                                est = _estimate(shape_model, cluster, optimizer, allreduce, global_batch_size,
                                                _chunks(shape_model, p, v), t, p, d, mbs, m, v, sp, rc, sh,
                                                memory_limit_bytes, overlap=ov, c=c, grad=grad_reduce_dtype,
                                                zero1_all_reduce=zero1_all_reduce)
                                if est is None:
                                    continue
                                config = (t, p, d, m, v, sp, rc, c, ov, sh)
                                key = (est.iteration_time_s, est.peak_memory_bytes, len(found))
                                found.append((*key, config, est))
    log.info("megatron: %d configurations, %d fit", tried, len(found))
    if not found:
        raise Infeasible(
            f"megatron: none of {tried} (t, c, p, d, micro-batch, chunks) configurations of {profile.name} "
            f"fits {memory_limit_bytes / 2**30:.3g} GiB per device on {n_dev} devices"
        )
    # Among configurations that differ only in sharding, drop those no faster and no smaller than
    # a kept one (sharding with the same traffic costs no time here but saves memory).
    found.sort(key=lambda x: (x[0], x[1], x[2]))
    kept: dict[tuple[object, ...], list[tuple[float, float]]] = {}
    plans: list[Plan] = []
    for time_s, peak, _, config, est in found:
        group = kept.setdefault(config[:-1], [])
        if any(k_time <= time_s and k_peak <= peak for k_time, k_peak in group):
            continue
        group.append((time_s, peak))
        found_plan = _plan(shape_model, global_batch_size, *config, optimizer, allreduce, est)
        plans.append(replace(found_plan, grad_reduce_dtype=grad_reduce_dtype,
                             zero1_grad_collective=zero1))
        if len(plans) == top:
            break
    return plans


def estimate_3d(
    plan: Plan, profile: ModelProfile, cluster: Cluster, *, optimizer_step: bool = True
) -> Estimate:
    """The estimate (module docstring) of a plan with one tensor- and context-parallel degree,
    replica count, sequence parallelism, TP overlap and sharding on every stage, equal
    micro-batches and a ``1f1b`` or ``interleaved`` schedule (any layer split);
    ``optimizer_step=False`` leaves out the optimizer step (as
    :class:`~pipesim.simulator.SimOptions` ``optimizer_step=False`` does).

    Raises:
        InputError: the plan is not of that form, its model is not a shaped transformer, or a
            tensor-parallel group spans servers.
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
    if t > 1:  # every CP rank's TP group
        for rank, rings in enumerate(plan.cp_groups(cluster.num_devices)):
            for lead in (d for ring in rings for d in ring):
                group = tuple(range(lead, lead + t))
                check_tp_group_in_server(group, cluster.server_of, f"stages[{rank}].tensor_parallel")
    c = first.context_parallel
    check_context_parallel(profile, 0, profile.num_layers - 1, c, "stages[0].context_parallel")
    m, v, p = plan.num_microbatches, plan.chunks, plan.num_ranks
    samples = plan.global_batch_size // m
    if samples % d:
        raise invalid("plan.global_batch_size", plan.global_batch_size,
                      f"the 3D estimate needs micro-batches of a multiple of the {d} replicas")
    model = _Model(profile, cluster, plan.recompute)
    chunks = [(s.first_layer, s.last_layer) for s in plan.stages]
    opt, ar, gbs = plan.optimizer.value, plan.allreduce.value, plan.global_batch_size
    rc = plan.recompute
    est = _estimate(model, cluster, opt, ar, gbs, chunks, t, p, d, samples // d, m, v, sp, rc, sh, math.inf,
                    schedule=plan.schedule.value, overlap=first.tp_comm_overlap, c=c,
                    optimizer_step=optimizer_step, grad=plan.grad_reduce_dtype,
                    zero1_all_reduce=plan.zero1_grad_collective is GradCollective.ALL_REDUCE,
                    zero3_runtime=plan.zero3_runtime)
    assert est is not None  # no memory limit
    return est


def _estimate(
    model: _Model, cluster: Cluster, optimizer: str, allreduce: str, gbs: int, chunks: list[tuple[int, int]],
    t: int, p: int, d: int, mbs: int, m: int, v: int, sp: bool, rc: Recompute, sh: Sharding, limit: float,
    schedule: str | None = None, overlap: bool = False, c: int = 1, optimizer_step: bool = True,
    grad: str | None = None, zero1_all_reduce: bool = False, zero3_runtime: Zero3Runtime = Zero3Runtime.FSDP,
) -> Estimate | None:
    schedule = schedule or ("1f1b" if v == 1 else "interleaved")
    if schedule == "dapple":
        schedule = "1f1b"  # the same in-flight count (DAPPLE's K_i = min(p - i, m))
    multiplier = sharded_memory_multiplier(model.profile.dtype, optimizer, sh, d * c, grad)
    g = grad_bytes_factor(model.profile.dtype, grad)  # gradient bytes per parameter byte
    per_unit = d * c > 1 and sh in (Sharding.ZERO2, Sharding.ZERO3)
    # every replica's CP ranks (tp-cp order) reduce the gradients together
    dp_curves = model.curves(tuple(k * t for k in range(d * c)), servers=True) if d * c > 1 else None
    tf = tb = 0.0
    peaks: list[float] = []
    head = tail = 0.0  # ZeRO: the first forward's unhidden gathers, the last backward's reduce tail
    for r in range(p):
        fr = br = 0.0
        static = 0.0
        stash = work = held = 0.0
        for k in range(r, p * v, p):
            first, last = chunks[k]
            times = model.times(first, last, mbs, t, sp, overlap, c)
            f_op = times.fwd_tp_s + times.fwd_comm_s
            replay = model.replay(first, last, mbs, t, sp, rc, overlap, c)
            b_op = times.bwd_tp_s + times.bwd_comm_s + replay
            if per_unit and dp_curves is not None:  # ZeRO-2/3: per-unit collectives (zero_lowering)
                sizes, fshare, bshare, calls = model.zero_units(first, last, t)
                scatters = [half_time_s(dp_curves, x * g, allreduce) for x in sizes]
                fwd_units = [f_op * x for x in fshare]
                bwd_units = [replay * f + (b_op - replay) * b
                             for f, b in zip(fshare, bshare, strict=True)]
                if sh is Sharding.ZERO3:  # the runtime's gathers and issue time (zero_lowering)
                    ug = [unit_gathers(zero3_runtime, rc is Recompute.FULL, x, u, model.elem)
                          for x, u in zip(sizes, calls, strict=True)]
                    fwd_units = [x + y for x, y in zip(fwd_units, unit_issue_s(
                        zero3_runtime, "F", [u.forward_calls for u in ug], [0] * len(ug), fwd_units, d * c),
                        strict=True)]
                    bwd_units = [x + y for x, y in zip(bwd_units, unit_issue_s(
                        zero3_runtime, "B", [u.backward_calls for u in ug], [u.scatter_calls for u in ug],
                        bwd_units, d * c), strict=True)]
                    times_s = [[half_time_s(dp_curves, x, allreduce) if x > 0 or j % 2 == 0 else 0.0
                                for j, x in enumerate((u.forward, u.forward_on_demand, u.backward,
                                                       u.backward_on_demand))] for u in ug]
                    f_op, b_op, first_extra, last_tail = zero3_op_times_s(
                        fwd_units, bwd_units, [x[0] for x in times_s], scatters,
                        bwd_gather_s=[x[2] for x in times_s],
                        fwd_on_demand_s=[x[1] for x in times_s],
                        bwd_on_demand_s=[x[3] for x in times_s],
                    )
                    # 1 + depth gathered units and one unit's gradients (zero_lowering.held_bytes)
                    held = max(held, (min(len(sizes), 2) + g) * max(sizes))
                else:
                    first_extra = 0.0
                    last_tail = reduce_tail_s(bwd_units[::-1], scatters[::-1])
                    held = max(held, max(sizes) * g)
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
        src, dst = 0, d * t * c  # rank 0's and rank 1's first devices (automatic placement)
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


def _plan(
    model: _Model, gbs: int, t: int, p: int, d: int, m: int, v: int, sp: bool, rc: Recompute, c: int,
    ov: bool, sh: Sharding, optimizer: str, allreduce: str, est: Estimate,
) -> Plan:
    stages = tuple(
        StagePlan(first_layer=first, last_layer=last, replicas=d, tensor_parallel=t, sequence_parallel=sp,
                  sharding=sh, context_parallel=c, tp_comm_overlap=ov)
        for first, last in _chunks(model, p, v)
    )
    plan = Plan(
        stages=stages,
        global_batch_size=gbs,
        num_microbatches=m,
        schedule="1f1b" if v == 1 else "interleaved",
        chunks=v,
        optimizer=optimizer,
        recompute=rc,
        allreduce=allreduce,
        estimate=est,
        planner="megatron",
    )
    placement = plan.placement(model.cluster.num_devices)
    placed = tuple(
        StagePlan(first_layer=s.first_layer, last_layer=s.last_layer, replicas=d, tensor_parallel=t,
                  sequence_parallel=sp, sharding=sh, devices=placement[i % p], context_parallel=c,
                  tp_comm_overlap=ov)
        for i, s in enumerate(stages)
    )
    return Plan(
        stages=placed, global_batch_size=gbs, num_microbatches=m, schedule=plan.schedule, chunks=v,
        optimizer=optimizer, recompute=rc, allreduce=allreduce, estimate=est, planner="megatron",
    )
