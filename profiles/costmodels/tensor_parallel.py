"""Tensor (and sequence) parallelism of shaped transformer layers, as Megatron-LM does it.

Shoeybi et al., "Megatron-LM" (arXiv:1909.08053, Sec. 3) split a block's GEMMs over ``t``
devices: the QKV and first MLP GEMMs by columns, the attention output and second MLP GEMMs by
rows, attention by heads. Each block then needs, per micro-batch, an all-reduce of its ``b s h``
output after the attention and after the MLP in the forward (the ``g`` operators) and two in
the backward (the ``f`` operators). Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (arXiv:2205.05198, Sec. 4.2.2) add sequence parallelism: layer norms
and dropouts are split along the sequence, and each all-reduce becomes a reduce-scatter plus an
all-gather: 2 all-gathers and 2 reduce-scatters in the forward and the same in the backward.

Compute (``docs/parallelism.md``): a block whose device model is known (:func:`tp_compute_model`:
the profile was costed on the cluster's device, as the zoo's are) is re-timed from its GEMM
shapes (:func:`block_tp_time_factors`): each forward and backward GEMM is timed split as
Megatron-LM splits it (column-parallel ``n / t``, row-parallel ``k / t``, attention
``count / t``) with the kernel model's tile and wave quantisation, so small per-device GEMMs
lose efficiency as they do on a GPU; the layer's other time is split into the share tensor
parallelism keeps whole
(:attr:`~pipesim.profiles.models.shape.LayerShape.replicated_fwd_fraction`: layer norms, residual
dropouts and adds without sequence parallelism; with it they are divided too) and the rest
(softmax, attention dropout, GeLU), divided by ``t``. Other layers, and blocks without a device
model (a profile file measured on another device), use the time division alone
(:func:`tp_time_factors`).

The embedding and the LM head are vocabulary-parallel: the embedding's table is split by
vocabulary, each device looks up every token (masked) and the partial outputs are all-reduced
(reduce-scattered with SP) in the forward; the head's logits GEMM is column-parallel (its input
is all-reduced in the backward; with SP all-gathered in the forward and reduce-scattered in the
backward) and the vocabulary-parallel cross-entropy all-reduces three ``b s`` fp32 vectors
(max logit, sum of exponentials, target logit) in the forward.

Activation memory per block (Korthikanti et al., Table 2, in ``s b h`` units with 2-byte
activations): ``34 + 5 a s / h`` without TP, ``10 + 24 / t + 5 a s / (h t)`` with TP and
``(34 + 5 a s / h) / t`` with TP and SP; the stash of a shaped block is its profile's saved bytes
scaled by the ratio of these figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import NamedTuple

from pipesim.errors import invalid
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.costmodels.compute import ComputeModel, GemmShape, compute_model
from pipesim.profiles.costmodels.memory import (
    Recompute,
    check_recompute,
    layer_kept_bytes,
    layer_transient_bytes,
)
from pipesim.profiles.hardware.specs import DeviceSpec
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer, ModelProfile
from pipesim.profiles.models.shape import LayerKind, LayerShape
from pipesim.profiles.models.zoo.roofline import Roofline
from pipesim.profiles.models.zoo.shapes import replicated_block_times_s
from pipesim.profiles.models.zoo.transformers import block_gemm_shapes

__all__ = [
    "CE_BYTES_PER_TOKEN",
    "TpCollective",
    "TpStageTimes",
    "block_tp_time_factors",
    "block_wgrad_shares",
    "check_tensor_parallel",
    "check_tp_group_in_server",
    "collective_time_s",
    "korthikanti_block_units",
    "layer_collective_times_s",
    "layer_collectives",
    "layer_shape",
    "stage_collectives",
    "stage_tp_times",
    "tp_activation_factor",
    "tp_compute_model",
    "tp_exposed_comm_s",
    "tp_parameter_bytes",
    "tp_replay_s",
    "tp_stage_activation_bytes",
    "tp_time_factors",
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


def layer_shape(profile: ModelProfile, index: int, where: str, degree: int, what: str) -> LayerShape:
    """Layer ``index``'s shape, which ``what`` (e.g. ``"tensor parallelism"``) of ``degree`` needs.

    Raises:
        InputError: the layer has no shape, naming ``where``, ``degree`` and the missing profile field.
    """
    layer = profile.layers[index]
    if layer.shape is None:
        raise invalid(
            where,
            degree,
            f"{what} needs each layer's shape, and layer {index} ({layer.name!r}) of "
            f"{profile.name!r} has none (profile field layers[{index}].shape: kind, hidden, heads, "
            "seq, ffn, vocab; see docs/profile-format.md)",
        )
    return layer.shape


def check_tensor_parallel(profile: ModelProfile, first: int, last: int, t: int, where: str) -> None:
    """Check that layers ``first..last`` can be split over ``t`` devices.

    Raises:
        InputError: ``t > 1`` and a layer has no shape (naming the missing ``shape`` field), or
            ``t`` does not divide a block's heads or its MLP width.
    """
    if t == 1:
        return
    for i in range(first, last + 1):
        layer = profile.layers[i]
        shape = layer_shape(profile, i, where, t, "tensor parallelism")
        if shape.kind is LayerKind.BLOCK and (shape.heads % t or shape.ffn % t):
            raise invalid(
                where,
                t,
                f"must divide layer {layer.name!r}'s attention heads ({shape.heads}) and MLP width "
                f"({shape.ffn})",
            )


def check_tp_group_in_server(group: Sequence[int], server_of: Callable[[int], int], where: str) -> None:
    """Check that a TP group's devices sit in one server (the 3D estimate's condition).

    The simulator runs TP collectives as transfers on the group's links, across servers too,
    sharing the NICs with pipeline and data-parallel traffic (``simulator/tp_collectives.py``).
    The 3D estimate (``planner/megatron.py``) times them on one group, alone on its links: exact
    inside one NVLink/NVSwitch server, blind to that sharing across servers, so it refuses such a
    group (Megatron-LM keeps TP inside a server too: Narayanan et al. 2021, Sec. 3.3, takeaway #1).

    Raises:
        InputError: the group spans servers; the message names ``where``, the degree and the
            servers.
    """
    servers = sorted({server_of(d) for d in group})
    if len(servers) > 1:
        raise invalid(
            where,
            len(group),
            f"a tensor-parallel group must sit in one server, and devices {group[0]}..{group[-1]} span "
            f"servers {servers[0]}..{servers[-1]}: its collectives cross the NICs, sharing them with "
            "pipeline and data-parallel traffic, which the 3D estimate does not model (the simulator "
            "does: `pipesim simulate`); for an estimate use a degree up to the GPUs per server (placed on "
            "a server boundary)",
        )


def tp_time_factors(shape: LayerShape, t: int, sequence_parallel: bool) -> tuple[float, float]:
    """``(forward, backward)`` time of a layer under ``t``-way TP relative to one device.

    The replicated share is kept whole and the rest divided by ``t``; with sequence parallelism
    a block's and a head's replicated share (layer norms, dropouts) is divided as well. The
    embedding's lookup is done in full on every device.
    """
    if t == 1:
        return 1.0, 1.0
    rf, rb = shape.replicated_fwd_fraction, shape.replicated_bwd_fraction
    if shape.kind is LayerKind.EMBEDDING:
        return rf + (1.0 - rf) / t, rb + (1.0 - rb) / t
    if sequence_parallel:
        return 1.0 / t, 1.0 / t
    return rf + (1.0 - rf) / t, rb + (1.0 - rb) / t


def tp_compute_model(profile: ModelProfile, device: DeviceSpec) -> ComputeModel | None:
    """The kernel model that times ``profile``'s GEMMs on ``device`` for TP re-timing, or ``None``.

    ``None`` (the time-division fallback) unless the profile's times are for ``device``
    (``reference_device`` is its name: the zoo costs on the cluster's device, and
    :func:`~pipesim.profiles.inputs.resolve_inputs` re-targets files to it) and the device runs
    the profile's dtype. The GEMMs are timed in that dtype as the precision; a layer whose GEMMs
    so timed take more than its own time (a ``tfloat32`` or ``float8`` profile, whose GEMMs ran
    at a faster rate than the storage dtype's) falls back per layer in
    :func:`block_tp_time_factors`.
    """
    if profile.reference_device != device.name or not device.supports(profile.dtype):
        return None
    return compute_model(device, profile.dtype)


_COLUMN, _ROW, _HEADS = "column", "row", "heads"


@lru_cache(maxsize=4096)
def _split_gemms(batch: int, shape: LayerShape, flash: bool) -> tuple[tuple[GemmShape, str], ...]:
    """A block's forward GEMMs with how TP splits each (Q, K, V, FFN1 by columns; the output
    projection and FFN2 by rows; ``Q K^T`` and ``P V`` by heads)."""
    gemms = block_gemm_shapes(batch=batch, seq=shape.seq, hidden=shape.hidden, heads=shape.heads,
                              ffn=shape.ffn, flash=flash)
    how = (_COLUMN,) * 3 + (() if flash else (_HEADS, _HEADS)) + (_ROW, _COLUMN, _ROW)
    return tuple(zip(gemms, how, strict=True))


def _split(gemm: GemmShape, how: str, t: int) -> GemmShape:
    if how == _COLUMN:
        return GemmShape(m=gemm.m, n=gemm.n // t, k=gemm.k, count=gemm.count)
    if how == _ROW:
        return GemmShape(m=gemm.m, n=gemm.n, k=gemm.k // t, count=gemm.count)
    return GemmShape(m=gemm.m, n=gemm.n, k=gemm.k, count=gemm.count // t)


def _gemm_op_times_s(model: ComputeModel, fwd: GemmShape, elem_bytes: int) -> tuple[float, float]:
    """``(forward, backward)`` operator time of a forward GEMM ``fwd`` and its two backward GEMMs
    (input gradient ``(m, k, n)``, weight or second input gradient ``(k, n, m)``), seconds, costed
    as the zoo costs them (bytes of A, B and C in the storage dtype; host dispatch floor)."""

    def op(g: GemmShape) -> float:
        moved = elem_bytes * (g.m * g.k + g.k * g.n + g.m * g.n) * g.count
        return model.op_time_s(model.gemm_time_s(g, moved))

    dgrad = GemmShape(m=fwd.m, n=fwd.k, k=fwd.n, count=fwd.count)
    wgrad = GemmShape(m=fwd.k, n=fwd.n, k=fwd.m, count=fwd.count)
    return op(fwd), op(dgrad) + op(wgrad)


@lru_cache(maxsize=4096)
def _block_model_times_s(
    model: ComputeModel, shape: LayerShape, samples: int, t: int, flash: bool, elem_bytes: int
) -> tuple[float, float, float, float, float, float]:
    """A block's GEMM times whole and split over ``t`` and its replicated operations' times, by
    ``model``: ``(G fwd, G bwd, G_t fwd, G_t bwd, R fwd, R bwd)``, seconds."""
    g_f = g_b = gt_f = gt_b = 0.0
    for gemm, how in _split_gemms(samples, shape, flash):
        f, b = _gemm_op_times_s(model, gemm, elem_bytes)
        ft, bt = _gemm_op_times_s(model, _split(gemm, how, t), elem_bytes)
        g_f, g_b, gt_f, gt_b = g_f + f, g_b + b, gt_f + ft, gt_b + bt
    r_f, r_b = replicated_block_times_s(Roofline(model=model), batch=samples, seq=shape.seq,
                                        hidden=shape.hidden)
    return g_f, g_b, gt_f, gt_b, r_f, r_b


def block_tp_time_factors(
    layer: Layer,
    samples: int,
    t: int,
    sequence_parallel: bool,
    model: ComputeModel,
    fwd_s: float,
    bwd_s: float,
    elem_bytes: int,
) -> tuple[float, float]:
    """``(forward, backward)`` time of a transformer block under ``t``-way TP relative to one
    device, from its GEMM shapes (module docstring).

    Per direction, with ``T`` the layer's time for ``samples`` samples (``fwd_s``, ``bwd_s``),
    ``G`` its GEMMs timed by ``model`` at full shape and ``G_t`` split, ``R`` its replicated
    operations (layer norms, residual dropouts and adds) timed by ``model``
    (:func:`~pipesim.profiles.models.zoo.shapes.replicated_block_times_s`): the time under TP is
    ``G_t + R (1 / t with sequence parallelism, else 1) + (T - G - R) / t``. A fused-attention
    block (one that saves no attention core, ``attention_core_saved_bytes == 0``) has no
    attention GEMMs: its fused kernel is in the rest, divided by ``t`` (heads). Falls back to
    :func:`tp_time_factors` in a direction where ``G + R`` exceeds ``T`` (the model does not
    describe the layer's time).

    Raises:
        InputError: ``samples`` is not an integer >= 1.
    """
    shape = layer.shape
    assert shape is not None
    assert shape.kind is LayerKind.BLOCK
    fallback = tp_time_factors(shape, t, sequence_parallel)
    if t == 1:
        return fallback
    flash = layer.attention_core_saved_bytes == 0
    g_f, g_b, gt_f, gt_b, r_f, r_b = _block_model_times_s(model, shape, samples, t, flash, elem_bytes)
    rep = 1.0 / t if sequence_parallel else 1.0
    out = []
    directions = ((fwd_s, g_f, gt_f, r_f, fallback[0]), (bwd_s, g_b, gt_b, r_b, fallback[1]))
    for total, g, gt, replicated, fb in directions:
        rest = total - g - replicated
        if total <= 0 or rest < -1e-9 * total:
            out.append(fb)
        else:
            out.append((gt + replicated * rep + max(0.0, rest) / t) / total)
    return out[0], out[1]


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
    output gradients, all-gathered with SP) are needed before any of their GEMMs and stay exposed."""
    return max(0.0, comm_s - wgrad_s)


def tp_parameter_bytes(layer: Layer, t: int, elem_bytes: int) -> float:
    """Parameter bytes of ``layer`` on one device of a ``t``-way TP group: the replicated
    parameters whole, the rest divided by ``t`` (``parameter_bytes`` for ``t = 1``)."""
    if t == 1 or layer.shape is None:
        return float(layer.parameter_bytes)
    replicated = min(float(layer.parameter_bytes), float(layer.shape.replicated_params * elem_bytes))
    return replicated + (layer.parameter_bytes - replicated) / t


def korthikanti_block_units(
    shape: LayerShape, t: int, sequence_parallel: bool, *, selective: bool = False
) -> float:
    """Activation bytes of one block per ``s b h`` (Korthikanti et al., Table 2; 2-byte
    activations, 1-byte dropout masks): ``34 + 5 a s / h`` for ``t = 1``,
    ``10 + 24 / t + 5 a s / (h t)`` with TP, ``(34 + 5 a s / h) / t`` with TP and SP; with
    ``selective`` recomputation (of the attention's softmax and dropout) the ``5 a s / h`` term
    drops (Table 2, last rows)."""
    attn = 0.0 if selective else 5.0 * shape.heads * shape.seq / shape.hidden
    if t == 1:
        return 34.0 + attn
    if sequence_parallel:
        return (34.0 + attn) / t
    return 10.0 + 24.0 / t + attn / t


def tp_activation_factor(
    shape: LayerShape, t: int, sequence_parallel: bool, *, selective: bool = False
) -> float:
    """A layer's kept activation bytes under TP relative to one device with the same
    recomputation: Korthikanti et al.'s ratio for a block (``selective``: of their selective
    rows, whose attention core is dropped), ``1 / t`` for the head's vocabulary-sized tensors
    (the whole head with SP), 1 for the embedding (its output is the next layer's input) without
    SP, ``1 / t`` with. 1 for ``t = 1``."""
    if t == 1:
        return 1.0
    if shape.kind is LayerKind.BLOCK:
        ours = korthikanti_block_units(shape, t, sequence_parallel, selective=selective)
        return ours / korthikanti_block_units(shape, 1, False, selective=selective)
    if sequence_parallel:
        return 1.0 / t
    if shape.kind is LayerKind.HEAD:
        whole = 2.0 * shape.hidden  # the layer-norm input and the logits GEMM input
        return (whole + shape.vocab / t) / (whole + shape.vocab)
    return 1.0


def tp_stage_activation_bytes(
    profile: ModelProfile,
    first_layer: int,
    last_layer: int,
    samples: float,
    recompute: Recompute | bool,
    t: int,
    sequence_parallel: bool,
) -> tuple[float, float]:
    """``(stash, work)`` of one device of a ``t``-way TP group of a stage for one micro-batch
    share, bytes: :func:`~pipesim.profiles.costmodels.memory.stage_activations` (the one
    device's model of each recompute mode) with each layer's kept bytes scaled by
    :func:`tp_activation_factor` (``selective``: Korthikanti et al.'s selective rows, so the
    attention core's ``5 a s / h`` is dropped and the rest divided as their Table 2 says), the
    received input divided by ``t`` with sequence parallelism, the largest layer working set
    (with ``selective`` its re-materialised attention core, split by heads) divided by ``t``,
    and with ``full`` the stage's re-materialised saved bytes scaled as without recomputation.
    Equal to ``stage_activations`` for ``t = 1``.

    Raises:
        InputError: ``samples`` is not > 0, an unknown recompute mode, or ``selective`` for a
            profile without attention cores.
    """
    mode = check_recompute(profile, recompute)
    selective = mode is Recompute.SELECTIVE
    layers = range(first_layer, last_layer + 1)
    inputs = 0.0
    if first_layer > 0:
        inputs = profile.cuts()[first_layer - 1].crossing_bytes / profile.profile_batch_size * samples
        if sequence_parallel:
            inputs /= t
    kept = layer_kept_bytes(profile, samples, mode)
    transient = layer_transient_bytes(profile, samples, mode)

    def factor(i: int, sel: bool) -> float:
        shape = profile.layers[i].shape
        return 1.0 if shape is None else tp_activation_factor(shape, t, sequence_parallel, selective=sel)

    held = 0.0
    if mode is Recompute.FULL:
        saved = profile.stashed_bytes(samples)
        held = sum(saved[i] * factor(i, False) for i in layers)
    stash = inputs + sum(kept[i] * factor(i, selective) for i in layers)
    return stash, held + max(transient[i] for i in layers) / t


def tp_replay_s(recompute: Recompute, replay_s: float, fwd_ratio: float, fwd_comm_s: float, t: int) -> float:
    """The forward a TP stage replays before its backward, seconds, from ``replay_s``, what it
    replays without TP (:func:`~pipesim.profiles.costmodels.memory.layer_recompute_times_s`
    summed over the stage): ``full`` reruns the stage's forward under TP, its collectives
    included (``replay_s x fwd_ratio + fwd_comm_s``); ``selective`` the attention cores, split by
    heads (``replay_s / t``, no collective inside); ``none`` nothing. The simulator's lowering
    and the Megatron planner both use it."""
    if recompute is Recompute.FULL:
        return replay_s * fwd_ratio + fwd_comm_s
    if recompute is Recompute.SELECTIVE:
        return replay_s / t
    return 0.0


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


class TpStageTimes(NamedTuple):
    """A TP stage's times for one micro-batch share on one device, seconds: the compute before
    and after TP (forward, backward) and its exposed collectives per direction; the backward's
    with the input-gradient collectives hidden behind the weight-gradient GEMMs
    (:func:`wgrad_hidden_comm_s`), and, for a split backward (zero-bubble ``I`` then ``W``
    later, so nothing to hide behind), ``bwd_split_comm_s`` without that."""

    fwd_s: float
    bwd_s: float
    fwd_tp_s: float
    bwd_tp_s: float
    fwd_comm_s: float
    bwd_comm_s: float
    bwd_split_comm_s: float = 0.0


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


def layer_collective_times_s(
    layer: Layer,
    bwd_tp_s: float,
    t: int,
    sequence_parallel: bool,
    samples: float,
    elem_bytes: int,
    curves: AllReduceCurves,
) -> tuple[float, float, float]:
    """``(forward, backward exposed, backward whole)`` seconds of one shaped layer's TP
    collectives (:func:`layer_collectives` of ``samples`` samples' tokens, timed with
    :func:`collective_time_s` on ``curves``): a backward collective with a ``wgrad_share``
    exposes only what its linear's weight-gradient time (``bwd_tp_s``, the layer's backward
    under TP, times its ``weight_grad_fraction`` times the share) does not hide
    (:func:`wgrad_hidden_comm_s`); "whole" counts every backward collective in full (a split
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
            bwd += wgrad_hidden_comm_s(c_s, wgrad_s * c.wgrad_share) if c.wgrad_share else c_s
    return fwd, bwd, whole


def stage_tp_times(
    profile: ModelProfile,
    first_layer: int,
    last_layer: int,
    samples: float,
    t: int,
    sequence_parallel: bool,
    curves: AllReduceCurves,
    compute: ComputeModel | None = None,
    overlap: bool = False,
) -> TpStageTimes:
    """Compute and collective time of layers ``first..last`` for ``samples`` samples under
    ``t``-way TP (per layer :func:`block_tp_time_factors` for blocks when ``compute``, the
    profile's device model from :func:`tp_compute_model`, is given and ``samples`` is whole,
    else :func:`tp_time_factors`; :func:`layer_collectives` timed with :func:`collective_time_s`
    on the group's ``curves``, a backward collective with a ``wgrad_share`` exposing only what
    its linear's weight-gradient time under TP (the layer's backward under TP times its
    ``weight_grad_fraction`` times the share) does not hide, :func:`wgrad_hidden_comm_s`; with
    ``overlap`` only the exposed part of the rest, :func:`tp_exposed_comm_s`). The one
    derivation both the planner's estimate and the simulator's lowering use."""
    f_all, b_all = profile.fwd_times_s(samples), profile.bwd_times_s(samples)
    elem = DTYPE_BYTES[profile.dtype]
    whole = float(samples).is_integer()
    f0 = f1 = b0 = b1 = 0.0
    comm_f = comm_b = comm_split = 0.0
    for i in range(first_layer, last_layer + 1):
        layer = profile.layers[i]
        shape = layer.shape
        if shape is None:
            ff, fb = 1.0, 1.0
        elif compute is not None and whole and t > 1 and shape.kind is LayerKind.BLOCK:
            ff, fb = block_tp_time_factors(layer, int(samples), t, sequence_parallel, compute,
                                           f_all[i], b_all[i], elem)
        else:
            ff, fb = tp_time_factors(shape, t, sequence_parallel)
        f0, f1 = f0 + f_all[i], f1 + f_all[i] * ff
        b0, b1 = b0 + b_all[i], b1 + b_all[i] * fb
        if shape is None or t == 1:
            continue
        cf, cb, cs = layer_collective_times_s(
            layer, b_all[i] * fb, t, sequence_parallel, samples, elem, curves
        )
        comm_f, comm_b, comm_split = comm_f + cf, comm_b + cb, comm_split + cs
    return TpStageTimes(
        f0,
        b0,
        f1,
        b1,
        tp_exposed_comm_s(comm_f, f1, t, overlap),
        tp_exposed_comm_s(comm_b, b1, t, overlap),
        tp_exposed_comm_s(comm_split, b1, t, overlap),
    )
