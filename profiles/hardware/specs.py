"""Hardware specs: one accelerator model (:class:`DeviceSpec`) and one kind of link (:class:`LinkSpec`).

Only the types live here; the figures are data (``data/devices.toml``, ``data/links.toml``, read by
:mod:`pipesim.profiles.hardware.catalog`). Peak figures are what the vendor advertises; the
``*_efficiency`` / ``achievable_fraction`` fields say what real training traffic reaches, so
costs derived from a spec are ``peak x fraction``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pipesim.errors import check_count, check_fraction, check_nonneg, check_positive, invalid
from pipesim.profiles.models.profile import DTYPES

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "MIN_EFFICIENCY",
    "PRECISIONS",
    "PRECISION_ALIASES",
    "STORAGE_DTYPE",
    "DeviceSpec",
    "LinkSpec",
    "parse_precision",
]

PRECISIONS: tuple[str, ...] = (*DTYPES, "tfloat32", "float8")
"""Compute precisions a device may have a peak rate for: the storage dtypes of profiles
(:data:`pipesim.profiles.models.profile.DTYPES`) plus ``tfloat32`` (fp32 tensors multiplied on
tensor cores with a 10-bit mantissa, Ampere and later) and ``float8`` (E4M3/E5M2 tensor-core GEMMs,
Hopper/Ada and later)."""

PRECISION_ALIASES: dict[str, str] = {
    "fp32": "float32",
    "tf32": "tfloat32",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp8": "float8",
}
"""Short spellings (``--dtype fp32|tf32|fp16|bf16|fp8``) of :data:`PRECISIONS`."""

STORAGE_DTYPE: dict[str, str] = {
    "float32": "float32",
    "tfloat32": "float32",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float8": "bfloat16",
}
"""The dtype activations and working weights are stored in when training in a precision. tf32 keeps
fp32 tensors (only the tensor-core multiply rounds); fp8 training keeps bf16 activations and
weights and casts GEMM inputs to fp8 per kernel (NVIDIA Transformer Engine's recipe)."""

ARCHITECTURES: tuple[str, ...] = (
    "pascal", "volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3",
)
"""GPU generations the compute model knows an efficiency curve for
(:mod:`pipesim.profiles.costmodels.compute`)."""


def parse_precision(value: object) -> str:
    """The canonical precision name of ``value`` (``"bf16"`` -> ``"bfloat16"``; case-insensitive).

    Raises:
        InputError: ``value`` is not one of :data:`PRECISIONS` or :data:`PRECISION_ALIASES`.
    """
    if isinstance(value, str):
        key = value.strip().lower()
        key = PRECISION_ALIASES.get(key, key)
        if key in PRECISIONS:
            return key
    names = ", ".join([*PRECISION_ALIASES, *PRECISIONS])
    raise invalid("dtype", value, f"must be one of {names}")


DEFAULT_COMPUTE_EFFICIENCY = 0.4
"""Share of peak FLOPS that matmul-heavy training layers reach: dense training typically reaches
30-50% of peak (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, report 44-52% of peak on A100 for their best configurations; smaller
models and older software reach less). 0.4 is the middle of that band."""

MIN_EFFICIENCY = 0.01
"""The smallest compute or memory efficiency a device may declare: below 1% of peak a what-if
describes no real accelerator (a typo such as ``1e-300`` would make iterations last 1e299 s)."""

DEFAULT_MEMORY_EFFICIENCY = 0.8
"""Share of peak memory bandwidth that memory-bound layers reach: microbenchmarks of V100 HBM2
measure about 750 of 900 GB/s (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", 2018), i.e. ~0.83; STREAM-like kernels on A100/H100 reach a similar share."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator model.

    Attributes:
        name: catalog name, e.g. ``"V100-SXM2-16GB"``.
        peak_flop_per_s: dense peak FLOP/s per training dtype (keys from
            :data:`pipesim.profiles.models.profile.DTYPES`). ``"float32"`` is the plain (non-tensor-core)
            FP32 rate; ``"float16"``/``"bfloat16"`` are dense tensor-core rates (no sparsity).
            A dtype the device cannot train in (bfloat16 on V100 and P100) is absent.
        memory_bytes: device memory capacity, bytes (nominal: the HBM stacks' binary size; the
            framework sees a little less).
        memory_bandwidth_bytes_per_s: peak device-memory bandwidth, bytes/s.
        compute_efficiency: fraction of peak FLOP/s that dense matmul-heavy layers reach, in (0, 1].
        memory_efficiency: fraction of peak memory bandwidth that memory-bound layers reach, in (0, 1].
        sm_count: streaming multiprocessors (NVIDIA) or compute units (AMD), or ``None`` when
            unknown: the compute model then skips wave quantisation.
        architecture: GPU generation (one of :data:`ARCHITECTURES`), or ``None``: picks the
            GEMM efficiency curve of :mod:`pipesim.profiles.costmodels.compute`.
        price_per_hour_usd: on-demand cloud price of one device, US dollars per hour, or ``None``
            when unknown (see ``source`` for where the figure comes from).
        source: the datasheets and price lists the figures come from.

    Raises:
        InputError: an empty name, an unknown dtype key, a non-positive peak, capacity or
            bandwidth, a fraction outside (0, 1] or a negative price.
    """

    name: str
    peak_flop_per_s: Mapping[str, float]
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    memory_efficiency: float = DEFAULT_MEMORY_EFFICIENCY
    price_per_hour_usd: float | None = None
    source: str = ""
    sm_count: int | None = None
    architecture: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise invalid("device.name", self.name, "must be a non-empty string")
        if not isinstance(self.peak_flop_per_s, Mapping) or not self.peak_flop_per_s:
            raise invalid(
                f"{self.name}.peak_flop_per_s", self.peak_flop_per_s, "must map at least one dtype to FLOP/s"
            )
        peaks: dict[str, float] = {}
        for dtype in PRECISIONS:  # canonical order, so equal specs print alike
            if dtype in self.peak_flop_per_s:
                value = self.peak_flop_per_s[dtype]
                check_positive(f"{self.name}.peak_flop_per_s[{dtype}]", value)
                peaks[dtype] = float(value)
        unknown = sorted(set(self.peak_flop_per_s) - set(PRECISIONS))
        if unknown:
            raise invalid(
                f"{self.name}.peak_flop_per_s", unknown[0], f"dtype must be one of {', '.join(PRECISIONS)}"
            )
        object.__setattr__(self, "peak_flop_per_s", MappingProxyType(peaks))
        check_count(f"{self.name}.memory_bytes", self.memory_bytes)
        check_positive(f"{self.name}.memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)
        for key, value in (
            ("compute_efficiency", self.compute_efficiency),
            ("memory_efficiency", self.memory_efficiency),
        ):
            check_fraction(f"{self.name}.{key}", value)
            if value < MIN_EFFICIENCY:
                raise invalid(f"{self.name}.{key}", value, f"must be in [{MIN_EFFICIENCY}, 1]")
        if self.price_per_hour_usd is not None:
            check_nonneg(f"{self.name}.price_per_hour_usd", self.price_per_hour_usd)
        if self.sm_count is not None:
            check_count(f"{self.name}.sm_count", self.sm_count)
        if self.architecture is not None and self.architecture not in ARCHITECTURES:
            rule = f"must be one of {', '.join(ARCHITECTURES)}"
            raise invalid(f"{self.name}.architecture", self.architecture, rule)

    def __hash__(self) -> int:
        # The peak mapping is a read-only proxy (unhashable), so hash on the scalar fields.
        return hash((self.name, self.memory_bytes, self.memory_bandwidth_bytes_per_s))

    def __reduce__(self) -> tuple[object, ...]:
        # The read-only peak mapping cannot be pickled; rebuild from a plain dict instead.
        return (
            _rebuild_device,
            (
                self.name,
                dict(self.peak_flop_per_s),
                self.memory_bytes,
                self.memory_bandwidth_bytes_per_s,
                self.compute_efficiency,
                self.memory_efficiency,
                self.price_per_hour_usd,
                self.source,
                self.sm_count,
                self.architecture,
            ),
        )

    def supports(self, dtype: str) -> bool:
        """True when the device has a peak rate for ``dtype``."""
        return dtype in self.peak_flop_per_s

    def peak_for(self, dtype: str) -> float:
        """Peak dense FLOP/s in ``dtype``.

        Raises:
            InputError: the device has no rate for ``dtype`` (e.g. bfloat16 on V100).
        """
        try:
            return self.peak_flop_per_s[dtype]
        except KeyError:
            raise invalid(
                "dtype", dtype, f"{self.name} supports only {', '.join(self.peak_flop_per_s)}"
            ) from None

    def achievable_flop_per_s(self, dtype: str) -> float:
        """FLOP/s dense layers reach in ``dtype``: peak times ``compute_efficiency``.

        Raises:
            InputError: the device has no rate for ``dtype``.
        """
        return self.peak_for(dtype) * self.compute_efficiency

    @property
    def achievable_memory_bandwidth_bytes_per_s(self) -> float:
        """Memory bandwidth memory-bound layers reach: peak times ``memory_efficiency``, bytes/s."""
        return self.memory_bandwidth_bytes_per_s * self.memory_efficiency


def _rebuild_device(
    name: str,
    peak_flop_per_s: dict[str, float],
    memory_bytes: int,
    memory_bandwidth_bytes_per_s: float,
    compute_efficiency: float,
    memory_efficiency: float,
    price_per_hour_usd: float | None,
    source: str,
    sm_count: int | None = None,
    architecture: str | None = None,
) -> DeviceSpec:
    """Unpickle a :class:`DeviceSpec` (see ``DeviceSpec.__reduce__``)."""
    return DeviceSpec(
        name=name,
        peak_flop_per_s=peak_flop_per_s,
        memory_bytes=memory_bytes,
        memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
        compute_efficiency=compute_efficiency,
        memory_efficiency=memory_efficiency,
        price_per_hour_usd=price_per_hour_usd,
        source=source,
        sm_count=sm_count,
        architecture=architecture,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """One kind of interconnect link, as a directed resource of the simulator.

    What one link is: for the NVLink entries without a suffix, ONE NVLink (one "brick") between
    two GPUs; an ``-xN`` suffix bundles N of them (a GPU's whole NVLink port into an NVSwitch
    fabric). PCIe entries are one x16 slot. Network entries are one NIC port.

    Attributes:
        name: catalog name, e.g. ``"NVLink2"``.
        bandwidth_bytes_per_s: peak data bandwidth in ONE direction, bytes/s (full duplex: the
            other direction has the same, independently).
        latency_s: typical one-way latency of a small message between two endpoints this kind of
            link connects (through at most one switch), seconds. A cluster spreads it over the
            hops of a path (see :mod:`pipesim.profiles.hardware.topology`).
        achievable_fraction: share of the peak that NCCL-like bulk traffic reaches, in (0, 1].
        source: where the figures come from.

    Raises:
        InputError: a non-positive bandwidth, a negative latency or a fraction outside (0, 1].
    """

    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    achievable_fraction: float = 0.8
    source: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise invalid("link.name", self.name, "must be a non-empty string")
        check_positive(f"{self.name}.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        check_nonneg(f"{self.name}.latency_s", self.latency_s)
        check_fraction(f"{self.name}.achievable_fraction", self.achievable_fraction)

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth bulk traffic reaches in one direction: peak times ``achievable_fraction``."""
        return self.bandwidth_bytes_per_s * self.achievable_fraction

    def bundled(self, count: int, name: str | None = None) -> LinkSpec:
        """The same link with ``count`` lanes side by side (``count`` times the bandwidth).

        Raises:
            InputError: ``count`` is not an integer >= 1.
        """
        check_count("count", count)
        if count == 1:
            return self
        return LinkSpec(
            name=name or f"{self.name}-x{count}",
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * count,
            latency_s=self.latency_s,
            achievable_fraction=self.achievable_fraction,
            source=self.source,
        )
