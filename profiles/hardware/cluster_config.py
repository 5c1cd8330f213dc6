"""Cluster configs: clusters from key/value configs, TOML files and what-if overrides.

One config vocabulary serves TOML files, :func:`cluster_from_config` and :func:`with_overrides`
(the schema with examples is in ``docs/hardware.md``):

- top-level keys: ``name``, ``description``, ``servers``, ``gpus_per_server``, ``intra``
  (``nvswitch`` | ``dgx1`` | ``pcie``), ``gpus_per_pcie_switch``, ``nics_per_server``;
- four parts, ``device``, ``intra_link``, ``pcie`` and ``nic``: the part's key names a catalog
  entry (``nic = "100GbE"``), and ``<part>_<field>`` keys set single fields
  (``nic_latency_us = 5``). In TOML a part may also be a table, ``[nic]`` with ``base = "100GbE"``
  and the fields without the prefix.

The fields of a part (with their units in the key names) are those of
:mod:`pipesim.profiles.hardware.parts`. Changing fields of a catalog entry keeps its figures
otherwise, appends ``*`` to its name (unless a ``name`` is given) and notes the change in its
``source``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TypeVar

from pipesim.errors import InputError, UnknownNameError, check_count
from pipesim.profiles.hardware.catalog import default_link, get_device, get_link, link_names
from pipesim.profiles.hardware.cluster_type import Cluster
from pipesim.profiles.hardware.parts import (
    DEVICE_FIELDS,
    LINK_FIELDS,
    ConfigError,
    build_device,
    build_link,
    checked,
    config_error,
    device_config,
    fields_of,
    link_config,
    text,
)
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec
from pipesim.profiles.hardware.topology import Topology

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
_FALLBACK_PCIE = "PCIe4"
"""Host PCIe link of a device without a catalog default (a custom device)."""
_FALLBACK_NIC = "100GbE"
"""NIC of a one-server cluster that names none (it carries no traffic there)."""


_Spec = TypeVar("_Spec", DeviceSpec, LinkSpec)


def _catalog_entry(key: str, value: object, lookup: Callable[[str], _Spec]) -> _Spec:
    name = text(key, value)
    try:
        return lookup(name)
    except UnknownNameError as exc:
        raise ConfigError(key, f"{key}={name!r}: {exc}") from None


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
            fields = DEVICE_FIELDS if part == "device" else LINK_FIELDS
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
            counts[key] = checked(check_count, key, flat[key])
    if "intra" in flat:
        try:
            topology = Topology(text("intra", flat["intra"]).strip().lower())
        except ValueError:
            valid = ", ".join(t.value for t in Topology)
            raise config_error("intra", flat["intra"], f"must be one of {valid}") from None
    elif base is not None:
        topology = base.topology
    else:
        raise ConfigError("intra", "intra: required (nvswitch, dgx1 or pcie)")

    base_device = base.device if base else None
    if "device" in flat:
        base_device = _catalog_entry("device", flat["device"], get_device)
    device = build_device(flat, base_device)
    family = base_device.name if base_device is not None else ""

    intra_given = "intra_link" in flat or bool(fields_of(flat, "intra_link"))
    intra_link: LinkSpec | None = None
    if topology is Topology.PCIE:
        if intra_given:
            raise ConfigError(
                "intra_link", "intra_link: only nvswitch and dgx1 servers have NVLink (intra is pcie)"
            )
    else:
        if "intra_link" in flat:
            intra_link = _catalog_entry("intra_link", flat["intra_link"], get_link)
        elif base is not None and base.intra_link is not None and base.topology is topology:
            intra_link = base.intra_link
        else:
            if topology is Topology.NVSWITCH:
                intra_link = default_link(family, "nvswitch_link")
            else:
                intra_link = default_link(family, "dgx1_link")
        intra_link = build_link(flat, "intra_link", intra_link)
        if intra_link is None:
            raise ConfigError(
                "intra_link",
                f"intra_link: required: no default NVLink for device {device.name!r} in a {topology.value} "
                f"server; name one of {', '.join(link_names())} or give intra_link_* fields",
            )

    pcie = base.pcie_link if base else (default_link(family, "pcie") or get_link(_FALLBACK_PCIE))
    if "pcie" in flat:
        pcie = _catalog_entry("pcie", flat["pcie"], get_link)
    built_pcie = build_link(flat, "pcie", pcie)
    assert built_pcie is not None

    nic = base.nic if base else None
    if "nic" in flat:
        nic = _catalog_entry("nic", flat["nic"], get_link)
    nic = build_link(flat, "nic", nic)
    if nic is None:
        if counts["servers"] > 1:
            raise ConfigError("nic", f'nic: required for {counts["servers"]} servers (e.g. nic = "100GbE")')
        nic = get_link(_FALLBACK_NIC)

    if "name" in flat:
        name = text("name", flat["name"])
    elif base is not None and not flat:
        name = base.name
    elif base is not None:
        name = base.name + "[" + ",".join(f"{k}={_short(v)}" for k, v in flat.items()) + "]"
    else:
        name = "custom"
    description = text("description", flat["description"], empty_ok=True) if "description" in flat else ""
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
        "device": device_config(cluster.device),
    }
    if cluster.intra_link is not None:
        config["intra_link"] = link_config(cluster.intra_link)
    config["pcie"] = link_config(cluster.pcie_link)
    config["nic"] = link_config(cluster.nic)
    return config
