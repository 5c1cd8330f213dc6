"""The Cluster type: servers of identical GPUs, their directed links and the routes between GPUs.

A :class:`Cluster` is ``num_servers`` identical servers of ``gpus_per_server`` GPUs, connected
inside by a :class:`~pipesim.profiles.hardware.topology.Topology` and across by NICs into one
non-blocking switch. Device ids are global, ``0 .. num_devices - 1``, server-major: device ``d``
is GPU ``d % gpus_per_server`` of server ``d // gpus_per_server``. How links are laid out and how
routes go is documented in :mod:`pipesim.profiles.hardware.topology`.

Only the type and its views live here; clusters come from configs
(:mod:`pipesim.profiles.hardware.cluster_config`), files and presets
(:mod:`pipesim.profiles.hardware.cluster_file`), all re-exported by
:mod:`pipesim.profiles.hardware.cluster`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pipesim.errors import check_count, invalid
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec
from pipesim.profiles.hardware.topology import (
    Link,
    ServerFabric,
    Topology,
    build_links,
    build_server_fabric,
)

__all__ = [
    "MAX_DEVICES",
    "MAX_NICS_PER_GPU",
    "Cluster",
    "cluster_to_dict",
    "describe_cluster",
    "device_spec_to_dict",
    "link_spec_to_dict",
]

MAX_DEVICES = 65536
"""Largest cluster pipesim builds (a guard against typos such as ``servers = 80000``)."""

MAX_NICS_PER_GPU = 4
"""Most NICs a server may have per GPU. Real servers have at most about one compute NIC per GPU
(DGX H100: 8 ConnectX-7 for 8 GPUs, NVIDIA DGX H100 user guide), so four per GPU leaves room for
what-ifs while keeping the number of links (and so memory and time) bounded by the GPU count."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """Servers of identical GPUs with their links; built once, then queried for routes.

    Attributes:
        name: the cluster's name.
        device: the GPU model every device is.
        num_servers: number of servers.
        gpus_per_server: GPUs in each server.
        topology: how the GPUs inside a server are connected.
        intra_link: the NVLink spec inside a server: the per-GPU port into the NVSwitch fabric for
            ``nvswitch`` (e.g. ``NVLink3-x12``), one NVLink for ``dgx1`` (doubled pairs get two);
            ``None`` for ``pcie``.
        pcie_link: the spec of every PCIe hop (GPU, NIC and PCIe-switch uplinks, all x16).
        nic: the spec of one NIC port (its link to the switch, each direction).
        nics_per_server: NICs in each server.
        gpus_per_pcie_switch: GPUs under each PCIe switch (default 2, as in DGX-1 and DGX A100).
        description: free text (what the cluster models, sources).
        links: every directed link, server-major (derived; see :mod:`pipesim.profiles.hardware.topology`).

    Raises:
        InputError: a count below 1, more than :data:`MAX_DEVICES` devices, ``dgx1`` without
            exactly 8 GPUs per server, a missing NVLink spec for ``nvswitch``/``dgx1``, or one given
            for ``pcie``.
    """

    name: str
    device: DeviceSpec
    num_servers: int
    gpus_per_server: int
    topology: Topology
    intra_link: LinkSpec | None
    pcie_link: LinkSpec
    nic: LinkSpec
    nics_per_server: int = 1
    gpus_per_pcie_switch: int = 2
    description: str = ""
    links: tuple[Link, ...] = field(init=False, repr=False, compare=False)
    _fabric: ServerFabric = field(init=False, repr=False, compare=False)
    _routes: dict[tuple[int, int], tuple[int, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise invalid("name", self.name, "must be a non-empty string")
        if not isinstance(self.device, DeviceSpec):
            raise invalid("device", self.device, "must be a DeviceSpec")
        try:
            object.__setattr__(self, "topology", Topology(self.topology))
        except ValueError:
            valid = ", ".join(t.value for t in Topology)
            raise invalid("intra", self.topology, f"topology must be one of {valid}") from None
        for name in ("num_servers", "gpus_per_server", "nics_per_server", "gpus_per_pcie_switch"):
            check_count(name, getattr(self, name))
        if self.nics_per_server > MAX_NICS_PER_GPU * self.gpus_per_server:
            raise invalid(
                "nics_per_server",
                self.nics_per_server,
                f"must be <= {MAX_NICS_PER_GPU} per GPU ({MAX_NICS_PER_GPU * self.gpus_per_server} "
                f"for {self.gpus_per_server} GPUs per server)",
            )
        if self.num_servers * self.gpus_per_server > MAX_DEVICES:
            raise invalid(
                "num_servers * gpus_per_server",
                self.num_servers * self.gpus_per_server,
                f"must be <= {MAX_DEVICES}",
            )
        if self.topology is Topology.DGX1 and self.gpus_per_server != 8:
            raise invalid("gpus_per_server", self.gpus_per_server, "the dgx1 topology has exactly 8 GPUs")
        if self.topology is Topology.PCIE:
            if self.intra_link is not None:
                raise invalid(
                    "intra_link", self.intra_link.name, "only nvswitch and dgx1 servers have NVLink"
                )
        elif not isinstance(self.intra_link, LinkSpec):
            raise invalid(
                "intra_link", self.intra_link, f"a {self.topology.value} server needs an NVLink spec"
            )
        for name in ("pcie_link", "nic"):
            if not isinstance(getattr(self, name), LinkSpec):
                raise invalid(name, getattr(self, name), "must be a LinkSpec")
        fabric = build_server_fabric(
            topology=self.topology,
            gpus_per_server=self.gpus_per_server,
            intra_link=self.intra_link,
            pcie_link=self.pcie_link,
            gpus_per_pcie_switch=self.gpus_per_pcie_switch,
            nic=self.nic,
            nics_per_server=self.nics_per_server,
        )
        object.__setattr__(self, "_fabric", fabric)
        object.__setattr__(self, "links", build_links(fabric, self.num_servers))
        object.__setattr__(self, "_routes", {})

    def __reduce__(self) -> tuple[object, ...]:
        # Pickle the configuration only; the link table and route cache are rebuilt on load.
        return (
            _rebuild_cluster,
            (
                self.name,
                self.device,
                self.num_servers,
                self.gpus_per_server,
                self.topology,
                self.intra_link,
                self.pcie_link,
                self.nic,
                self.nics_per_server,
                self.gpus_per_pcie_switch,
                self.description,
            ),
        )

    # ----------------------------------------------------------------------------------------
    # Devices
    @property
    def num_devices(self) -> int:
        """Total GPUs: ``num_servers * gpus_per_server``."""
        return self.num_servers * self.gpus_per_server

    def _check_device(self, device: int) -> None:
        if not isinstance(device, int) or isinstance(device, bool) or not 0 <= device < self.num_devices:
            raise invalid("device", device, f"must be a device id in 0..{self.num_devices - 1}")

    def server_of(self, device: int) -> int:
        """The server that holds ``device``.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        return device // self.gpus_per_server

    def local_index(self, device: int) -> int:
        """``device``'s GPU index inside its server.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        return device % self.gpus_per_server

    def devices_of_server(self, server: int) -> range:
        """The device ids of ``server``.

        Raises:
            InputError: ``server`` is not in ``0 .. num_servers - 1``.
        """
        if not isinstance(server, int) or isinstance(server, bool) or not 0 <= server < self.num_servers:
            raise invalid("server", server, f"must be a server index in 0..{self.num_servers - 1}")
        return range(server * self.gpus_per_server, (server + 1) * self.gpus_per_server)

    def gpu_node(self, device: int) -> str:
        """The node name of ``device`` in :attr:`links`, e.g. ``"s1.gpu3"``.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        server, local = divmod(device, self.gpus_per_server)
        return f"s{server}.gpu{local}"

    # ----------------------------------------------------------------------------------------
    # Routes
    def route(self, src_device: int, dst_device: int) -> tuple[int, ...]:
        """The directed links a transfer from ``src_device`` to ``dst_device`` crosses, in order.

        Returns:
            Indices into :attr:`links`, forming a contiguous path from ``gpu_node(src_device)`` to
            ``gpu_node(dst_device)``; ``()`` when the two are the same device. Deterministic and
            cached.

        Raises:
            InputError: a device id is out of range.
        """
        key = (src_device, dst_device)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        self._check_device(src_device)
        self._check_device(dst_device)
        fabric = self._fabric
        per_server = len(fabric.links)
        src_server, src_local = divmod(src_device, self.gpus_per_server)
        dst_server, dst_local = divmod(dst_device, self.gpus_per_server)
        if src_server == dst_server:
            base = src_server * per_server
            result = tuple(base + i for i in fabric.local_routes[src_local][dst_local])
        else:
            up_base = src_server * per_server
            down_base = dst_server * per_server
            result = tuple(up_base + i for i in fabric.up_routes[src_local]) + tuple(
                down_base + i for i in fabric.down_routes[dst_local]
            )
        self._routes[key] = result
        return result

    def route_latency_s(self, src_device: int, dst_device: int) -> float:
        """Sum of the link latencies on :meth:`route`, seconds (0 for the same device).

        Raises:
            InputError: a device id is out of range.
        """
        return sum(self.links[i].latency_s for i in self.route(src_device, dst_device))

    def route_bandwidth_bytes_per_s(self, src_device: int, dst_device: int) -> float:
        """Bottleneck (smallest) effective bandwidth on :meth:`route`, bytes/s; ``inf`` for the same device.

        Raises:
            InputError: a device id is out of range.
        """
        path = self.route(src_device, dst_device)
        return min((self.links[i].bandwidth_bytes_per_s for i in path), default=math.inf)

    @property
    def price_per_hour_usd(self) -> float | None:
        """On-demand price of all devices, US dollars per hour, or ``None`` when the device has none."""
        if self.device.price_per_hour_usd is None:
            return None
        return self.device.price_per_hour_usd * self.num_devices


def _rebuild_cluster(
    name: str,
    device: DeviceSpec,
    num_servers: int,
    gpus_per_server: int,
    topology: Topology,
    intra_link: LinkSpec | None,
    pcie_link: LinkSpec,
    nic: LinkSpec,
    nics_per_server: int,
    gpus_per_pcie_switch: int,
    description: str,
) -> Cluster:
    """Unpickle a :class:`Cluster` (see ``Cluster.__reduce__``)."""
    return Cluster(
        name=name,
        device=device,
        num_servers=num_servers,
        gpus_per_server=gpus_per_server,
        topology=topology,
        intra_link=intra_link,
        pcie_link=pcie_link,
        nic=nic,
        nics_per_server=nics_per_server,
        gpus_per_pcie_switch=gpus_per_pcie_switch,
        description=description,
    )


# ------------------------------------------------------------------------------------------------
# Views


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


def cluster_to_dict(cluster: Cluster) -> dict[str, object]:
    """A JSON-ready dict of a cluster (for ``pipesim show cluster --json``).

    Keys: ``name``, ``description``, ``device`` (:func:`device_spec_to_dict`), ``servers``,
    ``gpus_per_server``, ``num_devices``, ``topology``, ``intra_link``, ``pcie_link``, ``nic``
    (:func:`link_spec_to_dict`, ``intra_link`` may be ``None``), ``nics_per_server``,
    ``gpus_per_pcie_switch``, ``price_per_hour_usd`` and ``links``: one dict per directed link
    with ``index``, ``name``, ``kind``, ``src_node``, ``dst_node``, ``bandwidth_bytes_per_s``
    (effective), ``latency_s`` and ``spec`` (the spec's name).
    """
    return {
        "name": cluster.name,
        "description": cluster.description,
        "device": device_spec_to_dict(cluster.device),
        "servers": cluster.num_servers,
        "gpus_per_server": cluster.gpus_per_server,
        "num_devices": cluster.num_devices,
        "topology": cluster.topology.value,
        "intra_link": None if cluster.intra_link is None else link_spec_to_dict(cluster.intra_link),
        "pcie_link": link_spec_to_dict(cluster.pcie_link),
        "nic": link_spec_to_dict(cluster.nic),
        "nics_per_server": cluster.nics_per_server,
        "gpus_per_pcie_switch": cluster.gpus_per_pcie_switch,
        "price_per_hour_usd": cluster.price_per_hour_usd,
        "links": [
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
        ],
    }


def _gb_per_s(value: float) -> str:
    return f"{value / 1e9:.4g} GB/s"


def describe_cluster(cluster: Cluster) -> str:
    """A short human-readable description: a one-line summary, then one indented line per part.

    The name is not included; example first line: ``2 servers x 8 V100-SXM2-16GB = 16 GPUs``.
    """
    dev = cluster.device
    lines = [
        f"{cluster.num_servers} server{'s' if cluster.num_servers != 1 else ''} x "
        f"{cluster.gpus_per_server} {dev.name} = {cluster.num_devices} GPUs",
        f"  device: {dev.memory_bytes / 2**30:.4g} GiB, {dev.memory_bandwidth_bytes_per_s / 1e9:.4g} GB/s, "
        + ", ".join(f"{dtype} {peak / 1e12:.4g} TFLOPS" for dtype, peak in dev.peak_flop_per_s.items())
        + f" (x{dev.compute_efficiency:g} achievable)",
    ]
    if cluster.intra_link is not None:
        intra = cluster.intra_link
        what = (
            "per GPU into NVSwitch"
            if cluster.topology is Topology.NVSWITCH
            else "per NVLink (doubled pairs x2)"
        )
        lines.append(
            f"  intra: {cluster.topology.value}, {intra.name} {_gb_per_s(intra.bandwidth_bytes_per_s)} {what}"
            f", {intra.latency_s * 1e6:.3g} us"
        )
    else:
        lines.append(
            f"  intra: pcie, {cluster.gpus_per_pcie_switch} GPUs per PCIe switch, {cluster.pcie_link.name} "
            f"{_gb_per_s(cluster.pcie_link.bandwidth_bytes_per_s)}"
        )
    lines.append(
        f"  network: {cluster.nics_per_server} x {cluster.nic.name} per server "
        f"({_gb_per_s(cluster.nic.bandwidth_bytes_per_s)} each, {cluster.nic.latency_s * 1e6:.3g} us), "
        "non-blocking switch"
    )
    lines.append(f"  {len(cluster.links)} directed links")
    if cluster.price_per_hour_usd is not None:
        lines.append(f"  price: ${cluster.price_per_hour_usd:.2f}/hour on demand")
    return "\n".join(lines)
