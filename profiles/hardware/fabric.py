"""The network between servers: one non-blocking switch, or a rail-optimised fat-tree.

Two kinds of fabric (:class:`FabricKind`):

- ``switch``: every NIC has one link each way to one non-blocking ``switch`` node, so the NIC
  links are the only network limits (the model of pipesim's small presets).
- ``rail``: a **rail-optimised fat-tree**, as in NVIDIA DGX SuperPOD. NIC ``k`` of every server
  is on rail ``k``. Servers are grouped into scalable units (SUs) of ``servers_per_leaf``
  servers; each SU has one leaf switch per rail, and NIC ``k`` of each server of the SU links to
  the SU's rail-``k`` leaf (node ``su<U>.leaf<K>``). Leaves link up to a spine level, and with
  ``levels = 3`` pods of ``units_per_pod`` SUs each have their own spine level
  (``pod<P>.spine``), all pods linked up to one ``core`` level.

Each switch level is modelled as one non-blocking node whose capacity limits are the links into
and out of it: every leaf has one **uplink** each way to its spine node, with bandwidth
``servers_per_leaf x NIC effective bandwidth / oversubscription`` (the leaf's downlink total over
the factor: 1 is a full fat-tree, 2 halves what a leaf can send up); in a three-level tree every
pod's spine node has one link each way to ``core`` carrying the sum of its leaves' uplinks (the
levels above the leaf are non-blocking relative to what the leaves send up). A last SU with fewer
servers keeps the full leaf uplink (the switch is cabled for a whole SU). Links are linear in the
number of servers: ``2 x SUs x rails`` leaf uplinks plus ``2 x pods`` core links.

Latency: a NIC link gets half the NIC spec's latency (a catalog latency is endpoint to endpoint
through one switch); every uplink crosses one more switch and gets ``switch_latency_s``.

Routes across servers (see :mod:`pipesim.profiles.hardware.cluster_type`) go up to the lowest
common level: same leaf -> NIC, leaf, NIC; same pod -> leaf, spine, leaf; else leaf, pod spine,
core, pod spine, leaf. **Cross-rail traffic uses PXN**: as NCCL's PXN (NCCL >= 2.12) does, the
data first moves over NVLink inside the source server to the GPU on the destination's rail,
which sends it on its own rail. When the source server has no NVLink (``pcie``) or no GPU on that
rail (servers with fewer NICs), the route goes up its own rail and crosses rails at the spine
(the spine level joins all rails of its pod).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import overload

from pipesim.errors import check_count, check_nonneg, invalid
from pipesim.profiles.hardware.specs import LinkSpec
from pipesim.profiles.hardware.topology import SWITCH_NODE, Link, LinkKind, ServerFabric

__all__ = [
    "DEFAULT_SWITCH_LATENCY_S",
    "FabricKind",
    "FabricSpec",
    "LinkTable",
    "RailNetwork",
    "ServerBlock",
]

DEFAULT_SWITCH_LATENCY_S = 130e-9
"""Port-to-port latency one more InfiniBand switch adds, seconds: 130 ns, the figure NVIDIA gives
for its Quantum HDR switches (NVIDIA Quantum QM8700 series datasheet, "130ns port-to-port
latency"); NDR (Quantum-2) switches are of the same order."""


class FabricKind(str, Enum):
    """How servers are networked."""

    SWITCH = "switch"
    """One non-blocking switch joins every NIC."""
    RAIL = "rail"
    """A rail-optimised fat-tree of leaf, spine (and core) switches."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class FabricSpec:
    """The network fabric between servers (see the module docstring).

    Attributes:
        kind: ``switch`` or ``rail``.
        levels: switch levels of a rail fat-tree, 2 (leaf, spine) or 3 (leaf, spine, core).
        servers_per_leaf: servers of one scalable unit (servers under each leaf of a rail).
        units_per_pod: scalable units under one pod's spines (three levels only).
        oversubscription: leaf downlink bandwidth / leaf uplink bandwidth, >= 1.
        switch_latency_s: latency of each extra switch a route crosses, seconds.

    Raises:
        InputError: levels not 2 or 3, a count below 1, oversubscription below 1 or not finite,
            a negative latency, or non-default rail fields on a ``switch`` fabric.
    """

    kind: FabricKind = FabricKind.SWITCH
    levels: int = 2
    servers_per_leaf: int = 32
    units_per_pod: int = 4
    oversubscription: float = 1.0
    switch_latency_s: float = DEFAULT_SWITCH_LATENCY_S

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", FabricKind(self.kind))
        except ValueError:
            valid = ", ".join(k.value for k in FabricKind)
            raise invalid("fabric", self.kind, f"must be one of {valid}") from None
        if self.levels not in (2, 3) or isinstance(self.levels, bool):
            raise invalid("fabric_levels", self.levels, "must be 2 or 3")
        check_count("servers_per_leaf", self.servers_per_leaf)
        check_count("units_per_pod", self.units_per_pod)
        factor = self.oversubscription
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not 1 <= factor < float("inf"):
            raise invalid("oversubscription", factor, "must be a finite number >= 1")
        object.__setattr__(self, "oversubscription", float(factor))
        check_nonneg("switch_latency_s", self.switch_latency_s)
        defaults = (2, 32, 4, 1.0, DEFAULT_SWITCH_LATENCY_S)
        rail_fields = (
            self.levels,
            self.servers_per_leaf,
            self.units_per_pod,
            self.oversubscription,
            self.switch_latency_s,
        )
        if self.kind is FabricKind.SWITCH and rail_fields != defaults:
            raise invalid(
                "fabric",
                "switch",
                "fabric_levels, servers_per_leaf, units_per_pod, oversubscription and "
                "switch_latency apply only to fabric = rail",
            )

    def describe(self) -> str:
        """One line: ``non-blocking switch`` or e.g. ``rail-optimised 3-level fat-tree, ...``."""
        if self.kind is FabricKind.SWITCH:
            return "one non-blocking switch"
        pods = f", {self.units_per_pod} SUs per pod" if self.levels == 3 else ""
        ratio = (
            "non-blocking" if self.oversubscription == 1 else f"{self.oversubscription:g}:1 oversubscribed"
        )
        return (
            f"rail-optimised {self.levels}-level fat-tree, {self.servers_per_leaf} servers per leaf{pods}, "
            f"{ratio}, {self.switch_latency_s * 1e9:.3g} ns per extra switch"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RailNetwork:
    """The switch-to-switch links of a rail fabric and the paths through them.

    Link ``i`` of this network is link ``base + i`` of the cluster: first ``2 x units x rails``
    leaf links (leaf ``(u, r)``: up at ``2 (u rails + r)``, down right after), then, for three
    levels, ``2 x pods`` core links (pod ``p``: up, then down).

    Attributes:
        spec: the fabric.
        nic: one NIC port's spec (the leaf downlinks).
        rails: rails (the most NICs any server has).
        num_servers: servers in the cluster.
        base: index of this network's first link in the cluster.
    """

    spec: FabricSpec
    nic: LinkSpec
    rails: int
    num_servers: int
    base: int

    @property
    def units(self) -> int:
        """Scalable units (a last one may be partial)."""
        return -(-self.num_servers // self.spec.servers_per_leaf)

    @property
    def pods(self) -> int:
        """Pods (1 for a two-level tree)."""
        return -(-self.units // self.spec.units_per_pod) if self.spec.levels == 3 else 1

    @property
    def num_links(self) -> int:
        """Directed switch-to-switch links."""
        return 2 * self.units * self.rails + (2 * self.pods if self.spec.levels == 3 else 0)

    def unit_of(self, server: int) -> int:
        """The scalable unit of ``server``."""
        return server // self.spec.servers_per_leaf

    def leaf_node(self, server: int, rail: int) -> str:
        """The node name of the rail-``rail`` leaf above ``server``."""
        return f"su{self.unit_of(server)}.leaf{rail}"

    def _spine_node(self, unit: int) -> str:
        return f"pod{unit // self.spec.units_per_pod}.spine" if self.spec.levels == 3 else "spine"

    def uplink_spec(self) -> LinkSpec:
        """The spec of one leaf uplink (each direction)."""
        s = self.spec
        return LinkSpec(
            name=f"{self.nic.name}-leaf-uplink",
            bandwidth_bytes_per_s=self.nic.bandwidth_bytes_per_s * s.servers_per_leaf / s.oversubscription,
            latency_s=s.switch_latency_s,
            achievable_fraction=self.nic.achievable_fraction,
            source=(
                f"{s.servers_per_leaf} x {self.nic.name} per leaf / oversubscription {s.oversubscription:g} "
                "(pipesim rail fat-tree model)"
            ),
        )

    def core_spec(self) -> LinkSpec:
        """The spec of one pod-to-core link (each direction): the pod's leaf uplinks together."""
        up = self.uplink_spec()
        lanes = self.spec.units_per_pod * self.rails
        return LinkSpec(
            name=f"{self.nic.name}-pod-uplink",
            bandwidth_bytes_per_s=up.bandwidth_bytes_per_s * lanes,
            latency_s=up.latency_s,
            achievable_fraction=up.achievable_fraction,
            source=f"{lanes} leaf uplinks per pod (pipesim rail fat-tree model)",
        )

    def link(self, i: int) -> Link:
        """Link ``i`` of this network (0-based, not the cluster index)."""
        leaf_links = 2 * self.units * self.rails
        if i < leaf_links:
            leaf, down = divmod(i, 2)
            unit, rail = divmod(leaf, self.rails)
            a, b = f"su{unit}.leaf{rail}", self._spine_node(unit)
            spec = self.uplink_spec()
        else:
            pod, down = divmod(i - leaf_links, 2)
            a, b = f"pod{pod}.spine", "core"
            spec = self.core_spec()
        src, dst = (b, a) if down else (a, b)
        return Link(
            index=self.base + i,
            name=f"{src}->{dst}",
            kind=LinkKind.NETWORK,
            src_node=src,
            dst_node=dst,
            bandwidth_bytes_per_s=spec.effective_bandwidth_bytes_per_s,
            latency_s=spec.latency_s,
            spec=spec,
        )

    def path(self, src_server: int, src_rail: int, dst_server: int, dst_rail: int) -> tuple[int, ...]:
        """Cluster link indices from the source leaf to the destination leaf (``()`` when they are one).

        The leaves are rail ``src_rail`` above ``src_server`` and rail ``dst_rail`` above ``dst_server``.
        """
        su, du = self.unit_of(src_server), self.unit_of(dst_server)
        if su == du and src_rail == dst_rail:
            return ()
        up = self.base + 2 * (su * self.rails + src_rail)
        down = self.base + 2 * (du * self.rails + dst_rail) + 1
        if self.spec.levels == 2:
            return (up, down)
        sp, dp = su // self.spec.units_per_pod, du // self.spec.units_per_pod
        if sp == dp:
            return (up, down)
        core = self.base + 2 * self.units * self.rails
        return (up, core + 2 * sp, core + 2 * dp + 1, down)


@dataclass(frozen=True, slots=True)
class ServerBlock:
    """A run of identical servers in a cluster: where their devices and links start.

    Attributes:
        first_server: global index of the first server.
        servers: how many.
        first_device: global id of the first server's GPU 0.
        gpus: GPUs per server.
        first_link: cluster index of the first server's first link.
        template: the servers' link template (link ``i`` of server ``s`` is
            ``first_link + (s - first_server) * len(template.links) + i``).
    """

    first_server: int
    servers: int
    first_device: int
    gpus: int
    first_link: int
    template: ServerFabric

    def link_base(self, server: int) -> int:
        """Cluster index of ``server``'s first link."""
        return self.first_link + (server - self.first_server) * len(self.template.links)


class LinkTable(Sequence[Link]):
    """Every directed link of a cluster, made on demand from the server templates and the fabric.

    Indexing builds the :class:`~pipesim.profiles.hardware.topology.Link` (so a cluster of any size
    holds only its templates); links are server-major, then the fabric's switch-to-switch links.
    Two tables are equal when they hold the same links.
    """

    __slots__ = ("_blocks", "_len", "_network", "_starts")

    def __init__(self, blocks: Sequence[ServerBlock], network: RailNetwork | None) -> None:
        self._blocks = tuple(blocks)
        self._starts = [b.first_link for b in self._blocks]
        self._network = network
        last = self._blocks[-1]
        server_links = last.first_link + last.servers * len(last.template.links)
        self._len = server_links + (network.num_links if network is not None else 0)

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Link: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Link, ...]: ...

    def __getitem__(self, index: int | slice) -> Link | tuple[Link, ...]:
        if isinstance(index, slice):
            return tuple(self._link(i) for i in range(*index.indices(self._len)))
        i = index.__index__()
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"link index {index} out of range (0..{self._len - 1})")
        return self._link(i)

    def __iter__(self) -> Iterator[Link]:
        return (self._link(i) for i in range(self._len))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LinkTable):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LinkTable({self._len} links)"

    def bandwidths_bytes_per_s(self) -> list[float]:
        """Every link's effective bandwidth, bytes/s, in index order, without making the links."""
        out: list[float] = []
        for block in self._blocks:
            out.extend(
                [lk.spec.effective_bandwidth_bytes_per_s for lk in block.template.links] * block.servers
            )
        if self._network is not None:
            out.extend(self._network.link(i).bandwidth_bytes_per_s for i in range(self._network.num_links))
        return out

    def latencies_s(self) -> list[float]:
        """Every link's latency, seconds, in index order, without making the links."""
        out: list[float] = []
        for block in self._blocks:
            out.extend([lk.latency_s for lk in block.template.links] * block.servers)
        if self._network is not None:
            out.extend(self._network.link(i).latency_s for i in range(self._network.num_links))
        return out

    def kinds(self) -> list[LinkKind]:
        """Every link's kind, in index order, without making the links."""
        out: list[LinkKind] = []
        for block in self._blocks:
            out.extend([lk.kind for lk in block.template.links] * block.servers)
        if self._network is not None:
            out.extend([LinkKind.NETWORK] * self._network.num_links)
        return out

    def _link(self, i: int) -> Link:
        net = self._network
        if net is not None and i >= net.base:
            return net.link(i - net.base)
        block = self._blocks[bisect.bisect_right(self._starts, i) - 1]
        per_server = len(block.template.links)
        offset, t = divmod(i - block.first_link, per_server)
        server = block.first_server + offset
        local = block.template.links[t]
        prefix = f"s{server}."
        src = prefix + local.src if local.src != SWITCH_NODE else self._far_end(server, local.dst)
        dst = prefix + local.dst if local.dst != SWITCH_NODE else self._far_end(server, local.src)
        return Link(
            index=i,
            name=f"{src}->{dst}",
            kind=local.kind,
            src_node=src,
            dst_node=dst,
            bandwidth_bytes_per_s=local.spec.effective_bandwidth_bytes_per_s,
            latency_s=local.latency_s,
            spec=local.spec,
        )

    def _far_end(self, server: int, nic_node: str) -> str:
        """The switch node a server's NIC (``"nic<K>"``) links to."""
        if self._network is None:
            return SWITCH_NODE
        return self._network.leaf_node(server, int(nic_node[len("nic") :]))
