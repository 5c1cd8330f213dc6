"""Tensor (and sequence) parallelism of shaped transformer layers, as Megatron-LM does it.

Shoeybi et al., "Megatron-LM" (arXiv:1909.08053, Sec. 3) split a block's GEMMs over ``t``
devices: the QKV and first MLP GEMMs by columns, the attention output and second MLP GEMMs by
rows, attention by heads. Each block then needs, per micro-batch, an all-reduce of its ``b s h``
output after the attention and after the MLP in the forward (the ``g`` operators) and two in
the backward (the ``f`` operators). Korthikanti et al., "Reducing Activation Recomputation in
Large Transformer Models" (arXiv:2205.05198, Sec. 4.2.2) add sequence parallelism: layer norms
and dropouts are split along the sequence, and each all-reduce becomes a reduce-scatter plus an
all-gather: 2 all-gathers and 2 reduce-scatters in the forward and the same in the backward.

Compute (first version, see ``docs/parallelism.md``): a layer's time is split into the share
tensor parallelism divides by ``t`` and the share it keeps whole
(:attr:`~pipesim.profiles.models.shape.LayerShape.replicated_fwd_fraction`: layer norms, residual
dropouts and adds without sequence parallelism; with it everything in a block is divided).

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

from collections.abc import Sequence
from typing import NamedTuple

from pipesim.errors import invalid
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer, ModelProfile
from pipesim.profiles.models.shape import LayerKind, LayerShape

__all__ = [
    "CE_BYTES_PER_TOKEN",
    "TpCollective",
    "TpStageTimes",
    "check_tensor_parallel",
    "collective_time_s",
    "korthikanti_block_units",
    "layer_collectives",
    "stage_collectives",
    "stage_tp_times",
    "tp_activation_factor",
    "tp_parameter_bytes",
    "tp_stage_activation_bytes",
    "tp_time_factors",
]

CE_BYTES_PER_TOKEN = 4
"""Bytes per token of each of the vocabulary-parallel cross-entropy's three fp32 all-reduces."""


class TpCollective(NamedTuple):
    """One tensor-parallel collective of one layer for one micro-batch share.

    ``phase`` is ``"F"`` or ``"B"``; ``kind`` is ``"all-reduce"``, ``"all-gather"`` or
    ``"reduce-scatter"``; ``nbytes`` is the full (unsharded) tensor's size in bytes.
    """

    phase: str
    kind: str
    nbytes: float


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
        shape = layer.shape
        if shape is None:
            raise invalid(
                where,
                t,
                f"tensor parallelism needs each layer's shape, and layer {i} ({layer.name!r}) of "
                f"{profile.name!r} has none (profile field layers[{i}].shape: kind, hidden, heads, "
                "seq, ffn, vocab; see docs/profile-format.md)",
            )
        if shape.kind is LayerKind.BLOCK and (shape.heads % t or shape.ffn % t):
            raise invalid(
                where,
                t,
                f"must divide layer {layer.name!r}'s attention heads ({shape.heads}) and MLP width "
                f"({shape.ffn})",
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
        if sequence_parallel:
            one_way = (TpCollective("F", ag, act), TpCollective("F", rs, act)) * 2
            return one_way + tuple(TpCollective("B", c.kind, act) for c in one_way)
        return (TpCollective("F", ar, act),) * 2 + (TpCollective("B", ar, act),) * 2
    if shape.kind is LayerKind.EMBEDDING:
        if sequence_parallel:
            return (TpCollective("F", rs, act), TpCollective("B", ag, act))
        return (TpCollective("F", ar, act),)
    ce = (TpCollective("F", ar, samples * shape.seq * CE_BYTES_PER_TOKEN),) * 3
    if sequence_parallel:
        return (TpCollective("F", ag, act), *ce, TpCollective("B", rs, act))
    return (*ce, TpCollective("B", ar, act))


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
    """A layer's saved activation bytes under TP relative to one device without recomputation:
    Korthikanti et al.'s ratio for a block (``selective``: with selective recomputation), ``1 / t``
    for the head's vocabulary-sized tensors (the whole head with SP), 1 for the embedding (its
    output is the next layer's input) without SP, ``1 / t`` with."""
    if shape.kind is LayerKind.BLOCK and (t > 1 or selective):
        ours = korthikanti_block_units(shape, t, sequence_parallel, selective=selective)
        return ours / korthikanti_block_units(shape, 1, False)
    if t == 1:
        return 1.0
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
    share, bytes: :func:`~pipesim.profiles.costmodels.memory.stage_activation_bytes` with each
    layer's saved bytes scaled by :func:`tp_activation_factor`, the received input divided by
    ``t`` with sequence parallelism, and the working set divided by ``t``. A ``selective``
    recompute mode (where :class:`~pipesim.profiles.costmodels.memory.Recompute` has one) drops
    the blocks' ``5 a s / h`` term; ``full`` keeps only the received input.

    Raises:
        InputError: ``samples`` is not > 0, or an unknown recompute mode.
    """
    mode = Recompute.parse(recompute)
    selective = mode.value == "selective"  # where the vocabulary has it (Korthikanti et al. Sec. 5)
    layers = range(first_layer, last_layer + 1)
    stashed = profile.stashed_bytes(samples)
    inputs = 0.0
    if first_layer > 0:
        inputs = profile.cuts()[first_layer - 1].crossing_bytes / profile.profile_batch_size * samples
        if sequence_parallel:
            inputs /= t
    saved = 0.0
    for i in layers:
        shape = profile.layers[i].shape
        if shape is not None:
            saved += stashed[i] * tp_activation_factor(shape, t, sequence_parallel, selective=selective)
        else:
            saved += stashed[i]
    if mode is Recompute.FULL:
        return inputs, saved
    acts = profile.activation_bytes(samples)
    return inputs + saved, max(acts[i] for i in layers) / t


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
    and after TP (forward, backward) and its exposed collectives per direction."""

    fwd_s: float
    bwd_s: float
    fwd_tp_s: float
    bwd_tp_s: float
    fwd_comm_s: float
    bwd_comm_s: float


def stage_tp_times(
    profile: ModelProfile,
    first_layer: int,
    last_layer: int,
    samples: float,
    t: int,
    sequence_parallel: bool,
    curves: AllReduceCurves,
) -> TpStageTimes:
    """Compute and collective time of layers ``first..last`` for ``samples`` samples under
    ``t``-way TP (:func:`tp_time_factors` per layer; :func:`stage_collectives` timed with
    :func:`collective_time_s` on the group's ``curves``). The one derivation both the planner's
    estimate and the simulator's lowering use."""
    f_all, b_all = profile.fwd_times_s(samples), profile.bwd_times_s(samples)
    f0 = f1 = b0 = b1 = 0.0
    for i in range(first_layer, last_layer + 1):
        shape = profile.layers[i].shape
        ff, fb = (1.0, 1.0) if shape is None else tp_time_factors(shape, t, sequence_parallel)
        f0, f1 = f0 + f_all[i], f1 + f_all[i] * ff
        b0, b1 = b0 + b_all[i], b1 + b_all[i] * fb
    comm_f = comm_b = 0.0
    layers = profile.layers[first_layer : last_layer + 1]
    for c in stage_collectives(layers, t, sequence_parallel, samples, profile.dtype):
        if c.phase == "F":
            comm_f += collective_time_s(curves, c)
        else:
            comm_b += collective_time_s(curves, c)
    return TpStageTimes(f0, b0, f1, b1, comm_f, comm_b)
