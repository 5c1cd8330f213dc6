"""Cluster configs: clusters from key/value configs, TOML files and what-if overrides.

One config vocabulary serves TOML files, :func:`cluster_from_config` and :func:`with_overrides`
(the schema with examples is in ``docs/hardware.md``):

- top-level keys: ``name``, ``description``, ``servers``, ``gpus_per_server``, ``intra``
  (``nvswitch`` | ``dgx1`` | ``pcie``), ``gpus_per_pcie_switch``, ``nics_per_server``;
- fabric keys (:mod:`pipesim.profiles.hardware.fabric`): ``fabric`` (``switch`` | ``rail``),
  ``fabric_levels`` (2 | 3), ``servers_per_leaf``, ``units_per_pod``, ``oversubscription``,
  ``switch_latency_us`` / ``switch_latency_s``;
- ``group``: a list of server groups (``[[group]]`` tables: ``servers`` and any server key or
  server part), for heterogeneous clusters; top-level server keys are defaults for each group;
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

from pipesim.errors import InputError, UnknownNameError, check_count, check_nonneg
from pipesim.profiles.hardware.catalog import default_link, get_device, get_link, link_names
from pipesim.profiles.hardware.cluster_type import Cluster
from pipesim.profiles.hardware.fabric import FabricKind, FabricSpec
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
    one_of,
    text,
)
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec
from pipesim.profiles.hardware.topology import ServerGroup, Topology

__all__ = [
    "PARTS",
    "ConfigError",
    "cluster_from_config",
    "cluster_to_config",
    "flatten_config",
    "with_overrides",
]

_GROUP_KEYS = ("servers", "gpus_per_server", "intra", "gpus_per_pcie_switch", "nics_per_server")
"""Top-level keys that describe servers (also the keys of a ``[[group]]`` table, with the parts)."""
_FABRIC_KEYS = (
    "fabric",
    "fabric_levels",
    "servers_per_leaf",
    "units_per_pod",
    "oversubscription",
    "switch_latency_us",
    "switch_latency_s",
)
_TOP_KEYS = ("name", "description", *_GROUP_KEYS, *_FABRIC_KEYS, "group")
PARTS = ("intra_link", "device", "pcie", "nic")  # intra_link first: it shares a prefix with "intra"
_GROUP_PARTS = ("intra_link", "device", "pcie")
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


def _part_of(key: str) -> str | None:
    return next((p for p in PARTS if key.startswith(p + "_")), None)


def _check_keys(flat: Mapping[str, object]) -> None:
    for key in flat:
        if key in _TOP_KEYS or key in PARTS:
            continue
        part = _part_of(key)
        if part is not None:
            fields = DEVICE_FIELDS if part == "device" else LINK_FIELDS
            if key[len(part) + 1 :] in fields:
                continue
            valid = ", ".join(f"{part}_{f}" for f in fields)
            raise ConfigError(key, f"unknown key {key!r}; valid {part} keys: {valid}")
        valid = ", ".join((*_TOP_KEYS, *PARTS))
        raise ConfigError(key, f"unknown key {key!r}; valid keys: {valid} (and <part>_<field> keys)")


def _is_server_key(key: str) -> bool:
    """Whether ``key`` describes servers (a group key or one of a group part's keys)."""
    if key in _GROUP_KEYS or key in _GROUP_PARTS:
        return True
    part = _part_of(key)
    return part is not None and part != "nic"


def _server_group(flat: Mapping[str, object], base: ServerGroup | None) -> ServerGroup:
    """One server group from the server keys of ``flat`` (every key not given keeps ``base``'s)."""
    counts = {
        "servers": base.servers if base else 1,
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
    try:
        return ServerGroup(
            servers=counts["servers"],
            device=device,
            gpus_per_server=counts["gpus_per_server"],
            topology=topology,
            intra_link=intra_link,
            pcie_link=built_pcie,
            nics_per_server=counts["nics_per_server"],
            gpus_per_pcie_switch=counts["gpus_per_pcie_switch"],
        )
    except InputError as exc:
        key = str(exc).split("=", 1)[0]
        raise ConfigError(key if key in flat else None, str(exc)) from None


def _groups_from_list(
    flat: Mapping[str, object], value: object, base: ServerGroup | None
) -> tuple[ServerGroup, ...]:
    """The groups of a ``group`` list; top-level server keys are defaults for every group, and
    keys given nowhere keep ``base``'s (a what-if on a cluster: its first group)."""
    if not isinstance(value, list | tuple) or not value or not all(isinstance(g, Mapping) for g in value):
        raise config_error("group", value, "must be a non-empty list of tables ([[group]] in TOML)")
    if "servers" in flat:
        raise ConfigError("servers", "servers: give it in each [[group]], not at the top level, with groups")
    defaults = {k: v for k, v in flat.items() if _is_server_key(k) and k != "servers"}
    out = []
    for i, table in enumerate(value):
        try:
            group_flat, _ = flatten_config(table)
            for key in group_flat:
                if not _is_server_key(key) or _part_of(key) == "nic":
                    valid = ", ".join((*_GROUP_KEYS, *_GROUP_PARTS))
                    raise ConfigError(
                        key, f"unknown key {key!r}; valid keys: {valid} (and <part>_<field> keys)"
                    )
            _check_keys(group_flat)
            if "servers" not in group_flat:
                raise ConfigError("servers", "servers: required in every group")
            merged = dict(defaults)
            if "device" in group_flat:  # a group's own device drops the top-level device fields
                merged = {k: v for k, v in merged.items() if _part_of(k) != "device"}
            merged.update(group_flat)
            out.append(_server_group(merged, base))
        except ConfigError as exc:
            raise ConfigError("group", f"group {i}: {exc}") from None
    return tuple(out)


def _fabric(flat: Mapping[str, object], base: FabricSpec | None) -> FabricSpec:
    """The fabric from the fabric keys of ``flat`` (on top of ``base``'s unless the kind changes)."""
    kind = base.kind if base is not None else FabricKind.SWITCH
    if "fabric" in flat:
        try:
            kind = FabricKind(text("fabric", flat["fabric"]).strip().lower())
        except ValueError:
            valid = ", ".join(k.value for k in FabricKind)
            raise config_error("fabric", flat["fabric"], f"must be one of {valid}") from None
    start = base if base is not None and base.kind is kind else FabricSpec()
    values: dict[str, object] = {
        "levels": start.levels,
        "servers_per_leaf": start.servers_per_leaf,
        "units_per_pod": start.units_per_pod,
        "oversubscription": start.oversubscription,
        "switch_latency_s": start.switch_latency_s,
    }
    for key, name in (
        ("fabric_levels", "levels"),
        ("servers_per_leaf", "servers_per_leaf"),
        ("units_per_pod", "units_per_pod"),
    ):
        if key in flat:
            values[name] = checked(check_count, key, flat[key])
    if "oversubscription" in flat:
        values["oversubscription"] = flat["oversubscription"]
    latency_key = one_of(flat, ("switch_latency_us", "switch_latency_s"))
    if latency_key is not None:
        latency = checked(check_nonneg, latency_key, flat[latency_key])
        values["switch_latency_s"] = latency * 1e-6 if latency_key.endswith("_us") else latency
    try:
        return FabricSpec(kind=kind, **values)  # type: ignore[arg-type]
    except InputError as exc:  # FabricSpec names the key (fabric, fabric_levels, oversubscription, ...)
        key = str(exc).split("=", 1)[0]
        raise ConfigError(key if key in flat else None, str(exc)) from None


def cluster_from_config(config: Mapping[str, object], *, base: Cluster | None = None) -> Cluster:
    """Build a cluster from a config (flat keys, or parts as tables), optionally on top of ``base``.

    Without ``base``: ``device`` and ``intra`` are required; ``servers`` defaults to 1,
    ``gpus_per_server`` to 8, ``gpus_per_pcie_switch`` to 2, ``nics_per_server`` to 1; ``intra_link``
    and ``pcie`` default from the device (e.g. A100 -> ``NVLink3-x12``, ``PCIe4``); ``nic`` is
    required for more than one server (default ``100GbE`` otherwise); ``fabric`` defaults to
    ``switch``. A ``group`` list (``[[group]]`` tables, each with ``servers`` and any server keys)
    makes a heterogeneous cluster; the top-level server keys are then defaults for every group.
    With ``base``: every key not given keeps ``base``'s value; the NVLink default is re-derived
    only when ``intra`` changes. A base with several groups takes only non-server keys (or a
    whole new ``group`` list).

    Raises:
        InputError: an unknown key, a value of the wrong type or range, an unknown catalog name
            (the message lists the valid ones), a missing required key, or a combination the
            cluster rejects (e.g. ``dgx1`` without 8 GPUs per server). Its ``key`` attribute, when
            present, is the flat key at fault.
    """
    flat, _ = flatten_config(config)
    _check_keys(flat)
    if "group" in flat:
        groups = _groups_from_list(flat, flat["group"], base.groups[0] if base is not None else None)
    elif base is None:
        groups = (_server_group(flat, None),)
    elif base.is_homogeneous:
        groups = (_server_group(flat, base.groups[0]),)
    else:
        key = next((k for k in flat if _is_server_key(k)), None)
        if key is not None:
            raise ConfigError(
                key,
                f"{key}: cluster {base.name!r} has {len(base.groups)} server groups; change its servers "
                "with a whole new group list",
            )
        groups = base.groups
    fabric = _fabric(flat, base.fabric if base is not None else None)

    nic = base.nic if base else None
    if "nic" in flat:
        nic = _catalog_entry("nic", flat["nic"], get_link)
    nic = build_link(flat, "nic", nic)
    servers = sum(g.servers for g in groups)
    if nic is None:
        if servers > 1:
            raise ConfigError("nic", f'nic: required for {servers} servers (e.g. nic = "100GbE")')
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
        return Cluster(name=name, description=description, groups=groups, nic=nic, fabric=fabric)
    except InputError as exc:
        field = str(exc).split("=", 1)[0]
        key = {"num_servers * gpus_per_server": "servers", "topology": "intra"}.get(field, field)
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


def _group_config(group: ServerGroup) -> dict[str, object]:
    config: dict[str, object] = {
        "servers": group.servers,
        "gpus_per_server": group.gpus_per_server,
        "intra": group.topology.value,
        "gpus_per_pcie_switch": group.gpus_per_pcie_switch,
        "nics_per_server": group.nics_per_server,
        "device": device_config(group.device),
    }
    if group.intra_link is not None:
        config["intra_link"] = link_config(group.intra_link)
    config["pcie"] = link_config(group.pcie_link)
    return config


def cluster_to_config(cluster: Cluster) -> dict[str, object]:
    """The full config of ``cluster`` (parts as tables, SI keys): ``cluster_from_config`` of it
    gives back an equal cluster. A switch fabric has no fabric keys; several groups are a
    ``group`` list."""
    config: dict[str, object] = {"name": cluster.name, "description": cluster.description}
    fabric = cluster.fabric
    if fabric.kind is FabricKind.RAIL:
        config.update(
            {
                "fabric": fabric.kind.value,
                "fabric_levels": fabric.levels,
                "servers_per_leaf": fabric.servers_per_leaf,
                "units_per_pod": fabric.units_per_pod,
                "oversubscription": fabric.oversubscription,
                "switch_latency_s": fabric.switch_latency_s,
            }
        )
    if cluster.is_homogeneous:
        group = _group_config(cluster.groups[0])
        parts = {k: group.pop(k) for k in _GROUP_PARTS if k in group}
        config.update(group)
        config.update(parts)
    else:
        config["group"] = [_group_config(g) for g in cluster.groups]
    config["nic"] = link_config(cluster.nic)
    return config
