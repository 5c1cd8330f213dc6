"""Collective cost: route-based time estimates of a gradient all-reduce, shared by planner and simulator.

The estimate runs on the routes a cluster gives, so it sees two-hop NVLink paths, PCIe switches
and NICs shared by several members. The algorithms are sequences of *steps* in which every
member sends one chunk over its route at once:

* **ring** over ``n`` members (in the given order): ``2 (n - 1)`` steps of ``S / n`` bytes
  (reduce-scatter, then all-gather; Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms
  for clusters of workstations", JPDC 2009).
* **hierarchical** over ``k`` servers of ``g`` members each (members grouped by ``server_of``,
  servers in order of first appearance): ``g - 1`` intra-server ring steps of ``S / g`` bytes
  (reduce-scatter), ``2 (k - 1)`` steps of ``S / (g k)`` bytes on ``g`` concurrent inter-server
  rings (one per local rank), ``g - 1`` intra-server steps of ``S / g`` (all-gather). Uneven
  servers fall back to a ring over the members ordered by server; one server or one member per
  server is the plain ring.

Each step's time is a convex piecewise-linear function of the bytes
(:mod:`pipesim.profiles.costmodels.lines`: a chunk pays its route's latency and its bytes at
its links' equal share among the step's chunks; other traffic is not seen), so a whole
algorithm is one too, kept as its :data:`~pipesim.profiles.costmodels.lines.Lines` for cheap
evaluation at many sizes.

* **tree**: NCCL's double binary tree, a chain inside each server and two binary trees over the
  servers, pipelined in chunks (:mod:`pipesim.profiles.costmodels.double_tree`); its latency
  grows with the trees' depth, not with the member count as the ring's ``2 (n - 1)`` steps do.
* **several rings** (NCCL's channels over a direct-link mesh such as the DGX-1's hybrid
  cube-mesh): where every pair of consecutive members can be joined by direct links (one-hop
  routes), :func:`~pipesim.profiles.costmodels.ring_topology.ring_set` packs the most
  edge-disjoint Hamiltonian cycles it can into those links, counting a bundle of ``k`` links as
  ``k`` units, and runs each cycle in both directions, each ring carrying ``S / rings``. On a
  DGX-1 (6 NVLinks per V100, four peers, two doubled) that is 3 cycles and 6 rings, every NVLink
  busy in both directions, as NCCL's several rings over the cube-mesh ("three interwoven rings of
  single NVLink connections", NVIDIA DGX-1 with V100 system architecture whitepaper
  WP-08437-002). Across ``k`` servers of ``g > 1`` members each, NCCL's ``g`` rotated rings,
  one per NIC (:func:`~pipesim.profiles.costmodels.ring_topology.server_rings`, its sources).
  Elsewhere (one server on switches or PCIe, uneven servers, one member per server) one ring
  over the given order. The hierarchical form's intra-server phases run each
  server's ring set likewise.
* **nvls** (NVLink SHARP, NCCL >= 2.17 on NVSwitch-3 servers, H100 and later): the switch
  reduces. Every member sends its ``S`` bytes once (the switch pulls them for every shard's
  ``multimem.ld_reduce``) plus its reduced shard ``S / n`` once (the ``multimem.st`` that the
  switch multicasts), and receives as much: ``(1 + 1 / n) S`` each way on its own port, all
  members at once, at :data:`NVLS_FRACTION` of the port's achievable rate (NVIDIA/nccl issue
  2072 describes the two instructions; NVIDIA/nccl-tests issue 212, the NCCL maintainer: "On 8
  GPUs, you should reach a peak busBw of ~480GB/s (algbw ~275GB/s)" on H100). It applies only
  where it is asked for (``algorithm="nvls"``) and every member reaches the others through one
  switch (the same first and last link on all its routes); the route model does not know the
  NVSwitch generation, so ``auto`` never picks it.

**NCCL's protocols.** The lines above are the wire. A call adds its NCCL protocol's launch, a
hand-off per step and sends the protocol's wire bytes (LL: 2 per byte), the protocol of least
time chosen per size as NCCL's tuner does (:mod:`pipesim.profiles.costmodels.nccl_protocol`;
:meth:`AllReduceCurves.timed_call`): LL for small, latency-bound messages, LL128 for medium ones
over NVLink, Simple for large ones, so the bus bandwidth keeps rising over tens of MiB as
measured. Given the links' classes (``link_class``), a step's hand-off is NCCL's figure for its
class and the lines carry only the network links' latency, NVLS's 25 us is its whole latency,
and NCCL's tuner factors apply (LL's ``llMaxBws`` cap by the members' GPU generation and node
count, the tree's own protocol factors, LL128 only on GPUs that enable it); without them a step
pays its routes' latency in the lines plus the NVLink figure (and no LL128). Routes that are all ideal (zero
latency, no overhead) pay nothing extra.

``auto`` takes the fastest of the algorithms that apply (ties go to ring, then hierarchical):
hierarchical with even servers, tree with members on two servers or more (NCCL's trees span
servers, a chain within each); as NCCL's tuner, whose model picks ring for large messages and
tree where latency dominates at scale.

Everything here is pure: routes, bandwidths and latencies come in as callables, so this module
serves the planner (on a :class:`~pipesim.profiles.hardware.cluster.Cluster`) and the simulator
(on its network) alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from pipesim.errors import check_nonneg, invalid, parse_name
from pipesim.profiles.costmodels.double_tree import TreeCost, double_binary_tree, tree_cost
from pipesim.profiles.costmodels.lines import (
    Lines,
    add_lines,
    eval_lines,
    prune_lines,
    scale_lines,
    step_lines,
)
from pipesim.profiles.costmodels.nccl_protocol import (
    IDEAL,
    NVLS_PROTOCOL,
    PROTOCOLS,
    LinkClass,
    NcclGpus,
    Protocol,
    ll_max_bus_bytes_per_s,
    protocols_for,
    route_class,
    tuned,
)
from pipesim.profiles.costmodels.ring_topology import (
    LinkValue,
    RouteFn,
    group_by_server,
    nvls_ports,
    ring_set,
)
from pipesim.profiles.hardware.cluster_type import Cluster

__all__ = [
    "NVLS_FRACTION",
    "AllReduceAlgorithm",
    "AllReduceCurves",
    "AllReduceOverlap",
    "allreduce_curves",
    "allreduce_time_s",
]

NVLS_FRACTION = 309.4 / 370.0
"""The rate NVLink SHARP moves per port and direction, as a share of the rate NCCL's ring
reaches on the same port (the port's achievable bandwidth in the link catalog), 0.836. Both
from the NCCL maintainer on 8 x H100 (NVIDIA/nccl-tests issue 212, 2024-05-06): the ring's
effective NVLink bandwidth is 370 GB/s; NVLS reaches algbw ~275 GB/s, i.e. ``275 (1 + 1/8)``
= 309.4 GB/s on each port and direction. Checked against other GPU counts and H200 in
``experiments/validation/nccl.py``."""


class AllReduceAlgorithm(str, Enum):
    """How a stage's replicas all-reduce their gradients (see the module docstring)."""

    RING = "ring"
    HIERARCHICAL = "hierarchical"
    TREE = "tree"
    NVLS = "nvls"
    AUTO = "auto"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> AllReduceAlgorithm:
        """The algorithm called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: ``name`` is not ``ring``, ``hierarchical``, ``tree``, ``nvls`` or
                ``auto``.
        """
        return parse_name("all-reduce algorithm", cls, name)


class AllReduceOverlap(str, Enum):
    """When a stage's gradient all-reduce starts (the simulator's ``allreduce_overlap``).

    ``after_backward``: as soon as all its replicas finished their last backward (DAPPLE);
    ``end``: after the whole pipeline drained; ``bucketed``: per gradient bucket, in backward
    order, as soon as every replica's last backward produced it (PyTorch DDP).
    """

    AFTER_BACKWARD = "after_backward"
    END = "end"
    BUCKETED = "bucketed"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> AllReduceOverlap:
        """The overlap mode called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: ``name`` is not ``after_backward``, ``end`` or ``bucketed``.
        """
        return parse_name("all-reduce overlap mode", cls, name)


def _nvls_lines(
    ports: Sequence[tuple[int, int]], bandwidth: LinkValue, latency: LinkValue, overhead_s: float
) -> Lines:
    """NVLS on these ports: ``(1 + 1/n) x / NVLS_FRACTION`` bytes on every port, both ways, at once."""
    n = len(ports)
    routes = [(p,) for pair in ports for p in pair]
    return step_lines(routes, (1.0 + 1.0 / n) / NVLS_FRACTION, bandwidth, latency, overhead_s=overhead_s)


CALLS_KEPT = 4096
"""Most answers an :class:`AllReduceCurves` keeps (its memo is emptied when full)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AllReduceCurves:
    """The time of an all-reduce among fixed members as functions of the gradient bytes.

    The line sets are the wire (each step's chunks over their routes); a call adds its NCCL
    protocol's launch and per-step hand-off and sends the protocol's wire bytes
    (:mod:`pipesim.profiles.costmodels.nccl_protocol`), the protocol of least time chosen per
    size as NCCL's tuner does, where the members' routes are ``timed``.

    Attributes:
        ring: the ring all-reduce's wire time, :data:`Lines` of the bytes.
        hierarchical: the hierarchical all-reduce (the server-ordered ring for uneven servers),
            or ``None`` where it is the plain ring (one member, one server, one member per server).
        even: whether the servers hold equal member counts (``auto`` considers hierarchical only then).
        tree: the tree all-reduce (:class:`TreeCost`), or ``None`` for one member.
        tree_in_auto: whether ``auto`` considers the tree (members on two servers or more).
        nvls: NVLink SHARP (:func:`~pipesim.profiles.costmodels.ring_topology.nvls_ports`), or
            ``None`` where it does not apply; only ever run when asked for.
        ring_steps: the ring's steps, ``2 (n - 1)``.
        hierarchical_steps: the hierarchical form's steps (``2 (g - 1) + 2 (k - 1)``; the
            ring's for uneven servers).
        timed: whether NCCL's protocol costs apply: some route among the members has a latency
            or a per-transfer overhead (all-ideal routes: the bare wire, as the closed forms).
        hierarchical_inter_steps: of ``hierarchical_steps``, those on the inter-server rings
            (``2 (k - 1)``; 0 for the server-ordered ring).
        classes: the :class:`~pipesim.profiles.costmodels.nccl_protocol.LinkClass` of the ring's,
            the hierarchical form's intra- and inter-server and the tree's steps (a step's class:
            its slowest route's), where the curves were given link classes: a step's hand-off is
            then NCCL's figure for its class and the lines carry only the network links'
            latencies (:mod:`pipesim.profiles.costmodels.nccl_protocol`); ``None``: every step
            pays its routes' latency in the lines plus the protocol's NVLink figure.
        protocols: the protocols a call chooses from (LL128 only with link classes, and only
            where NCCL enables it for the members' GPUs).
        nodes: the servers the members span, as NCCL counts its nodes (:func:`allreduce_curves`).
        ll_cap: NCCL's cap on LL's bus bandwidth for these GPUs and nodes, bytes/s
            (:func:`~pipesim.profiles.costmodels.nccl_protocol.ll_max_bus_bytes_per_s`; ``inf``:
            none), applied with link classes.
    """

    ring: Lines
    hierarchical: Lines | None
    even: bool
    tree: TreeCost | None = None
    tree_in_auto: bool = False
    nvls: Lines | None = None
    ring_steps: int = 0
    hierarchical_steps: int = 0
    timed: bool = False
    hierarchical_inter_steps: int = 0
    classes: tuple[LinkClass, LinkClass, LinkClass, LinkClass] | None = None
    protocols: tuple[Protocol, ...] = PROTOCOLS
    nodes: int = 1
    ll_cap: float = math.inf
    _fixed: dict[AllReduceAlgorithm, tuple[tuple[Protocol, float], ...]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """Per algorithm, each protocol and its :meth:`fixed_s` (filled when first asked)."""
    _calls: dict[tuple[float, object], tuple[AllReduceAlgorithm, Protocol, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """:meth:`_resolved`'s answers by ``(bytes, algorithm asked)``, at most :data:`CALLS_KEPT`
    (the planners and the simulator ask for the same few sizes many times)."""

    def handoff_s(self, protocol: Protocol, algorithm: AllReduceAlgorithm, *, inter: bool = False) -> float:
        """Seconds of one step's hand-off with ``protocol`` in ``algorithm`` (``ring``,
        ``hierarchical``: its intra-server steps, or with ``inter`` its inter-server ones;
        ``tree``): NCCL's figure for the step's link class, or without classes the NVLink
        figure added to the routes' latencies."""
        tree = algorithm is AllReduceAlgorithm.TREE
        if self.classes is None:
            return protocol.step_s(tree=tree)
        if tree:
            return protocol.handoff_s(self.classes[3], tree=True)
        if algorithm is AllReduceAlgorithm.HIERARCHICAL:
            return protocol.handoff_s(self.classes[2 if inter else 1])
        return protocol.handoff_s(self.classes[0])

    def fixed_s(self, protocol: Protocol, algorithm: AllReduceAlgorithm) -> float:
        """Seconds of one call of ``algorithm`` with ``protocol`` besides its wire: the launch
        and every step's hand-off (an algorithm that applies; not ``auto`` or ``nvls``)."""
        if algorithm is AllReduceAlgorithm.TREE and self.tree is not None:
            return protocol.tree_launch_s + 2 * self.tree.depth * self.handoff_s(protocol, algorithm)
        if algorithm is AllReduceAlgorithm.HIERARCHICAL and self.hierarchical is not None:
            inter = self.hierarchical_inter_steps
            return (
                protocol.ring_launch_s
                + (self.hierarchical_steps - inter) * self.handoff_s(protocol, algorithm)
                + inter * self.handoff_s(protocol, algorithm, inter=True)
            )
        return protocol.ring_launch_s + self.ring_steps * self.handoff_s(protocol, AllReduceAlgorithm.RING)

    def _call(self, nbytes: float, algo: AllReduceAlgorithm) -> tuple[Protocol, float]:
        """``(protocol, seconds)`` of one call of an algorithm that applies (not ``auto``)."""
        if algo is AllReduceAlgorithm.NVLS and self.nvls is not None:
            wire = eval_lines(self.nvls, nbytes)
            return (NVLS_PROTOCOL, NVLS_PROTOCOL.ring_launch_s + wire) if self.timed else (IDEAL, wire)
        wire = self._wire_s(algo, nbytes)
        if not self.timed:
            return IDEAL, wire
        slope = -1.0  # a lower bound on (wire(f x) - wire(x)) / ((f - 1) x), found when needed
        best, best_s = IDEAL, math.inf
        fixed_costs = self._fixed.get(algo)
        if fixed_costs is None:
            fixed_costs = self._fixed[algo] = tuple((p, self.fixed_s(p, algo)) for p in self._tuned(algo))
        for protocol, fixed in fixed_costs:  # best_protocol inline (the planner's DP calls this a lot)
            extra = protocol.wire_factor - 1.0
            if extra > 0:
                # wire is convex (a max of lines; the tree's stream too): wire(f x) >= wire(x) +
                # (f - 1) x times the least slope, so a protocol that cannot win is not evaluated
                if slope < 0:
                    slope = self._least_slope(algo)
                if fixed + wire + slope * extra * nbytes >= best_s:
                    continue
                t = fixed + self._wire_s(algo, protocol.wire_factor * nbytes)
            else:
                t = fixed + wire
            if t < best_s:
                best, best_s = protocol, t
        return best, best_s

    def _tuned(self, algo: AllReduceAlgorithm) -> tuple[Protocol, ...]:
        """The protocols of an algorithm that applies, each with the wire bytes NCCL's tuner gives
        it there where link classes are known (the tree's own factors, LL's cap:
        :func:`~pipesim.profiles.costmodels.nccl_protocol.tuned`); as they are without classes."""
        if self.classes is None:
            return self.protocols
        tree = algo is AllReduceAlgorithm.TREE and self.tree is not None
        slope = self._least_slope(algo)
        if tree:
            bus = 2.0  # NCCL: a tree's algorithm bandwidth is half its bus bandwidth
        else:
            n = self.ring_steps // 2 + 1
            bus = 2.0 * (n - 1) / n  # a ring's bus bytes per payload byte
        rate = bus / slope if slope > 0 else math.inf
        return tuple(
            tuned(p, tree=tree, one_node=self.nodes == 1, bus_rate=rate, ll_cap=self.ll_cap)
            for p in self.protocols
        )

    def _least_slope(self, algo: AllReduceAlgorithm) -> float:
        """Seconds per byte ``L`` with ``wire(f x) - wire(x) >= L (f - 1) x`` for ``x >= 0``,
        ``f >= 1``: the least slope of the algorithm's lines (the tree: half the sum of its two
        phases' least slopes, each phase streaming half the bytes)."""
        if algo is AllReduceAlgorithm.TREE and self.tree is not None:
            phases = (self.tree.up, self.tree.down)
            return sum(min((b for _, b in lines), default=0.0) for lines in phases) / 2
        hier = algo is AllReduceAlgorithm.HIERARCHICAL and self.hierarchical is not None
        lines = self.hierarchical if hier and self.hierarchical is not None else self.ring
        return min((b for _, b in lines), default=0.0)

    def _wire_s(self, algo: AllReduceAlgorithm, x: float) -> float:
        """The wire time of ``x`` bytes (no protocol) of an algorithm that applies, seconds."""
        if algo is AllReduceAlgorithm.HIERARCHICAL and self.hierarchical is not None:
            return eval_lines(self.hierarchical, x)
        if algo is AllReduceAlgorithm.TREE and self.tree is not None:
            return self.tree.time_s(x)
        return eval_lines(self.ring, x)

    def _resolved(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm
    ) -> tuple[AllReduceAlgorithm, Protocol, float]:
        """``(algorithm, protocol, seconds)`` that run for ``nbytes`` (:meth:`algorithm_for`)."""
        key = (nbytes, algorithm)
        found = self._calls.get(key)
        if found is None:
            if len(self._calls) >= CALLS_KEPT:
                self._calls.clear()
            found = self._calls[key] = self._resolve(nbytes, algorithm)
        return found

    def _resolve(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm
    ) -> tuple[AllReduceAlgorithm, Protocol, float]:
        """:meth:`_resolved`, computed."""
        algo = AllReduceAlgorithm.parse(algorithm)
        if algo is AllReduceAlgorithm.AUTO:
            best = AllReduceAlgorithm.RING
            protocol, best_s = self._call(nbytes, best)
            if self.hierarchical is not None and self.even:
                p, t = self._call(nbytes, AllReduceAlgorithm.HIERARCHICAL)
                if t < best_s:
                    best, protocol, best_s = AllReduceAlgorithm.HIERARCHICAL, p, t
            if self.tree is not None and self.tree_in_auto:
                p, t = self._call(nbytes, AllReduceAlgorithm.TREE)
                if t < best_s:
                    best, protocol, best_s = AllReduceAlgorithm.TREE, p, t
            return best, protocol, best_s
        if (
            (algo is AllReduceAlgorithm.NVLS and self.nvls is None)
            or (algo is AllReduceAlgorithm.HIERARCHICAL and self.hierarchical is None)
            or (algo is AllReduceAlgorithm.TREE and self.tree is None)
        ):
            algo = AllReduceAlgorithm.RING
        return (algo, *self._call(nbytes, algo))

    def timed_call(self, nbytes: float, algorithm: str | AllReduceAlgorithm) -> tuple[Protocol, float]:
        """``(protocol, seconds)`` of one all-reduce of ``nbytes`` with ``algorithm`` (resolved as
        :meth:`algorithm_for` says): the protocol of least time and that time."""
        _, protocol, t = self._resolved(nbytes, algorithm)
        return protocol, t

    def algorithm_for(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO
    ) -> AllReduceAlgorithm:
        """The algorithm that runs for ``nbytes`` when ``algorithm`` is asked for: itself, except
        ``hierarchical`` where it is the plain ring (``RING``), ``tree`` without a tree (one
        member: ``RING``), ``nvls`` where it does not apply (``RING``), and ``auto``: the fastest
        of ring, hierarchical and tree that applies (each with its fastest protocol), ties to
        ring then hierarchical."""
        return self._resolved(nbytes, algorithm)[0]

    def protocol_for(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO
    ) -> Protocol:
        """The NCCL protocol an all-reduce of ``nbytes`` runs with (``algorithm`` resolved by
        :meth:`algorithm_for`); :data:`~pipesim.profiles.costmodels.nccl_protocol.IDEAL` on
        ideal routes."""
        return self._resolved(nbytes, algorithm)[1]

    def time_s(self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO) -> float:
        """Estimated time of an all-reduce of ``nbytes`` per member with ``algorithm``, seconds:
        the wire, and where ``timed`` the protocol's launch and per-step hand-offs."""
        return self._resolved(nbytes, algorithm)[2]

    def uses_hierarchical(
        self, nbytes: float, algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO
    ) -> bool:
        """Whether ``algorithm`` runs the hierarchical (or server-ordered) form for ``nbytes``."""
        return self.algorithm_for(nbytes, algorithm) is AllReduceAlgorithm.HIERARCHICAL


def allreduce_curves(
    members: Sequence[int],
    route: RouteFn,
    bandwidth: LinkValue,
    latency: LinkValue,
    *,
    server_of: Callable[[int], int] | None = None,
    overhead_s: float = 0.0,
    link_class: Callable[[int], LinkClass] | None = None,
    gpus: NcclGpus | None = None,
) -> AllReduceCurves:
    """Ring, hierarchical, tree and NVLS all-reduce time curves among ``members`` (module docstring).

    Args:
        members: distinct device ids in ring order.
        route: ``route(src, dst)`` link indices.
        bandwidth: ``bandwidth(link)`` bytes/s.
        latency: ``latency(link)`` seconds.
        server_of: ``server_of(device)``; without it there is no hierarchical form.
        overhead_s: fixed time per chunk transfer, seconds (not charged with ``link_class``:
            NCCL's hand-off is the whole cost of a step).
        link_class: ``link_class(link)``, NCCL's class of each link: with it a step's hand-off
            is NCCL's figure for its class, only network links add their latency, and LL128
            is offered (:mod:`pipesim.profiles.costmodels.nccl_protocol`); without it every
            step pays its routes' latency and the protocol's NVLink figure.
        gpus: the members' compute capabilities, for NCCL's generation-dependent figures (LL128
            enabled or not, LL's cap inside a server), used with ``link_class``. By default those
            of the members' devices where ``route`` is a
            :class:`~pipesim.profiles.hardware.cluster_type.Cluster`'s (every caller's), else
            unknown (:class:`~pipesim.profiles.costmodels.nccl_protocol.NcclGpus`). NCCL's node
            count (LL's cap across nodes, the tree's LL128 factor) is the servers the members
            span: by ``server_of``, else by that cluster's, else each member its own where a route
            crosses the network.

    Raises:
        InputError: no members or duplicates.
    """
    order = list(members)
    if not order or len(set(order)) != len(order):
        raise invalid("members", order, "must be distinct device ids, at least one")
    n = len(order)
    if n == 1:
        return AllReduceCurves(ring=(), hierarchical=None, even=True)
    wire_latency = latency if link_class is None else _network_latency(latency, link_class)
    wire_overhead = overhead_s if link_class is None else 0.0
    used: list[tuple[int, ...]] = []  # every route a step crosses (for timed and classes)

    def ring_of(seq: Sequence[int]) -> tuple[Lines, list[tuple[int, ...]]]:
        rings = ring_set(seq, route, bandwidth, server_of)
        routes = [route(r[i], r[(i + 1) % n]) for r in rings for i in range(n)]
        used.extend(routes)
        steps = step_lines(routes, 1.0 / (n * len(rings)), bandwidth, wire_latency, overhead_s=wire_overhead)
        return scale_lines(steps, 2.0 * (n - 1)), routes

    def class_of(routes: Sequence[tuple[int, ...]]) -> LinkClass:
        if link_class is None:
            return LinkClass.NVLINK
        return max((route_class(r, link_class) for r in routes), default=LinkClass.NVLINK)

    ring, ring_routes = ring_of(order)
    shape = double_binary_tree(order, server_of)
    tree = tree_cost(shape, route, bandwidth, wire_latency, overhead_s=wire_overhead)
    tree_routes = [route(c, p) for c, p in shape.up] + [route(p, c) for c, p in shape.up]
    used.extend(tree_routes)
    ports = nvls_ports(order, route, server_of)
    nvls = _nvls_lines(ports, bandwidth, wire_latency, wire_overhead) if ports is not None else None
    ring_steps = 2 * (n - 1)
    ring_class, tree_class = class_of(ring_routes), class_of(tree_routes)
    intra_class = inter_class = ring_class
    hier: Lines | None = None
    even = True
    tree_in_auto = False
    hier_steps = inter_steps = 0
    if server_of is not None:
        groups = group_by_server(order, server_of)
        even = len({len(x) for x in groups}) == 1
        tree_in_auto = len(groups) > 1
        if len(groups) == 1 or (even and len(groups[0]) == 1):
            pass
        elif not even:
            hier, flat_routes = ring_of([m for x in groups for m in x])
            intra_class = inter_class = class_of(flat_routes)
            hier_steps = ring_steps
        else:
            k, g = len(groups), len(groups[0])
            intra_steps: list[tuple[float, float]] = []
            intra_routes: list[tuple[int, ...]] = []
            for x in groups:  # each server on its own rings (several over a DGX-1's NVLinks)
                rings = ring_set(x, route, bandwidth)
                routes = [route(r[i], r[(i + 1) % g]) for r in rings for i in range(g)]
                intra_routes += routes
                intra_steps += step_lines(
                    routes, 1.0 / (g * len(rings)), bandwidth, wire_latency, overhead_s=wire_overhead
                )
            intra = prune_lines(intra_steps)
            inter_routes = [route(groups[s][j], groups[(s + 1) % k][j]) for j in range(g) for s in range(k)]
            inter = step_lines(inter_routes, 1.0 / (g * k), bandwidth, wire_latency, overhead_s=wire_overhead)
            used.extend(intra_routes + inter_routes)
            hier = add_lines(scale_lines(intra, 2.0 * (g - 1)), scale_lines(inter, 2.0 * (k - 1)))
            intra_class, inter_class = class_of(intra_routes), class_of(inter_routes)
            hier_steps, inter_steps = 2 * (g - 1) + 2 * (k - 1), 2 * (k - 1)
    timed = (overhead_s > 0 and any(used)) or any(latency(link) > 0 for r in used for link in r)
    if ports is not None:
        timed = timed or (overhead_s > 0) or any(latency(p) > 0 for pair in ports for p in pair)
    classes = None
    protocols: tuple[Protocol, ...] = PROTOCOLS
    nodes = 1
    ll_cap = math.inf
    if link_class is not None:
        classes = (ring_class, intra_class, inter_class, tree_class)
        owner = getattr(route, "__self__", None)
        cluster = owner if isinstance(owner, Cluster) else None
        if gpus is None:
            gpus = NcclGpus.of(cluster.device_spec(m).architecture for m in order) if cluster else NcclGpus()
        route_classes = [route_class(r, link_class) for r in used]
        protocols = protocols_for(route_classes, gpus)
        node_of = server_of if server_of is not None else cluster.server_of if cluster else None
        if node_of is not None:
            nodes = len({node_of(m) for m in order})
        elif LinkClass.NET in route_classes:
            nodes = n
        ll_cap = ll_max_bus_bytes_per_s(gpus, nodes)
    return AllReduceCurves(
        ring=ring,
        hierarchical=hier,
        even=even,
        tree=tree,
        tree_in_auto=tree_in_auto,
        nvls=nvls if hier is None else None,
        ring_steps=ring_steps,
        hierarchical_steps=hier_steps,
        timed=timed,
        hierarchical_inter_steps=inter_steps,
        classes=classes,
        protocols=protocols,
        nodes=nodes,
        ll_cap=ll_cap,
    )



def _network_latency(latency: LinkValue, link_class: Callable[[int], LinkClass]) -> LinkValue:
    """``latency`` on network links, 0 on the others (their latency is inside NCCL's hand-off)."""

    def wire(link: int) -> float:
        return latency(link) if link_class(link) is LinkClass.NET else 0.0

    return wire


def allreduce_time_s(
    members: Sequence[int],
    nbytes: float,
    route: RouteFn,
    bandwidth: LinkValue,
    latency: LinkValue,
    *,
    server_of: Callable[[int], int] | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.AUTO,
    overhead_s: float = 0.0,
    link_class: Callable[[int], LinkClass] | None = None,
) -> float:
    """Estimated all-reduce time of ``nbytes`` per member among ``members``, seconds.

    ``algorithm``: ``auto`` (the fastest that applies, see the module docstring), ``ring``,
    ``hierarchical`` (uneven servers: the ring ordered by server), ``tree`` or ``nvls`` (where
    it does not apply: the ring). ``link_class``: as in :func:`allreduce_curves`. One member
    costs 0.

    Raises:
        InputError: unknown algorithm (:class:`~pipesim.errors.UnknownNameError`), bad members,
            negative or non-finite ``nbytes``, or ``hierarchical`` without ``server_of``.
    """
    algorithm = AllReduceAlgorithm.parse(algorithm)
    check_nonneg("nbytes", nbytes)
    if algorithm is AllReduceAlgorithm.HIERARCHICAL and server_of is None:
        raise invalid("server_of", None, "is required for the hierarchical all-reduce")
    curves = allreduce_curves(
        members, route, bandwidth, latency, server_of=server_of, overhead_s=overhead_s, link_class=link_class
    )
    return curves.time_s(nbytes, algorithm)
