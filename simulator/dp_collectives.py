"""The data-parallel collectives of a program: gradient all-reduces (whole or in buckets) and
ZeRO's reduce-scatters and all-gathers (:mod:`pipesim.simulator.zero_lowering`).

For each stage with more than one replica, :func:`data_parallel_collectives` gives, by its
``sharding``:

* ``none``: one gradient all-reduce after its last backward (``allreduce_overlap``:
  ``after_backward``, after the drain with ``end``, or one per gradient bucket with
  ``bucketed``, marked on the last backward as PyTorch DDP's buckets fill);
* ``zero1`` and ``distributed``: the same, as reduce-scatters, then one all-gather of the updated
  parameters after the optimizer step (``after_step``: reduce-scatter, step, all-gather); with
  ``Plan.overlap_param_gather`` instead the previous step's all-gathers per bucket from the
  iteration's start, awaited by the first forwards (:mod:`pipesim.simulator.param_gather`).
  ``distributed`` (Megatron-Core r0.8.0) cuts only the first chunk of pipeline rank 0 into
  buckets, every other stage is one bucket
  (:func:`~pipesim.profiles.costmodels.buckets.megatron_bucketed`); on a rank holding several
  stages (the interleaved schedule) each stage's buckets start together after its last backward:
  r0.8.0's default ``--delay-grad-reduce`` sets ``config.grad_sync_func``, and the interleaved
  schedule then keeps the buckets' hooks off (``no_sync``) and calls ``start_grad_sync`` for a
  chunk after the backward that ends it (``backward_step_helper`` in
  ``megatron/core/pipeline_parallel/schedules.py`` at baf94af3c6; there on rank ``r`` ``r``
  backward steps later, which is not modelled);
* ``zero2`` and ``zero3``: per unit and micro-batch (:class:`ZeroLowering`), and for ``zero2``
  the all-gather after the optimizer step.

Buckets are cut by the parameter bytes one device holds (its TP shard, the tied copy on its user
layer), as PyTorch DDP's and Megatron's buffers count their local tensors. Gradient collectives
move the parameter bytes times
:func:`~pipesim.profiles.costmodels.grad_dtype.grad_bytes_factor` (fp32 gradients of bf16
training by default, ``Plan.grad_reduce_dtype``); parameter all-gathers the parameter bytes. A
ZeRO-1 stage all-reduces its gradients instead of reduce-scattering them with
``Plan.zero1_grad_collective = all-reduce`` (DeepSpeed's BF16_Optimizer).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from pipesim.plan import Plan
from pipesim.profiles.costmodels.buckets import Bucket, bucket_layers, megatron_bucketed
from pipesim.profiles.costmodels.grad_dtype import grad_bytes_factor
from pipesim.profiles.costmodels.sharding import CollectiveKind, GradCollective, Sharding, half_algorithm
from pipesim.profiles.costmodels.tied_embeddings import stage_copies
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules.pairs import unpaired
from pipesim.schedules.placement import copy_of
from pipesim.schedules.schedule import ScheduleStream
from pipesim.simulator.param_gather import GatherWaits, param_gathers
from pipesim.simulator.stage_costs import CostOptions, StageFacts
from pipesim.simulator.tp_lowering import TpLowering
from pipesim.simulator.zero_lowering import ZeroLowering

__all__ = ["Collective", "data_parallel_collectives", "tied_copy_bytes"]

logger = logging.getLogger(__name__)


def tied_copy_bytes(
    plan: Plan, profile: ModelProfile, stages: Sequence[StageFacts]
) -> dict[int, tuple[int, float]]:
    """Stage index -> ``(user layer, bytes on one device)`` of the tied copy the stage holds
    (:func:`~pipesim.profiles.costmodels.tied_embeddings.stage_copies`: the copies of its
    matrices over the stage's TP degree, vocabulary-parallel), for stages holding one. The
    copy is an ordinary parameter of its stage: its gradient joins the stage's data-parallel
    reduction and its optimizer step updates it (Megatron-LM d98e8a64,
    ``setup_embeddings_and_output_layer``, ``finalize_model_grads``).

    Raises:
        Nothing.
    """
    copies = stage_copies(profile, [(st.layers.start, st.layers.stop - 1) for st in stages],
                          [st.rank for st in stages])
    out: dict[int, tuple[int, float]] = {}
    for st, held in zip(stages, copies, strict=True):
        if held:
            t = plan.stages[st.index].tensor_parallel
            out[st.index] = (held[-1][0], sum(n for _, n in held) / t)
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Collective:
    """One data-parallel collective among a stage's replicas: a gradient all-reduce, or one of
    ZeRO's reduce-scatters and all-gathers.

    Attributes:
        index: its index in :attr:`Program.collectives`.
        stage: the stage whose gradients it reduces.
        bucket: the bucket index within the stage (0 when not bucketed).
        nbytes: bytes each member contributes.
        members: the devices, in ring order, whose streams post readiness.
        algorithm: ``ring``, ``hierarchical``, ``tree``, ``nvls`` or ``auto`` for an all-reduce;
            ``ring`` for a reduce-scatter or all-gather (NCCL's only algorithm for them).
        after: the collective that must end first (the stage's previous bucket), or ``None``.
        after_drain: wait until every compute stream has finished.
        kind: ``all-reduce``, ``reduce-scatter`` or ``all-gather``
            (:class:`~pipesim.profiles.costmodels.sharding.CollectiveKind`); ``nbytes`` is the
            whole buffer either way.
        posted: whether members post it (``False``: it starts once ``after`` has ended, as the
            parameter all-gather after ZeRO-1/2's optimizer step).
        group: the devices it runs among when more than ``members`` (with context parallelism
            each replica's CP ranks join: their streams are mirrored by ``members``); empty for
            ``members``.
        shared_with: the stage holding the other copy of ``stage``'s layers (``dualpipe``), whose
            devices are members too and post to it; ``None`` otherwise.
        after_step: it also waits for every member's optimizer step to end (the all-gather of
            the updated parameter shards after ZeRO-1/2's and the distributed optimizer's step);
            the step does not wait for it.
        rings: the groups of the stage's other TP ranks (``group or members`` shifted by rank
            ``1 .. t - 1``), where their rings share links with the first rank's
            (:meth:`~pipesim.simulator.tp_lowering.TpLowering.dp_rings`: fewer NICs than GPUs
            per server): each runs the same collective of ``nbytes`` at once, beside the first
            rank's, as separate collectives (Megatron-LM's data-parallel group per TP rank),
            and it ends with the last of them. Posted by ``members`` (the TP ranks run in lock
            step). Not one collective among all of them: that would split the bytes over the
            TP ranks (the hierarchical form's intra-server phase) instead of every rank
            reducing its full shard. Empty where each rank's group has links of its own (the
            first rank's time stands for all).
        after_devices: devices whose compute streams must all have finished first (a tied
            matrix's pair all-reduce, :mod:`pipesim.simulator.tied_grads`: each rank enters it
            once its own schedule has returned); empty for none.
        after_more: collectives beyond ``after`` that must all have ended first (the pair
            all-reduce: both ranks' own gradient collectives); empty for none.
    """

    index: int
    stage: int
    bucket: int
    nbytes: float
    members: tuple[int, ...]
    algorithm: str
    after: int | None
    after_drain: bool
    kind: str = CollectiveKind.ALL_REDUCE.value
    posted: bool = True
    group: tuple[int, ...] = ()
    shared_with: int | None = None
    after_step: bool = False
    rings: tuple[tuple[int, ...], ...] = ()
    after_devices: tuple[int, ...] = ()
    after_more: tuple[int, ...] = ()


Marks = dict[int, tuple[tuple[float, int], ...]]
"""stage -> ``(fraction, collective)`` marks on its last backward (bucketed all-reduce)."""


def data_parallel_collectives(
    plan: Plan,
    profile: ModelProfile,
    stages: list[StageFacts],
    stream: ScheduleStream,
    tp: TpLowering | None,
    opts: CostOptions,
    cluster: Cluster,
    *,
    zero_prefetch: int,
) -> tuple[list[Collective], Marks, ZeroLowering | None, GatherWaits]:
    """Every data-parallel collective of a program (module docstring), the bucket marks on the
    stages' last backwards, the ZeRO pass (``None`` without ZeRO-2/3) and, with
    ``Plan.overlap_param_gather``, the waits of the stages' first forwards for their parameter
    all-gathers (:func:`~pipesim.simulator.param_gather.param_gathers`; empty otherwise).

    Args:
        plan: the plan.
        profile: the model's layers.
        stages: the program's stage facts.
        stream: the schedule (ZeRO's per-unit collectives follow each rank's compute order).
        tp: the TP and sharding pass (``None`` without TP or sharding).
        opts: the lowering's options (all-reduce overlap, bucket size, free links).
        cluster: the cluster.
        zero_prefetch: ZeRO-3's gather look-ahead, units.
    """
    collectives: list[Collective] = []
    marks: dict[int, tuple[tuple[float, int], ...]] = {}
    bucketed = opts.allreduce_overlap == "bucketed"
    grad = grad_bytes_factor(profile.dtype, plan.grad_reduce_dtype)  # gradient bytes per parameter byte
    zero = None
    # with context parallelism the collectives join every replica's CP ranks (TpLowering.dp_group)
    groups = {
        st.index: _wider(tp.dp_group(st.index, st.devices), st.devices) if tp is not None else ()
        for st in stages
    }
    held = tied_copy_bytes(plan, profile, stages)  # the tied copies' bytes join their stages'
    if tp is not None and any(s.sharding in (Sharding.ZERO2, Sharding.ZERO3) for s in plan.stages):
        zero = ZeroLowering(plan, profile, stages, _with_copies(tp.layer_parameter_bytes, held),
                            zero_prefetch, cluster=None if opts.free_links else cluster, dp_groups=groups)
    # dualpipe: stage s and its copy (same layers, other direction) sum their weight gradients:
    # one all-reduce among the devices of both copies, charged on stage s < S/2
    copies = {st.index: copy_of(stream.placement, st.index, len(stages)) for st in stages}
    gathered: dict[int, list[Bucket]] = {}  # overlap_param_gather: stage -> its parameter buckets
    cut = megatron_bucketed([st.rank for st in stages])  # the distributed optimizer's one cut stage
    per_rank = {st.rank: sum(1 for x in stages if x.rank == st.rank) for st in stages}
    # per layer and stage the bytes one device holds (TP shard), the tied copy on its user layer
    def whole(layer: int, stage: int) -> float:
        return float(profile.layers[layer].parameter_bytes)

    device_bytes = _with_copies(tp.layer_parameter_bytes if tp is not None else whole, held)
    for stage in stages:
        copy = copies[stage.index]
        if copy is not None and copy < stage.index:
            continue
        members = stage.devices if copy is None else stage.devices + stages[copy].devices
        if len(groups[stage.index] or members) < 2 or (zero is not None and zero.per_unit(stage.index)):
            continue
        sharding = plan.stages[stage.index].sharding
        sharded = sharding is not Sharding.NONE
        scatter = sharded and not (sharding is Sharding.ZERO1
                                   and plan.zero1_grad_collective is GradCollective.ALL_REDUCE)
        kind = (CollectiveKind.REDUCE_SCATTER if scatter else CollectiveKind.ALL_REDUCE).value
        megatron = sharding is Sharding.DISTRIBUTED
        size = opts.bucket_bytes / grad if bucketed and (not megatron or stage.index == cut) else math.inf
        def stage_bytes(layer: int, s: int = stage.index) -> float:
            return device_bytes(layer, s)

        buckets = bucket_layers(profile, stage.layers, size, stage_bytes)
        if megatron and per_rank[stage.rank] > 1:  # interleaved: the chunk's buckets after its backward
            buckets = [(layers, nbytes, 1.0) for layers, nbytes, _ in buckets]
        if bucketed:
            stage_marks = []
            for k, (_, nbytes, fraction) in enumerate(buckets):
                index = len(collectives)
                collectives.append(
                    Collective(
                        index=index,
                        stage=stage.index,
                        bucket=k,
                        nbytes=nbytes * grad,
                        members=members,
                        algorithm=_name(plan.allreduce),
                        after=index - 1 if k else None,
                        after_drain=False,
                        kind=kind,
                        group=groups[stage.index],
                        shared_with=copy,
                    )
                )
                stage_marks.append((fraction, index))
            marks[stage.index] = tuple(stage_marks)
            if copy is not None:  # the copy's last backward marks the same buckets
                marks[copy] = marks[stage.index]
        else:
            (_, nbytes, _), = buckets
            collectives.append(
                Collective(
                    index=len(collectives),
                    stage=stage.index,
                    bucket=0,
                    nbytes=nbytes * grad,
                    members=members,
                    algorithm=_name(plan.allreduce),
                    after=None,
                    after_drain=opts.allreduce_overlap == "end",
                    kind=kind,
                    group=groups[stage.index],
                    shared_with=copy,
                )
            )
        if sharded and plan.overlap_param_gather:  # the previous step's gathers, before the forwards
            gathered[stage.index] = buckets
        elif sharded and tp is not None:  # ZeRO-1, distributed optimizer: gather the updated shards
            _post_step_gather(
                collectives, stage, sum(b[1] for b in buckets), _name(plan.allreduce),
                group=groups[stage.index],
            )
    waits: GatherWaits = {}
    if gathered:

        def add_gather(s: int, bucket: int, nbytes: float, after: int | None) -> int:
            index = len(collectives)
            collectives.append(
                Collective(index=index, stage=s, bucket=bucket, nbytes=nbytes, members=stages[s].devices,
                           algorithm=_name(plan.allreduce), after=after, after_drain=False,
                           kind=CollectiveKind.ALL_GATHER.value, posted=False, group=groups[s])
            )
            return index

        waits = param_gathers(profile, stages, gathered, copies, add_gather)
    if zero is not None:
        algorithm = _name(plan.allreduce)

        def add(
            s: int, unit: int, kind: CollectiveKind, nbytes: float, members: tuple[int, ...],
            after: int | None,
        ) -> int:
            index = len(collectives)
            collectives.append(
                Collective(index=index, stage=s, bucket=unit, nbytes=nbytes, members=members,
                           algorithm=algorithm, after=after, after_drain=False, kind=kind.value,
                           group=groups[s] if members == stages[s].devices else ())
            )
            return index

        for rank in range(stream.num_ranks):
            zero.build(rank, unpaired(stream.row(rank)), add)  # a pair's FB: the forward it runs
        for stage in stages:
            if zero.per_unit(stage.index) and plan.stages[stage.index].sharding is Sharding.ZERO2:
                assert tp is not None
                own = tp.parameter_bytes(stage.index) + held.get(stage.index, (-1, 0.0))[1]
                _post_step_gather(collectives, stage, own, algorithm,
                                  after=zero.last_scatter.get(stage.index), group=groups[stage.index])
    if tp is not None:  # the other TP ranks' groups where their rings share links (Collective.rings)
        collectives = _with_rings(collectives, tp)
    # reduce-scatters and all-gathers run on NCCL's rings whatever the plan names
    # (sharding.half_algorithm): ``hierarchical``, ``tree`` and ``nvls`` name all-reduce forms
    halves = [c.kind != CollectiveKind.ALL_REDUCE.value for c in collectives]
    if any(halves) and _name(plan.allreduce) not in ("ring", "auto"):
        logger.info("allreduce = %s applies to the all-reduces; the reduce-scatters and all-gathers "
                    "run on NCCL's rings, the only algorithm NCCL runs them on", _name(plan.allreduce))
    collectives = [replace(c, algorithm=half_algorithm(c.algorithm).value) if half else c
                   for c, half in zip(collectives, halves, strict=True)]
    return collectives, marks, zero, waits


def _name(value: object) -> str:
    return str(getattr(value, "value", value))


def _with_rings(collectives: list[Collective], tp: TpLowering) -> list[Collective]:
    """``collectives`` with the other TP ranks' groups (:attr:`Collective.rings`) where those
    share links with the first rank's."""
    out = []
    for c in collectives:
        rings = tp.dp_rings(c.stage, c.group or c.members)
        out.append(replace(c, rings=rings) if rings else c)
    return out


def _with_copies(
    layer_bytes: Callable[[int, int], float], held: Mapping[int, tuple[int, float]]
) -> Callable[[int, int], float]:
    """``layer_bytes(layer, stage)`` with each stage's tied copy (``held``,
    :func:`tied_copy_bytes`: its user layer and bytes on one device) added on its user layer:
    the copy is a parameter of that layer's ZeRO-2/3 unit and data-parallel bucket (gathered and
    reduce-scattered with it, Megatron-LM d98e8a64 ``setup_embeddings_and_output_layer``);
    ``layer_bytes`` itself where no stage holds one."""
    if not held:
        return layer_bytes

    def with_copy(layer: int, stage: int) -> float:
        user, extra = held.get(stage, (-1, 0.0))
        return layer_bytes(layer, stage) + (extra if layer == user else 0.0)

    return with_copy


def _wider(group: tuple[int, ...], devices: tuple[int, ...]) -> tuple[int, ...]:
    """``group`` where it has more devices than ``devices``, else ``()`` (the members alone)."""
    return group if group != devices else ()


def _post_step_gather(
    collectives: list[Collective],
    stage: StageFacts,
    nbytes: float,
    algorithm: str,
    after: int | None = None,
    group: tuple[int, ...] = (),
) -> None:
    """Append the all-gather of a stage's updated parameter shards after the optimizer step of
    ZeRO-1/2 and the distributed optimizer: it starts once the stage's last reduce-scatter (the
    last collective so far, unless ``after`` says) and every member's optimizer step
    (:class:`~pipesim.simulator.instructions.Update`, which waits for the reduce-scatters, not for
    it) have ended: reduce-scatter, step, all-gather, as Megatron-LM's distributed optimizer
    and DeepSpeed's ZeRO run them."""
    index = len(collectives)
    collectives.append(
        Collective(
            index=index,
            stage=stage.index,
            bucket=0,
            nbytes=nbytes,
            members=stage.devices,
            algorithm=algorithm,
            after=index - 1 if after is None else after,
            after_drain=False,
            kind=CollectiveKind.ALL_GATHER.value,
            posted=False,
            group=group,
            after_step=True,
        )
    )
