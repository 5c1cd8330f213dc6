"""Context parallelism: a replica's sequence split over ``c`` GPUs, attention by ring exchange.

Megatron-LM's ``--context-parallel-size c`` (``megatron/core/parallel_state.py`` at commit
d98e8a64 of NVIDIA/Megatron-LM: rank order ``tp-cp-ep-dp-pp``, so a replica's ``t c`` GPUs are
``c`` groups of ``t`` TP ranks; gradients are reduced over the data-parallel group *with* context
parallelism, ``get_data_parallel_group(with_context_parallel=True)`` in
``megatron/core/distributed/param_and_grad_buffer.py`` and ``finalize_model_grads.py``) runs
attention with Transformer Engine's ring attention
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``,
``flash_attn_p2p_communicate``: point-to-point sends of K/V in the forward, of K/V and dK/dV in
the backward, each step's transfer issued before the step's attention kernel). The algorithm is
Liu, Zaharia and Abbeel, "Ring Attention with Blockwise Transformers for Near-Infinite Context"
(arXiv:2310.01889, 2023, Sec. 3): each device keeps its query chunk, the key/value chunks travel
round the ring, and a step's transfer hides behind the step's blockwise attention.

Per block and micro-batch share of ``b`` samples, on one CP rank (``s`` tokens per sample, hidden
``h``, TP degree ``t``):

* **compute**: every token-wise operation (the QKV, projection and MLP GEMMs, layer norms,
  dropouts, GeLU) runs on ``s / c`` tokens; attention computes ``c`` blocks of
  ``(s / c) x (s / c)`` scores per head (its query chunk against every key chunk): FLOPs ``/ c``.
  With the device's kernel model (:func:`~pipesim.profiles.costmodels.tensor_parallel.tp_compute_model`)
  the GEMMs are re-timed at those shapes, TP-split as well (:func:`block_cp_time_factors`), so
  small chunks lose efficiency as on a GPU; otherwise the time is divided by ``c``.
* **ring exchange** (:func:`ring_exposed_s`): ``c - 1`` steps, each moving a K and V chunk,
  ``2 b (s / c) (h / t)`` elements, to the next rank (all ranks at once), each overlapped with
  one step's attention (``1 / c`` of the rank's attention time, its FLOP share of the block by
  :func:`attention_flop_share`): the forward exposes ``(c - 1) max(0, x - a)`` with ``x`` one
  step's transfer and ``a`` one step's attention. The backward sends K/V and the travelling
  dK/dV (twice the bytes) in ``c - 1`` overlapped steps, and dK/dV's last hop home after the
  last step (exposed).
* **TP collectives** carry ``s / c`` tokens (:func:`stage_cp_times`).
* **memory**: every activation is per token, and the scores of a chunk are ``(s / c) x s``:
  a rank keeps ``1 / c`` of the activations of its TP rank (:func:`cp_stage_activations`).
  Weights are not split by CP; sharded optimizer state is split over ``d c`` ranks.

The planner folds the exposed exchange into the op's time, timed on the slowest hop of the
ring's routes. The simulator runs it as real transfers on the ring's links
(``simulator/tp_lowering.py``, :meth:`~pipesim.simulator.tp_lowering.TpLowering.tp_comm`: per
op and micro-batch one flow over the ring's hops that waits the summed step latencies and
carries the summed chunk bytes, launched as early before the op's compute ends as the attention
hides of it): alone (a ring inside an NVSwitch server) the op ends exactly as folded here; a
ring across servers shares each GPU's NIC with the pipeline's sends and the data-parallel
collectives, which only the simulation sees. Every TP rank of a replica has a CP ring of its own
(the first one's shifted by the rank): where those ``t`` rings leave their servers through one
NIC the simulator runs them all and the 3D estimate times the hop at the NIC's share
(:func:`~pipesim.profiles.costmodels.dp_rings.ranks_apart`,
:func:`~pipesim.profiles.costmodels.dp_rings.unit_ring_loads`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import NamedTuple

from pipesim.errors import invalid
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.compute import ComputeModel
from pipesim.profiles.costmodels.memory import Recompute, StageActivations
from pipesim.profiles.costmodels.tensor_parallel import (
    TpStageTimes,
    _block_model_times_s,
    layer_collective_times_s,
    layer_shape,
    stage_tp_times,
    tp_exposed_comm_s,
    tp_stage_activations,
    tp_time_factors,
)
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer, ModelProfile
from pipesim.profiles.models.shape import LayerKind, LayerShape
from pipesim.profiles.models.zoo.transformers import block_gemm_shapes

__all__ = [
    "RingHop",
    "attention_flop_share",
    "block_cp_time_factors",
    "check_context_parallel",
    "cp_activation_split",
    "cp_stage_activations",
    "kv_chunk_bytes",
    "ring_exposed_s",
    "ring_hop",
    "stage_cp_times",
]


class RingHop(NamedTuple):
    """The slowest hop of a context-parallel ring: one step's transfer of ``n`` bytes takes
    ``latency_s + n / bandwidth_bytes_per_s`` seconds (every rank sends at once)."""

    latency_s: float
    bandwidth_bytes_per_s: float

    def time_s(self, nbytes: float) -> float:
        """One ring step moving ``nbytes`` bytes per rank, seconds (0 for no bytes)."""
        if nbytes <= 0:
            return 0.0
        bw = self.bandwidth_bytes_per_s
        return self.latency_s + (nbytes / bw if bw < math.inf else 0.0)


FREE_HOP = RingHop(latency_s=0.0, bandwidth_bytes_per_s=math.inf)
"""A ring on free links (transfers take no time)."""


def ring_hop(
    ring: Sequence[int],
    latency_s: Callable[[int, int], float],
    bandwidth_bytes_per_s: Callable[[int, int], float],
) -> RingHop:
    """The slowest hop of the ring ``ring[0] -> ring[1] -> ... -> ring[0]`` by route latency and
    bandwidth (``Cluster.route_latency_s`` and ``Cluster.route_bandwidth_bytes_per_s``).
    :data:`FREE_HOP` for one device."""
    if len(ring) < 2:
        return FREE_HOP
    hops = [(ring[k], ring[(k + 1) % len(ring)]) for k in range(len(ring))]
    return RingHop(
        latency_s=max(latency_s(a, b) for a, b in hops),
        bandwidth_bytes_per_s=min(bandwidth_bytes_per_s(a, b) for a, b in hops),
    )


def check_context_parallel(profile: ModelProfile, first: int, last: int, c: int, where: str) -> None:
    """Check that layers ``first..last`` can be split over ``c`` context-parallel ranks.

    Raises:
        InputError: ``c > 1`` and a layer has no shape (naming the missing ``shape`` field), or
            ``c`` does not divide a layer's sequence length.
    """
    if c == 1:
        return
    for i in range(first, last + 1):
        layer = profile.layers[i]
        shape = layer_shape(profile, i, where, c, "context parallelism")
        if shape.seq % c:
            raise invalid(where, c, f"must divide layer {layer.name!r}'s sequence length ({shape.seq})")


@lru_cache(maxsize=1024)
def attention_flop_share(shape: LayerShape) -> float:
    """The attention core's (``Q K^T`` and ``P V``) share of a block's forward GEMM FLOPs:
    ``4 b s^2 h / (8 b s h^2 + 4 b s h f + 4 b s^2 h)`` for MLP width ``f`` (the ring's
    overlap budget)."""
    gemms = block_gemm_shapes(batch=1, seq=shape.seq, hidden=shape.hidden, heads=shape.heads, ffn=shape.ffn)
    flops = [2.0 * g.m * g.n * g.k * g.count for g in gemms]
    return (flops[3] + flops[4]) / sum(flops)


def kv_chunk_bytes(shape: LayerShape, samples: float, t: int, c: int, elem_bytes: int) -> float:
    """Bytes of one rank's K and V chunk: ``2 b (s / c) (h / t)`` elements."""
    return 2.0 * samples * (shape.seq / c) * (shape.hidden / t) * elem_bytes


def ring_exposed_s(
    kv_bytes: float, attn_fwd_s: float, attn_bwd_s: float, c: int, hop: RingHop
) -> tuple[float, float]:
    """``(forward, backward)`` exposed ring-exchange time of one block, seconds (module
    docstring), for a K/V chunk of ``kv_bytes`` and the rank's attention time ``attn_fwd_s``,
    ``attn_bwd_s`` (all ``c`` steps): forward ``(c - 1) max(0, x(kv) - a_f / c)``, backward
    ``(c - 1) max(0, x(2 kv) - a_b / c) + x(kv)`` (dK/dV's last hop home)."""
    if c == 1:
        return 0.0, 0.0
    fwd = (c - 1) * max(0.0, hop.time_s(kv_bytes) - attn_fwd_s / c)
    bwd = (c - 1) * max(0.0, hop.time_s(2.0 * kv_bytes) - attn_bwd_s / c) + hop.time_s(kv_bytes)
    return fwd, bwd


@lru_cache(maxsize=1024)
def _chunk_shape(shape: LayerShape, c: int) -> LayerShape:
    """``shape`` with the sequence of one CP rank's chunk, ``s / c`` tokens."""
    return replace(shape, seq=shape.seq // c)


def block_cp_time_factors(
    layer: Layer,
    samples: int,
    t: int,
    c: int,
    sequence_parallel: bool,
    model: ComputeModel,
    fwd_s: float,
    bwd_s: float,
    elem_bytes: int,
) -> tuple[float, float]:
    """``(forward, backward)`` time of a block on one rank of ``t``-way TP and ``c``-way CP
    relative to one device, from its GEMM shapes.

    As :func:`~pipesim.profiles.costmodels.tensor_parallel.block_tp_time_factors`, with the
    token-wise GEMMs (Q, K, V, projection, MLP; TP-split) timed on ``s / c`` tokens, the
    attention GEMMs as ``c`` blocks of ``(s / c) x (s / c)`` per head (TP-split by heads), the
    replicated operations (``R``: layer norms, residual dropouts and adds) on ``s / c`` tokens,
    and the rest of the layer's time divided by ``t c``:
    ``G_tc + R_c (1 / t with SP, else 1) + (T - G - R) / (t c)``. Falls back to the time
    division (:func:`~pipesim.profiles.costmodels.tensor_parallel.tp_time_factors` over ``c``)
    in a direction where ``G + R`` exceeds ``T``.
    """
    shape = layer.shape
    assert shape is not None
    assert shape.kind is LayerKind.BLOCK
    fb = tp_time_factors(shape, t, sequence_parallel)
    fallback = (fb[0] / c, fb[1] / c)
    flash = layer.attention_core_saved_bytes == 0
    g_f, g_b, _, _, r_f, r_b = _block_model_times_s(model, shape, samples, t, flash, elem_bytes)
    chunk = _chunk_shape(shape, c)
    _, _, lin_f, lin_b, rc_f, rc_b = _block_model_times_s(model, chunk, samples, t, True, elem_bytes)
    att_f = att_b = 0.0
    if not flash:
        _, _, all_f, all_b, _, _ = _block_model_times_s(model, chunk, samples, t, False, elem_bytes)
        att_f, att_b = c * (all_f - lin_f), c * (all_b - lin_b)  # c ring steps of (s/c) x (s/c)
    rep = 1.0 / t if sequence_parallel else 1.0
    out = []
    directions = (
        (fwd_s, g_f, lin_f + att_f, r_f, rc_f, fallback[0]),
        (bwd_s, g_b, lin_b + att_b, r_b, rc_b, fallback[1]),
    )
    for total, g, gtc, replicated, replicated_c, fbk in directions:
        rest = total - g - replicated
        if total <= 0 or rest < -1e-9 * total:
            out.append(fbk)
        else:
            out.append((gtc + replicated_c * rep + max(0.0, rest) / (t * c)) / total)
    return out[0], out[1]


def stage_cp_times(
    profile: ModelProfile,
    first_layer: int,
    last_layer: int,
    samples: float,
    t: int,
    c: int,
    sequence_parallel: bool,
    curves: AllReduceCurves,
    hop: RingHop,
    compute: ComputeModel | None = None,
    overlap: bool = False,
    *,
    dgrad_overlap: bool = True,
) -> TpStageTimes:
    """Compute and exposed communication of layers ``first..last`` for ``samples`` samples on
    one rank of ``t``-way TP and ``c``-way CP (module docstring): per layer
    :func:`block_cp_time_factors` for blocks with a kernel model and whole ``samples``, else the
    TP time division over ``c``; the TP collectives of ``s / c`` tokens
    (:func:`~pipesim.profiles.costmodels.tensor_parallel.stage_collectives` of ``samples / c``,
    timed on the TP group's ``curves``, exposed part by ``overlap`` and ``dgrad_overlap``) plus
    each block's exposed ring exchange (:func:`ring_exposed_s` on ``hop``). Equal to
    :func:`~pipesim.profiles.costmodels.tensor_parallel.stage_tp_times` for ``c = 1``: the one
    derivation the simulator's lowering and the Megatron planner share."""
    if c == 1:
        return stage_tp_times(profile, first_layer, last_layer, samples, t, sequence_parallel, curves,
                              compute, overlap, dgrad_overlap=dgrad_overlap)
    f_all, b_all = profile.fwd_times_s(samples), profile.bwd_times_s(samples)
    elem = DTYPE_BYTES[profile.dtype]
    whole = float(samples).is_integer()
    f0 = f1 = b0 = b1 = 0.0
    ring_f = ring_b = 0.0
    comm_f = comm_b = comm_split = 0.0
    for i in range(first_layer, last_layer + 1):
        layer = profile.layers[i]
        shape = layer.shape
        assert shape is not None  # check_context_parallel
        if compute is not None and whole and shape.kind is LayerKind.BLOCK:
            ff, fb = block_cp_time_factors(layer, int(samples), t, c, sequence_parallel, compute,
                                           f_all[i], b_all[i], elem)
        else:
            tf, tb = tp_time_factors(shape, t, sequence_parallel)
            ff, fb = tf / c, tb / c
        f0, f1 = f0 + f_all[i], f1 + f_all[i] * ff
        b0, b1 = b0 + b_all[i], b1 + b_all[i] * fb
        # the TP collectives of s / c tokens, backward ones hidden behind the weight gradient
        cf, cb, cs = layer_collective_times_s(
            layer, b_all[i] * fb, t, sequence_parallel, samples / c, elem, curves, dgrad_overlap=dgrad_overlap
        )
        comm_f, comm_b, comm_split = comm_f + cf, comm_b + cb, comm_split + cs
        if shape.kind is LayerKind.BLOCK:
            share = attention_flop_share(shape)
            kv = kv_chunk_bytes(shape, samples, t, c, elem)
            rf, rb = ring_exposed_s(kv, share * f_all[i] * ff, share * b_all[i] * fb, c, hop)
            ring_f, ring_b = ring_f + rf, ring_b + rb
    return TpStageTimes(
        f0,
        b0,
        f1,
        b1,
        tp_exposed_comm_s(comm_f, f1, t, overlap) + ring_f,
        tp_exposed_comm_s(comm_b, b1, t, overlap) + ring_b,
        tp_exposed_comm_s(comm_split, b1, t, overlap) + ring_b,
    )


def cp_stage_activations(
    profile: ModelProfile,
    first_layer: int,
    last_layer: int,
    samples: float,
    recompute: Recompute | bool,
    t: int,
    sequence_parallel: bool,
    c: int,
) -> StageActivations:
    """Activation memory of one rank of ``t``-way TP and ``c``-way CP for one micro-batch share,
    bytes: :func:`~pipesim.profiles.costmodels.tensor_parallel.tp_stage_activations` over ``c``
    (every activation is per token; a chunk's scores are ``(s / c) x s``: Korthikanti et al.'s
    ``s b h (34 + 5 a s / h)`` per block becomes ``(s / c) b h (34 + 5 a s / h)``; what ``W``
    reads, the GEMMs' inputs and output gradients, is per token too). The ring's receive buffers
    (a few K/V chunks) are not counted.

    Raises:
        InputError: as ``tp_stage_activations``.
    """
    acts = tp_stage_activations(profile, first_layer, last_layer, samples, recompute, t, sequence_parallel)
    return cp_activation_split(acts, c)


def cp_activation_split(acts: StageActivations, c: int) -> StageActivations:
    """One CP rank's activations from those of its TP rank without CP
    (:func:`cp_stage_activations`): every figure over ``c``; unchanged for ``c = 1``."""
    if c == 1:
        return acts
    return StageActivations(stash_bytes=acts.stash_bytes / c, work_bytes=acts.work_bytes / c,
                            held_bytes=acts.held_bytes / c)
