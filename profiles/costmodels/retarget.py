"""Re-target a profile measured on one device to another with a per-layer roofline.

Assumptions (each tested in ``tests/profiles/test_retarget.py``):

1. A layer's time on a device is proportional to its roofline time
   ``max(flop / achievable_flop_per_s, bytes / achievable_memory_bandwidth_bytes_per_s)``, with the
   same constant of proportionality on every device (kernel launch overheads, fusion and the like
   scale along). So ``t_new = t_old * roofline_new / roofline_old``: a compute-bound layer scales
   with the ratio of achievable FLOPS, a memory-bound one with the ratio of memory bandwidths, and
   a layer that changes regime gets the mix.
2. Forward and backward are re-targeted separately, each with its own FLOP and byte counts.
3. Fallback when a layer has no FLOP count: it is taken as compute-bound, so its time scales with
   the ratio of achievable FLOPS for the profile's dtype (the common case for the GEMM- and
   convolution-heavy layers that dominate training). When it has FLOPs but no byte count, only
   the compute term is used.
4. Sizes (activation and parameter bytes) do not depend on the device and are kept.

A change of precision on one device (a profile measured in fp32 run in tf32, bf16 or fp8) is
:func:`retarget_precision`: only the GEMM share of each layer's time follows the ratio of the
precisions' achievable GEMM rates; the memory-bound rest follows the element sizes.
"""

from __future__ import annotations

import dataclasses
import logging

from pipesim.errors import UnknownNameError, invalid
from pipesim.profiles.costmodels.compute import gemm_efficiency
from pipesim.profiles.hardware.catalog import DeviceSpec, get_device
from pipesim.profiles.hardware.specs import STORAGE_DTYPE, parse_precision
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer, ModelProfile

__all__ = ["GEMM_SHARE_WITHOUT_FLOP", "retarget", "retarget_precision", "retarget_to", "roofline_time_s"]

log = logging.getLogger(__name__)


def retarget_to(profile: ModelProfile, device: DeviceSpec) -> ModelProfile:
    """``profile`` as it would run on ``device``: re-targeted when it was measured on another
    catalog device, unchanged when measured on ``device`` itself or on a device the catalog does
    not know (then its times are used as they are, with a warning in the log).

    Raises:
        InputError: ``device`` does not support the profile's dtype.
    """
    try:
        measured_on = get_device(profile.reference_device).name
    except UnknownNameError:
        log.warning(
            "profile %s was measured on %r, which is not in the device catalog: its times are used "
            "as they are on %s",
            profile.name,
            profile.reference_device,
            device.name,
        )
        return profile
    if measured_on == device.name:
        return profile
    log.info("re-targeting %s from %s to %s", profile.name, measured_on, device.name)
    return retarget(profile, device)


def roofline_time_s(
    device: DeviceSpec, dtype: str, flop: float | None, memory_bytes: float | None
) -> float | None:
    """The roofline time of ``flop`` FLOP moving ``memory_bytes`` bytes on ``device``, seconds.

    Returns ``None`` when ``flop`` is unknown (no roofline without a FLOP count).

    Raises:
        InputError: the device does not support ``dtype``.
    """
    if flop is None:
        return None
    compute = flop / device.achievable_flop_per_s(dtype)
    if memory_bytes is None:
        return compute
    return max(compute, memory_bytes / device.achievable_memory_bandwidth_bytes_per_s)


def _scaled(
    time_s: float,
    flop: float | None,
    memory_bytes: float | None,
    src: DeviceSpec,
    dst: DeviceSpec,
    dtype: str,
) -> float:
    old = roofline_time_s(src, dtype, flop, memory_bytes)
    new = roofline_time_s(dst, dtype, flop, memory_bytes)
    if old is None or new is None or old <= 0:
        return time_s * src.achievable_flop_per_s(dtype) / dst.achievable_flop_per_s(dtype)
    return time_s * new / old


def retarget(profile: ModelProfile, device: str | DeviceSpec) -> ModelProfile:
    """Re-target ``profile`` to ``device`` (a catalog name or spec) under the module's assumptions.

    Batch points are re-targeted with the per-layer time ratio found at the profile batch size.

    Returns:
        A new profile whose ``reference_device`` is the target device; the input is unchanged.

    Raises:
        UnknownNameError: an unknown device name (the profile's own device included).
        InputError: the target device does not support the profile's dtype (e.g. bfloat16 on a V100).
    """
    src = get_device(profile.reference_device)
    dst = device if isinstance(device, DeviceSpec) else get_device(device)
    if not dst.supports(profile.dtype):
        raise invalid("device", dst.name, f"does not support the profile's dtype {profile.dtype}")
    if src.name == dst.name:
        return profile
    layers: list[Layer] = []
    fwd_ratio: list[float] = []
    bwd_ratio: list[float] = []
    for layer in profile.layers:
        fwd = _scaled(layer.fwd_time_s, layer.fwd_flop, layer.fwd_memory_bytes, src, dst, profile.dtype)
        bwd = _scaled(layer.bwd_time_s, layer.bwd_flop, layer.bwd_memory_bytes, src, dst, profile.dtype)
        fwd_ratio.append(fwd / layer.fwd_time_s if layer.fwd_time_s > 0 else 1.0)
        bwd_ratio.append(bwd / layer.bwd_time_s if layer.bwd_time_s > 0 else 1.0)
        layers.append(dataclasses.replace(layer, fwd_time_s=fwd, bwd_time_s=bwd))
    points = tuple(
        dataclasses.replace(
            point,
            fwd_time_s=tuple(t * r for t, r in zip(point.fwd_time_s, fwd_ratio, strict=True)),
            bwd_time_s=tuple(t * r for t, r in zip(point.bwd_time_s, bwd_ratio, strict=True)),
        )
        for point in profile.batch_points
    )
    return dataclasses.replace(
        profile,
        layers=tuple(layers),
        batch_points=points,
        reference_device=dst.name,
        description=(profile.description + "; " if profile.description else "")
        + f"re-targeted from {src.name} to {dst.name} by per-layer roofline",
    )


GEMM_SHARE_WITHOUT_FLOP = 0.85
"""Share of a layer's time spent in GEMMs when the profile gives no FLOP count (TorchGraph files)
and the layer has parameters: GEMM-heavy layers spend most of their time in matrix products (a
BERT-large layer in fp32 spends ~0.85 of its V100 time in GEMMs in the zoo's kernel model). A
layer without parameters is taken as memory-bound (share 0)."""


def _gemm_share(layer: Layer, flop: float | None, memory_bytes: float | None, device: DeviceSpec,
                precision: str) -> float:
    if flop is None or flop <= 0:
        return GEMM_SHARE_WITHOUT_FLOP if layer.parameter_bytes > 0 else 0.0
    compute = flop / (device.peak_for(precision) * gemm_efficiency(device, precision))
    memory = (memory_bytes or 0.0) / device.achievable_memory_bandwidth_bytes_per_s
    return compute / (compute + memory) if compute + memory > 0 else 0.0


def retarget_precision(
    profile: ModelProfile, precision: str, device: DeviceSpec | None = None
) -> ModelProfile:
    """``profile`` (measured in its storage dtype's precision on ``device``, default its
    ``reference_device``) as it would run in ``precision`` on the same device.

    Per layer and direction, the GEMM share ``g`` of the time (from the layer's FLOP and bytes
    on the device, else :data:`GEMM_SHARE_WITHOUT_FLOP`) scales with the ratio of achievable GEMM
    rates ``peak x efficiency`` (:func:`pipesim.profiles.costmodels.compute.gemm_efficiency`) of
    the two precisions, the rest with the ratio of element sizes (memory-bound kernels move
    fewer bytes in a narrower dtype): ``t' = t (g R_gemm + (1 - g) R_bytes)``. Activation and
    parameter bytes scale with the element sizes; batch points scale like the layers.

    Returns:
        The profile in the new precision's storage dtype (``tf32`` keeps ``float32``; ``fp8``
        stores ``bfloat16``), or ``profile`` itself when nothing changes.

    Raises:
        UnknownNameError: the profile's device is not in the catalog.
        InputError: an unknown precision, or one the device cannot run (names the device and
            what it supports).
    """
    target = parse_precision(precision)
    source = profile.dtype
    if device is None:
        device = get_device(profile.reference_device)
    if target == source:
        return profile
    if not device.supports(target):
        supported = ", ".join(device.peak_flop_per_s)
        raise invalid("dtype", target, f"{device.name} cannot train in it; it supports {supported}")
    storage = STORAGE_DTYPE[target]
    r_gemm = (device.peak_for(source) * gemm_efficiency(device, source)) / (
        device.peak_for(target) * gemm_efficiency(device, target)
    )
    r_bytes = DTYPE_BYTES[storage] / DTYPE_BYTES[source]
    layers: list[Layer] = []
    fwd_ratio: list[float] = []
    bwd_ratio: list[float] = []
    for layer in profile.layers:
        g_f = _gemm_share(layer, layer.fwd_flop, layer.fwd_memory_bytes, device, source)
        g_b = _gemm_share(layer, layer.bwd_flop, layer.bwd_memory_bytes, device, source)
        rf, rb = g_f * r_gemm + (1 - g_f) * r_bytes, g_b * r_gemm + (1 - g_b) * r_bytes
        fwd_ratio.append(rf)
        bwd_ratio.append(rb)
        layers.append(dataclasses.replace(
            layer,
            fwd_time_s=layer.fwd_time_s * rf,
            bwd_time_s=layer.bwd_time_s * rb,
            activation_bytes=round(layer.activation_bytes * r_bytes),
            parameter_bytes=round(layer.parameter_bytes * r_bytes),
            saved_activation_bytes=None if layer.saved_activation_bytes is None
            else round(layer.saved_activation_bytes * r_bytes),
            fwd_memory_bytes=None if layer.fwd_memory_bytes is None else layer.fwd_memory_bytes * r_bytes,
            bwd_memory_bytes=None if layer.bwd_memory_bytes is None else layer.bwd_memory_bytes * r_bytes,
        ))
    points = tuple(
        dataclasses.replace(
            point,
            fwd_time_s=tuple(t * r for t, r in zip(point.fwd_time_s, fwd_ratio, strict=True)),
            bwd_time_s=tuple(t * r for t, r in zip(point.bwd_time_s, bwd_ratio, strict=True)),
            activation_bytes=tuple(round(b * r_bytes) for b in point.activation_bytes),
            saved_activation_bytes=None if point.saved_activation_bytes is None
            else tuple(round(b * r_bytes) for b in point.saved_activation_bytes),
        )
        for point in profile.batch_points
    )
    return dataclasses.replace(
        profile,
        layers=tuple(layers),
        batch_points=points,
        dtype=storage,
        description=(profile.description + "; " if profile.description else "")
        + f"re-targeted from {source} to {target} on {device.name} by GEMM share",
    )
