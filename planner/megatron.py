"""The Megatron-LM planner: 3D parallelism (tensor x pipeline x data) for shaped transformers.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21), Sec. 3 give the space and its rules of thumb; this planner searches it
exhaustively and ranks by an analytic estimate:

* ``t``: tensor-parallel degree, a power of two up to the server size dividing the heads and
  the MLP width (TP inside a server, Sec. 3.3 "takeaway #1");
* ``p``: pipeline ranks dividing the number of blocks, ``d = N / (t p)`` data-parallel replicas
  (every device used);
* the micro-batch size ``b`` per replica (``m = B / (d b)`` micro-batches), ``v`` model chunks
  per rank (``1f1b`` for ``v = 1``, ``interleaved`` otherwise, with ``m`` a multiple of ``p``);
* recomputation ``none``, ``full`` or ``selective`` (when the blocks have an attention core to
  drop: not with flash attention); sequence parallelism with TP or not; sharding ``none`` or
  the distributed optimizer (any sharding when pinned).

Stages are uniform: the blocks are cut into ``p v`` equal chunks; the embedding goes with the
first chunk and the head with the last (as in Megatron-LM). A rank's per-micro-batch forward and
backward times (the sum over its ``v`` chunks of
:func:`~pipesim.profiles.costmodels.tensor_parallel.stage_tp_times`, compute plus exposed TP
collectives; in the backward the replayed forward of recomputation,
:func:`~pipesim.profiles.costmodels.tensor_parallel.tp_replay_s`) give the estimate

    T = (m + (p - 1) / v) (t_f + t_b) + 2 (p v - 1) t_hop + t_dp + t_opt

with ``t_f``, ``t_b`` the slowest rank's, ``t_hop`` one activation transfer between ranks (each
TP rank sends ``1/t`` of it), ``t_dp`` the first rank's data-parallel gradient collective
(exposed: it finishes last in 1F1B) and ``t_opt`` its optimizer step after it
(:func:`~pipesim.profiles.costmodels.optimizer.stage_optimizer_step_s`; 0 with
``optimizer_step=False``). Memory per rank: TP-sharded weights, gradients and optimizer
state (:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`) plus the in-flight
micro-batches' stashes (:func:`~pipesim.profiles.costmodels.memory.in_flight_microbatches`) and
the backward's working set. Plans must fit the device memory.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from pipesim.errors import Infeasible, invalid
from pipesim.plan import Estimate, Plan, StagePlan
from pipesim.profiles.costmodels.collective import AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.memory import (
    Recompute,
    check_recompute,
    in_flight_microbatches,
    layer_recompute_times_s,
)
from pipesim.profiles.costmodels.optimizer import stage_optimizer_step_s
from pipesim.profiles.costmodels.sharding import Sharding, dp_traffic_factor, sharded_memory_multiplier
from pipesim.profiles.costmodels.tensor_parallel import (
    TpStageTimes,
    check_tp_group_in_server,
    stage_tp_times,
    tp_compute_model,
    tp_parameter_bytes,
    tp_replay_s,
    tp_stage_activation_bytes,
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

_Config = tuple[int, int, int, int, int, bool, Recompute, Sharding]
"""``(t, p, d, m, v, sequence parallel, recompute, sharding)``."""

THREE_D_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved")
"""Schedules :func:`estimate_3d` models (GPipe, DAPPLE and 1F1B share the time
``(m + p - 1)(t_f + t_b)`` of equal stages; their memory differs by the in-flight count)."""


def is_3d(plan: Plan) -> bool:
    """Whether ``plan`` uses tensor parallelism or sharding (so :func:`estimate_3d` estimates it)."""
    return any(s.tensor_parallel > 1 or s.sharding is not Sharding.NONE for s in plan.stages)


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronPins:
    """Dimensions the user fixed (``None``: searched).

    Raises:
        InputError: ``tensor_parallel < 1``; sequence parallelism pinned on without TP > 1.
        UnknownNameError: an unknown sharding.
    """

    tensor_parallel: int | None = None
    sequence_parallel: bool | None = None
    sharding: Sharding | str | None = None

    def __post_init__(self) -> None:
        if self.tensor_parallel is not None and (
            isinstance(self.tensor_parallel, bool) or not isinstance(self.tensor_parallel, int)
            or self.tensor_parallel < 1
        ):
            raise invalid("tensor_parallel", self.tensor_parallel, "must be an integer >= 1")
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
        self._times: dict[tuple[int, int, int, int, bool, bool], TpStageTimes] = {}
        self._acts: dict[tuple[int, int, int, int, bool, Recompute], tuple[float, float]] = {}
        self.recompute = recompute

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

    def times(self, first: int, last: int, mbs: int, t: int, sp: bool, overlap: bool = False) -> TpStageTimes:
        key = (first, last, mbs, t, sp, overlap)
        found = self._times.get(key)
        if found is None:
            group = tuple(range(t))
            curves = self.curves(group)
            found = self._times[key] = stage_tp_times(self.profile, first, last, mbs, t, sp, curves,
                                                     self.compute, overlap)
        return found

    def replay(
        self, first: int, last: int, mbs: int, t: int, sp: bool, rc: Recompute, overlap: bool = False
    ) -> float:
        """The forward replayed before a chunk's backward under TP, seconds (``tp_replay_s``)."""
        if rc is Recompute.NONE:
            return 0.0
        rec = layer_recompute_times_s(self.profile, mbs, rc)
        times = self.times(first, last, mbs, t, sp, overlap)
        ratio = times.fwd_tp_s / times.fwd_s if times.fwd_s > 0 else 1.0
        return tp_replay_s(rc, sum(rec[first : last + 1]), ratio, times.fwd_comm_s, t)

    def activations(
        self, first: int, last: int, mbs: int, t: int, sp: bool, rc: Recompute
    ) -> tuple[float, float]:
        key = (first, last, mbs, t, sp, rc)
        found = self._acts.get(key)
        if found is None:
            found = self._acts[key] = tp_stage_activation_bytes(self.profile, first, last, mbs, rc, t, sp)
        return found

    def params(self, first: int, last: int, t: int) -> float:
        layers = self.profile.layers[first : last + 1]
        return sum(tp_parameter_bytes(layer, t, self.elem) for layer in layers)


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
        pins: tensor parallelism, sequence parallelism or sharding the user fixed.

    Raises:
        InputError: the profile is not a shaped transformer, or a bad pin.
        Infeasible: no plan fits (the message says why).
    """
    pins = pins or MegatronPins()
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
    found: list[tuple[float, float, int, _Config, Estimate]] = []
    tried = 0
    for t in ts:
        if n_dev % t or shape.heads % t:
            continue
        sps = [False, True] if t > 1 else [False]
        if pins.sequence_parallel is not None:
            sps = [pins.sequence_parallel]
        for p in (q for q in range(1, blocks + 1) if blocks % q == 0 and (n_dev // t) % q == 0):
            d = n_dev // (t * p)
            for mbs in _MICROBATCH_SIZES:
                if global_batch_size % (d * mbs):
                    continue
                m = global_batch_size // (d * mbs)
                for v in range(1, MAX_CHUNKS + 1):
                    if blocks % (p * v) or (v > 1 and (p == 1 or m % p)):
                        continue
                    for sp in sps:
                        for rc in rcs:
                            for sh in shardings:
                                tried += 1
                                est = _estimate(shape_model, cluster, optimizer, allreduce, global_batch_size,
                                                _chunks(shape_model, p, v), t, p, d, mbs, m, v, sp, rc, sh,
                                                memory_limit_bytes)
                                if est is None:
                                    continue
                                config = (t, p, d, m, v, sp, rc, sh)
                                key = (est.iteration_time_s, est.peak_memory_bytes, len(found))
                                found.append((*key, config, est))
    log.info("megatron: %d configurations, %d fit", tried, len(found))
    if not found:
        raise Infeasible(
            f"megatron: none of {tried} (t, p, d, micro-batch, chunks) configurations of {profile.name} "
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
        plans.append(_plan(shape_model, global_batch_size, *config, optimizer, allreduce, est))
        if len(plans) == top:
            break
    return plans


def estimate_3d(
    plan: Plan, profile: ModelProfile, cluster: Cluster, *, optimizer_step: bool = True
) -> Estimate:
    """The estimate (module docstring) of a plan with one tensor-parallel degree, replica count,
    sequence parallelism and sharding on every stage, equal micro-batches and a ``1f1b`` or
    ``interleaved`` schedule (any layer split); ``optimizer_step=False`` leaves out the optimizer
    step (as :class:`~pipesim.simulator.SimOptions` ``optimizer_step=False`` does).

    Raises:
        InputError: the plan is not of that form, its model is not a shaped transformer, or a
            tensor-parallel group spans servers.
    """
    first = plan.stages[0]
    form = (first.tensor_parallel, first.replicas, first.sequence_parallel, first.sharding)
    if len({(s.tensor_parallel, s.replicas, s.sequence_parallel, s.sharding, s.tp_comm_overlap)
            for s in plan.stages}) > 1:
        raise invalid("plan", "mixed per-stage parallelism", "the 3D estimate needs the same t, d, sp and "
                      "sharding on every stage")
    if plan.microbatch_sizes is not None or plan.schedule.value not in THREE_D_SCHEDULES:
        names = ", ".join(THREE_D_SCHEDULES)
        rule = f"the 3D estimate models {names} with equal micro-batches"
        raise invalid("plan.schedule", plan.schedule.value, rule)
    t, d, sp, sh = form
    if t > 1:
        for rank, groups in enumerate(plan.tp_groups(cluster.num_devices)):
            for group in groups:
                check_tp_group_in_server(group, cluster.server_of, f"stages[{rank}].tensor_parallel")
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
                    schedule=plan.schedule.value, overlap=first.tp_comm_overlap,
                    optimizer_step=optimizer_step)
    assert est is not None  # no memory limit
    return est


def _estimate(
    model: _Model, cluster: Cluster, optimizer: str, allreduce: str, gbs: int, chunks: list[tuple[int, int]],
    t: int, p: int, d: int, mbs: int, m: int, v: int, sp: bool, rc: Recompute, sh: Sharding, limit: float,
    schedule: str | None = None, overlap: bool = False, optimizer_step: bool = True,
) -> Estimate | None:
    schedule = schedule or ("1f1b" if v == 1 else "interleaved")
    if schedule == "dapple":
        schedule = "1f1b"  # the same in-flight count (DAPPLE's K_i = min(p - i, m))
    multiplier = sharded_memory_multiplier(model.profile.dtype, optimizer, sh, d)
    tf = tb = 0.0
    peaks: list[float] = []
    for r in range(p):
        fr = br = 0.0
        static = 0.0
        stash = work = 0.0
        for k in range(r, p * v, p):
            first, last = chunks[k]
            times = model.times(first, last, mbs, t, sp, overlap)
            fr += times.fwd_tp_s + times.fwd_comm_s
            br += times.bwd_tp_s + times.bwd_comm_s + model.replay(first, last, mbs, t, sp, rc, overlap)
            static += model.params(first, last, t) * multiplier
            s_bytes, w_bytes = model.activations(first, last, mbs, t, sp, rc)
            stash, work = max(stash, s_bytes), max(work, w_bytes)
        in_flight = in_flight_microbatches(schedule, r, p, m, chunks=v)
        peak = static + in_flight * stash + work
        if peak > limit:
            return None
        peaks.append(peak)
        tf, tb = max(tf, fr), max(tb, br)
    hop = 0.0
    if p > 1:
        act = mbs * model.shape.seq * model.shape.hidden * model.elem / t
        src, dst = 0, d * t  # rank 0's and rank 1's first devices (automatic placement)
        bw = cluster.route_bandwidth_bytes_per_s(src, dst)
        hop = cluster.route_latency_s(src, dst) + (act / bw if bw < math.inf else 0.0)
    dp = 0.0
    if d > 1:
        first, last = chunks[0]
        nbytes = sum(model.params(*chunks[k], t) for k in range(0, p * v, p)) * dp_traffic_factor(sh)
        members = tuple(k * t for k in range(d))
        dp = model.curves(members, servers=True).time_s(nbytes, allreduce)
    opt = 0.0
    if optimizer_step:  # rank 0's update, after its gradient collective (it finishes last)
        for k in range(0, p * v, p):
            opt += stage_optimizer_step_s(
                model.params(*chunks[k], t), cluster.device_spec(0), optimizer, model.profile.dtype, sh, d
            )
    time_s = (m + (p - 1) / v) * (tf + tb) + 2 * (p * v - 1) * hop + dp + opt
    return Estimate(
        iteration_time_s=time_s,
        throughput_samples_per_s=gbs / time_s,
        peak_memory_bytes=max(peaks),
    )


def _plan(
    model: _Model, gbs: int, t: int, p: int, d: int, m: int, v: int, sp: bool, rc: Recompute, sh: Sharding,
    optimizer: str, allreduce: str, est: Estimate,
) -> Plan:
    stages = tuple(
        StagePlan(first_layer=first, last_layer=last, replicas=d, tensor_parallel=t, sequence_parallel=sp,
                  sharding=sh)
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
                  sequence_parallel=sp, sharding=sh, devices=placement[i % p])
        for i, s in enumerate(stages)
    )
    return Plan(
        stages=placed, global_batch_size=gbs, num_microbatches=m, schedule=plan.schedule, chunks=v,
        optimizer=optimizer, recompute=rc, allreduce=allreduce, estimate=est, planner="megatron",
    )
