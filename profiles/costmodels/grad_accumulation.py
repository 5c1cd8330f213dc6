"""The gradient accumulation pass: adding each micro-batch's weight gradients into the iteration's.

With several micro-batches per iteration, every parameter's gradient of a micro-batch is added
into the gradient accumulated over the iteration. Unless the framework fuses that add into the
weight-gradient GEMM, it is a separate memory-bound pass over the layer's parameters after each
micro-batch's backward. :class:`GradAccumulation` names the implementations; per parameter and
micro-batch they move (``g``: bytes of the training dtype's gradient, ``a``: of the accumulator):

* ``fused``: nothing. Megatron-LM's ``--gradient-accumulation-fusion`` (NVIDIA/Megatron-LM commit
  83b1e42f30, 2022-02-13; ``megatron/mpu/layers.py``
  ``LinearWithGradAccumulationAndAsyncAllreduce.backward`` calls
  ``fused_dense_cuda.wgrad_gemm_accum_fp32(input, grad_output, weight.main_grad)`` and returns no
  weight gradient) accumulates into the fp32 ``main_grad`` inside the GEMM (on by default, but
  ``megatron/arguments.py`` turns it off unless the gradients accumulate in fp32: bf16, or
  ``--accumulate-allreduce-grads-in-fp32``). Biases, layer norms and the word embeddings still go
  through the hook below (``megatron/model/distributed.py`` at 877f6a1bd5, 2022-05-24); not
  charged (a block's biases and norms are a few per mille of its parameters; the embeddings'
  pass is about 1 ms per micro-batch on a 1T first or last stage).
* ``deepspeed-bf16``: DeepSpeed's BF16_Optimizer (BLOOM-176B's run: github.com/microsoft/DeepSpeed
  branch ``olruwase/elastic-ckpt-refresh`` at e4a5a4648, the code merged as "bf16+pipeline
  parallelism", PR #1801, commit 56c522386) keeps an unsharded fp32 gradient buffer beside the bf16
  weights. Its pipeline engine, after the backward of every micro-batch, calls
  ``BF16_Optimizer.update_hp_grads`` (``deepspeed/runtime/pipe/engine.py`` ``_exec_backward_pass``;
  the loss stage gets there through ``optimizer.backward``), which for every parameter runs
  ``hp_grad.add_(lp.grad.to(float32))`` (``deepspeed/runtime/bf16_optimizer.py``
  ``update_hp_grads``): a cast (read the gradient, ``g``, write an fp32 temporary, 4) and an add
  (read the temporary and the fp32 accumulator, write the accumulator: 12), two kernels,
  :data:`HP_GRAD_BYTES_PER_PARAMETER` bytes for bf16, on the compute stream before the engine's
  next instruction (the gradient send).
* ``main-grad-hook``: Megatron-LM's local DDP with contiguous gradient buffers
  (``megatron/model/distributed.py`` ``DistributedDataParallel._make_param_hook`` at 6985e58938,
  2021-08-18, and at aed2f75e20, 2021-04-11) registers a hook on every parameter's
  ``AccumulateGrad`` node that runs ``param.main_grad.add_(param.grad.data)`` and drops
  ``param.grad``, every micro-batch (the buffer is zeroed before the first, ``zero_grad_buffer``):
  one kernel reading the gradient (``g``) and the buffer (``a``) and writing the buffer (``a``).
  The buffer is fp32 with ``--accumulate-allreduce-grads-in-fp32`` (forced for bf16), else the
  parameters' dtype. In the 2021 code the hook exists only with contiguous buffers
  (``--use-contiguous-buffers-in-ddp``, off by default there; ``megatron/arguments.py`` at
  6985e58938); from 2022 they are on by default (``--no-contiguous-buffers-in-local-ddp``,
  ``megatron/arguments.py`` at 877f6a1bd5), so fp16 without fp32 accumulation runs the hook with
  an fp16 buffer, the fusion being off.
* ``autograd``: no hook: PyTorch's ``AccumulateGrad`` (``torch/csrc/autograd/functions/
  accumulate_grad.h`` ``accumulateGrad``) steals the first micro-batch's gradient (no copy: the
  optimizer's ``zero_grad`` set ``param.grad`` to None) and adds every later one in place
  (``variable_grad += new_grad``: read both, write one, ``3 g``). That is Megatron-LM's 2021 local
  DDP without contiguous buffers (its ``allreduce_gradients`` then reduces ``param.grad``) and
  ``--DDP-impl torch`` (PyTorch DDP under ``no_sync`` for all micro-batches but the last,
  ``megatron/schedules.py``). A profile's layer has no micro-batch index, so each backward pays
  ``(m - 1) / m`` of the pass for ``m`` micro-batches: the iteration's total, spread evenly.

The pass is charged to each layer's backward as memory-bound kernels (one launch per kernel and
layer, not per parameter tensor) over the layer's parameters on the profile's device, the same
time at every batch size (it does not depend on the samples): added at the profile batch size and
at every batch point, it is exact at those sizes and between them (the profile interpolates
linearly), but a profile without batch points scales it with the micro-batch (build the profile at
the micro-batch size; the zoo's have points at powers of two). Under tensor parallelism a block's
backward time beyond its GEMMs and replicated operations is divided by the TP degree
(:func:`~pipesim.profiles.costmodels.tensor_parallel.block_tp_time_factors`), which is the pass
over each rank's ``1 / t`` of the parameters.

A pipeline's last stage that holds a copy of tied weights (DeepSpeed's ``TiedLayerSpec``,
Megatron-LM's word embeddings on the last stage: the output projection sharing the input
embedding) accumulates that copy's gradients too; the zoo's GPT head has no parameters of its own
(the tied matrix is counted once, in the embeddings), so the copy is given as ``tied_copies``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum

from pipesim.errors import check_count, check_nonneg, invalid, parse_name
from pipesim.profiles.costmodels.compute import ComputeModel
from pipesim.profiles.models.profile import DTYPE_BYTES, DTYPES, ModelProfile

__all__ = [
    "HP_GRAD_BYTES_PER_PARAMETER",
    "GradAccumulation",
    "grad_accumulation_kernel_bytes",
    "grad_accumulation_s",
    "tied_copy_parameters",
    "with_grad_accumulation",
]

_FP32_BYTES = DTYPE_BYTES["float32"]

HP_GRAD_BYTES_PER_PARAMETER = 2 + 4 + 4 + 4 + 4
"""Bytes ``update_hp_grads`` moves per bf16 parameter and micro-batch: the cast reads the bf16
gradient (2) and writes an fp32 temporary (4); the add reads the temporary (4) and the accumulator
(4) and writes the accumulator (4) (module docstring)."""


class GradAccumulation(str, Enum):
    """How a framework adds each micro-batch's weight gradients into the iteration's (module
    docstring)."""

    FUSED = "fused"
    DEEPSPEED_BF16 = "deepspeed-bf16"
    MAIN_GRAD_HOOK = "main-grad-hook"
    AUTOGRAD = "autograd"


def grad_accumulation_kernel_bytes(
    kind: GradAccumulation | str, grad_bytes: int, main_grad_bytes: int = _FP32_BYTES
) -> tuple[int, ...]:
    """Bytes per parameter each kernel of one accumulation pass moves (module docstring): empty
    for ``fused``; ``(g + 4, 12)`` for ``deepspeed-bf16``; ``(g + 2 a,)`` for ``main-grad-hook``;
    ``(3 g,)`` for ``autograd``, with ``g = grad_bytes`` and ``a = main_grad_bytes``.

    Raises:
        UnknownNameError: ``kind`` names no :class:`GradAccumulation`.
        InputError: ``grad_bytes`` or ``main_grad_bytes`` not an integer >= 1.
    """
    kind = parse_name("grad_accumulation", GradAccumulation, kind)
    g = check_count("grad_bytes", grad_bytes)
    a = check_count("main_grad_bytes", main_grad_bytes)
    if kind is GradAccumulation.DEEPSPEED_BF16:
        return (g + _FP32_BYTES, HP_GRAD_BYTES_PER_PARAMETER - 6)
    if kind is GradAccumulation.MAIN_GRAD_HOOK:
        return (g + 2 * a,)
    if kind is GradAccumulation.AUTOGRAD:
        return (3 * g,)
    return ()


def _share(kind: GradAccumulation, microbatches: int) -> float:
    """Fraction of the micro-batches that run the pass: ``(m - 1) / m`` for ``autograd``."""
    return (microbatches - 1) / microbatches if kind is GradAccumulation.AUTOGRAD else 1.0


def grad_accumulation_s(
    parameters: float,
    model: ComputeModel,
    kind: GradAccumulation | str,
    *,
    grad_bytes: int = 2,
    main_grad_bytes: int = _FP32_BYTES,
    microbatches: int = 1,
) -> float:
    """Time of one micro-batch's accumulation pass over ``parameters`` parameters on ``model``'s
    device, seconds: memory-bound kernels moving :func:`grad_accumulation_kernel_bytes` per
    parameter, for ``autograd`` times ``(m - 1) / m`` with ``m = microbatches`` (the first
    micro-batch's gradient is stolen, not added); 0 for no parameters and for ``fused``.

    Raises:
        UnknownNameError: ``kind`` names no :class:`GradAccumulation`.
        InputError: ``parameters`` negative or not finite; ``grad_bytes``, ``main_grad_bytes``
            or ``microbatches`` not an integer >= 1.
    """
    kind = parse_name("grad_accumulation", GradAccumulation, kind)
    kernels = grad_accumulation_kernel_bytes(kind, grad_bytes, main_grad_bytes)
    m = check_count("microbatches", microbatches)
    check_nonneg("parameters", parameters)
    if parameters == 0 or not kernels:
        return 0.0
    time_s = sum(model.memory_time_s(parameters * b) for b in kernels)
    return time_s if kind is not GradAccumulation.AUTOGRAD else time_s * _share(kind, m)


def tied_copy_parameters(profile: ModelProfile) -> dict[str, int]:
    """Layer name -> parameters of the tied copy it holds (``Layer.tied_to``: the zoo GPT's head
    with the word embeddings' copy), for ``tied_copies`` of :func:`with_grad_accumulation` when
    that layer runs on another device than the original (a pipeline's last stage)."""
    elem = DTYPE_BYTES[profile.dtype]
    return {x.name: (x.tied_parameter_bytes or 0) // elem for x in profile.layers if x.tied_to}


def with_grad_accumulation(
    profile: ModelProfile,
    model: ComputeModel,
    kind: GradAccumulation | str,
    *,
    microbatches: int = 1,
    main_grad_dtype: str = "float32",
    tied_copies: Mapping[str, int] | None = None,
) -> ModelProfile:
    """``profile`` with the gradient accumulation pass of ``kind`` added to each layer's backward,
    at the profile batch size and at every batch point (module docstring); ``profile`` itself for
    ``fused``.

    Args:
        profile: a profile costed on ``model``'s device; its dtype is the gradients'.
        model: the device's compute model (its achievable memory bandwidth times the pass).
        kind: the implementation (:class:`GradAccumulation` or its name).
        microbatches: micro-batches per iteration (``autograd`` adds ``m - 1`` of ``m``).
        main_grad_dtype: the accumulator's dtype for ``main-grad-hook`` (a profile dtype:
            ``float32`` with fp32 accumulation, else the parameters' dtype).
        tied_copies: layer name -> parameters of a tied copy that layer holds (the zoo GPT's
            ``head`` on the last stage: ``vocab x hidden``).

    Raises:
        UnknownNameError: ``kind`` names no :class:`GradAccumulation`.
        InputError: ``microbatches`` not an integer >= 1; ``main_grad_dtype`` not a profile
            dtype; a ``tied_copies`` name that is not a layer of ``profile``, or a count that is
            not an integer >= 0.
    """
    kind = parse_name("grad_accumulation", GradAccumulation, kind)
    m = check_count("microbatches", microbatches)
    if main_grad_dtype not in DTYPE_BYTES:
        raise invalid("main_grad_dtype", main_grad_dtype, f"must be one of {', '.join(DTYPES)}")
    copies = dict(tied_copies or {})
    names = {layer.name for layer in profile.layers}
    for name, count in copies.items():
        if name not in names:
            raise invalid("tied_copies", name, f"must name a layer of {profile.name!r}")
        check_count(f"tied_copies[{name}]", count, minimum=0)
    elem = DTYPE_BYTES[profile.dtype]
    kernels = grad_accumulation_kernel_bytes(kind, elem, DTYPE_BYTES[main_grad_dtype])
    if not kernels or _share(kind, m) == 0:
        return profile  # fused, or one autograd micro-batch: nothing to add
    share = _share(kind, m)
    bytes_per_parameter = sum(kernels) * share if kind is GradAccumulation.AUTOGRAD else sum(kernels)
    params = [layer.parameter_bytes / elem + copies.get(layer.name, 0) for layer in profile.layers]
    extra = [
        grad_accumulation_s(n, model, kind, grad_bytes=elem, main_grad_bytes=DTYPE_BYTES[main_grad_dtype],
                            microbatches=m)
        for n in params
    ]
    layers = tuple(
        dataclasses.replace(
            layer,
            bwd_time_s=layer.bwd_time_s + x,
            bwd_memory_bytes=None if layer.bwd_memory_bytes is None
            else layer.bwd_memory_bytes + n * bytes_per_parameter,
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
