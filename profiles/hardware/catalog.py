"""The hardware catalog: named accelerators and links, read from the package's TOML data.

The figures live in ``data/devices.toml`` and ``data/links.toml`` (next to this module), each
entry with the ``source`` it comes from; the schema is in ``docs/hardware.md``. An entry's fields
use the same vocabulary as a part table of a cluster file and go through the same builder
(:func:`pipesim.profiles.hardware.parts.build_device` / ``build_link``). Besides its fields, a
catalog entry may carry ``aliases`` (other spellings) and, for a device, the links a server of it
has by default: ``pcie`` (its host interface), ``nvswitch_link`` (its port into an NVSwitch
fabric) and ``dgx1_link`` (one NVLink of a DGX-1 hybrid cube-mesh).

Lookups are case-insensitive and accept the aliases (``"v100"`` is ``"V100-SXM2-16GB"``);
misses raise :class:`~pipesim.errors.UnknownNameError` listing the valid names.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.profiles.hardware.parts import DEVICE_FIELDS, LINK_FIELDS, build_device, build_link
from pipesim.profiles.hardware.specs import (
    DEFAULT_COMPUTE_EFFICIENCY,
    DEFAULT_MEMORY_EFFICIENCY,
    DeviceSpec,
    LinkSpec,
)
from pipesim.profiles.hardware.toml_text import parse_toml

__all__ = [
    "DEFAULT_COMPUTE_EFFICIENCY",
    "DEFAULT_MEMORY_EFFICIENCY",
    "DeviceSpec",
    "LinkSpec",
    "data_text",
    "default_link",
    "device_names",
    "get_device",
    "get_link",
    "link_names",
]

DATA_PACKAGE = "pipesim.profiles.hardware"
"""The package whose ``data/`` folder holds the catalog and the cluster presets."""

LinkRole = Literal["pcie", "nvswitch_link", "dgx1_link"]
"""A default link of a catalog device (see the module docstring)."""
_ROLES: tuple[str, ...] = ("pcie", "nvswitch_link", "dgx1_link")


def _normalize(name: str) -> str:
    """Lookup key: lower case, with spaces and underscores read as hyphens."""
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def data_text(*parts: str) -> str:
    """The text of a packaged data file, e.g. ``data_text("data", "devices.toml")``.

    Raises:
        OSError: no such file (a broken installation).
    """
    resource = resources.files(DATA_PACKAGE)
    for part in parts:
        resource = resource.joinpath(part)
    return resource.read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class _Catalog:
    devices: Mapping[str, DeviceSpec]
    device_keys: Mapping[str, str]
    links: Mapping[str, LinkSpec]
    link_keys: Mapping[str, str]
    defaults: Mapping[tuple[str, str], str]


def _entries(data: Mapping[str, Any], table: str, path: str) -> list[dict[str, Any]]:
    entries = data.get(table)
    if set(data) != {table} or not isinstance(entries, list) or not entries:
        raise FormatError(path, None, f"expected only [[{table}]] entries")
    for index, entry in enumerate(entries):
        if not isinstance(entry.get("name"), str):
            raise FormatError(path, None, f"[[{table}]] number {index + 1}: name: required (a string)")
    return entries


def _aliases(entry: Mapping[str, Any], path: str) -> list[str]:
    aliases = entry.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise FormatError(path, None, f"{entry['name']}: aliases={aliases!r}: expected a list of strings")
    return [_normalize(a) for a in aliases]


def _add_keys(keys: dict[str, str], name: str, aliases: list[str], path: str) -> None:
    for key in (_normalize(name), *aliases):
        if keys.get(key, name) != name:
            raise FormatError(path, None, f"{name}: the name or alias {key!r} is taken by {keys[key]}")
        keys[key] = name


def _build(entry: Mapping[str, Any], part: str, path: str) -> DeviceSpec | LinkSpec:
    extra = ("aliases", *_ROLES) if part == "device" else ("aliases",)
    valid = (*(DEVICE_FIELDS if part == "device" else LINK_FIELDS), *extra)
    unknown = sorted(set(entry) - set(valid))
    if unknown:
        raise FormatError(
            path, None, f"{entry['name']}: unknown key {unknown[0]!r}; valid keys: {', '.join(valid)}"
        )
    fields = {f"{part}_{key}": value for key, value in entry.items() if key not in extra}
    try:
        spec = build_device(fields, None) if part == "device" else build_link(fields, part, None)
    except InputError as exc:
        raise FormatError(path, None, f"{entry['name']}: {exc}") from None
    assert spec is not None  # a link without base and fields is refused above
    return spec


@functools.cache
def _catalog() -> _Catalog:
    """Read and check the catalog files once."""
    links: dict[str, LinkSpec] = {}
    link_keys: dict[str, str] = {}
    path = "data/links.toml"
    for entry in _entries(parse_toml(data_text("data", "links.toml"), path), "link", path):
        spec = _build(entry, "link", path)
        assert isinstance(spec, LinkSpec)
        _add_keys(link_keys, spec.name, _aliases(entry, path), path)
        links[spec.name] = spec
    devices: dict[str, DeviceSpec] = {}
    device_keys: dict[str, str] = {}
    defaults: dict[tuple[str, str], str] = {}
    path = "data/devices.toml"
    for entry in _entries(parse_toml(data_text("data", "devices.toml"), path), "device", path):
        device = _build(entry, "device", path)
        assert isinstance(device, DeviceSpec)
        _add_keys(device_keys, device.name, _aliases(entry, path), path)
        devices[device.name] = device
        for role in _ROLES:
            if role in entry:
                link = entry[role]
                if not isinstance(link, str) or _normalize(link) not in link_keys:
                    raise FormatError(path, None, f"{device.name}: {role}={link!r}: not a catalog link")
                defaults[(device.name, role)] = link_keys[_normalize(link)]
    return _Catalog(devices, device_keys, links, link_keys, defaults)


def device_names() -> tuple[str, ...]:
    """The catalog device names, sorted."""
    return tuple(sorted(_catalog().devices))


def get_device(name: str) -> DeviceSpec:
    """Look a device up by catalog name or alias, case-insensitively.

    Raises:
        UnknownNameError: no such device; the message lists the catalog names.
    """
    catalog = _catalog()
    canonical = catalog.device_keys.get(_normalize(name)) if isinstance(name, str) else None
    if canonical is None:
        raise UnknownNameError("device", str(name), device_names())
    return catalog.devices[canonical]


def link_names() -> tuple[str, ...]:
    """The catalog link names, sorted."""
    return tuple(sorted(_catalog().links))


def get_link(name: str) -> LinkSpec:
    """Look a link up by catalog name or alias, case-insensitively.

    Raises:
        UnknownNameError: no such link; the message lists the catalog names.
    """
    catalog = _catalog()
    canonical = catalog.link_keys.get(_normalize(name)) if isinstance(name, str) else None
    if canonical is None:
        raise UnknownNameError("link", str(name), link_names())
    return catalog.links[canonical]


def default_link(device: str, role: LinkRole) -> LinkSpec | None:
    """The link a server of catalog ``device`` has by default in ``role``, or ``None``.

    ``role``: ``"pcie"`` (the device's host interface), ``"nvswitch_link"`` (its NVSwitch port,
    DGX-2 / DGX A100 / DGX H100) or ``"dgx1_link"`` (one NVLink of a DGX-1). A device that is not
    in the catalog (a custom one) has no defaults.
    """
    name = _catalog().defaults.get((device, role))
    return None if name is None else get_link(name)
