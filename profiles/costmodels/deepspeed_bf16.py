"""DeepSpeed's BF16_Optimizer: the fp32 gradient accumulation it runs after every micro-batch.

DeepSpeed's bf16 training (the BF16_Optimizer of BLOOM-176B's run: github.com/microsoft/DeepSpeed
branch ``olruwase/elastic-ckpt-refresh`` at e4a5a4648, the code merged as "bf16+pipeline
parallelism", PR #1801, commit 56c522386) keeps an unsharded fp32 gradient buffer beside the bf16
weights. Its pipeline engine, after the backward of every micro-batch, calls
``BF16_Optimizer.update_hp_grads`` (``deepspeed/runtime/pipe/engine.py`` ``_exec_backward_pass``;
the loss stage gets there through ``optimizer.backward``),
which for every parameter runs ``hp_grad.add_(lp.grad.to(float32))``
(``deepspeed/runtime/bf16_optimizer.py`` ``update_hp_grads``): a cast (read the bf16 gradient,
2 bytes, write an fp32 temporary, 4) and an add (read the temporary and the fp32 accumulator,
write the accumulator: 12): :data:`HP_GRAD_BYTES_PER_PARAMETER` bytes per parameter, on the
compute stream before the engine's next instruction (the gradient send). Megatron-LM accumulates
into its fp32 ``main_grad`` inside the weight-gradient GEMM instead, so this pass is DeepSpeed's
alone: an explicit profile transform (:func:`with_hp_grad_accumulation`), not a default.

The pass is charged to each layer's backward as a memory-bound kernel over the layer's
parameters on the profile's device, the same time at every batch size (it does not depend on
the samples): added at the profile batch size and at every batch point, it is exact at those
sizes and between them (the profile interpolates linearly), but a profile without batch points
scales it with the micro-batch (build the profile at the micro-batch size; the zoo's have points
at powers of two). Under tensor parallelism a block's backward time beyond its GEMMs and replicated
operations is divided by the TP degree
(:func:`~pipesim.profiles.costmodels.tensor_parallel.block_tp_time_factors`), which is the pass
over each rank's ``1 / t`` of the parameters.

A pipeline's last stage that holds a copy of tied weights (DeepSpeed's ``TiedLayerSpec``: the
output projection sharing the word embeddings) accumulates that copy's gradients too; the zoo's
GPT head has no parameters of its own (the tied matrix is counted once, in the embeddings), so
the copy is given as ``tied_copies``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pipesim.errors import check_count, invalid
from pipesim.profiles.costmodels.compute import ComputeModel
from pipesim.profiles.models.profile import DTYPE_BYTES, ModelProfile

__all__ = ["HP_GRAD_BYTES_PER_PARAMETER", "hp_grad_accumulation_s", "with_hp_grad_accumulation"]

HP_GRAD_BYTES_PER_PARAMETER = 2 + 4 + 4 + 4 + 4
"""Bytes ``update_hp_grads`` moves per parameter and micro-batch: the cast reads the bf16 gradient
(2) and writes an fp32 temporary (4); the add reads the temporary (4) and the accumulator (4) and
writes the accumulator (4) (module docstring)."""


def hp_grad_accumulation_s(parameters: float, model: ComputeModel) -> float:
    """Time of ``update_hp_grads`` over ``parameters`` parameters on ``model``'s device: two
    memory-bound kernels moving :data:`HP_GRAD_BYTES_PER_PARAMETER` bytes per parameter, seconds
    (0 for no parameters).

    Raises:
        InputError: ``parameters`` negative or not finite.
    """
    if parameters == 0:
        return 0.0
    cast = model.memory_time_s(parameters * (2 + 4))
    add = model.memory_time_s(parameters * (HP_GRAD_BYTES_PER_PARAMETER - 6))
    return cast + add


def with_hp_grad_accumulation(
    profile: ModelProfile, model: ComputeModel, *, tied_copies: Mapping[str, int] | None = None
) -> ModelProfile:
    """``profile`` with DeepSpeed's per-micro-batch fp32 gradient accumulation added to each
    layer's backward, at the profile batch size and at every batch point (module docstring).

    Args:
        profile: a bf16 (or fp16) profile costed on ``model``'s device.
        model: the device's compute model (its achievable memory bandwidth times the pass).
        tied_copies: layer name -> parameters of a tied copy that layer holds (the zoo GPT's
            ``head`` on the last stage: ``vocab x hidden``).

    Raises:
        InputError: a ``tied_copies`` name that is not a layer of ``profile``, or a count that
            is not an integer >= 0.
    """
    copies = dict(tied_copies or {})
    names = {layer.name for layer in profile.layers}
    for name, count in copies.items():
        if name not in names:
            raise invalid("tied_copies", name, f"must name a layer of {profile.name!r}")
        check_count(f"tied_copies[{name}]", count, minimum=0)
    elem = DTYPE_BYTES[profile.dtype]
    params = [layer.parameter_bytes / elem + copies.get(layer.name, 0) for layer in profile.layers]
    extra = [hp_grad_accumulation_s(n, model) for n in params]
    layers = tuple(
        dataclasses.replace(
            layer,
            bwd_time_s=layer.bwd_time_s + x,
            bwd_memory_bytes=None if layer.bwd_memory_bytes is None
            else layer.bwd_memory_bytes + n * HP_GRAD_BYTES_PER_PARAMETER,
            wgrad_fraction=None if layer.wgrad_fraction is None or layer.bwd_time_s + x == 0
            else (layer.wgrad_fraction * layer.bwd_time_s + x) / (layer.bwd_time_s + x),
        )
        for layer, n, x in zip(profile.layers, params, extra, strict=True)
    )
    points = tuple(
        dataclasses.replace(p, bwd_time_s=tuple(b + x for b, x in zip(p.bwd_time_s, extra, strict=True)))
        for p in profile.batch_points
    )
    return dataclasses.replace(profile, layers=layers, batch_points=points)
