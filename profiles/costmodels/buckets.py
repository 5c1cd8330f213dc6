"""Data-parallel buckets: a stage's layers grouped as PyTorch DDP and Megatron-Core group their
gradients (and, in Megatron's buffer, their parameters) for bucketed collectives.

A stage's layers from its last one down (the backward's order) are cut whenever the bucket holds
at least ``bucket_bytes`` of the parameters one device holds (its TP shard, with a tied copy on
the layer that uses it): PyTorch DDP's rule (``bucket_cap_mb`` over the rank's own tensors), and
Megatron-Core's ``ParamAndGradBuffer`` (``megatron/core/distributed/param_and_grad_buffer.py`` at
r0.8.0, baf94af3c6), which lays the rank's parameters out in reverse and fills buckets of
``bucket_size`` elements of its local (TP-sharded) tensors from the end of the model. pipesim cuts
between layers; Megatron cuts between parameters, so its buckets hold part of a layer where a
layer's shard exceeds the bucket (the same bytes in more, smaller collectives).

Megatron-Core cuts only some stages (:func:`megatron_bucketed`); the others are one bucket. The
simulator's bucketed gradient collectives (:mod:`pipesim.simulator.dp_collectives`), its
overlapped parameter all-gathers (:mod:`pipesim.simulator.param_gather`) and the 3D estimate's
(:mod:`pipesim.planner.param_gather`) use these buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipesim.profiles.models.profile import ModelProfile

__all__ = ["Bucket", "bucket_layers", "megatron_bucketed"]

Bucket = tuple[tuple[int, ...], float, float]
"""``(layers in backward order, parameter bytes on one device, fraction of the backward after
which its gradients exist)``."""


def bucket_layers(
    profile: ModelProfile, layers: range, bucket_bytes: float,
    layer_bytes: Callable[[int], float] | None = None,
) -> list[Bucket]:
    """The buckets of a stage's ``layers`` in backward order (module docstring): each its layers
    (last first), parameter bytes on one device and the fraction of the backward after which it
    is complete.

    Args:
        profile: the model's layers.
        layers: the stage's layers.
        bucket_bytes: the smallest bucket, parameter bytes on one device (> 0; ``math.inf``: one
            bucket).
        layer_bytes: ``layer_bytes(i)``: layer ``i``'s parameter bytes on one device (its TP
            shard, a tied copy it uses included); default the profile's whole layer.
    """
    items = profile.layers
    size_of = layer_bytes if layer_bytes is not None else (lambda i: float(items[i].parameter_bytes))
    total_bwd = sum(items[i].bwd_time_s for i in layers)
    buckets: list[Bucket] = []
    members: list[int] = []
    size = 0.0
    done = 0.0
    for i in reversed(layers):
        size += size_of(i)
        done += items[i].bwd_time_s
        members.append(i)
        if size >= bucket_bytes:
            buckets.append((tuple(members), size, done / total_bwd if total_bwd > 0 else 1.0))
            size = 0.0
            members = []
    if size > 0 or not buckets:
        buckets.append((tuple(members), size, 1.0))
    elif members:  # trailing layers without parameters join the last bucket
        last, nbytes, fraction = buckets[-1]
        buckets[-1] = (last + tuple(members), nbytes, fraction)
    return buckets


def megatron_bucketed(ranks: Sequence[int]) -> int | None:
    """The one stage Megatron-Core r0.8.0 cuts into buckets, given each stage's pipeline rank
    (``ranks[s]``, stages in order), or ``None`` for none: the first model chunk of pipeline rank
    0. ``DistributedDataParallel.__init__`` (``megatron/core/distributed/
    distributed_data_parallel.py`` at r0.8.0, baf94af3c6) sets ``bucket_size = None`` (one bucket)
    on pipeline ranks above 0 ("data-parallel communication on these stages is not on the
    critical path") and where ``disable_bucketing`` is set, which ``get_model``
    (``megatron/training/training.py`` at the same tag) sets for every model chunk after the
    first (``model_chunk_idx > 0``). A rank's chunks are its stages in stage order.
    """
    return next((s for s, rank in enumerate(ranks) if rank == 0), None)
