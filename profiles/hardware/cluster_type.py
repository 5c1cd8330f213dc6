"""The Cluster type: servers of GPUs, their directed links and the routes between GPUs.

A :class:`Cluster` is one or more groups of identical servers (:class:`ServerGroup`: a device
type, a GPU count, an inside topology), connected across by NICs into a fabric
(:class:`~pipesim.profiles.hardware.fabric.FabricSpec`: one non-blocking switch, or a
rail-optimised fat-tree). Device ids are global, ``0 .. num_devices - 1``, server-major in group
order: in a cluster of identical servers device ``d`` is GPU ``d % gpus_per_server`` of server
``d // gpus_per_server``. How links are laid out and how routes go is documented in
:mod:`pipesim.profiles.hardware.topology` (inside servers) and
:mod:`pipesim.profiles.hardware.fabric` (between them).

Links are made on demand from per-server templates (:class:`~pipesim.profiles.hardware.fabric.LinkTable`)
and routes are computed on demand and cached, so building a 16,384-GPU cluster costs a few
templates, not its links or its O(n^2) routes.

Only the type lives here (its JSON and text views are in
:mod:`pipesim.profiles.hardware.cluster_views`); clusters come from configs
(:mod:`pipesim.profiles.hardware.cluster_config`), files and presets
(:mod:`pipesim.profiles.hardware.cluster_file`), all re-exported by
:mod:`pipesim.profiles.hardware.cluster`.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from pipesim.errors import invalid
from pipesim.profiles.hardware.fabric import FabricKind, FabricSpec, LinkTable, RailNetwork, ServerBlock
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec
from pipesim.profiles.hardware.topology import (
    MAX_NICS_PER_GPU,
    ServerFabric,
    ServerGroup,
    Topology,
)

__all__ = [
    "MAX_DEVICES",
    "MAX_NICS_PER_GPU",
    "Cluster",
    "ServerGroup",
]

MAX_DEVICES = 65536
"""Largest cluster pipesim builds (a guard against typos such as ``servers = 80000``)."""


def _merge_groups(groups: tuple[ServerGroup, ...]) -> tuple[ServerGroup, ...]:
    """Adjacent groups of the same server kind merged into one (so equal clusters compare equal)."""
    out: list[ServerGroup] = []
    for group in groups:
        if out and out[-1].same_server(group):
            prev = out.pop()
            out.append(
                ServerGroup(
                    servers=prev.servers + group.servers,
                    device=prev.device,
                    gpus_per_server=prev.gpus_per_server,
                    topology=prev.topology,
                    intra_link=prev.intra_link,
                    pcie_link=prev.pcie_link,
                    nics_per_server=prev.nics_per_server,
                    gpus_per_pcie_switch=prev.gpus_per_pcie_switch,
                )
            )
        else:
            out.append(group)
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster:
    """Groups of servers with their links and fabric; built once, then queried for routes.

    Attributes:
        name: the cluster's name.
        groups: the server groups, in device-id order (adjacent groups of the same server kind
            are merged). One group: a homogeneous cluster.
        nic: the spec of one NIC port (its link to the first switch, each direction).
        fabric: the network between servers (default: one non-blocking switch).
        description: free text (what the cluster models, sources).
        links: every directed link (derived; see :mod:`pipesim.profiles.hardware.topology` and
            :mod:`pipesim.profiles.hardware.fabric`).

    The properties ``device``, ``gpus_per_server``, ``topology``, ``intra_link``, ``pcie_link``,
    ``nics_per_server`` and ``gpus_per_pcie_switch`` describe the first group (``gpus_per_server``
    refuses a cluster whose servers differ in GPU count); :meth:`device_spec` gives any device's
    own type.

    Raises:
        InputError: no group, a bad group (see :class:`ServerGroup`), more than
            :data:`MAX_DEVICES` devices, a NIC that is not a ``LinkSpec``.
    """

    name: str
    groups: tuple[ServerGroup, ...]
    nic: LinkSpec
    fabric: FabricSpec = field(default_factory=FabricSpec)
    description: str = ""
    links: LinkTable = field(init=False, repr=False, compare=False)
    _blocks: tuple[ServerBlock, ...] = field(init=False, repr=False, compare=False)
    _device_starts: list[int] = field(init=False, repr=False, compare=False)
    _network: RailNetwork | None = field(init=False, repr=False, compare=False)
    _routes: dict[tuple[int, int], tuple[int, ...]] = field(init=False, repr=False, compare=False)
    _link_values: tuple[list[float], list[float]] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise invalid("name", self.name, "must be a non-empty string")
        groups = tuple(self.groups) if isinstance(self.groups, tuple | list) else ()
        if not groups or not all(isinstance(g, ServerGroup) for g in groups):
            raise invalid("groups", self.groups, "must be a non-empty sequence of ServerGroup")
        groups = _merge_groups(groups)
        object.__setattr__(self, "groups", groups)
        if not isinstance(self.nic, LinkSpec):
            raise invalid("nic", self.nic, "must be a LinkSpec")
        if not isinstance(self.fabric, FabricSpec):
            raise invalid("fabric", self.fabric, "must be a FabricSpec")
        total = sum(g.num_devices for g in groups)
        if total > MAX_DEVICES:
            raise invalid("num_servers * gpus_per_server", total, f"must be <= {MAX_DEVICES}")
        templates: dict[ServerGroup, ServerFabric] = {}
        blocks: list[ServerBlock] = []
        server = device = link = 0
        for group in groups:
            kind = ServerGroup(
                servers=1,
                device=group.device,
                gpus_per_server=group.gpus_per_server,
                topology=group.topology,
                intra_link=group.intra_link,
                pcie_link=group.pcie_link,
                nics_per_server=group.nics_per_server,
                gpus_per_pcie_switch=group.gpus_per_pcie_switch,
            )
            template = templates.get(kind)
            if template is None:
                template = templates[kind] = group.fabric(self.nic)
            blocks.append(ServerBlock(server, group.servers, device, group.gpus_per_server, link, template))
            server += group.servers
            device += group.num_devices
            link += group.servers * len(template.links)
        network = None
        if self.fabric.kind is FabricKind.RAIL:
            rails = max(g.nics_per_server for g in groups)
            network = RailNetwork(spec=self.fabric, nic=self.nic, rails=rails, num_servers=server, base=link)
        object.__setattr__(self, "_blocks", tuple(blocks))
        object.__setattr__(self, "_device_starts", [b.first_device for b in blocks])
        object.__setattr__(self, "_network", network)
        object.__setattr__(self, "links", LinkTable(blocks, network))
        object.__setattr__(self, "_routes", {})
        object.__setattr__(self, "_link_values", None)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickle the configuration only; the link table and route cache are rebuilt on load.
        return (_rebuild_cluster, (self.name, self.groups, self.nic, self.fabric, self.description))

    # ----------------------------------------------------------------------------------------
    # The first group (the whole cluster when it is homogeneous)
    @property
    def device(self) -> DeviceSpec:
        """The GPU model of the first group (of every device in a single-device-type cluster)."""
        return self.groups[0].device

    @property
    def gpus_per_server(self) -> int:
        """GPUs in each server.

        Raises:
            InputError: the servers differ in GPU count (see :attr:`server_gpu_counts`).
        """
        counts = {g.gpus_per_server for g in self.groups}
        if len(counts) != 1:
            raise invalid(
                "gpus_per_server",
                sorted(counts),
                f"cluster {self.name!r} has servers of different GPU counts; this needs identical servers",
            )
        return self.groups[0].gpus_per_server

    @property
    def topology(self) -> Topology:
        """How the GPUs inside a server of the first group are connected."""
        return self.groups[0].topology

    @property
    def intra_link(self) -> LinkSpec | None:
        """The NVLink spec of the first group (``None`` for ``pcie``)."""
        return self.groups[0].intra_link

    @property
    def pcie_link(self) -> LinkSpec:
        """The PCIe spec of the first group."""
        return self.groups[0].pcie_link

    @property
    def nics_per_server(self) -> int:
        """NICs in each server of the first group."""
        return self.groups[0].nics_per_server

    @property
    def gpus_per_pcie_switch(self) -> int:
        """GPUs under each PCIe switch in the first group."""
        return self.groups[0].gpus_per_pcie_switch

    @property
    def is_homogeneous(self) -> bool:
        """Whether every server is the same kind (one group)."""
        return len(self.groups) == 1

    @property
    def server_gpu_counts(self) -> tuple[int, ...]:
        """GPUs in each server, in server order."""
        return tuple(g.gpus_per_server for g in self.groups for _ in range(g.servers))

    # ----------------------------------------------------------------------------------------
    # Devices
    @property
    def num_devices(self) -> int:
        """Total GPUs."""
        last = self._blocks[-1]
        return last.first_device + last.servers * last.gpus

    @property
    def num_servers(self) -> int:
        """Total servers."""
        last = self._blocks[-1]
        return last.first_server + last.servers

    def _check_device(self, device: int) -> None:
        if not isinstance(device, int) or isinstance(device, bool) or not 0 <= device < self.num_devices:
            raise invalid("device", device, f"must be a device id in 0..{self.num_devices - 1}")

    def _locate(self, device: int) -> tuple[ServerBlock, int, int]:
        """``(block, server, local index)`` of a valid device id."""
        block = self._blocks[bisect.bisect_right(self._device_starts, device) - 1]
        offset, local = divmod(device - block.first_device, block.gpus)
        return block, block.first_server + offset, local

    def server_of(self, device: int) -> int:
        """The server that holds ``device``.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        return self._locate(device)[1]

    def local_index(self, device: int) -> int:
        """``device``'s GPU index inside its server.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        return self._locate(device)[2]

    def device_spec(self, device: int) -> DeviceSpec:
        """The GPU model of ``device`` (its group's).

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        block = self._locate(device)[0]
        return self.groups[self._blocks.index(block)].device

    def compute_time_factor(self, device: int, dtype: str) -> float:
        """How much longer ``device`` takes than :attr:`device` for the same compute, at ``dtype``.

        The ratio of peak rates (reference / this device's); 1.0 for a device of the reference
        type. A profile retargeted to :attr:`device` costs a layer on ``device`` at its time times
        this factor.

        Raises:
            InputError: ``device`` is out of range, or a device has no rate for ``dtype``.
        """
        spec = self.device_spec(device)
        if spec == self.device:
            return 1.0
        return (self.device.peak_for(dtype) * self.device.compute_efficiency) / (
            spec.peak_for(dtype) * spec.compute_efficiency
        )

    def device_speed_factors(self, dtype: str) -> dict[int, float]:
        """Relative compute speed of every device not of the reference type (1 / :meth:`compute_time_factor`).

        Empty for a single-device-type cluster. The simulator multiplies these into its
        per-device ``speed_factors``, so a heterogeneous cluster costs each device by its own type.

        Raises:
            InputError: a device has no rate for ``dtype``.
        """
        out: dict[int, float] = {}
        for block, group in zip(self._blocks, self.groups, strict=True):
            if group.device == self.device:
                continue
            speed = 1.0 / self.compute_time_factor(block.first_device, dtype)
            out.update((d, speed) for d in range(block.first_device, block.first_device + group.num_devices))
        return out

    @property
    def servers_interchangeable(self) -> bool:
        """Whether renumbering servers leaves every route's cost unchanged: identical servers on
        one non-blocking switch (a rail fat-tree's hop count depends on which servers talk)."""
        return self.is_homogeneous and self.fabric.kind is FabricKind.SWITCH

    def devices_of_server(self, server: int) -> range:
        """The device ids of ``server``.

        Raises:
            InputError: ``server`` is not in ``0 .. num_servers - 1``.
        """
        if not isinstance(server, int) or isinstance(server, bool) or not 0 <= server < self.num_servers:
            raise invalid("server", server, f"must be a server index in 0..{self.num_servers - 1}")
        block = next(b for b in reversed(self._blocks) if b.first_server <= server)
        start = block.first_device + (server - block.first_server) * block.gpus
        return range(start, start + block.gpus)

    def gpu_node(self, device: int) -> str:
        """The node name of ``device`` in :attr:`links`, e.g. ``"s1.gpu3"``.

        Raises:
            InputError: ``device`` is not in ``0 .. num_devices - 1``.
        """
        self._check_device(device)
        _, server, local = self._locate(device)
        return f"s{server}.gpu{local}"

    # ----------------------------------------------------------------------------------------
    # Routes
    def route(self, src_device: int, dst_device: int) -> tuple[int, ...]:
        """The directed links a transfer from ``src_device`` to ``dst_device`` crosses, in order.

        Returns:
            Indices into :attr:`links`, forming a contiguous path from ``gpu_node(src_device)`` to
            ``gpu_node(dst_device)``; ``()`` when the two are the same device. Deterministic and
            cached (computed on first use).

        Raises:
            InputError: a device id is out of range.
        """
        key = (src_device, dst_device)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        self._check_device(src_device)
        self._check_device(dst_device)
        src_block, src_server, src_local = self._locate(src_device)
        dst_block, dst_server, dst_local = self._locate(dst_device)
        src_fabric, dst_fabric = src_block.template, dst_block.template
        src_base = src_block.link_base(src_server)
        if src_server == dst_server:
            result = tuple(src_base + i for i in src_fabric.local_routes[src_local][dst_local])
        else:
            prefix: tuple[int, ...] = ()
            middle: tuple[int, ...] = ()
            network = self._network
            if network is not None:
                src_rail = src_fabric.gpu_nics[src_local]
                dst_rail = dst_fabric.gpu_nics[dst_local]
                if src_rail != dst_rail and _has_nvlink(src_block):
                    proxy = src_fabric.gpu_on_rail(dst_rail, prefer=dst_local)
                    if proxy is not None:  # PXN: over NVLink to the GPU on the destination's rail
                        prefix = tuple(src_base + i for i in src_fabric.local_routes[src_local][proxy])
                        src_local, src_rail = proxy, dst_rail
                middle = network.path(src_server, src_rail, dst_server, dst_rail)
            dst_base = dst_block.link_base(dst_server)
            result = (
                prefix
                + tuple(src_base + i for i in src_fabric.up_routes[src_local])
                + middle
                + tuple(dst_base + i for i in dst_fabric.down_routes[dst_local])
            )
        self._routes[key] = result
        return result

    def route_latency_s(self, src_device: int, dst_device: int) -> float:
        """Sum of the link latencies on :meth:`route`, seconds (0 for the same device).

        Raises:
            InputError: a device id is out of range.
        """
        latencies = self._values()[0]
        return sum(latencies[i] for i in self.route(src_device, dst_device))

    def route_bandwidth_bytes_per_s(self, src_device: int, dst_device: int) -> float:
        """Bottleneck (smallest) effective bandwidth on :meth:`route`, bytes/s; ``inf`` for the same device.

        Raises:
            InputError: a device id is out of range.
        """
        path = self.route(src_device, dst_device)
        bandwidths = self._values()[1]
        return min((bandwidths[i] for i in path), default=math.inf)

    def _values(self) -> tuple[list[float], list[float]]:
        """Every link's latency (seconds) and effective bandwidth (bytes/s), in index order,
        listed on first use (:meth:`LinkTable.latencies_s`; building a :class:`Link` per lookup
        cost the planners' route sums a tenth of their time on large clusters)."""
        found = self._link_values
        if found is None:
            found = (self.links.latencies_s(), self.links.bandwidths_bytes_per_s())
            object.__setattr__(self, "_link_values", found)
        return found

    @property
    def price_per_hour_usd(self) -> float | None:
        """On-demand price of all devices, US dollars per hour, or ``None`` when a device has none."""
        total = 0.0
        for group in self.groups:
            if group.device.price_per_hour_usd is None:
                return None
            total += group.device.price_per_hour_usd * group.num_devices
        return total


def _has_nvlink(block: ServerBlock) -> bool:
    """Whether the servers of ``block`` have NVLink (PXN forwards over NVLink only)."""
    return block.template.has_nvlink


def _rebuild_cluster(
    name: str,
    groups: tuple[ServerGroup, ...],
    nic: LinkSpec,
    fabric: FabricSpec,
    description: str,
) -> Cluster:
    """Unpickle a :class:`Cluster` (see ``Cluster.__reduce__``)."""
    return Cluster(name=name, groups=groups, nic=nic, fabric=fabric, description=description)
