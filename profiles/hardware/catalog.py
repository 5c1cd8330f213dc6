"""Hardware catalog: accelerators (:class:`DeviceSpec`) and interconnects (:class:`LinkSpec`).

Every figure is a datasheet or measured value with its source in the entry's ``source`` field.
Peak figures are what the vendor advertises; the ``*_efficiency`` / ``achievable_fraction``
fields say what real training traffic reaches, so costs derived from a catalog entry are
``peak x fraction``.

Lookups are case-insensitive and accept a few aliases (``"v100"`` is ``"V100-SXM2-16GB"``);
misses raise :class:`~pipesim.errors.UnknownNameError` listing the valid names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from pipesim.errors import UnknownNameError, invalid
from pipesim.profiles.models.profile import DTYPES
from pipesim.units import GB, GBIT, GIB, TERA

__all__ = [
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "DeviceSpec",
    "LinkSpec",
    "device_names",
    "get_device",
    "get_link",
    "link_names",
]

DEFAULT_COMPUTE_EFFICIENCY = 0.4
"""Share of peak FLOPS that matmul-heavy training layers reach: dense training typically reaches
30-50% of peak (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM", SC 2021, report 44-52% of peak on A100 for their best configurations; smaller
models and older software reach less). 0.4 is the middle of that band."""

DEFAULT_MEMORY_EFFICIENCY = 0.8
"""Share of peak memory bandwidth that memory-bound layers reach: microbenchmarks of V100 HBM2
measure about 750 of 900 GB/s (Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via
Microbenchmarking", 2018), i.e. ~0.83; STREAM-like kernels on A100/H100 reach a similar share."""


def _normalize(name: str) -> str:
    """Lookup key: lower case, with spaces and underscores read as hyphens."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _check_fraction(field: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 1):
        raise invalid(field, value, "must be a number in (0, 1]")


def _check_positive(field: str, value: float) -> None:
    if not (
        isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    ):
        raise invalid(field, value, "must be a finite number > 0")


def _check_nonneg(field: str, value: float) -> None:
    if not (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    ):
        raise invalid(field, value, "must be a finite number >= 0")


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

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise invalid("device.name", self.name, "must be a non-empty string")
        if not isinstance(self.peak_flop_per_s, Mapping) or not self.peak_flop_per_s:
            raise invalid(
                f"{self.name}.peak_flop_per_s", self.peak_flop_per_s, "must map at least one dtype to FLOP/s"
            )
        peaks: dict[str, float] = {}
        for dtype in DTYPES:  # canonical order, so equal specs print alike
            if dtype in self.peak_flop_per_s:
                value = self.peak_flop_per_s[dtype]
                _check_positive(f"{self.name}.peak_flop_per_s[{dtype}]", value)
                peaks[dtype] = float(value)
        unknown = sorted(set(self.peak_flop_per_s) - set(DTYPES))
        if unknown:
            raise invalid(
                f"{self.name}.peak_flop_per_s", unknown[0], f"dtype must be one of {', '.join(DTYPES)}"
            )
        object.__setattr__(self, "peak_flop_per_s", MappingProxyType(peaks))
        if (
            not isinstance(self.memory_bytes, int)
            or isinstance(self.memory_bytes, bool)
            or self.memory_bytes <= 0
        ):
            raise invalid(f"{self.name}.memory_bytes", self.memory_bytes, "must be an integer > 0")
        _check_positive(f"{self.name}.memory_bandwidth_bytes_per_s", self.memory_bandwidth_bytes_per_s)
        _check_fraction(f"{self.name}.compute_efficiency", self.compute_efficiency)
        _check_fraction(f"{self.name}.memory_efficiency", self.memory_efficiency)
        if self.price_per_hour_usd is not None:
            _check_nonneg(f"{self.name}.price_per_hour_usd", self.price_per_hour_usd)

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
        _check_positive(f"{self.name}.bandwidth_bytes_per_s", self.bandwidth_bytes_per_s)
        _check_nonneg(f"{self.name}.latency_s", self.latency_s)
        _check_fraction(f"{self.name}.achievable_fraction", self.achievable_fraction)

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """Bandwidth bulk traffic reaches in one direction: peak times ``achievable_fraction``."""
        return self.bandwidth_bytes_per_s * self.achievable_fraction

    def bundled(self, count: int, name: str | None = None) -> LinkSpec:
        """The same link with ``count`` lanes side by side (``count`` times the bandwidth).

        Raises:
            InputError: ``count`` is not an integer >= 1.
        """
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise invalid("count", count, "must be an integer >= 1")
        if count == 1:
            return self
        return LinkSpec(
            name=name or f"{self.name}-x{count}",
            bandwidth_bytes_per_s=self.bandwidth_bytes_per_s * count,
            latency_s=self.latency_s,
            achievable_fraction=self.achievable_fraction,
            source=self.source,
        )


# ------------------------------------------------------------------------------------------------
# Device catalog

_V100_SRC = (
    "NVIDIA Tesla V100 datasheet (2017/2018): SXM2 15.7 TFLOPS fp32, 125 TFLOPS fp16 tensor core, "
    "900 GB/s HBM2, 16 or 32 GB; no bfloat16."
)
_A100_SRC = (
    "NVIDIA A100 Tensor Core GPU datasheet (2021): SXM 19.5 TFLOPS fp32 (156 TF32 tensor), "
    "312 TFLOPS fp16/bf16 dense tensor core, 1555 GB/s (40GB HBM2) / 2039 GB/s (80GB HBM2e)."
)

_DEVICE_LIST: tuple[DeviceSpec, ...] = (
    DeviceSpec(
        name="P100",
        peak_flop_per_s={"float32": 10.6 * TERA, "float16": 21.2 * TERA},
        memory_bytes=16 * GIB,
        memory_bandwidth_bytes_per_s=732 * GB,
        price_per_hour_usd=1.46,
        source=(
            "NVIDIA Tesla P100 datasheet: SXM2 10.6 TFLOPS fp32, 21.2 TFLOPS fp16, 732 GB/s, 16 GB HBM2; "
            "no tensor cores, no bfloat16. Price: Google Cloud on-demand P100, us-central1, "
            "$1.46/GPU-hour (cloud.google.com/compute/gpus-pricing, 2023)."
        ),
    ),
    DeviceSpec(
        name="V100-SXM2-16GB",
        peak_flop_per_s={"float32": 15.7 * TERA, "float16": 125 * TERA},
        memory_bytes=16 * GIB,
        memory_bandwidth_bytes_per_s=900 * GB,
        price_per_hour_usd=3.06,
        source=_V100_SRC
        + " Price: AWS p3.16xlarge (8 x V100 16GB) on-demand $24.48/h in us-east-1 = $3.06/GPU-hour "
        "(aws.amazon.com/ec2/instance-types/p3, 2023).",
    ),
    DeviceSpec(
        name="V100-PCIe-16GB",
        peak_flop_per_s={"float32": 14 * TERA, "float16": 112 * TERA},
        memory_bytes=16 * GIB,
        memory_bandwidth_bytes_per_s=900 * GB,
        price_per_hour_usd=2.48,
        source="NVIDIA Tesla V100 datasheet (2017/2018): PCIe card 14 TFLOPS fp32, 112 TFLOPS fp16 tensor "
        "core (lower clocks than SXM2), 900 GB/s HBM2, 16 GB; no bfloat16. Price: Google Cloud on-demand "
        "V100, us-central1, $2.48/GPU-hour (cloud.google.com/compute/gpus-pricing, 2023).",
    ),
    DeviceSpec(
        name="V100-SXM2-32GB",
        peak_flop_per_s={"float32": 15.7 * TERA, "float16": 125 * TERA},
        memory_bytes=32 * GIB,
        memory_bandwidth_bytes_per_s=900 * GB,
        price_per_hour_usd=3.90,
        source=_V100_SRC
        + " Price: AWS p3dn.24xlarge (8 x V100 32GB) on-demand $31.212/h in us-east-1 = $3.90/GPU-hour "
        "(aws.amazon.com/ec2/instance-types/p3, 2023).",
    ),
    DeviceSpec(
        name="A100-40GB",
        peak_flop_per_s={"float32": 19.5 * TERA, "float16": 312 * TERA, "bfloat16": 312 * TERA},
        memory_bytes=40 * GIB,
        memory_bandwidth_bytes_per_s=1555 * GB,
        price_per_hour_usd=4.10,
        source=_A100_SRC
        + " Price: AWS p4d.24xlarge (8 x A100 40GB) on-demand $32.77/h in us-east-1 = $4.10/GPU-hour "
        "(aws.amazon.com/ec2/instance-types/p4, 2023).",
    ),
    DeviceSpec(
        name="A100-80GB",
        peak_flop_per_s={"float32": 19.5 * TERA, "float16": 312 * TERA, "bfloat16": 312 * TERA},
        memory_bytes=80 * GIB,
        memory_bandwidth_bytes_per_s=2039 * GB,
        price_per_hour_usd=5.12,
        source=_A100_SRC
        + " Price: AWS p4de.24xlarge (8 x A100 80GB) on-demand $40.97/h in us-east-1 = $5.12/GPU-hour "
        "(aws.amazon.com/ec2/instance-types/p4, 2023).",
    ),
    DeviceSpec(
        name="H100-SXM",
        peak_flop_per_s={"float32": 66.9 * TERA, "float16": 989 * TERA, "bfloat16": 989 * TERA},
        memory_bytes=80 * GIB,
        memory_bandwidth_bytes_per_s=3.35 * TERA,
        price_per_hour_usd=12.29,
        source=(
            "NVIDIA H100 Tensor Core GPU datasheet / architecture whitepaper (2022): SXM5 66.9 TFLOPS fp32, "
            "989 TFLOPS fp16/bf16 dense tensor core (1979 with sparsity), 80 GB HBM3 at 3.35 TB/s. "
            "Price: AWS p5.48xlarge (8 x H100) on-demand $98.32/h in us-east-1 = $12.29/GPU-hour "
            "(aws.amazon.com/ec2/instance-types/p5, 2023; AWS cut P5 prices in 2025)."
        ),
    ),
)

_DEVICES: dict[str, DeviceSpec] = {d.name: d for d in _DEVICE_LIST}

_DEVICE_ALIASES: dict[str, str] = {
    "v100": "V100-SXM2-16GB",
    "v100-16gb": "V100-SXM2-16GB",
    "v100-sxm2": "V100-SXM2-16GB",
    "v100-32gb": "V100-SXM2-32GB",
    "v100-pcie": "V100-PCIe-16GB",
    "p100-sxm2": "P100",
    "p100-16gb": "P100",
    "a100": "A100-40GB",
    "a100-sxm-40gb": "A100-40GB",
    "a100-sxm4-40gb": "A100-40GB",
    "a100-sxm-80gb": "A100-80GB",
    "a100-sxm4-80gb": "A100-80GB",
    "h100": "H100-SXM",
    "h100-sxm5": "H100-SXM",
    "h100-80gb": "H100-SXM",
}
"""Alternative spellings (normalized: lower case, hyphens) of catalog device names."""

_DEVICE_KEYS: dict[str, str] = {_normalize(n): n for n in _DEVICES} | _DEVICE_ALIASES


def device_names() -> tuple[str, ...]:
    """The catalog device names, sorted."""
    return tuple(sorted(_DEVICES))


def get_device(name: str) -> DeviceSpec:
    """Look a device up by catalog name or alias, case-insensitively.

    Raises:
        UnknownNameError: no such device; the message lists the catalog names.
    """
    canonical = _DEVICE_KEYS.get(_normalize(name)) if isinstance(name, str) else None
    if canonical is None:
        raise UnknownNameError("device", str(name), device_names())
    return _DEVICES[canonical]


# ------------------------------------------------------------------------------------------------
# Link catalog

_NVLINK_LAT = 2e-6  # seconds (2 us)
_NVLINK_LAT_SRC = (
    "Latency: ~2 us one-way for a small GPU-to-GPU write over NVLink (CUDA sample "
    "p2pBandwidthLatencyTest reports 1.8-2.3 us, P2P writes, github.com/NVIDIA/cuda-samples issue 230)."
)
_NVLINK_FRACTION = 0.8
_NVLINK_FRACTION_SRC = (
    "Achievable: NCCL all-reduce reaches roughly 0.7-0.85 of link peak (nccl-tests busbw vs peak; "
    "e.g. ~783 of 900 GB/s on HGX H100, github.com/NVIDIA/nccl issue 1264); 0.8 used."
)
_PCIE_LAT = 2e-6  # seconds (2 us)
_PCIE_SRC_TAIL = (
    "Latency ~2 us for a small peer-to-peer write between two endpoints across a PCIe switch, the same "
    "order as NVLink (p2pBandwidthLatencyTest; staging through host memory instead costs 10-20 us, "
    "github.com/NVIDIA/cuda-samples issue 230). Achievable: ~0.8 of peak after TLP/DLLP overheads "
    "(x16 Gen3 copies reach ~12-13 GB/s)."
)
_ETH_LAT = 25e-6  # seconds (25 us)
_ETH_SRC_TAIL = (
    "Latency ~25 us one-way for a small message over TCP sockets (the NCCL socket transport), "
    "kernel network stack included (order of magnitude). Achievable: 0.75 of line rate after "
    "Ethernet/IP/TCP framing and socket overheads."
)
_IB_SRC_TAIL = (
    "Latency ~1-2 us one-way RDMA small-message latency through one switch (vendor "
    "ConnectX/Quantum figures, ib_write_lat; NCCL adds a few us). Achievable: 0.85 of the data "
    "rate for NCCL over IB verbs (nccl-tests)."
)

_LINK_LIST: tuple[LinkSpec, ...] = (
    LinkSpec(
        name="NVLink1",
        bandwidth_bytes_per_s=20 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="One NVLink 1.0 link (P100): 20 GB/s per direction; a P100 SXM2 has 4 (160 GB/s total, both "
        "directions) - NVIDIA Tesla P100 datasheet. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink2",
        bandwidth_bytes_per_s=25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="One NVLink 2.0 link (V100): 25 GB/s per direction; a V100 SXM2 has 6 (300 GB/s total, both "
        "directions) - NVIDIA V100 datasheet. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink2-x6",
        bandwidth_bytes_per_s=6 * 25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="All 6 NVLink 2.0 links of a V100 into NVSwitch (DGX-2/HGX-2): 150 GB/s per direction - "
        "NVIDIA V100 datasheet, DGX-2 datasheet. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink3",
        bandwidth_bytes_per_s=25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="One NVLink 3.0 link (A100): 25 GB/s per direction; an A100 has 12 - NVIDIA A100 "
        "datasheet/whitepaper. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink3-x12",
        bandwidth_bytes_per_s=12 * 25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="All 12 NVLink 3.0 links of an A100 into NVSwitch: 300 GB/s per direction (600 GB/s total) - "
        "NVIDIA A100 datasheet. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink4",
        bandwidth_bytes_per_s=25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="One NVLink 4.0 link (H100): 25 GB/s per direction; an H100 SXM has 18 - NVIDIA H100 "
        "datasheet/whitepaper. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="NVLink4-x18",
        bandwidth_bytes_per_s=18 * 25 * GB,
        latency_s=_NVLINK_LAT,
        achievable_fraction=_NVLINK_FRACTION,
        source="All 18 NVLink 4.0 links of an H100 SXM into NVSwitch: 450 GB/s per direction (900 GB/s "
        "total) - NVIDIA H100 datasheet. " + _NVLINK_LAT_SRC + " " + _NVLINK_FRACTION_SRC,
    ),
    LinkSpec(
        name="PCIe3",
        bandwidth_bytes_per_s=15.75 * GB,
        latency_s=_PCIE_LAT,
        achievable_fraction=0.8,
        source="PCIe 3.0 x16: 8 GT/s x 16 lanes x 128/130 encoding = 15.75 GB/s per direction - PCI-SIG "
        "PCIe 3.0 base specification. " + _PCIE_SRC_TAIL,
    ),
    LinkSpec(
        name="PCIe4",
        bandwidth_bytes_per_s=31.5 * GB,
        latency_s=_PCIE_LAT,
        achievable_fraction=0.8,
        source="PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 = 31.5 GB/s per direction - PCI-SIG PCIe 4.0 "
        "base specification. " + _PCIE_SRC_TAIL,
    ),
    LinkSpec(
        name="PCIe5",
        bandwidth_bytes_per_s=63.0 * GB,
        latency_s=_PCIE_LAT,
        achievable_fraction=0.8,
        source="PCIe 5.0 x16: 32 GT/s x 16 lanes x 128/130 = 63 GB/s per direction - PCI-SIG PCIe 5.0 "
        "base specification. " + _PCIE_SRC_TAIL,
    ),
    LinkSpec(
        name="10GbE",
        bandwidth_bytes_per_s=10 * GBIT,
        latency_s=_ETH_LAT,
        achievable_fraction=0.75,
        source="10 Gigabit Ethernet: 10 Gb/s = 1.25 GB/s line rate per direction - IEEE 802.3. "
        + _ETH_SRC_TAIL,
    ),
    LinkSpec(
        name="25GbE",
        bandwidth_bytes_per_s=25 * GBIT,
        latency_s=_ETH_LAT,
        achievable_fraction=0.75,
        source="25 Gigabit Ethernet: 25 Gb/s = 3.125 GB/s line rate per direction - IEEE 802.3by. "
        + _ETH_SRC_TAIL,
    ),
    LinkSpec(
        name="100GbE",
        bandwidth_bytes_per_s=100 * GBIT,
        latency_s=_ETH_LAT,
        achievable_fraction=0.75,
        source="100 Gigabit Ethernet: 100 Gb/s = 12.5 GB/s line rate per direction - IEEE 802.3. "
        + _ETH_SRC_TAIL,
    ),
    LinkSpec(
        name="IB-EDR",
        bandwidth_bytes_per_s=100 * GBIT,
        latency_s=1.5e-6,
        achievable_fraction=0.85,
        source="InfiniBand EDR 4x: 100 Gb/s = 12.5 GB/s per direction - IBTA specification. " + _IB_SRC_TAIL,
    ),
    LinkSpec(
        name="IB-HDR",
        bandwidth_bytes_per_s=200 * GBIT,
        latency_s=1.5e-6,
        achievable_fraction=0.85,
        source="InfiniBand HDR 4x: 200 Gb/s = 25 GB/s per direction - IBTA specification. " + _IB_SRC_TAIL,
    ),
    LinkSpec(
        name="IB-NDR",
        bandwidth_bytes_per_s=400 * GBIT,
        latency_s=1.5e-6,
        achievable_fraction=0.85,
        source="InfiniBand NDR 4x: 400 Gb/s = 50 GB/s per direction - IBTA specification. " + _IB_SRC_TAIL,
    ),
)

_LINKS: dict[str, LinkSpec] = {spec.name: spec for spec in _LINK_LIST}

_LINK_ALIASES: dict[str, str] = {
    "nvlink": "NVLink2",
    "pcie": "PCIe3",
    "pcie3-x16": "PCIe3",
    "pcie4-x16": "PCIe4",
    "pcie5-x16": "PCIe5",
    "edr": "IB-EDR",
    "hdr": "IB-HDR",
    "ndr": "IB-NDR",
    "infiniband-edr": "IB-EDR",
    "infiniband-hdr": "IB-HDR",
    "infiniband-ndr": "IB-NDR",
    "10gbe": "10GbE",
    "10g": "10GbE",
    "25g": "25GbE",
    "100g": "100GbE",
}
"""Alternative spellings (normalized) of catalog link names."""

_LINK_KEYS: dict[str, str] = {_normalize(n): n for n in _LINKS} | _LINK_ALIASES


def link_names() -> tuple[str, ...]:
    """The catalog link names, sorted."""
    return tuple(sorted(_LINKS))


def get_link(name: str) -> LinkSpec:
    """Look a link up by catalog name or alias, case-insensitively.

    Raises:
        UnknownNameError: no such link; the message lists the catalog names.
    """
    canonical = _LINK_KEYS.get(_normalize(name)) if isinstance(name, str) else None
    if canonical is None:
        raise UnknownNameError("link", str(name), link_names())
    return _LINKS[canonical]
