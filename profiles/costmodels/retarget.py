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
"""

from __future__ import annotations

import dataclasses
import logging

from pipesim.errors import UnknownNameError, invalid
from pipesim.profiles.hardware.catalog import DeviceSpec, get_device
from pipesim.profiles.models.profile import Layer, ModelProfile

__all__ = ["retarget", "retarget_to", "roofline_time_s"]

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
