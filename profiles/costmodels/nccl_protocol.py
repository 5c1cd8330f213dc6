"""NCCL's protocols: what one collective call costs besides its bytes on the wire.

NCCL runs every collective with one of three protocols (NCCL's tuner picks the algorithm and
protocol of least estimated time for each call's size): **LL** (low latency: 8-byte stores
carrying 4 bytes of data and a 4-byte flag, so the receiver sees data and its arrival in one
access; half of the wire carries flags), **LL128** (128-byte lines with one 8-byte flag) and
**Simple** (bulk copies, then a flag after a memory fence: the whole link, but a slower hand-off
per step). Its tuner (NVIDIA/nccl ``src/graph/tuning.cc``, commit 5067397,
``ncclTunerConstantsDefaults`` and ``ncclTopoTuneModel``) models a call as

    base latency (per call)  +  steps x hardware latency (per step)  +  bytes / bandwidth

where the base latency (``baseLatencies``, per algorithm and protocol) covers the kernel's
launch and set-up, the per-step latency (``hwLatencies``, per link class, algorithm and
protocol) the protocol's hand-off between neighbours at each of the algorithm's steps
(``2 (n - 1)`` for a ring all-reduce), and the bandwidth is the links' with a per-protocol
factor (LL ring: ``busBw * .5``).

pipesim keeps the wire in the route model (each step's chunks cross their routes' links at the
achievable bandwidth, :mod:`pipesim.profiles.costmodels.collective`) and adds, per call, the
protocol's launch, per step its hand-off, and sends ``wire_factor`` bytes per payload byte.

**Hand-offs by link class.** NCCL's per-step figure depends on the class of the links a step
crosses (``hwLatencies[NVLINK | PCI | NET]``; :class:`LinkClass`, a route's class being its
slowest kind of link: :func:`route_class`): ring LL 0.6, 1.0, 2.7 us; LL128 1.9, 2.5, 4.0 us;
Simple 3.4, 5.7, 14.0 us; tree LL 0.6, 1.0, 5.0; LL128 1.25, 1.9, 8.5; Simple 4.0, 4.0, 14.0 us
(:attr:`Protocol.ring_handoff_s`, :attr:`Protocol.tree_handoff_s`). Where a collective's cost
is given its links' classes (``link_class`` of
:func:`~pipesim.profiles.costmodels.collective.allreduce_curves`, the simulator's
:class:`~pipesim.simulator.network.Network` built with ``link_classes``) that figure is the
whole hand-off of a step inside a server: the NVLink and PCIe links' own latencies (the catalog's
~2 us, a ``cudaMemcpy``-level point-to-point figure) are not added to it, and no per-transfer
overhead is; a step that crosses the network adds its network links' latency (the wire and its
switches: 1.5 us per InfiniBand switch, 25 us over TCP, milliseconds over a WAN) to NCCL's NET
figure. So an 8-byte all-reduce on 8 NVLink GPUs costs NCCL's own estimate, ``6.6 + 14 x 0.6 =
15.0`` us (ring LL), as measured on a DGX H100 (13.7 us, ``experiments/validation/nccl.py``).
Without classes (the default of the cost callables) every step pays its route's latency plus
the protocol's NVLink figure (:attr:`Protocol.ring_step_s`), as before.

**LL128** (NCCL >= 2.5): 128-byte lines with one 8-byte flag, ``baseLatencies`` 14.0 us (ring and
tree), ring bandwidth ``busBw * 0.92`` (the comment gives 120/128: :attr:`LL128` sends
``1 / 0.92`` wire bytes per byte). NCCL enables it by default only where the graph's intra-node
paths are NVLink (``typeIntra <= PATH_NVB``), the NIC path is at most PXB (PXN on Hopper and
later), compute capability >= 7.0 and equal on all ranks unless all are >= 9.0 (the
``protoEnable`` pass of ``ncclTopoTuneModel``). pipesim offers it only with link classes, only
where no route of the collective is PCIe-class and the GPUs qualify (:func:`protocols_for`,
:class:`NcclGpus`, the generations of the catalog's devices: :data:`COMPUTE_CAPABILITY`); not
modelled: the per-channel cap of its bandwidth (20 GB/s per channel on Volta and Ampere, 36.7 on
Hopper: ``perChMaxRingLL128Bws``; pipesim has no channel count, NCCL's topology search gives it)
and the NIC's PCIe path (PXB at worst: every layout here puts each NIC under a PCIe switch
with GPUs, where NCCL's ring enters and leaves the server).

**The tuner's bandwidth factors** (with link classes). LL's bus bandwidth is capped at
``llMaxBws`` (:func:`ll_max_bus_bytes_per_s`: by GPU generation inside a node, by node count
across), the ring's ``min(llMaxBw, busBw * .5)``, the tree's ``min(llMaxBw, busBw * .92 / 3.8)``;
a tree all-reduce runs at ``busBw * .92`` (LL128 further ``7/9`` inside a node, ``120/128``
across). :func:`tuned` turns them into wire bytes per payload byte for one algorithm
(``Protocol.wire_factor`` of a copy), which every executor sends. The 2019 DGX-1 curve
held in ``experiments/validation/nccl.py`` was measured with NCCL before 2.5 (2.5.6, 2019-11-19,
is the first release with ``src/graph/tuning.cc`` and LL128): it is computed without link
classes (``nccl_tuner=False`` there).

**Ideal links.** Where every route of a collective has zero latency (and no per-transfer
overhead) nothing is charged: such links are ideal, as in the closed-form tests, and the
collective runs as :data:`IDEAL` (no launch, no hand-off, one wire byte per byte).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum

from pipesim.errors import check_nonneg, check_positive, invalid
from pipesim.profiles.hardware.fabric import LinkTable
from pipesim.profiles.hardware.topology import Link, LinkKind

__all__ = [
    "COMPUTE_CAPABILITY",
    "IDEAL",
    "LL",
    "LL128",
    "NVLS_PROTOCOL",
    "PROTOCOLS",
    "SIMPLE",
    "LinkClass",
    "NcclGpus",
    "Protocol",
    "best_protocol",
    "call_time_s",
    "link_classes",
    "ll_max_bus_bytes_per_s",
    "protocols_for",
    "route_class",
    "tuned",
]


class LinkClass(IntEnum):
    """NCCL's classes of hardware for its per-step latencies (``NCCL_HW_NVLINK``, ``_PCI``, ``_NET``),
    ordered from fastest to slowest hand-off."""

    NVLINK = 0
    PCI = 1
    NET = 2


_KIND_CLASS = {
    LinkKind.NVLINK: LinkClass.NVLINK,
    LinkKind.PCIE: LinkClass.PCI,
    LinkKind.NETWORK: LinkClass.NET,
}


def link_classes(links: Iterable[Link] | LinkTable) -> list[LinkClass]:
    """NCCL's class of each of a cluster's links, in index order (NVLink, PCIe, network)."""
    if isinstance(links, LinkTable):
        return [_KIND_CLASS[kind] for kind in links.kinds()]
    return [_KIND_CLASS[link.kind] for link in links]


def route_class(route: Sequence[int], link_class: Callable[[int], LinkClass]) -> LinkClass:
    """The class of a route: its slowest link's (NET if it crosses the network, else PCI if it
    crosses PCIe, else NVLINK); NVLINK for an empty route."""
    return max((link_class(link) for link in route), default=LinkClass.NVLINK)


@dataclass(frozen=True, slots=True, kw_only=True)
class Protocol:
    """One NCCL protocol's costs besides the route's latency and bandwidth (module docstring).

    Attributes:
        name: ``LL``, ``Simple``, ``NVLS`` or ``ideal``.
        ring_launch_s: per call of a ring (or hierarchical) collective, seconds.
        tree_launch_s: per call of a tree all-reduce, seconds.
        ring_step_s: per step of a ring, seconds (the protocol's hand-off between neighbours).
        tree_step_s: per step of a tree, seconds.
        wire_factor: bytes on the wire per payload byte (LL: 2, half of each 8-byte store is
            its flag).
        ring_handoff_s: per step of a ring by :class:`LinkClass` (NVLink, PCI, NET), seconds:
            the whole hand-off where link classes are known; default 0 each.
        tree_handoff_s: the same for a tree step.
        tree_bw_factor: NCCL's bus bandwidth of a tree all-reduce with this protocol as a share
            of the links' over several servers (where link classes are known; module docstring).
        tree_bw_factor_one_node: the same inside one server.
        ll_capped: whether NCCL caps this protocol's bus bandwidth at ``llMaxBws``
            (:func:`ll_max_bus_bytes_per_s`; LL only).
    """

    name: str
    ring_launch_s: float
    tree_launch_s: float
    ring_step_s: float
    tree_step_s: float
    wire_factor: float
    ring_handoff_s: tuple[float, float, float] = field(default=(0.0, 0.0, 0.0))
    tree_handoff_s: tuple[float, float, float] = field(default=(0.0, 0.0, 0.0))
    tree_bw_factor: float = 1.0
    tree_bw_factor_one_node: float = 1.0
    ll_capped: bool = False

    def __post_init__(self) -> None:
        for name in ("ring_launch_s", "tree_launch_s", "ring_step_s", "tree_step_s"):
            check_nonneg(name, getattr(self, name))
        for name in ("wire_factor", "tree_bw_factor", "tree_bw_factor_one_node"):
            check_positive(name, getattr(self, name))
        for name in ("ring_handoff_s", "tree_handoff_s"):
            values = getattr(self, name)
            if len(values) != len(LinkClass):
                raise invalid(name, values, "must give one figure per link class (NVLink, PCI, NET)")
            for i, v in enumerate(values):
                check_nonneg(f"{name}[{i}]", v)

    def launch_s(self, *, tree: bool = False) -> float:
        """Seconds per call (the tree's or the ring's)."""
        return self.tree_launch_s if tree else self.ring_launch_s

    def step_s(self, *, tree: bool = False) -> float:
        """Seconds per step (the tree's or the ring's) added to the route's latency, where link
        classes are not known (the NVLink figure)."""
        return self.tree_step_s if tree else self.ring_step_s

    def handoff_s(self, link_class: LinkClass, *, tree: bool = False) -> float:
        """Seconds of a step's whole hand-off over links of ``link_class`` (the tree's or the ring's)."""
        return (self.tree_handoff_s if tree else self.ring_handoff_s)[link_class]


_US = 1e-6
_TREE = 0.92
"""NCCL's factor on a tree all-reduce's bus bandwidth, every protocol (``busBw * .92``)."""

LL = Protocol(
    name="LL",
    ring_launch_s=6.6 * _US,
    tree_launch_s=6.8 * _US,
    ring_step_s=0.6 * _US,
    tree_step_s=0.6 * _US,
    wire_factor=2.0,
    ring_handoff_s=(0.6 * _US, 1.0 * _US, 2.7 * _US),
    tree_handoff_s=(0.6 * _US, 1.0 * _US, 5.0 * _US),
    tree_bw_factor=_TREE / 3.8,
    tree_bw_factor_one_node=_TREE / 3.8,
    ll_capped=True,
)
"""NCCL's LL: ``baseLatencies`` ring 6.6 us, tree 6.8 us; ``hwLatencies`` per step NVLink 0.6 us
(ring and tree), PCI 1.0, NET 2.7 (ring) and 5.0 us (tree); half of the wire carries flags (NCCL's
ring model: ``busBw * .5``); the tree ``busBw * .92 / 3.8``; both capped at ``llMaxBws``."""

LL128 = Protocol(
    name="LL128",
    ring_launch_s=14.0 * _US,
    tree_launch_s=14.0 * _US,
    ring_step_s=1.9 * _US,
    tree_step_s=1.25 * _US,
    wire_factor=1.0 / 0.92,
    ring_handoff_s=(1.9 * _US, 2.5 * _US, 4.0 * _US),
    tree_handoff_s=(1.25 * _US, 1.9 * _US, 8.5 * _US),
    tree_bw_factor=_TREE * 120.0 / 128.0,
    tree_bw_factor_one_node=_TREE * 7.0 / 9.0,
)
"""NCCL's LL128: ``baseLatencies`` 14.0 us (ring and tree); ``hwLatencies`` per step NVLink 1.9 us
(ring), 1.25 (tree), PCI 2.5 / 1.9, NET 4.0 / 8.5; ring ``busBw * 0.92``, tree ``busBw * .92``
times 120/128 across servers, 7/9 inside one (offered only with link classes, where NCCL enables
it: :func:`protocols_for`)."""

SIMPLE = Protocol(
    name="Simple",
    ring_launch_s=8.4 * _US,
    tree_launch_s=8.4 * _US,
    ring_step_s=3.4 * _US,
    tree_step_s=4.0 * _US,
    wire_factor=1.0,
    ring_handoff_s=(3.4 * _US, 5.7 * _US, 14.0 * _US),
    tree_handoff_s=(4.0 * _US, 4.0 * _US, 14.0 * _US),
    tree_bw_factor=_TREE,
    tree_bw_factor_one_node=_TREE,
)
"""NCCL's Simple: ``baseLatencies`` 8.4 us (ring and tree); ``hwLatencies`` per step NVLink ring
3.4 us, tree 4.0; PCI 5.7 / 4.0; NET 14.0 / 14.0; the ring the link's whole bandwidth, the tree
``busBw * .92``."""

NVLS_PROTOCOL = Protocol(
    name="NVLS",
    ring_launch_s=25.0 * _US,
    tree_launch_s=25.0 * _US,
    ring_step_s=0.0,
    tree_step_s=0.0,
    wire_factor=1.0,
)
"""NVLink SHARP (Simple only): NCCL's latency of an NVLS all-reduce inside one server is its
``hwLatencies`` NVLink NVLS Simple figure, 25 us, with no base latency and no per-step term."""

IDEAL = Protocol(
    name="ideal", ring_launch_s=0.0, tree_launch_s=0.0, ring_step_s=0.0, tree_step_s=0.0, wire_factor=1.0
)
"""No cost besides the wire: collectives over ideal (zero-latency) routes."""

PROTOCOLS = (SIMPLE, LL)
"""The protocols a collective chooses from without link classes, in tie-breaking order (Simple first)."""


COMPUTE_CAPABILITY: Mapping[str, int] = {
    "pascal": 60,
    "volta": 70,
    "turing": 75,
    "ampere": 80,
    "ada": 89,
    "hopper": 90,
    "blackwell": 100,
}
"""CUDA compute capability (major x 10 + minor) of each NVIDIA GPU generation of the device catalog
(``DeviceSpec.architecture``), as NCCL compares it: P100 6.0, V100 7.0, T4 7.5, A100 8.0 (the
generation's first; GA10x parts are 8.6, the same tuning row), L4/L40S 8.9, H100/H200 9.0, B200
10.0 (NVIDIA CUDA C++ Programming Guide, "Compute Capabilities"; NVIDIA's CUDA GPUs list). AMD
generations (``cdna2``, ``cdna3``) are absent: their collectives are RCCL's, not modelled here."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NcclGpus:
    """The compute capabilities of a communicator's GPUs, as NCCL's tuner sees them
    (``minCompCap``, ``maxCompCap``); ``None`` where some member's generation is not known
    (a custom device, an AMD GPU): then no generation-dependent figure applies."""

    min_compute_capability: int | None = None
    max_compute_capability: int | None = None

    @classmethod
    def of(cls, architectures: Iterable[str | None]) -> NcclGpus:
        """The capabilities of GPUs of these catalog generations (:data:`COMPUTE_CAPABILITY`)."""
        ccs = [COMPUTE_CAPABILITY.get(a) if a is not None else None for a in architectures]
        known = [c for c in ccs if c is not None]
        if not known or len(known) != len(ccs):
            return cls()
        return cls(min_compute_capability=min(known), max_compute_capability=max(known))

    def ll128_enabled(self) -> bool:
        """Whether NCCL enables LL128 by default on these GPUs: compute capability 7.0 or more,
        the same on every rank unless all are 9.0 or more (``ncclTopoTuneModel``'s ``protoEnable``
        pass); ``True`` where the generation is not known (as before the gating was modelled)."""
        lo, hi = self.min_compute_capability, self.max_compute_capability
        if lo is None or hi is None:
            return True
        return lo >= 70 and (lo == hi or lo >= 90)


_GBS = 1e9
_LL_MAX_ONE_NODE = {70: 39.0, 80: 87.7, 90: 141.0, 100: 2 * 141.0}
"""``llMaxBws`` for one node, GB/s, by NCCL's compute capability row (Volta, Ampere, Hopper,
Blackwell: ``compCapIndex``, a GPU below 8.0 counting as Volta)."""
_LL_MAX_NODES = {2: 39.0, 3: 20.4}
"""``llMaxBws`` across nodes, GB/s, for 2 nodes and for more: NCCL's row for an Intel (or any
non-AMD) CPU, ``index1 = 0``; its AMD row (22.5, 19.0) is not taken: clusters here do not name
their CPUs."""


def ll_max_bus_bytes_per_s(gpus: NcclGpus, nodes: int) -> float:
    """NCCL's cap on LL's bus bandwidth (``llMaxBws``, NVIDIA/nccl ``src/graph/tuning.cc`` at
    commit 5067397), bytes/s: inside one node by the GPUs' generation (Volta 39.0 GB/s, Ampere
    87.7, Hopper 141.0, Blackwell 282.0), across ``nodes`` by the host CPU (39.0 for two nodes,
    20.4 for more: NCCL's Intel row); ``inf`` for one node of GPUs of unknown generation.

    Raises:
        InputError: ``nodes`` < 1.
    """
    if nodes < 1:
        raise invalid("nodes", nodes, "must be at least 1")
    if nodes > 1:
        return _LL_MAX_NODES[min(nodes, 3)] * _GBS
    cc = gpus.min_compute_capability
    if cc is None:
        return math.inf
    row = 100 if cc >= 100 else 90 if cc >= 90 else 80 if cc >= 80 else 70
    return _LL_MAX_ONE_NODE[row] * _GBS


def protocols_for(classes: Sequence[LinkClass], gpus: NcclGpus | None = None) -> tuple[Protocol, ...]:
    """The protocols a collective whose routes are of ``classes`` chooses from where link classes
    are known, in tie-breaking order: Simple, LL and, where NCCL enables it, LL128: no route
    PCIe-class (LL128 only over NVLink inside a server, module docstring) and GPUs of compute
    capability 7.0 or more (:meth:`NcclGpus.ll128_enabled`; ``gpus`` unknown: enabled)."""
    if LinkClass.PCI in classes or (gpus is not None and not gpus.ll128_enabled()):
        return PROTOCOLS
    return (SIMPLE, LL, LL128)


def tuned(protocol: Protocol, *, tree: bool, one_node: bool, bus_rate: float, ll_cap: float) -> Protocol:
    """``protocol`` with the wire bytes per payload byte NCCL's tuner gives it for one algorithm
    (where link classes are known): the ring's ``wire_factor``; for a tree ``1 / tree_bw_factor``
    (``one_node``: ``tree_bw_factor_one_node``); for LL at least ``bus_rate / ll_cap``, so that its
    bus bandwidth on links of ``bus_rate`` bytes/s (the algorithm's, before any protocol factor)
    is at most ``ll_cap`` (:func:`ll_max_bus_bytes_per_s`). The protocol itself where nothing
    changes, else a copy of the same name (every executor sends ``wire_factor`` bytes per byte,
    so the cap holds in the simulator as in the estimate)."""
    factor = protocol.wire_factor
    if tree:
        factor = 1.0 / (protocol.tree_bw_factor_one_node if one_node else protocol.tree_bw_factor)
    if protocol.ll_capped and 0 < bus_rate < math.inf and ll_cap < math.inf:
        factor = max(factor, bus_rate / ll_cap)
    return protocol if factor == protocol.wire_factor else replace(protocol, wire_factor=factor)


def call_time_s(
    protocol: Protocol,
    steps: int,
    wire_s: Callable[[float], float],
    nbytes: float,
    *,
    tree: bool = False,
    link_class: LinkClass | None = None,
) -> float:
    """Seconds of one call of ``nbytes`` with ``protocol``: its launch, ``steps`` hand-offs (NCCL's
    figure for ``link_class``; without one, the NVLink figure added to the wire's latencies) and
    ``wire_s(wire_factor * nbytes)`` (the algorithm's time on the routes, seconds)."""
    step = protocol.step_s(tree=tree) if link_class is None else protocol.handoff_s(link_class, tree=tree)
    return protocol.launch_s(tree=tree) + steps * step + wire_s(protocol.wire_factor * nbytes)


def best_protocol(
    steps: int,
    wire_s: Callable[[float], float],
    nbytes: float,
    *,
    timed: bool,
    tree: bool = False,
    link_class: LinkClass | None = None,
) -> tuple[Protocol, float]:
    """The protocol of least :func:`call_time_s` for ``nbytes`` (ties to Simple) and its time,
    seconds, as NCCL's tuner chooses (with ``link_class``, among :func:`protocols_for` it);
    :data:`IDEAL` and the bare wire time where not ``timed`` (every route of the collective ideal)."""
    if not timed:
        return IDEAL, wire_s(nbytes)
    protocols = PROTOCOLS if link_class is None else protocols_for([link_class])
    best, best_s = IDEAL, math.inf
    for protocol in protocols:
        t = call_time_s(protocol, steps, wire_s, nbytes, tree=tree, link_class=link_class)
        if t < best_s:
            best, best_s = protocol, t
    return best, best_s
