"""Parts of a hardware config: one device or one link from ``<part>_<field>`` keys.

The field vocabulary (with units in the key names) shared by the catalog files
(``data/devices.toml``, ``data/links.toml``), cluster files and what-if overrides; the schema is
in ``docs/hardware.md``:

- a device takes ``peak_flop_per_s`` or ``peak_tflop_per_s`` (tables of dtype to rate),
  ``memory_bytes``/``memory_gib``/``memory_gb``, ``memory_bandwidth_bytes_per_s``/
  ``memory_bandwidth_gb_per_s``, ``compute_efficiency``, ``memory_efficiency``,
  ``price_per_hour_usd``, ``name``, ``source``;
- a link takes ``bandwidth_bytes_per_s``/``bandwidth_gb_per_s``/``bandwidth_gbit_per_s``,
  ``latency_s``/``latency_us``, ``achievable_fraction``, ``name``, ``source``.

Each value is converted once, here, to SI units. Changing fields of a base spec keeps its other
figures, appends ``*`` to its name (unless a ``name`` is given) and notes the change in ``source``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from pipesim.errors import InputError, check_count, check_fraction, check_nonneg, check_positive
from pipesim.profiles.hardware.specs import ARCHITECTURES, DeviceSpec, LinkSpec
from pipesim.profiles.hardware.specs import PRECISIONS as DTYPES
from pipesim.units import GB, GBIT, GIB, TERA

MAX_DEVICE_MEMORY_BYTES = 2.0**60
"""The most memory a what-if device may declare (1 EiB), so that ``device_memory_gib=1e300`` is a
clear error rather than an overflow."""

__all__ = [
    "DEVICE_FIELDS",
    "LINK_FIELDS",
    "ConfigError",
    "build_device",
    "build_link",
    "checked",
    "config_error",
    "device_config",
    "link_config",
    "one_of",
    "text",
]

DEVICE_FIELDS = (
    "name",
    "source",
    "peak_flop_per_s",
    "peak_tflop_per_s",
    "memory_bytes",
    "memory_gib",
    "memory_gb",
    "memory_bandwidth_bytes_per_s",
    "memory_bandwidth_gb_per_s",
    "compute_efficiency",
    "memory_efficiency",
    "price_per_hour_usd",
    "sm_count",
    "architecture",
)
LINK_FIELDS = (
    "name",
    "source",
    "bandwidth_bytes_per_s",
    "bandwidth_gb_per_s",
    "bandwidth_gbit_per_s",
    "latency_s",
    "latency_us",
    "achievable_fraction",
)

_T = TypeVar("_T", float, int)


class ConfigError(InputError):
    """A bad config value; ``key`` is the flat config key at fault, or ``None`` (for file line numbers)."""

    def __init__(self, key: str | None, message: str) -> None:
        self.key = key
        super().__init__(message)


def config_error(key: str, value: object, rule: str) -> ConfigError:
    """The standard bad-value error (``key=value: rule``) tied to the config key ``key``."""
    return ConfigError(key, f"{key}={value!r}: {rule}")


def checked(check: Callable[[str, object], _T], key: str, value: object) -> _T:
    """``check(key, value)`` (one of the :mod:`pipesim.errors` checks), its error tied to ``key``.

    Raises:
        ConfigError: the check failed; the message is the check's.
    """
    try:
        return check(key, value)
    except InputError as exc:
        raise ConfigError(key, str(exc)) from None


def text(key: str, value: object, *, empty_ok: bool = False) -> str:
    """``value`` after checking it is a string (non-blank unless ``empty_ok``).

    Raises:
        ConfigError: not a string, or blank.
    """
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise config_error(key, value, "must be a string" if empty_ok else "must be a non-empty string")
    return value


def one_of(cfg: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    """The one of ``keys`` given in ``cfg`` (they name one quantity in different units), or ``None``.

    Raises:
        ConfigError: more than one is given.
    """
    given = [k for k in keys if k in cfg]
    if len(given) > 1:
        raise ConfigError(given[1], f"{given[0]} and {given[1]} give the same quantity: keep one")
    return given[0] if given else None


def fields_of(cfg: Mapping[str, object], part: str) -> dict[str, object]:
    """The ``<part>_<field>`` keys of ``cfg`` (no top-level key starts with a part's prefix)."""
    prefix = part + "_"
    return {k: v for k, v in cfg.items() if k.startswith(prefix)}


def _changed_note(base_source: str, changed: Mapping[str, object]) -> str:
    note = "Changed: " + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + "."
    return f"{base_source} {note}".strip()


def build_device(cfg: Mapping[str, object], base: DeviceSpec | None) -> DeviceSpec:
    """The device from the ``device_<field>`` keys of ``cfg``, on top of ``base`` if given.

    Without ``base`` the peak rates, memory and memory bandwidth are required.

    Raises:
        ConfigError: a bad or missing value (``key`` names the config key).
    """
    fields = fields_of(cfg, "device")
    if not fields:
        if base is None:
            raise ConfigError("device", "device: required (a catalog name, or the fields of a custom device)")
        return base
    kwargs: dict[str, object] = {}
    peaks: dict[str, float] = dict(base.peak_flop_per_s) if base is not None else {}
    if base is not None:
        kwargs = {
            "name": base.name + "*",
            "source": _changed_note(base.source, fields),
            "memory_bytes": base.memory_bytes,
            "memory_bandwidth_bytes_per_s": base.memory_bandwidth_bytes_per_s,
            "compute_efficiency": base.compute_efficiency,
            "memory_efficiency": base.memory_efficiency,
            "price_per_hour_usd": base.price_per_hour_usd,
            "sm_count": base.sm_count,
            "architecture": base.architecture,
        }
    else:
        kwargs["name"] = "custom-device"
    for field in ("name", "source"):
        if f"device_{field}" in fields:
            kwargs[field] = text(f"device_{field}", fields[f"device_{field}"], empty_ok=field == "source")
    peak_key = one_of(fields, ("device_peak_flop_per_s", "device_peak_tflop_per_s"))
    if peak_key is not None:
        table = fields[peak_key]
        if not isinstance(table, Mapping) or not table:
            raise config_error(peak_key, table, f"must be a table of dtype = rate ({', '.join(DTYPES)})")
        scale = TERA if peak_key.endswith("tflop_per_s") else 1.0
        for dtype, rate in table.items():
            if dtype not in DTYPES:
                raise config_error(f"{peak_key}.{dtype}", rate, f"dtype must be one of {', '.join(DTYPES)}")
            peaks[dtype] = checked(check_positive, f"{peak_key}.{dtype}", rate) * scale
    elif base is None:
        raise ConfigError("device_peak_tflop_per_s", "device_peak_tflop_per_s: required for a custom device")
    mem_key = one_of(fields, ("device_memory_bytes", "device_memory_gib", "device_memory_gb"))
    if mem_key == "device_memory_bytes":
        kwargs["memory_bytes"] = checked(check_count, mem_key, fields[mem_key])
    elif mem_key is not None:
        scale = GIB if mem_key.endswith("gib") else GB
        amount = checked(check_positive, mem_key, fields[mem_key])
        if amount * scale > MAX_DEVICE_MEMORY_BYTES:
            raise config_error(
                mem_key, fields[mem_key], f"must be at most {MAX_DEVICE_MEMORY_BYTES / scale:g}"
            )
        kwargs["memory_bytes"] = round(amount * scale)
    elif base is None:
        raise ConfigError("device_memory_gib", "device_memory_gib: required for a custom device")
    bw_key = one_of(fields, ("device_memory_bandwidth_bytes_per_s", "device_memory_bandwidth_gb_per_s"))
    if bw_key is not None:
        scale = GB if bw_key.endswith("gb_per_s") else 1.0
        kwargs["memory_bandwidth_bytes_per_s"] = checked(check_positive, bw_key, fields[bw_key]) * scale
    elif base is None:
        raise ConfigError(
            "device_memory_bandwidth_gb_per_s",
            "device_memory_bandwidth_gb_per_s: required for a custom device",
        )
    for field in ("compute_efficiency", "memory_efficiency"):
        if f"device_{field}" in fields:
            kwargs[field] = checked(check_fraction, f"device_{field}", fields[f"device_{field}"])
    if "device_price_per_hour_usd" in fields:
        kwargs["price_per_hour_usd"] = checked(
            check_nonneg, "device_price_per_hour_usd", fields["device_price_per_hour_usd"]
        )
    if "device_sm_count" in fields:
        kwargs["sm_count"] = checked(check_count, "device_sm_count", fields["device_sm_count"])
    if "device_architecture" in fields:
        arch = fields["device_architecture"]
        if arch not in ARCHITECTURES:
            raise config_error("device_architecture", arch, f"must be one of {', '.join(ARCHITECTURES)}")
        kwargs["architecture"] = arch
    try:
        return DeviceSpec(peak_flop_per_s=peaks, **kwargs)  # type: ignore[arg-type]
    except InputError as exc:
        raise ConfigError(next(iter(fields)), str(exc)) from None


def build_link(cfg: Mapping[str, object], part: str, base: LinkSpec | None) -> LinkSpec | None:
    """The link from the ``<part>_<field>`` keys of ``cfg``, on top of ``base`` if given.

    Returns ``base`` when no field is given (``None`` when there is no base either). Without
    ``base`` the bandwidth and latency are required.

    Raises:
        ConfigError: a bad or missing value (``key`` names the config key).
    """
    fields = fields_of(cfg, part)
    if not fields:
        return base
    kwargs: dict[str, object] = {}
    if base is not None:
        kwargs = {
            "name": base.name + "*",
            "source": _changed_note(base.source, fields),
            "bandwidth_bytes_per_s": base.bandwidth_bytes_per_s,
            "latency_s": base.latency_s,
            "achievable_fraction": base.achievable_fraction,
        }
    else:
        kwargs["name"] = f"custom-{part.replace('_', '-')}"
    for field in ("name", "source"):
        if f"{part}_{field}" in fields:
            kwargs[field] = text(f"{part}_{field}", fields[f"{part}_{field}"], empty_ok=field == "source")
    bw_keys = tuple(f"{part}_bandwidth_{u}" for u in ("bytes_per_s", "gb_per_s", "gbit_per_s"))
    bw_key = one_of(fields, bw_keys)
    if bw_key is not None:
        scale = {bw_keys[0]: 1.0, bw_keys[1]: GB, bw_keys[2]: GBIT}[bw_key]
        kwargs["bandwidth_bytes_per_s"] = checked(check_positive, bw_key, fields[bw_key]) * scale
    elif base is None:
        raise ConfigError(bw_keys[1], f"{bw_keys[1]}: required for a custom {part}")
    lat_key = one_of(fields, (f"{part}_latency_s", f"{part}_latency_us"))
    if lat_key is not None:
        latency = checked(check_nonneg, lat_key, fields[lat_key])
        # Divide by 1e6 rather than multiply by US: 5 us becomes exactly the float 5e-06.
        kwargs["latency_s"] = latency / 1e6 if lat_key.endswith("_us") else latency
    elif base is None:
        raise ConfigError(f"{part}_latency_us", f"{part}_latency_us: required for a custom {part}")
    if f"{part}_achievable_fraction" in fields:
        kwargs["achievable_fraction"] = checked(
            check_fraction, f"{part}_achievable_fraction", fields[f"{part}_achievable_fraction"]
        )
    try:
        return LinkSpec(**kwargs)  # type: ignore[arg-type]
    except InputError as exc:
        raise ConfigError(next(iter(fields)), str(exc)) from None


def device_config(spec: DeviceSpec) -> dict[str, object]:
    """Every field of ``spec`` under its SI key (``build_device`` of it gives an equal spec)."""
    out: dict[str, object] = {
        "name": spec.name,
        "peak_flop_per_s": dict(spec.peak_flop_per_s),
        "memory_bytes": spec.memory_bytes,
        "memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s,
        "compute_efficiency": spec.compute_efficiency,
        "memory_efficiency": spec.memory_efficiency,
    }
    if spec.price_per_hour_usd is not None:
        out["price_per_hour_usd"] = spec.price_per_hour_usd
    if spec.sm_count is not None:
        out["sm_count"] = spec.sm_count
    if spec.architecture is not None:
        out["architecture"] = spec.architecture
    out["source"] = spec.source
    return out


def link_config(spec: LinkSpec) -> dict[str, object]:
    """Every field of ``spec`` under its SI key (``build_link`` of it gives an equal spec)."""
    return {
        "name": spec.name,
        "bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s,
        "latency_s": spec.latency_s,
        "achievable_fraction": spec.achievable_fraction,
        "source": spec.source,
    }
