"""The Megatron-LM planner: 3D parallelism (tensor x pipeline x data) for shaped transformers.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21), Sec. 3 give the space and its rules of thumb; this planner searches it
exhaustively and ranks by an analytic estimate (:mod:`pipesim.planner.three_d`):

* ``t``: tensor-parallel degree, a power of two up to the server size dividing the heads and
  the MLP width (TP inside a server, Sec. 3.3 "takeaway #1"); a pinned ``t`` may be larger (its
  groups then span servers, and the estimate charges their rings' NIC hops);
* ``c``: context-parallel degree, a power of two dividing the sequence length (Megatron-LM's
  ``--context-parallel-size``, ring attention:
  :mod:`~pipesim.profiles.costmodels.context_parallel`);
* ``p``: pipeline ranks dividing the number of blocks, ``d = N / (t c p)`` data-parallel
  replicas (every device used);
* the micro-batch size ``b`` per replica (``m = B / (d b)`` micro-batches), ``v`` model chunks
  per rank and the schedule (:func:`searched_schedules`): ``1f1b``, ``zb-h1``, ``zb-h2`` for
  ``v = 1``, ``interleaved`` (``m`` a multiple of ``p``) and ``interleaved-zb`` for ``v > 1``,
  the V shapes ``zbv``, ``v-half``, ``v-min`` and ``dualpipev`` for ``v = 2``; each timed by
  its order over the chunks' per-op times
  (:func:`~pipesim.planner.three_d.prepare_config`), best first: every configuration's memory,
  per-op times and lower bound (micro-batch 0's way to a rank and back and ``m`` times its
  ops) first, then the orders in the order of that bound, until it cannot make the shortlist;
* recomputation ``none``, ``full`` or ``selective`` (when the blocks have an attention core to
  drop: not with flash attention); sequence parallelism with TP or not, and with it the TP
  communication overlap (``tp_comm_overlap``) or not; sharding ``none``, the distributed
  optimizer, ZeRO-1, ZeRO-2 or ZeRO-3 (:data:`SEARCHED_SHARDINGS`; with more than one data- or
  context-parallel rank; ZeRO-3 with a zero-bubble order under the ``fsdp`` runtime only).
  Configurations that differ only in sharding and are no faster and no smaller than a kept one
  are dropped (with equal traffic a sharding level only saves memory; ZeRO-2 and 3 move their
  collectives into the backward and forward, which the estimate may find faster or slower than
  ZeRO-1's: it is evaluated, not assumed).

Pins (:class:`MegatronPins`) restrict each dimension to the value given.

Stages are uniform: the blocks are cut into ``p v`` equal chunks; the embedding goes with the
first chunk and the head with the last (as in Megatron-LM), placed automatically. Plans must fit
the device memory (the estimate's peak per rank).
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, replace

from pipesim.errors import Infeasible, invalid
from pipesim.plan import Estimate, Plan, StagePlan
from pipesim.planner.schedule_time import valid_microbatches
from pipesim.planner.three_d import (
    THREE_D_SCHEDULES,
    ZERO_BUBBLE_3D,
    PreparedConfig,
    ThreeDCosts,
    chunk_ranges,
    estimate_3d,
    is_3d,
    prepare_config,
)
from pipesim.profiles.costmodels.memory import Recompute, check_recompute
from pipesim.profiles.costmodels.sharding import GradCollective, Sharding
from pipesim.profiles.costmodels.zero3_runtime import Zero3Runtime
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules.placement import stage_ranks
from pipesim.schedules.registry import placement_of

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

_Config = tuple[int, int, int, int, int, bool, Recompute, int, bool, str, Sharding]
"""``(t, p, d, m, v, sequence parallel, recompute, c, tp_comm_overlap, schedule, sharding)``."""

SEARCHED_SHARDINGS: tuple[Sharding, ...] = (
    Sharding.NONE, Sharding.DISTRIBUTED, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3,
)
"""Shardings the search tries (with more than one data- or context-parallel rank: with one, every
sharding is no sharding, or more memory for the distributed optimizer's main copy)."""

def searched_schedules(p: int, v: int) -> tuple[str, ...]:
    """Schedules the search tries for ``p`` ranks of ``v`` chunks: ``1f1b``, ``zb-h1`` and
    ``zb-h2`` for one chunk, ``interleaved`` and ``interleaved-zb`` for more, and for two also
    the V shapes ``zbv``, ``v-half``, ``v-min`` and ``dualpipev`` (which take exactly two); no
    zero-bubble schedule without a pipeline (``p = 1``: nothing to fill, and no chunks).
    ZeRO-3 takes the zero-bubble ones under the ``fsdp`` runtime only
    (:func:`~pipesim.planner.three_d.prepare_config`).
    Not searched: ``zb-auto`` (its order is built from one stage's costs and a memory limit,
    ``Plan.schedule_options``, which the search's plans do not carry; its candidates include
    ZB-H1 and ZB-H2, searched), DualPipe and Chimera (two model copies per rank, which the 3D
    estimate's chunks do not express): docs/parallelism.md, "The Megatron planner"."""
    if v == 1:
        return ("1f1b", "zb-h1", "zb-h2") if p > 1 else ("1f1b",)
    if v == 2:
        return ("interleaved", "interleaved-zb", *V_SHAPES)
    return ("interleaved", "interleaved-zb")


V_SHAPES: tuple[str, ...] = ("zbv", "v-half", "v-min", "dualpipev")
"""The V-shaped schedules (two chunks per rank) the search tries."""


def _chunks_taken(schedule: str, v: int) -> bool:
    """Whether ``schedule`` runs ``v`` chunks per rank (the looped ``interleaved`` and
    ``interleaved-zb``: more than one; the V shapes: two; the others: one)."""
    if schedule in ("interleaved", "interleaved-zb"):
        return v > 1
    return v == (2 if schedule in V_SHAPES else 1)

PRUNE = True
"""Whether the search stops at the lower bounds (tests turn it off to check that it prunes
nothing that would be returned)."""

MAX_CONTEXT_PARALLEL = 16
"""Largest context-parallel degree searched (a power of two dividing the sequence length)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MegatronPins:
    """Dimensions the user fixed (``None``: searched).

    Attributes:
        tensor_parallel, sequence_parallel, sharding, context_parallel: the stages' degrees,
            sequence parallelism and sharding (:class:`~pipesim.plan.StagePlan`).
        tp_comm_overlap: the TP communication overlap (``StagePlan.tp_comm_overlap``); pinned
            on, only plans with sequence parallelism (which it needs) are searched.
        schedule: the pipeline schedule, one of :data:`THREE_D_SCHEDULES` (``dapple`` plans
            as ``1f1b``).

    Raises:
        InputError: ``tensor_parallel`` or ``context_parallel < 1``; sequence parallelism pinned
            on without TP > 1; the TP overlap pinned on with sequence parallelism pinned off or
            TP pinned to 1; a pin that is not a boolean where one is needed; a schedule the 3D
            estimate does not model.
        UnknownNameError: an unknown sharding.
    """

    tensor_parallel: int | None = None
    sequence_parallel: bool | None = None
    sharding: Sharding | str | None = None
    context_parallel: int | None = None
    tp_comm_overlap: bool | None = None
    schedule: str | None = None

    def __post_init__(self) -> None:
        for name in ("tensor_parallel", "context_parallel"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise invalid(name, value, "must be an integer >= 1")
        for name in ("sequence_parallel", "tp_comm_overlap"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise invalid(name, value, "must be true or false")
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise invalid("sequence_parallel", True, "needs tensor_parallel > 1")
        if self.tp_comm_overlap and (self.sequence_parallel is False or self.tensor_parallel == 1):
            rule = "needs sequence_parallel (as Megatron-LM's tp_comm_overlap)"
            raise invalid("tp_comm_overlap", True, rule)
        if self.sharding is not None:
            object.__setattr__(self, "sharding", Sharding.parse(self.sharding))
        if self.schedule is not None:
            name = getattr(self.schedule, "value", self.schedule)
            if name not in THREE_D_SCHEDULES:
                raise invalid("schedule", name, "the megatron planner plans " + ", ".join(THREE_D_SCHEDULES))
            object.__setattr__(self, "schedule", name)




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
    zero3_runtime: Zero3Runtime | str = Zero3Runtime.FSDP,
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
        grad_reduce_dtype, zero1_grad_collective, zero3_runtime: the plans' gradient
            collectives and ZeRO-3's runtime (:class:`~pipesim.plan.Plan`), which the estimate
            charges.

    Raises:
        InputError: the profile is not a shaped transformer, a bad pin, or a zero-bubble schedule
            and ZeRO-3 pinned with a ``zero3_runtime`` other than ``fsdp``.
        Infeasible: no plan fits (the message says why).
    """
    pins = pins or MegatronPins()
    zero1 = GradCollective.parse(zero1_grad_collective)
    zero1_all_reduce = zero1 is GradCollective.ALL_REDUCE
    runtime = Zero3Runtime.parse(zero3_runtime)
    if (pins.schedule in ZERO_BUBBLE_3D and pins.sharding is Sharding.ZERO3
            and runtime is not Zero3Runtime.FSDP):
        rule = f"the megatron planner plans {pins.schedule} with ZeRO-3 under the fsdp runtime"
        raise invalid("zero3_runtime", runtime.value, rule)
    n_dev, g = cluster.num_devices, cluster.gpus_per_server
    shape_model = ThreeDCosts(profile, cluster, Recompute.NONE)
    shape = shape_model.shape
    blocks = shape_model.num_blocks
    ts = [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= g and shape.heads % t == 0 and shape.ffn % t == 0]
    ts = _candidates(ts, pins.tensor_parallel)
    rcs = [check_recompute(profile, recompute)] if recompute is not None else [Recompute.NONE, Recompute.FULL]
    if recompute is None and any(layer.attention_core_saved_bytes for layer in profile.layers):
        rcs.append(Recompute.SELECTIVE)  # blocks with an attention core to drop (not flash attention)
    shardings = list(SEARCHED_SHARDINGS)
    if pins.sharding is not None:
        shardings = [Sharding.parse(pins.sharding)]
    cs = [c for c in (1, 2, 4, 8, 16) if c <= MAX_CONTEXT_PARALLEL and shape.seq % c == 0]
    cs = _candidates(cs, pins.context_parallel)
    # The distributed optimizer moves ZeRO-1's bytes and holds more (fp32 main gradients) that its
    # update also reads (optimizer.update_bytes_per_parameter): with ZeRO-1's reduce-scatter it is
    # never faster nor smaller by the estimate, and the dominance below would drop it.
    if pins.sharding is None and not zero1_all_reduce:
        shardings.remove(Sharding.DISTRIBUTED)
    found, tried = _search(
        profile, cluster, global_batch_size, shape_model, shardings, ts, cs, rcs, pins, blocks, n_dev,
        top=top, optimizer=optimizer, allreduce=allreduce, memory_limit_bytes=memory_limit_bytes,
        grad=grad_reduce_dtype, zero1_all_reduce=zero1_all_reduce, runtime=runtime)
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
                             zero1_grad_collective=zero1, zero3_runtime=runtime))
        if len(plans) == top:
            break
    return plans


def _search(
    profile: ModelProfile,
    cluster: Cluster,
    global_batch_size: int,
    shape_model: ThreeDCosts,
    shardings: list[Sharding],
    ts: list[int],
    cs: list[int],
    rcs: list[Recompute],
    pins: MegatronPins,
    blocks: int,
    n_dev: int,
    *,
    top: int,
    optimizer: str,
    allreduce: str,
    memory_limit_bytes: float,
    grad: str | None,
    zero1_all_reduce: bool,
    runtime: Zero3Runtime,
) -> tuple[list[tuple[float, float, int, _Config, Estimate]], int]:
    """The configurations of :func:`megatron_plans`' space with sharding in ``shardings`` that
    fit, as ``(time, peak, index, config, estimate)``, and how many were tried."""
    shape = shape_model.shape
    configs: list[tuple[int, int, int, int, int, int, int, bool, bool, Recompute, str, Sharding]] = []
    for t, c in ((t, c) for t in ts for c in cs):
        if n_dev % (t * c) or shape.heads % t:
            continue
        sps = [False, True] if t > 1 else [False]
        if pins.sequence_parallel is not None:
            sps = [pins.sequence_parallel]
        if pins.tp_comm_overlap:  # the overlap needs sequence parallelism
            sps = [s for s in sps if s]
        overlaps = (False, True) if pins.tp_comm_overlap is None else (pins.tp_comm_overlap,)
        for p in (q for q in range(1, blocks + 1) if blocks % q == 0 and (n_dev // (t * c)) % q == 0):
            d = n_dev // (t * c * p)
            for mbs in _MICROBATCH_SIZES:
                if global_batch_size % (d * mbs):
                    continue
                m = global_batch_size // (d * mbs)
                for v in range(1, MAX_CHUNKS + 1):
                    if blocks % (p * v) or (v > 1 and p == 1):
                        continue
                    names = searched_schedules(p, v) if pins.schedule is None else (pins.schedule,)
                    scheds = [x for x in names if _chunks_taken(x, v) and _microbatches_taken(x, p, m, v)]
                    for sp, ov, rc, sched, sh in (
                        (s, o, r, x, h) for s in sps for o in (overlaps if s else (False,)) for r in rcs
                        for x in scheds for h in shardings
                    ):
                        if sh is not Sharding.NONE and d * c == 1 and pins.sharding is None:
                            continue  # one data-parallel rank: nothing to shard
                        if (sched in ZERO_BUBBLE_3D and sh is Sharding.ZERO3 and d * c > 1
                                and runtime is not Zero3Runtime.FSDP):
                            continue  # ZeRO-3 split for zero-bubble orders under fsdp only (prepare_config)
                        configs.append((t, c, p, d, mbs, m, v, sp, ov, rc, sched, sh))
    # Best first: every configuration's memory, per-op times and lower bound (prepare_config),
    # then the costly part (the schedule's order, ZeRO-2/3's per-unit collectives) in order of
    # the lower bound, until it exceeds the ``top * len(shardings)``-th best time found (the plans
    # returned are among that many: the sharding dominance below drops at most
    # ``len(shardings) - 1`` of a kept plan's group). Ties keep the enumeration's order.
    ranges: dict[tuple[int, int], list[tuple[int, int]]] = {}  # per (p, v) the chunks' layers

    def prepare(index: int) -> PreparedConfig | None:
        t, c, p, d, mbs, m, v, sp, ov, rc, sched, sh = configs[index]
        chunks = ranges.get((p, v))
        if chunks is None:
            chunks = ranges[(p, v)] = chunk_ranges(shape_model, p, v)
        return prepare_config(
            shape_model, cluster, optimizer, allreduce, global_batch_size,
            chunks, t, p, d, mbs, m, v, sp, rc, sh,
            memory_limit_bytes, schedule=sched, overlap=ov, c=c, grad=grad,
            zero1_all_reduce=zero1_all_reduce, zero3_runtime=runtime)

    prepared: list[tuple[float, int]] = []  # (lower bound, index) of those whose memory fits
    for index in range(len(configs)):
        ready = prepare(index)
        if ready is not None:
            prepared.append((ready.lower_bound_s if PRUNE else 0.0, index))
    prepared.sort()
    found: list[tuple[float, float, int, _Config, Estimate]] = []
    keep = top * len(shardings)
    best: list[float] = []  # the ``keep`` best times so far, as a max-heap (negated)
    for bound, index in prepared:
        if len(best) == keep and bound > -best[0]:
            break  # no configuration left can make the shortlist
        ready = prepare(index)  # again: cheaper than holding every configuration's state
        est = ready.finish() if ready is not None else None
        if est is None:
            continue
        t, c, p, d, mbs, m, v, sp, ov, rc, sched, sh = configs[index]
        config = (t, p, d, m, v, sp, rc, c, ov, sched, sh)
        found.append((est.iteration_time_s, est.peak_memory_bytes, index, config, est))
        if len(best) < keep:
            heapq.heappush(best, -est.iteration_time_s)
        elif est.iteration_time_s < -best[0]:
            heapq.heapreplace(best, -est.iteration_time_s)
    tried = len(configs)
    log.info("megatron: %d configurations with %s, %d fit, %d evaluated in full", tried,
             "/".join(h.value for h in shardings), len(prepared), len(found))
    return found, tried



def _microbatches_taken(schedule: str, p: int, m: int, v: int) -> bool:
    """Whether ``schedule`` takes ``m`` micro-batches on ``p`` ranks of ``v`` chunks (interleaved:
    ``m`` a multiple of ``p``, as Megatron-LM; the others: their generator's rule,
    :func:`~pipesim.planner.schedule_time.valid_microbatches`)."""
    if schedule == "interleaved":
        return m % p == 0
    return valid_microbatches(schedule, p, m, v)


def _plan(
    model: ThreeDCosts, gbs: int, t: int, p: int, d: int, m: int, v: int, sp: bool, rc: Recompute, c: int,
    ov: bool, schedule: str, sh: Sharding, optimizer: str, allreduce: str, est: Estimate,
) -> Plan:
    stages = tuple(
        StagePlan(first_layer=first, last_layer=last, replicas=d, tensor_parallel=t, sequence_parallel=sp,
                  sharding=sh, context_parallel=c, tp_comm_overlap=ov)
        for first, last in chunk_ranges(model, p, v)
    )
    plan = Plan(
        stages=stages,
        global_batch_size=gbs,
        num_microbatches=m,
        schedule=schedule,
        chunks=v,
        optimizer=optimizer,
        recompute=rc,
        allreduce=allreduce,
        estimate=est,
        planner="megatron",
    )
    placement = plan.placement(model.cluster.num_devices)
    where = stage_ranks(placement_of(schedule) or "looped", p * v, p)  # zbv: the V shape
    placed = tuple(
        StagePlan(first_layer=s.first_layer, last_layer=s.last_layer, replicas=d, tensor_parallel=t,
                  sequence_parallel=sp, sharding=sh, devices=placement[where[i]], context_parallel=c,
                  tp_comm_overlap=ov)
        for i, s in enumerate(stages)
    )
    return Plan(
        stages=placed, global_batch_size=gbs, num_microbatches=m, schedule=plan.schedule, chunks=v,
        optimizer=optimizer, recompute=rc, allreduce=allreduce, estimate=est, planner="megatron",
    )
