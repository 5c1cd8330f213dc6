"""The tensor-parallel collectives of shaped transformer layers, as Megatron-LM issues them, and
their cost on a TP group's ring.

Shoeybi et al., "Megatron-LM" (arXiv:1909.08053, Sec. 3): each block needs, per micro-batch, an
all-reduce of its ``b s h`` output after the attention and after the MLP in the forward (the
``g`` operators) and two in the backward (the ``f`` operators). Korthikanti et al., "Reducing
Activation Recomputation in Large Transformer Models" (arXiv:2205.05198, Sec. 4.2.2) add
sequence parallelism: each all-reduce becomes a reduce-scatter plus an all-gather, 2 all-gathers
and 2 reduce-scatters in the forward and the same in the backward. The embedding's partial
outputs are all-reduced (reduce-scattered with SP) in the forward; the head's input is
all-reduced in the backward (with SP all-gathered in the forward and reduce-scattered in the
backward) and the vocabulary-parallel cross-entropy all-reduces three ``b s`` fp32 vectors.

Each collective is timed on the group's ring all-reduce curves
(:mod:`pipesim.profiles.costmodels.collective`): an all-reduce is the ring all-reduce, an
all-gather or reduce-scatter its half. The backward's input-gradient collectives of the
column-parallel linears hide behind their weight-gradient GEMMs (:func:`wgrad_hidden_comm_s`)
where the framework launches them asynchronously (Megatron-LM since September 2021; before, and
with ``--no-async-tensor-model-parallel-allreduce``, every TP collective is synchronous and
exposed whole: ``dgrad_overlap`` of :func:`layer_collective_times_s`); Megatron-LM's
``tp_comm_overlap`` hides more (:func:`tp_exposed_comm_s`).
:mod:`pipesim.profiles.costmodels.tensor_parallel` (the per-layer shapes, compute and memory
under TP) sums them per stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer
from pipesim.profiles.models.shape import LayerKind, LayerShape

__all__ = [
    "CE_BYTES_PER_TOKEN",
    "UB_COMM_SMS",
    "UB_PIPELINE_SPLITS",
    "TpCollective",
    "block_wgrad_shares",
    "collective_time_s",
    "comm_held_gemm_s",
    "layer_collective_times_s",
    "layer_collectives",
    "stage_collectives",
    "tp_exposed_comm_s",
    "wgrad_hidden_comm_s",
]

CE_BYTES_PER_TOKEN = 4
"""Bytes per token of each of the vocabulary-parallel cross-entropy's three fp32 all-reduces."""


class TpCollective(NamedTuple):
    """One tensor-parallel collective of one layer for one micro-batch share.

    ``phase`` is ``"F"`` or ``"B"``; ``kind`` is ``"all-reduce"``, ``"all-gather"`` or
    ``"reduce-scatter"``; ``nbytes`` is the full (unsharded) tensor's size in bytes;
    ``wgrad_share`` is the share of the layer's weight-gradient time it can hide behind (0: none):
    the input-gradient all-reduce (reduce-scatter with SP) of a column-parallel linear runs while
    that linear's weight-gradient GEMM computes (:func:`wgrad_hidden_comm_s`).
    """

    phase: str
    kind: str
    nbytes: float
    wgrad_share: float = 0.0



def layer_collectives(
    shape: LayerShape, t: int, sequence_parallel: bool, samples: float, elem_bytes: int
) -> tuple[TpCollective, ...]:
    """The TP collectives of one layer for ``samples`` samples (module docstring; Megatron-LM's
    counts: 2 all-reduces forward and 2 backward per block, or with sequence parallelism 2
    all-gathers and 2 reduce-scatters each way).

    Args:
        shape: the layer's shape.
        t: tensor-parallel degree (no collectives for 1).
        sequence_parallel: Korthikanti et al.'s sequence parallelism.
        samples: samples in the micro-batch share.
        elem_bytes: bytes per activation element.
    """
    if t == 1:
        return ()
    act = samples * shape.seq * shape.hidden * elem_bytes
    ar, ag, rs = "all-reduce", "all-gather", "reduce-scatter"
    if shape.kind is LayerKind.BLOCK:
        qkv, fc1 = block_wgrad_shares(shape)
        if sequence_parallel:  # backward: the row-parallel linears' output-gradient all-gathers
            # (exposed) and the column-parallel linears' input-gradient reduce-scatters (hidden)
            return (
                (TpCollective("F", ag, act), TpCollective("F", rs, act)) * 2
                + (TpCollective("B", ag, act), TpCollective("B", rs, act, qkv))
                + (TpCollective("B", ag, act), TpCollective("B", rs, act, fc1))
            )
        backward = (TpCollective("B", ar, act, qkv), TpCollective("B", ar, act, fc1))
        return (TpCollective("F", ar, act),) * 2 + backward
    if shape.kind is LayerKind.EMBEDDING:
        if sequence_parallel:
            return (TpCollective("F", rs, act), TpCollective("B", ag, act))
        return (TpCollective("F", ar, act),)
    ce = (TpCollective("F", ar, samples * shape.seq * CE_BYTES_PER_TOKEN),) * 3
    if sequence_parallel:
        return (TpCollective("F", ag, act), *ce, TpCollective("B", rs, act, 1.0))
    return (*ce, TpCollective("B", ar, act, 1.0))


def block_wgrad_shares(shape: LayerShape) -> tuple[float, float]:
    """Shares of a block's weight-gradient GEMM work done by its two column-parallel linears,
    ``(QKV, FC1)``: by weight size (a weight-gradient GEMM's FLOPs are ``2 b s`` per weight),
    ``3 h^2`` and ``h f`` of ``4 h^2 + 2 h f`` (QKV, projection, FC1, FC2; ``f`` the MLP width)."""
    h, f = float(shape.hidden), float(shape.ffn)
    total = 4.0 * h * h + 2.0 * h * f
    return 3.0 * h * h / total, h * f / total


def wgrad_hidden_comm_s(comm_s: float, wgrad_s: float) -> float:
    """The exposed part of a backward TP collective of ``comm_s`` seconds that overlaps a
    weight-gradient GEMM of ``wgrad_s`` seconds: ``max(0, comm - wgrad)``.

    Megatron-LM launches a column-parallel linear's input-gradient all-reduce asynchronously
    (with SP its reduce-scatter) and computes the weight gradient meanwhile (Korthikanti et al.
    2022, Sec. 6.2; Megatron-LM ``megatron/core/tensor_parallel/layers.py`` at commit
    000c4ac24f61, ``linear_with_grad_accumulation_and_async_allreduce``: "the tensor parallel all
    reduce of the input gradients can be done asynchronously with the calculation of the weight
    gradients", the reduce-scatter likewise with sequence parallelism; ``ColumnParallelLinear``
    turns it on, ``allreduce_dgrad``). The row-parallel linears' backward collectives (their
    output gradients, all-gathered with SP) are needed before any of their GEMMs and stay exposed.

    The asynchronous launch came with Megatron-LM commit cf7efd4f5a (2021-08-30, "allreduce
    overlap with wgrad gemm": ``--async-tensor-parallel-allreduce``, made the default by
    3f65246911, 2021-09-02, with ``--no-async-tensor-model-parallel-allreduce`` to turn it off).
    Before it (``megatron/mpu/mappings.py`` at 5281919420, 2020-09-11, and at aed2f75e20,
    2021-04-11) ``_CopyToModelParallelRegion.backward`` all-reduces the input gradient with a
    blocking ``torch.distributed.all_reduce`` after the linear's whole backward (input and weight
    gradients) has run: nothing hides it (``dgrad_overlap=False`` of
    :func:`layer_collective_times_s`)."""
    return max(0.0, comm_s - wgrad_s)


def stage_collectives(
    layers: Sequence[Layer], t: int, sequence_parallel: bool, samples: float, dtype: str
) -> tuple[TpCollective, ...]:
    """Every TP collective of a stage's layers for one micro-batch share, in layer order."""
    elem = DTYPE_BYTES[dtype]
    out: list[TpCollective] = []
    for layer in layers:
        if layer.shape is not None:
            out.extend(layer_collectives(layer.shape, t, sequence_parallel, samples, elem))
    return tuple(out)


def collective_time_s(curves: AllReduceCurves, collective: TpCollective) -> float:
    """Time of one TP collective on a group whose ring all-reduce ``curves`` are given, seconds:
    an all-reduce is the ring all-reduce of ``nbytes``; an all-gather or a reduce-scatter of the
    full ``nbytes`` is its half (``n - 1`` of its ``2 (n - 1)`` ring steps)."""
    full = curves.time_s(collective.nbytes, AllReduceAlgorithm.RING)
    return full if collective.kind == "all-reduce" else full / 2.0


def tp_exposed_comm_s(comm_s: float, compute_s: float, t: int, overlap: bool) -> float:
    """The exposed part of an op's TP collectives (``comm_s`` seconds in all) next to its
    ``compute_s`` seconds of compute under TP, seconds.

    Without ``overlap``: all of it. With it (Megatron-LM's ``tp_comm_overlap`` by ring
    exchange, as Megatron Bridge's GPT-3 175B preset
    ``userbuffers_bf16_h100_h12288_tp4_mbs1_seqlen2048`` runs the QKV and FC1 all-gathers and
    the projection and FC2 input-gradient reduce-scatters): each collective is cut into ``t``
    chunks, one per TP rank, and each chunk after the first moves while the GEMM works on the one
    before, so ``(t - 1) / t`` of it can hide behind the op's compute:
    ``comm / t + max(0, (comm - compute) (t - 1) / t)``.
    """
    if not overlap or t <= 1:
        return comm_s
    return comm_s / t + max(0.0, comm_s - compute_s) * (t - 1) / t


UB_COMM_SMS = 16
"""SMs each of Transformer Engine's SM-driven userbuffers communication kernels holds while it
runs, under Megatron-LM's ``--tp-comm-overlap``.

Megatron-LM core_r0.8.0 (baf94af3c6; ``megatron/training/initialize.py``,
``_initialize_tp_communicators``)
calls Transformer Engine's ``initialize_ub`` with ``ub_cfgs = {}`` unless
``--tp-comm-overlap-cfg`` names a file, so every GEMM takes TE's defaults; TE v1.7 (tag at
4e7caa1c35; ``transformer_engine/pytorch/module/base.py``, ``initialize_ub``) sets them:

* ``"ring_exchange"`` for ``qkv_fprop``, ``fc1_fprop``, ``proj_dgrad``, ``fc2_dgrad`` (the
  all-gathers before the column-parallel forward GEMMs and of the row-parallel linears' output
  gradients): ``UbufP2PCommOverlap``, which sets ``use_ce = 1``
  (``transformer_engine/pytorch/csrc/comm_gemm_overlap.h``), so ``userbuffers_send`` moves the
  chunks with ``cudaMemcpyAsync`` on the copy engines and launches a one-block signal kernel
  (``csrc/userbuffers/userbuffers.cu``): no SMs taken from the GEMMs;
* ``"pipeline"`` for ``proj_fprop`` and ``fc2_fprop`` (the reduce-scatters after the
  row-parallel forward GEMMs, :data:`UB_PIPELINE_SPLITS` chunks) and ``"bulk"`` for
  ``qkv_dgrad``, ``fc1_dgrad`` (the all-gather of the layer-norm output for the weight gradient,
  beside the input-gradient GEMM) and ``qkv_wgrad``, ``fc1_wgrad`` (the input gradient's
  reduce-scatter beside the weight-gradient GEMM; ``layernorm_linear.py``'s backward runs the
  input-gradient GEMM with ``BULK_OVERLAP_AG`` and the weight-gradient GEMM with
  ``BULK_OVERLAP_RS``; Megatron-LM's ``tp_comm_bulk_dgrad`` and ``tp_comm_bulk_wgrad`` default
  to true, ``megatron/core/model_parallel_config.py`` at core_r0.8.0): ``UbufCommOverlap``,
  ``use_ce = 0`` and ``comm_sms = num_sm``, ``add_ub``'s default ``num_sm = 16``; its
  reduce-scatter and
  all-gather kernels launch ``comm->sms`` blocks of ``comm->threads`` threads (``userbuffers.cu``,
  ``SETUP_LAUNCH_CONFIG``; 1024 threads set in ``userbuffers-host.cpp``) on a communication
  stream beside the GEMM.

``add_ub``'s default ``set_sm_margin = 0`` makes ``_math_sms`` the device's whole
``multiProcessorCount`` (``comm_gemm_overlap.h``): cuBLAS is not told of the communication
kernel, which simply holds its 16 SMs while it runs, and the GEMM's blocks run on the others
(:func:`comm_held_gemm_s`). That a communication block leaves no room for a GEMM block on its
SM (register file and shared memory) is an assumption, not traced."""

UB_PIPELINE_SPLITS = 4
"""Chunks of Transformer Engine's ``"pipeline"`` GEMM-then-reduce-scatter overlap:
``initialize_ub``'s ``num_splits = 4 if method == "pipeline"`` (TE v1.7,
``transformer_engine/pytorch/module/base.py``). ``split_overlap_rs``
(``csrc/comm_gemm_overlap.h``) reduce-scatters chunk ``i`` while the GEMM computes chunk
``i + 1``, so ``(splits - 1) / splits`` of the reduce-scatter runs beside the GEMM and the last
chunk's after it."""


def comm_held_gemm_s(full_s: float, reduced_s: float, held_s: float) -> float:
    """Time of a GEMM that takes ``full_s`` on all of the device's SMs and ``reduced_s`` on the
    SMs a concurrent communication kernel leaves (:data:`UB_COMM_SMS`), while that kernel holds
    its SMs for ``held_s`` of the GEMM's run, seconds.

    Fluid: the GEMM does ``held_s / reduced_s`` of its work while the SMs are held and the rest
    at the full rate: ``held_s + (1 - held_s / reduced_s) full_s``, or ``reduced_s`` when the
    communication outlasts it. ``full_s`` for ``held_s = 0``.
    """
    if held_s <= 0.0:
        return full_s
    if held_s >= reduced_s:
        return reduced_s
    return held_s + (1.0 - held_s / reduced_s) * full_s


def layer_collective_times_s(
    layer: Layer,
    bwd_tp_s: float,
    t: int,
    sequence_parallel: bool,
    samples: float,
    elem_bytes: int,
    curves: AllReduceCurves,
    *,
    dgrad_overlap: bool = True,
) -> tuple[float, float, float]:
    """``(forward, backward exposed, backward whole)`` seconds of one shaped layer's TP
    collectives (:func:`layer_collectives` of ``samples`` samples' tokens, timed with
    :func:`collective_time_s` on ``curves``): with ``dgrad_overlap`` (the framework launches the
    column-parallel linears' input-gradient collectives asynchronously, Megatron-LM's default
    since 2021-09) a backward collective with a ``wgrad_share`` exposes only what its linear's
    weight-gradient time (``bwd_tp_s``, the layer's backward under TP, times its
    ``weight_grad_fraction`` times the share) does not hide (:func:`wgrad_hidden_comm_s`);
    without it (synchronous collectives, Megatron-LM before) it is exposed whole; "whole"
    counts every backward collective in full (a split
    backward's ``I``, whose weight gradient runs later). Shared by :func:`stage_tp_times` and
    context parallelism's per-rank times (``s / c`` tokens)."""
    shape = layer.shape
    if shape is None or t == 1:
        return 0.0, 0.0, 0.0
    wgrad_s = bwd_tp_s * layer.weight_grad_fraction
    fwd = bwd = whole = 0.0
    for c in layer_collectives(shape, t, sequence_parallel, samples, elem_bytes):
        c_s = collective_time_s(curves, c)
        if c.phase == "F":
            fwd += c_s
        else:
            whole += c_s
            hides = dgrad_overlap and c.wgrad_share > 0
            bwd += wgrad_hidden_comm_s(c_s, wgrad_s * c.wgrad_share) if hides else c_s
    return fwd, bwd, whole
