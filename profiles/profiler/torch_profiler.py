"""The PyTorch profiler: measure a user's model block by block and turn it into a ModelProfile.

DAPPLE plans from a per-layer profile of forward/backward time, activation and parameter sizes
(Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large Models", PPoPP 2021,
section 3 "profiler"). This module is that profiler for pipesim. For every block of the model (see
:mod:`pipesim.profiles.profiler.blocks`) and every requested batch size it records

* forward and backward time: the median of ``repeats`` runs after ``warmup`` runs, with the
  smallest and largest run (on CUDA timed with CUDA events after a synchronise);
* the output activation bytes (``numel * element_size`` of every output tensor);
* the saved activation bytes: the storages autograd keeps for the backward, seen through
  ``torch.autograd.graph.saved_tensors_hooks``, each storage counted once and the block's own
  parameters and buffers left out;
* parameter bytes, and forward/backward FLOP from ``torch.utils.flop_counter.FlopCounterMode``
  (which counts matrix multiplies, convolutions and attention only; element-wise work counts 0).

Several batch sizes become :class:`BatchPoint` entries so the simulator interpolates between
measurements; :func:`scaling_linearity` says how far the measurements are from linear.

torch is imported inside the functions only: this module imports without it.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipesim.errors import invalid
from pipesim.profiles.models.profile import DTYPES, BatchPoint, Layer, ModelProfile
from pipesim.profiles.profiler.blocks import build_model, model_blocks, require_torch
from pipesim.profiles.profiler.measure import BlockMeasurement, TimeStats, measure_blocks

__all__ = [
    "DEVICES",
    "BlockMeasurement",
    "Linearity",
    "TimeStats",
    "TorchProfile",
    "parse_batch_sizes",
    "profile_factory",
    "profile_module",
    "scaling_linearity",
]

log = logging.getLogger(__name__)

DEVICES: tuple[str, ...] = ("cpu", "cuda")
"""Devices the profiler runs on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Linearity:
    """How linear a measured quantity is in the batch size.

    Attributes:
        quantity: what was measured, e.g. ``"fwd_time_s"`` (summed over the blocks).
        r_squared: coefficient of determination of a least-squares line ``a + b * batch`` through
            the points (1 for two points; ``None`` for one point or when all values are equal).
        max_deviation: the largest ``|measured - proportional| / measured`` over the batch sizes,
            where ``proportional`` scales the profile batch's value by ``batch / profile batch``
            (what pipesim assumes without batch points); ``None`` for one batch size.
    """

    quantity: str
    r_squared: float | None
    max_deviation: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class TorchProfile:
    """The outcome of profiling a model.

    Attributes:
        profile: the model profile (at the largest batch size, the others as batch points).
        measurements: per batch size (ascending), one :class:`BlockMeasurement` per block.
        linearity: scaling of total forward time, backward time and saved bytes with the batch.
    """

    profile: ModelProfile
    measurements: tuple[tuple[BlockMeasurement, ...], ...]
    linearity: tuple[Linearity, ...]


# --------------------------------------------------------------------------------------------
# Pure helpers
def parse_batch_sizes(text: str) -> tuple[int, ...]:
    """Parse ``8`` or ``1,2,4,8`` into distinct ascending batch sizes.

    Raises:
        InputError: an empty list, a non-integer, a size < 1, or a repeated size.
    """
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise invalid("batch_size", text, "must be an integer or a comma-separated list, e.g. 1,2,4,8")
    sizes: list[int] = []
    for part in parts:
        try:
            size = int(part)
        except ValueError:
            raise invalid("batch_size", text, f"{part!r} is not an integer") from None
        if size < 1:
            raise invalid("batch_size", text, f"batch sizes must be >= 1, got {size}")
        sizes.append(size)
    if len(set(sizes)) != len(sizes):
        raise invalid("batch_size", text, "batch sizes must be distinct")
    return tuple(sorted(sizes))


def scaling_linearity(
    quantity: str, batch_sizes: Sequence[int], values: Sequence[float], profile_batch_size: int
) -> Linearity:
    """How linear ``values`` (one per batch size) are in the batch size (see :class:`Linearity`).

    Raises:
        InputError: the lists differ in length, or ``profile_batch_size`` is not among them.
    """
    if len(batch_sizes) != len(values) or not batch_sizes:
        raise invalid("values", list(values), f"must have one entry per batch size ({len(batch_sizes)})")
    if profile_batch_size not in batch_sizes:
        raise invalid("profile_batch_size", profile_batch_size, f"must be one of {list(batch_sizes)}")
    if len(batch_sizes) == 1:
        return Linearity(quantity=quantity, r_squared=None, max_deviation=None)
    xs = [float(b) for b in batch_sizes]
    ys = [float(v) for v in values]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - mean_y) ** 2 for y in ys)
    r_squared: float | None = None
    if syy > 0:
        slope = sxy / sxx
        residual = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in zip(xs, ys, strict=True))
        r_squared = max(0.0, 1.0 - residual / syy)
    base = ys[list(batch_sizes).index(profile_batch_size)]
    deviations = [abs(y - base * x / profile_batch_size) / y for x, y in zip(xs, ys, strict=True) if y > 0]
    return Linearity(quantity=quantity, r_squared=r_squared, max_deviation=max(deviations, default=0.0))


def _check_options(batch_sizes: Sequence[int], device: str, dtype: str, repeats: int, warmup: int) -> None:
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise invalid("batch_sizes", list(batch_sizes), "must be one or more integers >= 1")
    if len(set(batch_sizes)) != len(batch_sizes):
        raise invalid("batch_sizes", list(batch_sizes), "must be distinct")
    if device not in DEVICES:
        raise invalid("device", device, f"must be one of {', '.join(DEVICES)}")
    if dtype not in DTYPES:
        raise invalid("dtype", dtype, f"must be one of {', '.join(DTYPES)}")
    if repeats < 1:
        raise invalid("repeats", repeats, "must be >= 1")
    if warmup < 0:
        raise invalid("warmup", warmup, "must be >= 0")


def _describe(
    source: str,
    torch: Any,
    device: str,
    dtype: str,
    repeats: int,
    warmup: int,
    top: Sequence[BlockMeasurement],
    linearity: Sequence[Linearity],
    batch_sizes: Sequence[int],
) -> str:
    parts = [
        f"Measured by `pipesim profile` from {source} with PyTorch {torch.__version__} on {device} "
        f"({dtype}): per block the median of {repeats} runs after {warmup} warm-up runs."
    ]
    for kind in ("fwd", "bwd"):
        stats = [(getattr(m, kind).spread, m.name) for m in top]
        worst, worst_name = max(stats)
        mid = statistics.median(s for s, _ in stats)
        parts.append(
            f"{kind} time spread (max-min)/median at batch {top[0].batch_size}: "
            f"median {mid:.1%}, worst {worst:.1%} ({worst_name})."
        )
    parts.append("FLOP from torch FlopCounterMode (matmul, convolution, attention only).")
    if len(batch_sizes) > 1:
        text = "; ".join(
            f"{lin.quantity} R^2 "
            + ("n/a" if lin.r_squared is None else f"{lin.r_squared:.4f}")
            + f", max deviation from proportional {lin.max_deviation or 0.0:.1%}"
            for lin in linearity
        )
        parts.append(f"Batch scaling over {','.join(map(str, batch_sizes))}: {text}.")
    return " ".join(parts)


def profile_module(
    model: Any,
    *,
    name: str,
    batch_sizes: Sequence[int],
    input_shape: Sequence[int] | None = None,
    input_dtype: str = "auto",
    device: str = "cpu",
    dtype: str = "float32",
    repeats: int = 5,
    warmup: int = 2,
    seed: int = 0,
    reference_device: str | None = None,
    source: str = "a torch.nn.Module",
    threads: int | None = None,
) -> TorchProfile:
    """Profile a ``torch.nn.Module`` block by block (see the module docstring).

    The model is moved to ``device`` and ``dtype`` and put in training mode. Block ``i + 1`` runs
    on block ``i``'s output (detached, so that each block's backward is timed alone).

    Args:
        model: the model; its blocks come from :func:`pipesim.profiles.profiler.blocks.model_blocks`.
        name: the profile's name.
        batch_sizes: samples per batch to measure; the largest becomes ``profile_batch_size``
            and the others :class:`BatchPoint` entries.
        input_shape: per-sample input shape (without the batch dimension), or ``None`` to infer
            it from a leading ``nn.Linear``.
        input_dtype: ``auto``, ``float`` or ``long`` (token ids for embeddings).
        device: ``"cpu"`` or ``"cuda"``.
        dtype: ``float32``, ``float16`` or ``bfloat16``.
        repeats: timed runs per block, forward and backward (the median is kept).
        warmup: untimed runs before them.
        seed: seed of the synthetic input.
        reference_device: the profile's ``reference_device`` (default: the CUDA device's name,
            or ``"cpu"``).
        source: where the model came from, for the description.
        threads: CPU threads torch may use while profiling (``torch.set_num_threads``; the old
            value is restored afterwards), or ``None`` to leave torch's setting. One thread gives
            steadier CPU timings on a busy machine, where waiting for a second thread can cost a
            whole scheduler tick per operation.

    Returns:
        The profile with every measurement and the batch-scaling linearity.

    Raises:
        InputError: torch is missing, a bad option, CUDA asked for but not available, a model
            without a block list, or a block that rejects its input (shape or dtype).
    """
    torch = require_torch()
    _check_options(batch_sizes, device, dtype, repeats, warmup)
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise invalid("threads", threads, "must be an integer >= 1 or absent")
    if device == "cuda" and not torch.cuda.is_available():
        raise invalid("device", device, "CUDA is not available to torch on this machine; use --device cpu")
    torch_device = torch.device(device)
    torch_dtype = getattr(torch, dtype)
    model.to(device=torch_device, dtype=torch_dtype)
    model.train()
    blocks = model_blocks(model)
    sizes = sorted(batch_sizes)
    old_threads = int(torch.get_num_threads())
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        measured = measure_blocks(
            torch, blocks, sizes, input_shape=input_shape, input_dtype=input_dtype,
            device=torch_device, dtype=torch_dtype, repeats=repeats, warmup=warmup, seed=seed,
        )  # fmt: skip
    finally:
        torch.set_num_threads(old_threads)
    top = measured[-1]
    pbs = sizes[-1]
    linearity = tuple(
        scaling_linearity(q, sizes, [sum(get(m) for m in row) for row in measured], pbs)
        for q, get in (
            ("fwd_time_s", lambda m: m.fwd.median_s),
            ("bwd_time_s", lambda m: m.bwd.median_s),
            ("saved_activation_bytes", lambda m: float(m.saved_activation_bytes)),
        )
    )
    layers = tuple(
        Layer(
            name=m.name,
            fwd_time_s=m.fwd.median_s,
            bwd_time_s=m.bwd.median_s,
            activation_bytes=m.activation_bytes,
            parameter_bytes=m.parameter_bytes,
            saved_activation_bytes=m.saved_activation_bytes,
            fwd_flop=m.fwd_flop,
            bwd_flop=m.bwd_flop,
        )
        for m in top
    )
    points = tuple(
        BatchPoint(
            batch_size=row[0].batch_size,
            fwd_time_s=tuple(m.fwd.median_s for m in row),
            bwd_time_s=tuple(m.bwd.median_s for m in row),
            activation_bytes=tuple(m.activation_bytes for m in row),
            saved_activation_bytes=tuple(m.saved_activation_bytes for m in row),
        )
        for row in measured[:-1]
    )
    if reference_device is None:
        reference_device = str(torch.cuda.get_device_name(torch_device)) if device == "cuda" else "cpu"
    profile = ModelProfile(
        name=name,
        layers=layers,
        profile_batch_size=pbs,
        reference_device=reference_device,
        dtype=dtype,
        batch_points=points,
        description=_describe(source, torch, device, dtype, repeats, warmup, top, linearity, sizes),
    )
    return TorchProfile(profile=profile, measurements=tuple(measured), linearity=linearity)


def profile_factory(spec: str, *, name: str | None = None, seed: int = 0, **options: Any) -> TorchProfile:
    """Build the model with the factory ``MODULE:FACTORY`` (after seeding torch) and profile it.

    Args:
        spec: ``MODULE:FACTORY`` (see :func:`pipesim.profiles.profiler.blocks.load_factory`).
        name: the profile's name (default: the factory's name).
        seed: seeds torch before the factory runs (deterministic weights) and the input.
        **options: the keyword arguments of :func:`profile_module`.

    Raises:
        InputError: see :func:`pipesim.profiles.profiler.blocks.build_model` and :func:`profile_module`.
    """
    torch = require_torch()
    torch.manual_seed(seed)
    model = build_model(spec)
    if name is None:
        name = spec.rpartition(":")[2]
    return profile_module(model, name=name, seed=seed, source=spec, **options)
