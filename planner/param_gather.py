"""The 3D estimate's part of ``Plan.overlap_param_gather`` (Megatron-LM's
``--overlap-param-gather``): the distributed optimizer's parameter all-gathers of the previous
step, per bucket, ahead of the first forwards (:mod:`pipesim.simulator.param_gather`).

Without the option the estimate charges the all-gather after the optimizer step
(:func:`pipesim.planner.three_d._after_backward_s`); with it that term is dropped and
:func:`gather_head_s` is added instead: what the gathers delay the first forwards by.

Per pipeline rank the gathers of its stages run one after another from the iteration's start,
its stages in chunk order, each stage's buckets in forward order (``G_1, G_2, ...``, each
gathered as :func:`~pipesim.profiles.costmodels.sharding.half_time_s` on the DP group's curves).
Micro-batch 0 reaches stage ``k`` at ``s_k = sum_{j < k} (F_j + h_j)`` (``F_j`` the stages'
forward times, ``h_j`` a send where stages ``j`` and ``j + 1`` are on different ranks): it
never waits for a rank in the first forwards of the 1F1B and interleaved orders, since a rank's
``p`` forwards of chunk ``c`` end before micro-batch 0 comes back for chunk ``c + 1``. Bucket
``b`` of stage ``k``'s first layer is reached ``F_kb`` later (the forward time of the stage's
layers before it, by the layers' forward times, as the simulator places a bucket's wait). A
delay of one stage's first forward delays micro-batch 0 at every stage after it, so the first
forwards end late by ``D = max(0, max_{k, b} (G_1 + ... + G_kb - s_k - F_kb))`` (the sum over
the gathers of stage ``k``'s rank up to bucket ``b``): exact for one stage, and for the
interleaved schedule's chain of later chunks, each gathered after the chunks before it on its
rank (Megatron's one chain per rank, :mod:`pipesim.simulator.param_gather`), whose gathers can
outlast the ``p`` forwards between two chunks' first forwards. The estimate adds ``D``; the
pipeline's later actions move with micro-batch 0 (an approximation where the schedule has slack).

Buckets: only pipeline rank 0's first chunk is cut (Megatron-Core r0.8.0,
:func:`~pipesim.profiles.costmodels.buckets.megatron_bucketed`), in buckets of Megatron-Core's
default for ``--overlap-grad-reduce``, ``max(4e7, 1e6 d)`` elements
(``megatron/core/distributed/distributed_data_parallel.py`` at r0.8.0, baf94af3c6, lines 51-57),
of the parameters' training dtype, counted over the parameters one device holds (its TP shard,
a tied copy on its user layer), as the simulator buckets
(:mod:`pipesim.simulator.dp_collectives`); every other stage is one bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial

from pipesim.planner.three_d_costs import ThreeDCosts
from pipesim.profiles.costmodels.buckets import bucket_layers, megatron_bucketed
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
    chunks: Sequence[tuple[int, int]],
    ranks: Sequence[int],
    start_s: Sequence[float],
    fwd_s: Sequence[float],
    bucket_bytes: float,
    layer_bytes: Callable[[int, int], float],
    gather_s: Callable[[float], float],
) -> float:
    """How late the overlapped parameter all-gathers make the first forwards (module docstring),
    seconds.

    Args:
        profile: the model's layers.
        chunks: per stage, its ``(first, last)`` layers.
        ranks: per stage, its pipeline rank.
        start_s: per stage, when micro-batch 0 reaches it, s.
        fwd_s: per stage, its forward time, s.
        bucket_bytes: the smallest bucket of the one cut stage (rank 0's first), parameter bytes
            on one device (> 0).
        layer_bytes: ``layer_bytes(layer, stage)``: the parameter bytes one device of the stage
            holds of the layer (its TP shard, a tied copy on its user layer).
        gather_s: seconds one all-gather of that many bytes per device takes.
    """
    head = 0.0
    cut = megatron_bucketed(ranks)
    gathered: dict[int, float] = {}  # pipeline rank -> its gathers so far, s
    for k in sorted(range(len(chunks)), key=lambda j: (ranks[j], j)):
        first, last = chunks[k]
        layers = range(first, last + 1)
        times = [profile.layers[i].fwd_time_s for i in layers]
        total = sum(times)
        size = bucket_bytes if k == cut else math.inf
        found = bucket_layers(profile, layers, size, partial(_at, layer_bytes, k))
        for members, nbytes, _ in reversed(found):
            gathered[ranks[k]] = gathered.get(ranks[k], 0.0) + gather_s(nbytes)
            at = min(members, default=first)
            before = fwd_s[k] * sum(times[: at - first]) / total if total > 0 else 0.0
            head = max(head, gathered[ranks[k]] - start_s[k] - before)
    return head


def overlapped_gather_s(
    model: ThreeDCosts, chunks: Sequence[tuple[int, int]], stages_of: Sequence[Sequence[int]],
    fwd_s: Sequence[float], hop_s: float, t: int, d: int, curves: AllReduceCurves, allreduce: str,
    copy_bytes: Sequence[float], copy_at: Sequence[int],
) -> float:
    """:func:`gather_head_s` of a 3D configuration, seconds: every stage of ``chunks`` on its rank
    (``stages_of``), micro-batch 0 reaching it after the stages before it (``fwd_s`` per stage,
    and a send of ``hop_s`` between ranks), Megatron's default buckets for ``d`` replicas
    (:func:`bucket_elements`) of the training dtype on rank 0's first stage, TP degree ``t``,
    each stage's tied copy (``copy_bytes`` on one device, on the layer at position ``copy_at``
    of the stage; -1: none) in its user layer's bucket, each gather on the DP group's ``curves``
    with ``allreduce``."""
    ranks = [0] * len(chunks)
    for r, ks in enumerate(stages_of):
        for k in ks:
            ranks[k] = r
    starts, before = [], 0.0
    for k in range(len(chunks)):
        starts.append(before)
        before += fwd_s[k] + (hop_s if k + 1 < len(chunks) and ranks[k + 1] != ranks[k] else 0.0)

    def layer_bytes(layer: int, stage: int) -> float:
        own = model.params(layer, layer, t)
        return own + (copy_bytes[stage] if layer - chunks[stage][0] == copy_at[stage] else 0.0)

    return gather_head_s(
        model.profile, chunks, ranks, starts, fwd_s, bucket_elements(d) * model.elem, layer_bytes,
        lambda nbytes: half_time_s(curves, nbytes, allreduce),
    )


def _at(layer_bytes: Callable[[int, int], float], stage: int, layer: int) -> float:
    """``layer_bytes(layer, stage)``."""
    return layer_bytes(layer, stage)
