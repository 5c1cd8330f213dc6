"""Topology: the directed links of a cluster and the routes between its GPUs.

The simulator treats every :class:`Link` as a directed resource with a bandwidth and a latency,
shared max-min fairly among the flows on it. This module lays those links out for a cluster of
identical servers and precomputes, once per server layout, the routes between local GPUs and
from each GPU to the inter-server switch, so that a route in a cluster of any size is a tuple
concatenation.

Nodes (their names appear in :attr:`Link.src_node` / :attr:`Link.dst_node`): ``s<S>.gpu<G>``,
``s<S>.pcie<P>`` (a PCIe switch), ``s<S>.host`` (the CPU root complex), ``s<S>.nic<K>``,
``s<S>.nvswitch`` (for the ``nvswitch`` topology) and one ``switch`` joining all servers (a
non-blocking network switch, so its only limits are the NIC links into and out of it).

Inside a server (every topology):

```
            host                      GPUs hang under PCIe switches, ``gpus_per_pcie_switch``
          /      \\                   each; the switches under the host. NIC k hangs under
      pcie0      pcie1 ...            PCIe switch (k * switches) // nics.
     /  |  \\     /  \\
  gpu0 gpu1 nic0 gpu2 gpu3
```

plus, for ``nvswitch``, a link each way between every GPU and ``nvswitch`` (one link stands for
the GPU's whole NVLink port, e.g. 12 x NVLink3 on A100), and for ``dgx1`` the DGX-1 (V100)
hybrid cube-mesh of :data:`DGX1_NVLINKS`, one link each way per connected GPU pair (a doubled
pair is one link with twice the bandwidth).

Routes (deterministic):

- same server, ``nvswitch``: gpu -> nvswitch -> gpu.
- same server, ``dgx1``: the direct NVLink when the pair has one; otherwise two NVLink hops
  through the intermediate GPU whose slower hop is fastest (lowest index on ties). Every
  non-adjacent pair has such a GPU (the peer in the other quad), so NVLink carries all traffic
  inside a DGX-1, as when NCCL forwards through a GPU.
- same server, ``pcie``: gpu -> pcie switch [-> host -> pcie switch] -> gpu.
- across servers: gpu -> (PCIe) -> nic -> switch -> nic -> (PCIe) -> gpu, using NIC
  ``(local GPU index * nics) // gpus_per_server`` on each side (GPUs share NICs in contiguous
  blocks, so a NIC serves the GPUs under its own PCIe switch when the counts line up, as in
  DGX-1 and DGX A100).

Latency: a link gets half its spec's latency, except a direct GPU-GPU NVLink, which gets all of
it. A catalog latency is "endpoint to endpoint through one switch", so a transfer through one
NVSwitch, one PCIe switch or the network switch pays exactly the catalog figure per network it
crosses.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipesim.errors import check_count, invalid
from pipesim.profiles.hardware.specs import DeviceSpec, LinkSpec

__all__ = [
    "DGX1_NVLINKS",
    "MAX_NICS_PER_GPU",
    "SWITCH_NODE",
    "Link",
    "LinkKind",
    "ServerFabric",
    "ServerGroup",
    "Topology",
    "build_server_fabric",
    "nic_of",
    "pcie_switch_of",
]


MAX_NICS_PER_GPU = 4
"""Most NICs a server may have per GPU. Real servers have at most about one compute NIC per GPU
(DGX H100: 8 ConnectX-7 for 8 GPUs, NVIDIA DGX H100 user guide), so four per GPU leaves room for
what-ifs while keeping the number of links (and so memory and time) bounded by the GPU count."""


class Topology(str, Enum):
    """How the GPUs inside one server are connected."""

    NVSWITCH = "nvswitch"
    """All GPUs reach one NVSwitch fabric with their whole NVLink port (DGX-2, DGX A100/H100)."""
    DGX1 = "dgx1"
    """The DGX-1 (V100) hybrid cube-mesh of NVLinks between 8 GPUs."""
    PCIE = "pcie"
    """No NVLink: GPUs talk through PCIe switches and the host."""

    def __str__(self) -> str:
        return self.value


class LinkKind(str, Enum):
    """What a directed link physically is."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    NETWORK = "network"
    """A NIC port to or from the inter-server switch."""

    def __str__(self) -> str:
        return self.value


DGX1_NVLINKS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 1),
    (0, 2, 1),
    (0, 3, 2),
    (0, 4, 2),
    (1, 2, 2),
    (1, 3, 1),
    (1, 5, 2),
    (2, 3, 2),
    (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1),
    (4, 6, 1),
    (4, 7, 2),
    (5, 6, 2),
    (5, 7, 1),
    (6, 7, 2),
)
"""NVLinks of a DGX-1 with V100: ``(gpu a, gpu b, number of NVLink 2.0 links)``. Each GPU uses
its 6 links on 4 peers (its quad and the same position in the other quad), two of them doubled.
Source: NVIDIA, "NVIDIA DGX-1 With Tesla V100 System Architecture" whitepaper (WP-08437-002,
2017), hybrid cube-mesh figure; GPU numbering as ``nvidia-smi topo -m`` reports it (NV1/NV2)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """One directed link of a cluster, a resource of the simulator.

    Attributes:
        index: position in :attr:`pipesim.profiles.hardware.cluster.Cluster.links`.
        name: ``"<src_node>-><dst_node>"``.
        kind: what the link is (NVLink, PCIe, network).
        src_node: the node the data leaves, e.g. ``"s0.gpu3"``.
        dst_node: the node the data reaches, e.g. ``"s0.nvswitch"``.
        bandwidth_bytes_per_s: effective bandwidth in this direction (spec bandwidth times its
            achievable fraction, times the lane count for doubled links), bytes/s.
        latency_s: latency this hop adds, seconds (see the module docstring).
        spec: the catalog (or custom) spec the link was made from, already bundled for doubled links.
    """

    index: int
    name: str
    kind: LinkKind
    src_node: str
    dst_node: str
    bandwidth_bytes_per_s: float
    latency_s: float
    spec: LinkSpec


@dataclass(frozen=True, slots=True)
class _LocalLink:
    """A link of the server template; node names without the ``s<S>.`` prefix."""

    kind: LinkKind
    src: str
    dst: str
    spec: LinkSpec
    latency_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerFabric:
    """The links of one server (plus its NIC links to the switch) and the routes inside it.

    Link ``i`` of server ``s`` is link ``s * len(links) + i`` of the cluster.

    Attributes:
        links: the server's link template.
        local_routes: ``local_routes[a][b]`` = template link offsets from GPU a to GPU b.
        up_routes: ``up_routes[a]`` = offsets from GPU a out to the switch (ends with a NETWORK link).
        down_routes: ``down_routes[b]`` = offsets from the switch in to GPU b (starts with one).
    """

    links: tuple[_LocalLink, ...]
    local_routes: tuple[tuple[tuple[int, ...], ...], ...]
    up_routes: tuple[tuple[int, ...], ...]
    down_routes: tuple[tuple[int, ...], ...]
    gpu_nics: tuple[int, ...] = ()
    """``gpu_nics[g]``: the NIC (= rail) local GPU ``g`` uses across servers."""
    has_nvlink: bool = False
    """Whether the GPUs are joined by NVLink (``nvswitch`` or ``dgx1``)."""

    def gpu_on_rail(self, rail: int, prefer: int) -> int | None:
        """The local GPU to forward through to reach rail ``rail`` (PXN): ``prefer`` when it is on
        that rail, else the lowest GPU on it; ``None`` when the server has no NIC on that rail."""
        if 0 <= prefer < len(self.gpu_nics) and self.gpu_nics[prefer] == rail:
            return prefer
        return next((g for g, nic in enumerate(self.gpu_nics) if nic == rail), None)


SWITCH_NODE = "switch"
"""Name of the inter-server network switch node."""


def pcie_switch_of(gpu: int, gpus_per_pcie_switch: int) -> int:
    """The PCIe switch local GPU ``gpu`` hangs under."""
    return gpu // gpus_per_pcie_switch


def nic_of(gpu: int, gpus_per_server: int, nics_per_server: int) -> int:
    """The NIC local GPU ``gpu`` sends and receives inter-server traffic through."""
    return gpu * nics_per_server // gpus_per_server


def build_server_fabric(
    *,
    topology: Topology,
    gpus_per_server: int,
    intra_link: LinkSpec | None,
    pcie_link: LinkSpec,
    gpus_per_pcie_switch: int,
    nic: LinkSpec,
    nics_per_server: int,
) -> ServerFabric:
    """Lay out one server's links and routes (the template every server of a cluster shares).

    Args:
        topology: how the GPUs are connected.
        gpus_per_server: GPUs in the server (8 for ``dgx1``).
        intra_link: the NVLink spec: the per-GPU port into the switch for ``nvswitch``, one
            NVLink for ``dgx1``; ``None`` for ``pcie``.
        pcie_link: the PCIe spec of every PCIe hop (GPU, NIC and switch uplinks are all x16).
        gpus_per_pcie_switch: GPUs under each PCIe switch.
        nic: the spec of one NIC port.
        nics_per_server: NICs in the server.

    Returns:
        The server's template. Arguments are assumed valid (the cluster checks them).
    """
    links: list[_LocalLink] = []
    offset: dict[tuple[str, str], int] = {}

    def add(kind: LinkKind, a: str, b: str, spec: LinkSpec, latency_s: float) -> None:
        for src, dst in ((a, b), (b, a)):
            offset[(src, dst)] = len(links)
            links.append(_LocalLink(kind, src, dst, spec, latency_s))

    n_pcie = -(-gpus_per_server // gpus_per_pcie_switch)
    half_pcie = pcie_link.latency_s / 2
    for g in range(gpus_per_server):
        add(LinkKind.PCIE, f"gpu{g}", f"pcie{pcie_switch_of(g, gpus_per_pcie_switch)}", pcie_link, half_pcie)
    for p in range(n_pcie):
        add(LinkKind.PCIE, f"pcie{p}", "host", pcie_link, half_pcie)
    nic_switch = [k * n_pcie // nics_per_server for k in range(nics_per_server)]
    for k in range(nics_per_server):
        add(LinkKind.PCIE, f"nic{k}", f"pcie{nic_switch[k]}", pcie_link, half_pcie)
    direct: dict[tuple[int, int], float] = {}
    if topology is Topology.NVSWITCH:
        assert intra_link is not None
        for g in range(gpus_per_server):
            add(LinkKind.NVLINK, f"gpu{g}", "nvswitch", intra_link, intra_link.latency_s / 2)
    elif topology is Topology.DGX1:
        assert intra_link is not None
        for a, b, count in DGX1_NVLINKS:
            spec = intra_link.bundled(count)
            add(LinkKind.NVLINK, f"gpu{a}", f"gpu{b}", spec, spec.latency_s)
            direct[(a, b)] = direct[(b, a)] = spec.effective_bandwidth_bytes_per_s
    for k in range(nics_per_server):
        add(LinkKind.NETWORK, f"nic{k}", SWITCH_NODE, nic, nic.latency_s / 2)

    def path(nodes: list[str]) -> tuple[int, ...]:
        return tuple(offset[(nodes[i], nodes[i + 1])] for i in range(len(nodes) - 1))

    def pcie_nodes(src_switch: int, dst_switch: int) -> list[str]:
        if src_switch == dst_switch:
            return [f"pcie{src_switch}"]
        return [f"pcie{src_switch}", "host", f"pcie{dst_switch}"]

    def local(a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return ()
        if topology is Topology.NVSWITCH:
            return path([f"gpu{a}", "nvswitch", f"gpu{b}"])
        if topology is Topology.DGX1:
            if (a, b) in direct:
                return path([f"gpu{a}", f"gpu{b}"])
            best = max(
                (m for m in range(gpus_per_server) if (a, m) in direct and (m, b) in direct),
                key=lambda m: (min(direct[(a, m)], direct[(m, b)]), -m),
            )
            return path([f"gpu{a}", f"gpu{best}", f"gpu{b}"])
        sa = pcie_switch_of(a, gpus_per_pcie_switch)
        sb = pcie_switch_of(b, gpus_per_pcie_switch)
        return path([f"gpu{a}", *pcie_nodes(sa, sb), f"gpu{b}"])

    def up(g: int) -> tuple[int, ...]:
        k = nic_of(g, gpus_per_server, nics_per_server)
        sw = pcie_switch_of(g, gpus_per_pcie_switch)
        return path([f"gpu{g}", *pcie_nodes(sw, nic_switch[k]), f"nic{k}", SWITCH_NODE])

    def down(g: int) -> tuple[int, ...]:
        k = nic_of(g, gpus_per_server, nics_per_server)
        sw = pcie_switch_of(g, gpus_per_pcie_switch)
        return path([SWITCH_NODE, f"nic{k}", *pcie_nodes(nic_switch[k], sw), f"gpu{g}"])

    gpus = range(gpus_per_server)
    return ServerFabric(
        links=tuple(links),
        local_routes=tuple(tuple(local(a, b) for b in gpus) for a in gpus),
        up_routes=tuple(up(g) for g in gpus),
        down_routes=tuple(down(g) for g in gpus),
        gpu_nics=tuple(nic_of(g, gpus_per_server, nics_per_server) for g in gpus),
        has_nvlink=topology is not Topology.PCIE,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerGroup:
    """``servers`` identical servers: one device type, one GPU count, one inside topology.

    Attributes:
        servers: how many servers of this kind.
        device: the GPU model of every GPU in them.
        gpus_per_server: GPUs in each server.
        topology: how the GPUs inside a server are connected.
        intra_link: the NVLink spec (the per-GPU port into NVSwitch for ``nvswitch``, one NVLink
            for ``dgx1``); ``None`` for ``pcie``.
        pcie_link: the spec of every PCIe hop.
        nics_per_server: NICs in each server (NIC ``k`` is on rail ``k`` of a rail fabric).
        gpus_per_pcie_switch: GPUs under each PCIe switch.

    Raises:
        InputError: a count below 1, more than ``MAX_NICS_PER_GPU`` NICs per GPU, ``dgx1`` without
            exactly 8 GPUs, a missing NVLink spec for ``nvswitch``/``dgx1`` or one given for ``pcie``.
    """

    servers: int
    device: DeviceSpec
    gpus_per_server: int
    topology: Topology
    intra_link: LinkSpec | None
    pcie_link: LinkSpec
    nics_per_server: int = 1
    gpus_per_pcie_switch: int = 2

    def __post_init__(self) -> None:
        if not isinstance(self.device, DeviceSpec):
            raise invalid("device", self.device, "must be a DeviceSpec")
        try:
            object.__setattr__(self, "topology", Topology(self.topology))
        except ValueError:
            valid = ", ".join(t.value for t in Topology)
            raise invalid("intra", self.topology, f"topology must be one of {valid}") from None
        for name in ("servers", "gpus_per_server", "nics_per_server", "gpus_per_pcie_switch"):
            check_count(name, getattr(self, name))
        if self.nics_per_server > MAX_NICS_PER_GPU * self.gpus_per_server:
            raise invalid(
                "nics_per_server",
                self.nics_per_server,
                f"must be <= {MAX_NICS_PER_GPU} per GPU ({MAX_NICS_PER_GPU * self.gpus_per_server} "
                f"for {self.gpus_per_server} GPUs per server)",
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
        if not isinstance(self.pcie_link, LinkSpec):
            raise invalid("pcie_link", self.pcie_link, "must be a LinkSpec")

    @property
    def num_devices(self) -> int:
        """GPUs in the group: ``servers * gpus_per_server``."""
        return self.servers * self.gpus_per_server

    def same_server(self, other: ServerGroup) -> bool:
        """Whether ``other``'s servers are the same kind as these (everything but the count)."""
        return (
            self.device,
            self.gpus_per_server,
            self.topology,
            self.intra_link,
            self.pcie_link,
            self.nics_per_server,
            self.gpus_per_pcie_switch,
        ) == (
            other.device,
            other.gpus_per_server,
            other.topology,
            other.intra_link,
            other.pcie_link,
            other.nics_per_server,
            other.gpus_per_pcie_switch,
        )

    def fabric(self, nic: LinkSpec) -> ServerFabric:
        """The link template of one of these servers with ``nic`` ports."""
        return build_server_fabric(
            topology=self.topology,
            gpus_per_server=self.gpus_per_server,
            intra_link=self.intra_link,
            pcie_link=self.pcie_link,
            gpus_per_pcie_switch=self.gpus_per_pcie_switch,
            nic=nic,
            nics_per_server=self.nics_per_server,
        )
