"""Data-parallel buckets: a stage's layers grouped as PyTorch DDP and Megatron-Core group their
gradients (and, in Megatron's buffer, their parameters) for bucketed collectives.

A stage's layers from its last one down (the backward's order) are cut whenever the bucket holds
at least ``bucket_bytes`` of parameters: PyTorch DDP's rule, and Megatron-Core's
``ParamAndGradBuffer`` (``megatron/core/distributed/param_and_grad_buffer.py`` at r0.8.0,
baf94af3c6), which lays the parameters out in reverse and fills buckets of ``bucket_size``
elements from the end of the model. The simulator's bucketed gradient collectives
(:mod:`pipesim.simulator.dp_collectives`), its overlapped parameter all-gathers
(:mod:`pipesim.simulator.param_gather`) and the 3D estimate's (:mod:`pipesim.planner.param_gather`)
use these buckets.
"""

from __future__ import annotations

from pipesim.profiles.models.profile import ModelProfile

__all__ = ["Bucket", "bucket_layers"]

Bucket = tuple[tuple[int, ...], float, float]
"""``(layers in backward order, parameter bytes, fraction of the backward after which its
gradients exist)``."""


def bucket_layers(profile: ModelProfile, layers: range, bucket_bytes: float) -> list[Bucket]:
    """The buckets of a stage's ``layers`` in backward order (module docstring): each its layers
    (last first), parameter bytes and the fraction of the backward after which it is complete.

    Args:
        profile: the model's layers.
        layers: the stage's layers.
        bucket_bytes: the smallest bucket, parameter bytes (> 0).
    """
    items = profile.layers
    total_bwd = sum(items[i].bwd_time_s for i in layers)
    buckets: list[Bucket] = []
    members: list[int] = []
    size = 0.0
    done = 0.0
    for i in reversed(layers):
        size += items[i].parameter_bytes
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
