"""The 3D estimate's part of ``Plan.overlap_param_gather`` (Megatron-LM's
``--overlap-param-gather``): the distributed optimizer's parameter all-gathers of the previous
step, per bucket, ahead of the first forwards (:mod:`pipesim.simulator.param_gather`).

Without the option the estimate charges the all-gather after the optimizer step
(:func:`pipesim.planner.three_d._after_backward_s`); with it that term is dropped and
:func:`gather_head_s` is added instead: what the gathers delay the first forward by.

Per pipeline rank ``r`` the gathers of its first stage (chunk) run one after another from the
iteration's start, ``G_0, G_1, ...`` in forward order (the buckets of
:func:`~pipesim.profiles.costmodels.buckets.bucket_layers`, each gathered as
:func:`~pipesim.profiles.costmodels.sharding.half_time_s` on the DP group's curves); micro-batch
0 reaches the rank at ``s_r`` (the stages before it and their sends), and bucket ``k``'s first
layer at ``s_r + F_k`` (``F_k`` the forward time of the layers before it, by the layers' forward
times, as the simulator places a bucket's wait). The rank's first forward ends late by
``D_r = max(0, max_k (G_0 + ... + G_k - s_r - F_k))``; the estimate adds ``max_r D_r`` (exact
for one stage; for a pipeline the rank whose delay is largest holds the others back by about
that much). Later chunks' gathers (interleaved schedules) come after ``p`` forwards of the first
chunk and are taken as hidden.

Buckets: Megatron-Core's default for ``--overlap-grad-reduce``, ``max(4e7, 1e6 d)`` elements
(``megatron/core/distributed/distributed_data_parallel.py`` at r0.8.0, baf94af3c6, lines 51-57),
of the parameters' training dtype; as the simulator buckets, by the layers' whole parameter bytes
(:mod:`pipesim.simulator.dp_collectives`), each bucket's gather the TP shard of its bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipesim.planner.three_d_costs import ThreeDCosts
from pipesim.profiles.costmodels.buckets import bucket_layers
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.sharding import half_time_s
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["MEGATRON_BUCKET_ELEMENTS", "bucket_elements", "gather_head_s", "overlapped_gather_s"]

MEGATRON_BUCKET_ELEMENTS = 40_000_000
"""Megatron-Core's smallest default gradient/parameter bucket, elements (``max(40000000,
1000000 * dp_size)``: ``distributed_data_parallel.py`` at r0.8.0, baf94af3c6)."""


def bucket_elements(replicas: int) -> int:
    """Megatron-Core r0.8.0's default bucket size with ``--overlap-grad-reduce`` for a
    data-parallel group of ``replicas`` ranks, elements."""
    return max(MEGATRON_BUCKET_ELEMENTS, 1_000_000 * replicas)


def gather_head_s(
    profile: ModelProfile,
    first_chunks: Sequence[tuple[int, int]],
    start_s: Sequence[float],
    fwd_s: Sequence[float],
    bucket_bytes: float,
    shard: Callable[[int, int], float],
    gather_s: Callable[[float], float],
) -> float:
    """How late the overlapped parameter all-gathers make the first forwards (module docstring),
    seconds.

    Args:
        profile: the model's layers.
        first_chunks: per rank, its first stage's ``(first, last)`` layers.
        start_s: per rank, when micro-batch 0 reaches its first stage, s.
        fwd_s: per rank, its first stage's forward time, s.
        bucket_bytes: the smallest bucket, parameter bytes (> 0).
        shard: ``shard(first, last)``: parameter bytes a device holds of those layers (its TP shard).
        gather_s: seconds one all-gather of that many bytes per device takes.
    """
    head = 0.0
    for (first, last), start, fwd in zip(first_chunks, start_s, fwd_s, strict=True):
        layers = range(first, last + 1)
        whole = float(sum(profile.layers[i].parameter_bytes for i in layers))
        scale = shard(first, last) / whole if whole > 0 else 0.0
        times = [profile.layers[i].fwd_time_s for i in layers]
        total = sum(times)
        gathered = 0.0
        for members, nbytes, _ in reversed(bucket_layers(profile, layers, bucket_bytes)):
            gathered += gather_s(nbytes * scale)
            at = min(members, default=first)
            before = fwd * sum(times[: at - first]) / total if total > 0 else 0.0
            head = max(head, gathered - start - before)
    return head


def overlapped_gather_s(
    model: ThreeDCosts, chunks: Sequence[tuple[int, int]], stages_of: Sequence[Sequence[int]],
    fwd_s: Sequence[float], hop_s: float, t: int, d: int, curves: AllReduceCurves, allreduce: str,
) -> float:
    """:func:`gather_head_s` of a 3D configuration, seconds: per rank its first stage
    (``stages_of[r][0]`` of ``chunks``), reached after the stages of the ranks before it
    (``fwd_s`` per stage, and a send of ``hop_s`` each), Megatron's default buckets for ``d``
    replicas (:func:`bucket_elements`) of the training dtype, TP degree ``t``, each gather on the
    DP group's ``curves`` with ``allreduce``."""
    firsts = [ks[0] for ks in stages_of]
    starts, before = [], 0.0
    for k in firsts:
        starts.append(before)
        before += fwd_s[k] + hop_s
    return gather_head_s(
        model.profile, [chunks[k] for k in firsts], starts, [fwd_s[k] for k in firsts],
        bucket_elements(d) * model.elem, lambda first, last: model.params(first, last, t),
        lambda nbytes: half_time_s(curves, nbytes, allreduce),
    )
