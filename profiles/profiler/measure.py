"""Measuring a chain of PyTorch blocks: time, output and saved bytes, parameters and FLOP per block.

The measurement behind :mod:`pipesim.profiles.profiler.torch_profiler`. Each block runs on the previous
block's output, detached so that its backward is timed alone. Per block and batch size:

* one untimed forward + backward under ``torch.utils.flop_counter.FlopCounterMode`` (FLOP of
  matrix multiplies, convolutions and attention; element-wise work counts 0) and
  ``torch.autograd.graph.saved_tensors_hooks``, which sees every tensor autograd keeps for the
  backward: the saved bytes are the sizes of their storages, each counted once, leaving out the
  block's own parameters and buffers;
* ``warmup`` untimed and ``repeats`` timed forward and backward runs (``time.perf_counter`` on
  CPU; CUDA events after a synchronise on CUDA), gradients reset to ``None`` before each run.

torch is passed in (or imported inside functions): this module imports without it.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pipesim.errors import InputError
from pipesim.profiles.profiler.blocks import first_input, require_torch

__all__ = ["BlockMeasurement", "TimeStats", "measure_blocks"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeStats:
    """Timings of one operation over the measured runs, seconds."""

    median_s: float
    min_s: float
    max_s: float

    @property
    def spread(self) -> float:
        """(max - min) / median: 0 for perfectly steady runs (0 when the median is 0)."""
        return (self.max_s - self.min_s) / self.median_s if self.median_s > 0 else 0.0

    @classmethod
    def of(cls, samples_s: Sequence[float]) -> TimeStats:
        """The statistics of ``samples_s`` (at least one sample)."""
        return cls(median_s=statistics.median(samples_s), min_s=min(samples_s), max_s=max(samples_s))


@dataclass(frozen=True, slots=True, kw_only=True)
class BlockMeasurement:
    """What was measured for one block at one batch size.

    Attributes:
        name: the block's name (the layer name in the profile).
        batch_size: samples in the batch.
        fwd: forward timings.
        bwd: backward timings (zeros when nothing in the block needs a gradient).
        activation_bytes: bytes of the block's output tensors.
        saved_activation_bytes: bytes of the storages autograd keeps for the backward.
        parameter_bytes: bytes of the block's parameters.
        fwd_flop: forward FLOP counted by FlopCounterMode, or ``None`` without it.
        bwd_flop: backward FLOP, or ``None``.
        output_shapes: the shape of each output tensor.
    """

    name: str
    batch_size: int
    fwd: TimeStats
    bwd: TimeStats
    activation_bytes: int
    saved_activation_bytes: int
    parameter_bytes: int
    fwd_flop: float | None
    bwd_flop: float | None
    output_shapes: tuple[tuple[int, ...], ...]


# --------------------------------------------------------------------------------------------
# Measuring one block
def _tensors(value: Any) -> list[Any]:
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _as_args(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _nbytes(tensor: Any) -> int:
    return int(tensor.numel()) * int(tensor.element_size())


def _storage_key(tensor: Any) -> tuple[str, int, int]:
    storage = tensor.untyped_storage()
    return str(tensor.device), int(storage.data_ptr()), int(storage.nbytes())


class _Clock:
    """Times a callable: perf_counter on CPU, CUDA events (after a synchronise) on CUDA."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.cuda = device.type == "cuda"

    def time(self, fn: Callable[[], Any]) -> tuple[Any, float]:
        if self.cuda:
            cuda = self.torch.cuda
            cuda.synchronize()
            start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return out, float(start.elapsed_time(end)) / 1000.0  # elapsed_time is in ms
        t0 = time.perf_counter()
        out = fn()
        return out, time.perf_counter() - t0


def _shape_error(name: str, index: int, block: Any, args: Sequence[Any], exc: Exception) -> InputError:
    shapes = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in _tensors(args))
    fed = "the synthetic input (batch, *input_shape)" if index == 0 else f"the output of block {index - 1}"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return InputError(
        f"block {index} {name!r} ({type(block).__name__}) does not accept {fed} of shape {shapes}: "
        f"{first_line}; --input-shape is per sample, without the batch dimension, and each block "
        "receives the previous block's output"
    )


def _counted_pass(torch: Any, block: Any, args: Sequence[Any]) -> tuple[Any, int, float | None, float | None]:
    """One untimed forward + backward: saved bytes and FLOP; returns (output, saved, fwd, bwd)."""
    excluded = {_storage_key(t) for t in [*block.parameters(), *block.buffers()]}
    seen: set[tuple[str, int, int]] = set()
    saved = 0

    def pack(tensor: Any) -> Any:
        nonlocal saved
        try:
            key = _storage_key(tensor)
            size = key[2]
        except (RuntimeError, NotImplementedError):  # a tensor without a plain storage
            key, size = ("?", id(tensor), 0), _nbytes(tensor)
        if key not in excluded and key not in seen:
            seen.add(key)
            saved += size
        return tensor

    try:
        from torch.utils.flop_counter import FlopCounterMode

        counter: Any = FlopCounterMode(display=False)
    except ImportError:  # pragma: no cover - torch < 2.1
        counter = None
    fwd_flop: float | None = None
    bwd_flop: float | None = None
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        if counter is not None:
            with counter:
                out = block(*args)
                fwd_flop = float(counter.get_total_flops())
                _backward(torch, out, args)
                bwd_flop = float(counter.get_total_flops()) - fwd_flop
        else:
            out = block(*args)
            _backward(torch, out, args)
    return out, saved, fwd_flop, bwd_flop


def _backward(torch: Any, out: Any, args: Sequence[Any]) -> bool:
    """Backward from every output that needs a gradient (with gradient ones); False if none does."""
    roots = [t for t in _tensors(out) if t.requires_grad]
    if not roots:
        return False
    torch.autograd.backward(roots, [torch.ones_like(t) for t in roots])
    return True


def _timed_run(torch: Any, clock: _Clock, block: Any, args: tuple[Any, ...]) -> tuple[float, float]:
    """One timed forward and backward of ``block``: (forward seconds, backward seconds)."""
    result, fwd = clock.time(lambda: block(*args))
    roots = [t for t in _tensors(result) if t.requires_grad]
    if not roots:
        return fwd, 0.0
    grads = [torch.ones_like(t) for t in roots]
    _, bwd = clock.time(lambda: torch.autograd.backward(roots, grads))
    return fwd, bwd


def _measure_block(
    torch: Any,
    clock: _Clock,
    name: str,
    index: int,
    block: Any,
    args: tuple[Any, ...],
    *,
    batch_size: int,
    repeats: int,
    warmup: int,
) -> tuple[BlockMeasurement, Any]:
    params = list(block.parameters())
    try:
        out, saved, fwd_flop, bwd_flop = _counted_pass(torch, block, args)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        raise _shape_error(name, index, block, args, exc) from exc
    outputs = _tensors(out)
    fwd_s: list[float] = []
    bwd_s: list[float] = []
    for run in range(warmup + repeats):
        for p in params:
            p.grad = None
        for t in _tensors(args):
            t.grad = None
        fwd, bwd = _timed_run(torch, clock, block, args)
        if run >= warmup:
            fwd_s.append(fwd)
            bwd_s.append(bwd)
    for p in params:
        p.grad = None
    seen: set[int] = set()
    parameter_bytes = 0
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            parameter_bytes += _nbytes(p)
    measurement = BlockMeasurement(
        name=name,
        batch_size=batch_size,
        fwd=TimeStats.of(fwd_s),
        bwd=TimeStats.of(bwd_s),
        activation_bytes=sum(_nbytes(t) for t in outputs),
        saved_activation_bytes=saved,
        parameter_bytes=parameter_bytes,
        fwd_flop=fwd_flop,
        bwd_flop=bwd_flop,
        output_shapes=tuple(tuple(int(d) for d in t.shape) for t in outputs),
    )
    return measurement, out


def _next_args(torch: Any, out: Any) -> tuple[Any, ...]:
    """The next block's inputs: the outputs detached, floating ones requiring a gradient."""

    def fresh(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            t = value.detach()
            return t.requires_grad_(True) if t.is_floating_point() else t
        if isinstance(value, (tuple, list)):
            return type(value)(fresh(v) for v in value)
        return value

    return _as_args(fresh(out))


# --------------------------------------------------------------------------------------------
# A chain of blocks
def measure_blocks(
    torch: Any,
    blocks: Sequence[tuple[str, Any]],
    sizes: Sequence[int],
    *,
    input_shape: Sequence[int] | None,
    input_dtype: str,
    device: Any,
    dtype: Any,
    repeats: int,
    warmup: int,
    seed: int,
) -> list[tuple[BlockMeasurement, ...]]:
    """Measure every block at every batch size, block ``i + 1`` running on block ``i``'s output.

    Args:
        torch: the imported torch module.
        blocks: ``(name, module)`` pairs in execution order, already on ``device`` and ``dtype``.
        sizes: batch sizes, samples.
        input_shape: per-sample shape of the first block's input, or ``None`` to infer it.
        input_dtype: ``auto``, ``float`` or ``long`` (see
            :func:`pipesim.profiles.profiler.blocks.first_input`).
        device: the torch device.
        dtype: the torch floating dtype.
        repeats: timed runs per block.
        warmup: untimed runs before them.
        seed: seed of the synthetic input.

    Returns:
        One tuple of measurements (one per block) per batch size, in the order of ``sizes``.

    Raises:
        InputError: the input shape cannot be inferred, or a block rejects its input (torch's
            error rephrased with the block, the shapes and the rule).
    """
    clock = _Clock(torch, device)
    measured: list[tuple[BlockMeasurement, ...]] = []
    for batch_size in sizes:
        x = first_input(
            blocks[0][1],
            batch_size=batch_size,
            input_shape=input_shape,
            input_dtype=input_dtype,
            device=device,
            dtype=dtype,
            seed=seed,
        )
        args: tuple[Any, ...] = (x,)
        row: list[BlockMeasurement] = []
        for index, (block_name, block) in enumerate(blocks):
            m, out = _measure_block(
                torch, clock, block_name, index, block, args,
                batch_size=batch_size, repeats=repeats, warmup=warmup,
            )  # fmt: skip
            row.append(m)
            args = _next_args(torch, out)
            log.debug(
                "batch %d, %s: fwd %.3g s, bwd %.3g s", batch_size, block_name, m.fwd.median_s, m.bwd.median_s
            )
        measured.append(tuple(row))
    return measured
