"""Views of a cluster: a JSON-ready dict (``pipesim show cluster --json``) and a short text description."""

from __future__ import annotations

from pipesim.profiles.hardware.cluster_type import Cluster
from pipesim.profiles.hardware.fabric import FabricSpec
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec
from pipesim.profiles.hardware.topology import ServerGroup, Topology

__all__ = ["cluster_to_dict", "describe_cluster", "device_spec_to_dict", "link_spec_to_dict"]


def device_spec_to_dict(spec: DeviceSpec) -> dict[str, object]:
    """A JSON-ready dict of a device spec (SI units, as the field names say)."""
    return {
        "name": spec.name,
        "peak_flop_per_s": dict(spec.peak_flop_per_s),
        "memory_bytes": spec.memory_bytes,
        "memory_bandwidth_bytes_per_s": spec.memory_bandwidth_bytes_per_s,
        "compute_efficiency": spec.compute_efficiency,
        "memory_efficiency": spec.memory_efficiency,
        "price_per_hour_usd": spec.price_per_hour_usd,
        "source": spec.source,
    }


def link_spec_to_dict(spec: LinkSpec) -> dict[str, object]:
    """A JSON-ready dict of a link spec (SI units, as the field names say)."""
    return {
        "name": spec.name,
        "bandwidth_bytes_per_s": spec.bandwidth_bytes_per_s,
        "latency_s": spec.latency_s,
        "achievable_fraction": spec.achievable_fraction,
        "effective_bandwidth_bytes_per_s": spec.effective_bandwidth_bytes_per_s,
        "source": spec.source,
    }


def _group_to_dict(group: ServerGroup) -> dict[str, object]:
    return {
        "servers": group.servers,
        "device": group.device.name,
        "gpus_per_server": group.gpus_per_server,
        "topology": group.topology.value,
        "intra_link": None if group.intra_link is None else group.intra_link.name,
        "pcie_link": group.pcie_link.name,
        "nics_per_server": group.nics_per_server,
        "gpus_per_pcie_switch": group.gpus_per_pcie_switch,
    }


def _fabric_to_dict(fabric: FabricSpec) -> dict[str, object]:
    return {
        "kind": fabric.kind.value,
        "levels": fabric.levels,
        "servers_per_leaf": fabric.servers_per_leaf,
        "units_per_pod": fabric.units_per_pod,
        "oversubscription": fabric.oversubscription,
        "switch_latency_s": fabric.switch_latency_s,
    }


def cluster_to_dict(cluster: Cluster, *, with_links: bool = True) -> dict[str, object]:
    """A JSON-ready dict of a cluster (for ``pipesim show cluster --json``).

    Keys: ``name``, ``description``, ``device`` (:func:`device_spec_to_dict`, the first group's),
    ``servers``, ``gpus_per_server`` (``None`` when servers differ in GPU count), ``num_devices``,
    ``topology``, ``intra_link``, ``pcie_link``, ``nic`` (:func:`link_spec_to_dict`,
    ``intra_link`` may be ``None``), ``nics_per_server``, ``gpus_per_pcie_switch`` (the first
    group's), ``groups`` (one dict per server group: ``servers``, ``device``, ``gpus_per_server``,
    ``topology``, ``intra_link``, ``pcie_link`` (spec names), ``nics_per_server``,
    ``gpus_per_pcie_switch``), ``fabric`` (``kind``, ``levels``, ``servers_per_leaf``,
    ``units_per_pod``, ``oversubscription``, ``switch_latency_s``), ``num_links``,
    ``price_per_hour_usd`` and, with ``with_links``, ``links``: one dict per directed link with
    ``index``, ``name``, ``kind``, ``src_node``, ``dst_node``, ``bandwidth_bytes_per_s``
    (effective), ``latency_s`` and ``spec`` (the spec's name).
    """
    uniform = len({g.gpus_per_server for g in cluster.groups}) == 1
    data: dict[str, object] = {
        "name": cluster.name,
        "description": cluster.description,
        "device": device_spec_to_dict(cluster.device),
        "servers": cluster.num_servers,
        "gpus_per_server": cluster.gpus_per_server if uniform else None,
        "num_devices": cluster.num_devices,
        "topology": cluster.topology.value,
        "intra_link": None if cluster.intra_link is None else link_spec_to_dict(cluster.intra_link),
        "pcie_link": link_spec_to_dict(cluster.pcie_link),
        "nic": link_spec_to_dict(cluster.nic),
        "nics_per_server": cluster.nics_per_server,
        "gpus_per_pcie_switch": cluster.gpus_per_pcie_switch,
        "groups": [_group_to_dict(g) for g in cluster.groups],
        "fabric": _fabric_to_dict(cluster.fabric),
        "num_links": len(cluster.links),
        "price_per_hour_usd": cluster.price_per_hour_usd,
    }
    if with_links:
        data["links"] = [
            {
                "index": link.index,
                "name": link.name,
                "kind": link.kind.value,
                "src_node": link.src_node,
                "dst_node": link.dst_node,
                "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
                "latency_s": link.latency_s,
                "spec": link.spec.name,
            }
            for link in cluster.links
        ]
    return data


def _gb_per_s(value: float) -> str:
    return f"{value / 1e9:.4g} GB/s"


def _describe_group(group: ServerGroup, prefix: str) -> list[str]:
    dev = group.device
    lines = [
        f"{prefix}device: {dev.name}, {dev.memory_bytes / 2**30:.4g} GiB, "
        f"{dev.memory_bandwidth_bytes_per_s / 1e9:.4g} GB/s, "
        + ", ".join(f"{dtype} {peak / 1e12:.4g} TFLOPS" for dtype, peak in dev.peak_flop_per_s.items())
        + f" (x{dev.compute_efficiency:g} achievable)",
    ]
    if group.intra_link is not None:
        intra = group.intra_link
        what = (
            "per GPU into NVSwitch"
            if group.topology is Topology.NVSWITCH
            else "per NVLink (doubled pairs x2)"
        )
        lines.append(
            f"{prefix}intra: {group.topology.value}, {intra.name} "
            f"{_gb_per_s(intra.bandwidth_bytes_per_s)} {what}, {intra.latency_s * 1e6:.3g} us"
        )
    else:
        lines.append(
            f"{prefix}intra: pcie, {group.gpus_per_pcie_switch} GPUs per PCIe switch, {group.pcie_link.name} "
            f"{_gb_per_s(group.pcie_link.bandwidth_bytes_per_s)}"
        )
    return lines


def describe_cluster(cluster: Cluster) -> str:
    """A short human-readable description: a one-line summary, then one indented line per part.

    The name is not included; example first line: ``2 servers x 8 V100-SXM2-16GB = 16 GPUs``
    (heterogeneous: ``2 x 8 A100-80GB + 1 x 4 V100-SXM2-16GB = 20 GPUs``).
    """
    groups = cluster.groups
    if len(groups) == 1:
        g = groups[0]
        lines = [
            f"{g.servers} server{'s' if g.servers != 1 else ''} x {g.gpus_per_server} {g.device.name} = "
            f"{cluster.num_devices} GPUs",
            *_describe_group(g, "  "),
        ]
    else:
        lines = [
            " + ".join(f"{g.servers} x {g.gpus_per_server} {g.device.name}" for g in groups)
            + f" = {cluster.num_devices} GPUs in {cluster.num_servers} servers"
        ]
        for i, g in enumerate(groups):
            lines.append(
                f"  group {i}: {g.servers} server{'s' if g.servers != 1 else ''} x {g.gpus_per_server} GPUs"
            )
            lines.extend(_describe_group(g, "    "))
    nics = {g.nics_per_server for g in groups}
    nic_count = str(nics.pop()) if len(nics) == 1 else "/".join(str(g.nics_per_server) for g in groups)
    lines.append(
        f"  network: {nic_count} x {cluster.nic.name} per server "
        f"({_gb_per_s(cluster.nic.bandwidth_bytes_per_s)} each, {cluster.nic.latency_s * 1e6:.3g} us), "
        + cluster.fabric.describe()
    )
    lines.append(f"  {len(cluster.links)} directed links")
    if cluster.price_per_hour_usd is not None:
        lines.append(f"  price: ${cluster.price_per_hour_usd:.2f}/hour on demand")
    return "\n".join(lines)
