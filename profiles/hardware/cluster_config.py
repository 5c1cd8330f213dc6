"""Cluster configs: clusters from key/value configs, TOML files and what-if overrides.

One config vocabulary serves TOML files, :func:`cluster_from_config` and :func:`with_overrides`
(the schema with examples is in ``docs/hardware.md``):

- top-level keys: ``name``, ``description``, ``servers``, ``gpus_per_server``, ``intra``
  (``nvswitch`` | ``dgx1`` | ``pcie``), ``gpus_per_pcie_switch``, ``nics_per_server``;
- four parts, ``device``, ``intra_link``, ``pcie`` and ``nic``: the part's key names a catalog
  entry (``nic = "100GbE"``), and ``<part>_<field>`` keys set single fields
  (``nic_latency_us = 5``). In TOML a part may also be a table, ``[nic]`` with ``base = "100GbE"``
  and the fields without the prefix.

Field keys carry their unit: devices take ``peak_flop_per_s`` or ``peak_tflop_per_s`` (tables of
dtype to rate), ``memory_bytes``/``memory_gib``/``memory_gb``,
``memory_bandwidth_bytes_per_s``/``memory_bandwidth_gb_per_s``, ``compute_efficiency``,
``memory_efficiency``, ``price_per_hour_usd``, ``name``, ``source``; links take
``bandwidth_bytes_per_s``/``bandwidth_gb_per_s``/``bandwidth_gbit_per_s``, ``latency_s``/
``latency_us``, ``achievable_fraction``, ``name``, ``source``.

Changing fields of a catalog entry keeps its figures otherwise, appends ``*`` to its name (unless
a ``name`` is given) and notes the change in its ``source``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import TypeVar

from pipesim.errors import InputError, UnknownNameError
from pipesim.profiles.hardware.catalog import DeviceSpec, LinkSpec, get_device, get_link, link_names
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.hardware.topology import Topology
from pipesim.profiles.models.profile import DTYPES
from pipesim.units import GB, GBIT, GIB, TERA

__all__ = [
    "PARTS",
    "ConfigError",
    "cluster_from_config",
    "cluster_to_config",
    "flatten_config",
    "with_overrides",
]

_TOP_KEYS = (
    "name",
    "description",
    "servers",
    "gpus_per_server",
    "intra",
    "gpus_per_pcie_switch",
    "nics_per_server",
)
PARTS = ("intra_link", "device", "pcie", "nic")  # intra_link first: it shares a prefix with "intra"
_DEVICE_FIELDS = (
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
)
_LINK_FIELDS = (
    "name",
    "source",
    "bandwidth_bytes_per_s",
    "bandwidth_gb_per_s",
    "bandwidth_gbit_per_s",
    "latency_s",
    "latency_us",
    "achievable_fraction",
)

_NVSWITCH_DEFAULT = {
    "V100-SXM2-16GB": "NVLink2-x6",
    "V100-SXM2-32GB": "NVLink2-x6",
    "A100-40GB": "NVLink3-x12",
    "A100-80GB": "NVLink3-x12",
    "H100-SXM": "NVLink4-x18",
}
"""Default per-GPU NVSwitch port for catalog devices (DGX-2, DGX A100, DGX H100)."""
_DGX1_DEFAULT = {"V100-SXM2-16GB": "NVLink2", "V100-SXM2-32GB": "NVLink2"}
"""Default NVLink of a ``dgx1`` server (the layout is the V100 one; P100's DGX-1 differs)."""
_PCIE_DEFAULT = {
    "P100": "PCIe3",
    "V100-SXM2-16GB": "PCIe3",
    "V100-SXM2-32GB": "PCIe3",
    "V100-PCIe-16GB": "PCIe3",
    "A100-40GB": "PCIe4",
    "A100-80GB": "PCIe4",
    "H100-SXM": "PCIe5",
}
"""PCIe generation of each catalog device's host interface; others default to PCIe4."""


class ConfigError(InputError):
    """A bad config value; ``key`` is the flat config key at fault, or ``None`` (for file line numbers)."""

    def __init__(self, key: str | None, message: str) -> None:
        self.key = key
        super().__init__(message)


def _bad(key: str, value: object, rule: str) -> ConfigError:
    return ConfigError(key, f"{key}={value!r}: {rule}")


# ------------------------------------------------------------------------------------------------
# Value checks: each returns the value converted, or raises naming the config key


def _number(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(key, value, "must be a finite number")
    return float(value)


def _positive(key: str, value: object) -> float:
    number = _number(key, value)
    if number <= 0:
        raise _bad(key, value, "must be > 0")
    return number


def _nonneg(key: str, value: object) -> float:
    number = _number(key, value)
    if number < 0:
        raise _bad(key, value, "must be >= 0")
    return number


def _fraction(key: str, value: object) -> float:
    number = _number(key, value)
    if not 0 < number <= 1:
        raise _bad(key, value, "must be in (0, 1]")
    return number


def _count(key: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _bad(key, value, "must be an integer >= 1")
    return value


def _text(key: str, value: object, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise _bad(key, value, "must be a string" if empty_ok else "must be a non-empty string")
    return value


def _one_of(cfg: Mapping[str, object], keys: tuple[str, ...]) -> str | None:
    given = [k for k in keys if k in cfg]
    if len(given) > 1:
        raise ConfigError(given[1], f"{given[0]} and {given[1]} give the same quantity: keep one")
    return given[0] if given else None


# ------------------------------------------------------------------------------------------------
# Parts


def _fields(cfg: Mapping[str, object], part: str) -> dict[str, object]:
    """The ``<part>_<field>`` keys of ``cfg`` (no top-level key starts with a part's prefix)."""
    prefix = part + "_"
    return {k: v for k, v in cfg.items() if k.startswith(prefix)}


_Spec = TypeVar("_Spec", DeviceSpec, LinkSpec)


def _catalog(key: str, value: object, lookup: Callable[[str], _Spec]) -> _Spec:
    name = _text(key, value)
    try:
        return lookup(name)
    except UnknownNameError as exc:
        raise ConfigError(key, f"{key}={name!r}: {exc}") from None


def _changed_note(base_source: str, changed: Mapping[str, object]) -> str:
    note = "Changed: " + ", ".join(f"{k}={v!r}" for k, v in changed.items()) + "."
    return f"{base_source} {note}".strip()


def _build_device(cfg: Mapping[str, object], base: DeviceSpec | None) -> DeviceSpec:
    fields = _fields(cfg, "device")
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
        }
    else:
        kwargs["name"] = "custom-device"
    for field in ("name", "source"):
        if f"device_{field}" in fields:
            kwargs[field] = _text(f"device_{field}", fields[f"device_{field}"], empty_ok=field == "source")
    peak_key = _one_of(fields, ("device_peak_flop_per_s", "device_peak_tflop_per_s"))
    if peak_key is not None:
        table = fields[peak_key]
        if not isinstance(table, Mapping) or not table:
            raise _bad(peak_key, table, f"must be a table of dtype = rate ({', '.join(DTYPES)})")
        scale = TERA if peak_key.endswith("tflop_per_s") else 1.0
        for dtype, rate in table.items():
            if dtype not in DTYPES:
                raise _bad(f"{peak_key}.{dtype}", rate, f"dtype must be one of {', '.join(DTYPES)}")
            peaks[dtype] = _positive(f"{peak_key}.{dtype}", rate) * scale
    elif base is None:
        raise ConfigError("device_peak_tflop_per_s", "device_peak_tflop_per_s: required for a custom device")
    mem_key = _one_of(fields, ("device_memory_bytes", "device_memory_gib", "device_memory_gb"))
    if mem_key == "device_memory_bytes":
        kwargs["memory_bytes"] = _count(mem_key, fields[mem_key])
    elif mem_key is not None:
        scale = GIB if mem_key.endswith("gib") else GB
        kwargs["memory_bytes"] = round(_positive(mem_key, fields[mem_key]) * scale)
    elif base is None:
        raise ConfigError("device_memory_gib", "device_memory_gib: required for a custom device")
    bw_key = _one_of(fields, ("device_memory_bandwidth_bytes_per_s", "device_memory_bandwidth_gb_per_s"))
    if bw_key is not None:
        scale = GB if bw_key.endswith("gb_per_s") else 1.0
        kwargs["memory_bandwidth_bytes_per_s"] = _positive(bw_key, fields[bw_key]) * scale
    elif base is None:
        raise ConfigError(
            "device_memory_bandwidth_gb_per_s",
            "device_memory_bandwidth_gb_per_s: required for a custom device",
        )
    for field in ("compute_efficiency", "memory_efficiency"):
        if f"device_{field}" in fields:
            kwargs[field] = _fraction(f"device_{field}", fields[f"device_{field}"])
    if "device_price_per_hour_usd" in fields:
        kwargs["price_per_hour_usd"] = _nonneg(
            "device_price_per_hour_usd", fields["device_price_per_hour_usd"]
        )
    try:
        return DeviceSpec(peak_flop_per_s=peaks, **kwargs)  # type: ignore[arg-type]
    except InputError as exc:
        raise ConfigError(next(iter(fields)), str(exc)) from None


def _build_link(cfg: Mapping[str, object], part: str, base: LinkSpec | None) -> LinkSpec | None:
    fields = _fields(cfg, part)
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
            kwargs[field] = _text(f"{part}_{field}", fields[f"{part}_{field}"], empty_ok=field == "source")
    bw_keys = tuple(f"{part}_bandwidth_{u}" for u in ("bytes_per_s", "gb_per_s", "gbit_per_s"))
    bw_key = _one_of(fields, bw_keys)
    if bw_key is not None:
        scale = {bw_keys[0]: 1.0, bw_keys[1]: GB, bw_keys[2]: GBIT}[bw_key]
        kwargs["bandwidth_bytes_per_s"] = _positive(bw_key, fields[bw_key]) * scale
    elif base is None:
        raise ConfigError(bw_keys[1], f"{bw_keys[1]}: required for a custom {part}")
    lat_key = _one_of(fields, (f"{part}_latency_s", f"{part}_latency_us"))
    if lat_key is not None:
        latency = _nonneg(lat_key, fields[lat_key])
        # Divide by 1e6 rather than multiply by US: 5 us becomes exactly the float 5e-06.
        kwargs["latency_s"] = latency / 1e6 if lat_key.endswith("_us") else latency
    elif base is None:
        raise ConfigError(f"{part}_latency_us", f"{part}_latency_us: required for a custom {part}")
    if f"{part}_achievable_fraction" in fields:
        kwargs["achievable_fraction"] = _fraction(
            f"{part}_achievable_fraction", fields[f"{part}_achievable_fraction"]
        )
    try:
        return LinkSpec(**kwargs)  # type: ignore[arg-type]
    except InputError as exc:
        raise ConfigError(next(iter(fields)), str(exc)) from None


# ------------------------------------------------------------------------------------------------
# Configs


def flatten_config(
    config: Mapping[str, object],
) -> tuple[dict[str, object], dict[str, tuple[str | None, str]]]:
    """Flat keys from a config whose parts may be tables, and where each came from.

    Returns:
        ``(flat, origin)``: ``origin[key]`` is ``(table or None, key inside it)``.

    Raises:
        ConfigError: a key is given twice (as a flat key and inside its part's table).
    """
    flat: dict[str, object] = {}
    origin: dict[str, tuple[str | None, str]] = {}

    def put(key: str, value: object, where: tuple[str | None, str]) -> None:
        if key in flat:
            raise ConfigError(key, f"{key}: given twice (once as {origin[key][1]!r}, once as {where[1]!r})")
        flat[key] = value
        origin[key] = where

    for key, value in config.items():
        if key in PARTS and isinstance(value, Mapping):
            for sub, sub_value in value.items():
                put(key if sub == "base" else f"{key}_{sub}", sub_value, (key, str(sub)))
        else:
            put(str(key), value, (None, str(key)))
    return flat, origin


def _check_keys(flat: Mapping[str, object]) -> None:
    for key in flat:
        if key in _TOP_KEYS or key in PARTS:
            continue
        part = next((p for p in PARTS if key.startswith(p + "_")), None)
        if part is not None:
            fields = _DEVICE_FIELDS if part == "device" else _LINK_FIELDS
            if key[len(part) + 1 :] in fields:
                continue
            valid = ", ".join(f"{part}_{f}" for f in fields)
            raise ConfigError(key, f"unknown key {key!r}; valid {part} keys: {valid}")
        valid = ", ".join((*_TOP_KEYS, *PARTS))
        raise ConfigError(key, f"unknown key {key!r}; valid keys: {valid} (and <part>_<field> keys)")


def cluster_from_config(config: Mapping[str, object], *, base: Cluster | None = None) -> Cluster:
    """Build a cluster from a config (flat keys, or parts as tables), optionally on top of ``base``.

    Without ``base``: ``device`` and ``intra`` are required; ``servers`` defaults to 1,
    ``gpus_per_server`` to 8, ``gpus_per_pcie_switch`` to 2, ``nics_per_server`` to 1; ``intra_link``
    and ``pcie`` default from the device (e.g. A100 -> ``NVLink3-x12``, ``PCIe4``); ``nic`` is
    required for more than one server (default ``100GbE`` otherwise).
    With ``base``: every key not given keeps ``base``'s value; the NVLink default is re-derived
    only when ``intra`` changes.

    Raises:
        InputError: an unknown key, a value of the wrong type or range, an unknown catalog name
            (the message lists the valid ones), a missing required key, or a combination the
            cluster rejects (e.g. ``dgx1`` without 8 GPUs per server). Its ``key`` attribute, when
            present, is the flat key at fault.
    """
    flat, _ = flatten_config(config)
    _check_keys(flat)
    counts = {
        "servers": base.num_servers if base else 1,
        "gpus_per_server": base.gpus_per_server if base else 8,
        "gpus_per_pcie_switch": base.gpus_per_pcie_switch if base else 2,
        "nics_per_server": base.nics_per_server if base else 1,
    }
    for key in counts:
        if key in flat:
            counts[key] = _count(key, flat[key])
    if "intra" in flat:
        try:
            topology = Topology(_text("intra", flat["intra"]).strip().lower())
        except ValueError:
            valid = ", ".join(t.value for t in Topology)
            raise _bad("intra", flat["intra"], f"must be one of {valid}") from None
    elif base is not None:
        topology = base.topology
    else:
        raise ConfigError("intra", "intra: required (nvswitch, dgx1 or pcie)")

    base_device = base.device if base else None
    if "device" in flat:
        base_device = _catalog("device", flat["device"], get_device)
    device = _build_device(flat, base_device)
    family = base_device.name if base_device is not None else ""

    intra_given = "intra_link" in flat or bool(_fields(flat, "intra_link"))
    intra_link: LinkSpec | None = None
    if topology is Topology.PCIE:
        if intra_given:
            raise ConfigError(
                "intra_link", "intra_link: only nvswitch and dgx1 servers have NVLink (intra is pcie)"
            )
    else:
        if "intra_link" in flat:
            intra_link = _catalog("intra_link", flat["intra_link"], get_link)
        elif base is not None and base.intra_link is not None and base.topology is topology:
            intra_link = base.intra_link
        else:
            default = (_NVSWITCH_DEFAULT if topology is Topology.NVSWITCH else _DGX1_DEFAULT).get(family)
            intra_link = get_link(default) if default is not None else None
        intra_link = _build_link(flat, "intra_link", intra_link)
        if intra_link is None:
            raise ConfigError(
                "intra_link",
                f"intra_link: required: no default NVLink for device {device.name!r} in a {topology.value} "
                f"server; name one of {', '.join(link_names())} or give intra_link_* fields",
            )

    pcie = base.pcie_link if base else get_link(_PCIE_DEFAULT.get(family, "PCIe4"))
    if "pcie" in flat:
        pcie = _catalog("pcie", flat["pcie"], get_link)
    built_pcie = _build_link(flat, "pcie", pcie)
    assert built_pcie is not None

    nic = base.nic if base else None
    if "nic" in flat:
        nic = _catalog("nic", flat["nic"], get_link)
    nic = _build_link(flat, "nic", nic)
    if nic is None:
        if counts["servers"] > 1:
            raise ConfigError("nic", f'nic: required for {counts["servers"]} servers (e.g. nic = "100GbE")')
        nic = get_link("100GbE")

    if "name" in flat:
        name = _text("name", flat["name"])
    elif base is not None and not flat:
        name = base.name
    elif base is not None:
        name = base.name + "[" + ",".join(f"{k}={_short(v)}" for k, v in flat.items()) + "]"
    else:
        name = "custom"
    description = _text("description", flat["description"], empty_ok=True) if "description" in flat else ""
    if "description" not in flat and base is not None and not flat:
        description = base.description
    elif "description" not in flat and base is not None:
        what_if = ", ".join(f"{k}={_short(v)}" for k, v in flat.items())
        description = f"{base.description} What-if: {what_if}.".strip()
    try:
        return Cluster(
            name=name,
            description=description,
            device=device,
            num_servers=counts["servers"],
            gpus_per_server=counts["gpus_per_server"],
            topology=topology,
            intra_link=intra_link,
            pcie_link=built_pcie,
            nic=nic,
            nics_per_server=counts["nics_per_server"],
            gpus_per_pcie_switch=counts["gpus_per_pcie_switch"],
        )
    except InputError as exc:
        field = str(exc).split("=", 1)[0]
        key = {"num_servers": "servers", "topology": "intra"}.get(field, field)
        raise ConfigError(key if key in flat else None, str(exc)) from None


def _short(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def with_overrides(cluster: Cluster, overrides: Mapping[str, object]) -> Cluster:
    """A what-if copy of ``cluster`` with some keys changed (the config vocabulary above).

    Example: ``with_overrides(c, {"device": "A100-80GB", "nic": "100GbE", "servers": 4,
    "nic_latency_us": 5})``. Unless ``name`` is given, the result is named after ``cluster``
    with the overrides in brackets. Changing ``device`` keeps the interconnect; change ``intra``
    (or ``intra_link``, ``pcie``) to change it too.

    Raises:
        InputError: an unknown key (the message lists the valid ones) or a bad value, as for
            :func:`cluster_from_config`.
    """
    return cluster_from_config(overrides, base=cluster)


def _device_config(spec: DeviceSpec) -> dict[str, object]:
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
    out["source"] = spec.source
    return out


def _link_config(spec: LinkSpec) -> dict[str, object]:
    return {
        "name": spec.name,
        "bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s,
        "latency_s": spec.latency_s,
        "achievable_fraction": spec.achievable_fraction,
        "source": spec.source,
    }


def cluster_to_config(cluster: Cluster) -> dict[str, object]:
    """The full config of ``cluster`` (parts as tables, SI keys): ``cluster_from_config`` of it
    gives back an equal cluster."""
    config: dict[str, object] = {
        "name": cluster.name,
        "description": cluster.description,
        "servers": cluster.num_servers,
        "gpus_per_server": cluster.gpus_per_server,
        "intra": cluster.topology.value,
        "gpus_per_pcie_switch": cluster.gpus_per_pcie_switch,
        "nics_per_server": cluster.nics_per_server,
        "device": _device_config(cluster.device),
    }
    if cluster.intra_link is not None:
        config["intra_link"] = _link_config(cluster.intra_link)
    config["pcie"] = _link_config(cluster.pcie_link)
    config["nic"] = _link_config(cluster.nic)
    return config
