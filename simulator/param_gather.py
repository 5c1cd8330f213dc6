"""The distributed optimizer's parameter all-gathers overlapped with the
forward (``Plan.overlap_param_gather``, Megatron-LM's ``--overlap-param-gather``).

The parameter buckets are the gradient buckets (:mod:`pipesim.simulator.dp_collectives`):
Megatron's buffer holds a bucket's parameters and gradients together, so a stage is cut only
where Megatron-Core cuts it (the first chunk of pipeline rank 0, with ``allreduce_overlap =
bucketed``: :func:`~pipesim.profiles.costmodels.buckets.megatron_bucketed`) and is one bucket
elsewhere; a bucket's bytes are the parameters one device holds (its TP shard), a tied copy
(:func:`~pipesim.profiles.costmodels.tied_embeddings.stage_copies`, the output layer's copy of
the embedding) in the bucket of the layer that uses it. Megatron-Core r0.8.0 puts the copy in a
bucket of its own (``shared_embedding``, ``param_and_grad_buffer.py``): the same bytes, one
gather more, not modelled.

Megatron-Core r0.8.0 with ``--overlap-param-gather`` (``megatron/core/optimizer/distrib_optimizer.py``
at baf94af3c6: ``zero_grad``, ``_make_forward_pre_hook``, ``_finish_param_sync_helper``,
``_get_model_param_buffer_dp_views``) skips the all-gather after the optimizer step; the next
iteration's ``zero_grad`` dispatches the first bucket's all-gather, each module's forward
pre-hook waits for the all-gather of its parameters' bucket and then dispatches the next bucket's,
the buckets ordered as the forward uses them (each model chunk's buckets reversed, the chunks in
order: one chain through all of a rank's chunks, r0.8.0's default ``--delay-param-gather`` off).
On the GPU the all-gathers thus run one after another on the data-parallel
communicator's stream (the host issues the next one before the compute that waits, running ahead
of the GPU) while the forward runs, and a module's first forward waits for its bucket; a later
chunk's gather is dispatched once the chunk before it is first reached, long before its own first
forward (``p`` forwards later in the interleaved order), so it is taken as running right after.

One simulated iteration stands for the steady state: the gathers of the previous iteration's
step run from the iteration's start, one after another per pipeline rank (its stages in chunk
order, each stage's buckets in forward order), each among the stage's replicas on the DP group's
links, sharing them with every other flow; the first forward of a stage on a device waits,
at the point of the forward where the bucket's first layer starts (a fraction of the forward by
the layers' forward times), for that bucket's gather; the step's own gather is not run (it
belongs to the next iteration). A ``dualpipe`` copy's first forward waits for its original's
gathers. Memory is unchanged: Megatron's parameter buffer holds the whole bf16 parameters
throughout (:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from pipesim.profiles.costmodels.buckets import Bucket
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator.stage_costs import StageFacts

__all__ = ["GatherWaits", "param_gathers"]

GatherWaits = dict[int, tuple[tuple[float, int], ...]]
"""stage -> ``(fraction of its first forward, all-gather)`` waits, in order."""

AddGather = Callable[[int, int, float, "int | None"], int]
"""``add(stage, bucket, bytes per member, after)`` appends one unposted all-gather and returns its
index."""


def param_gathers(
    profile: ModelProfile,
    stages: Sequence[StageFacts],
    buckets: Mapping[int, list[Bucket]],
    copies: Mapping[int, int | None],
    add: AddGather,
) -> GatherWaits:
    """Add the overlapped parameter all-gathers of every stage in ``buckets`` with ``add`` (module
    docstring) and return the waits of the stages' first forwards.

    Args:
        profile: the model's layers (forward times place a bucket's start inside the forward).
        stages: the program's stage facts.
        buckets: stage -> its buckets (:func:`~pipesim.profiles.costmodels.buckets.bucket_layers`,
            bytes on one device), the stages whose replicas gather.
        copies: stage -> the stage holding the other copy of its layers (``dualpipe``), or ``None``.
        add: appends one all-gather (``after``: the one before it on the rank) and returns its index.
    """
    waits: GatherWaits = {}
    last: dict[int, int] = {}  # pipeline rank -> its last gather so far
    for stage in sorted(stages, key=lambda st: (st.rank, st.index)):
        found = buckets.get(stage.index)
        if found is None:
            continue
        layers = list(stage.layers)
        fwd = [profile.layers[i].fwd_time_s for i in layers]
        total = sum(fwd)
        stage_waits = []
        for k in range(len(found) - 1, -1, -1):  # forward order: the stage's first layers first
            members, nbytes, _ = found[k]
            first = min(members, default=layers[0])
            before = sum(fwd[: first - layers[0]])
            cid = add(stage.index, k, nbytes, last.get(stage.rank))
            last[stage.rank] = cid
            stage_waits.append((before / total if total > 0 else 0.0, cid))
        waits[stage.index] = tuple(sorted(stage_waits))
    for s, copy in copies.items():  # dualpipe: the copy's first forward waits for the same gathers
        if copy is not None and s not in waits and copy in waits:
            waits[s] = waits[copy]
    return waits
