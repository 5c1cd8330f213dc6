"""The tensor-parallel collectives of one compute op, lowered to real transfers on the group's links.

Every compute op of a tensor-parallel stage (``F``, ``B``, ``I``) carries the TP collectives
of its layers for its micro-batch share
(:func:`~pipesim.profiles.costmodels.tensor_parallel.stage_collectives`). The lowering
(:mod:`pipesim.simulator.tp_lowering`) gives the op one :class:`TpComm`: the op's collectives
*aggregated* into one ring collective among the TP group, which the executors run as network
transfers over the group's routes (NVLink/NVSwitch inside a server, PCIe, NICs and the fabric
across servers), sharing every link max-min fairly with the pipeline's sends and the
data-parallel collectives. The op's compute occupies its stream for its own duration; the
collective is launched ``hidden_s`` before the compute ends (the part of it the compute hides:
the backward's input-gradient all-reduces behind the weight-gradient GEMMs, and with
``tp_comm_overlap`` the ring-exchange overlap) and the op ends when both have ended, so the next
instruction waits for it (exposed).

**The aggregation.** A ring all-reduce of ``S`` bytes among ``n`` members is ``2 (n - 1)`` steps
in which every member sends ``S / n`` bytes to the next; an all-gather or a reduce-scatter is
``n - 1`` of them. On a ring whose hops have one latency ``a`` and one bandwidth ``B`` (a group
inside one NVSwitch server) the op's collectives, which run one after another on the stream,
take

    sum_i u_i (n - 1) (a + S_i / (n B))  =  U (n - 1) a  +  (n - 1) / n  x  (sum_i u_i S_i) / B

with ``u_i`` 2 for an all-reduce, 1 for a half and ``U = sum u_i``: exactly one flow per hop
that waits ``U (n - 1) a`` (the summed per-call latencies) and then carries
``(n - 1) / n x sum u_i S_i`` bytes (the summed steps' bytes). Each call also pays its NCCL
protocol (:mod:`pipesim.profiles.costmodels.nccl_protocol`, chosen by its size): ``u_i / 2``
launches and a hand-off ``h_i`` per step join the wait, ``u_i (L_i / 2 + (n - 1) h_i)``, and
its bytes count ``f_i`` times (LL's flags), as in the planner's curves. So the aggregation changes no
time when nothing else uses the links: the folded per-op sums of before, and
:func:`~pipesim.profiles.costmodels.tensor_parallel.stage_tp_times`, which the planner uses,
are reproduced (``tests/tp/test_tp_network.py``). With hops of different latency and bandwidth
(a ring across servers) the per-call time is ``max`` over the hops and the sum of maxima can be
less than one flow's time (at most the slowest hop's latency times the steps plus the bytes
at the slowest hop's rate: equal when the slowest hop is also the one of highest latency, as
NIC hops are).

**One flow per hop set.** NCCL's ring is pipelined in slices: in the steady state every hop
moves data at the pace of the slowest, so a ring is modelled as *one* flow over the union of its
hops' links (a max-min share limited by its most contended link), not ``n`` flows of which the
fast ones would finish early and wait at each step's barrier. Hops that share a link (which one
flow counts once) are split into several flows, each over link-disjoint hops; a direct-link mesh
(a DGX-1) runs its several rings (:func:`~pipesim.profiles.costmodels.ring_topology.ring_set`)
as one flow set each, carrying its share of the bytes, as the folded curves did. What this
approximates under contention: the op's collectives run as one block at the end of its compute
rather than layer by layer between its kernels, and the step barriers are replaced by the
pipelined steady state.

**Context parallelism.** With ``c > 1`` the op's ring exchange (per block ``c - 1`` steps of a
K/V chunk forward; K/V and dK/dV, then dK/dV's last hop home, backward) is one more part on the
CP ring's hops, in order: one flow that waits the summed step latencies of the ring's slowest
hop and carries the summed chunk bytes, which is exactly the folded
:func:`~pipesim.profiles.costmodels.context_parallel.ring_exposed_s` step time
``latency + bytes / bandwidth`` on that hop summed. An op's parts run one after another (the
ring's, then the TP collectives'), launched together as early as the compute hides of both;
alone that ends the op at ``compute + exposed ring + exposed TP``, as folded. Where the other
CP ranks' TP groups or the other TP ranks' CP rings share a link that slows them, a part
carries their flows too (the first's bytes each, its latency), and ends with the last
(``TpLowering.cp_rank_groups``, ``TpLowering.tp_rank_rings``).

Per (op, micro-batch) one collective of a handful of flows: the program stays about as small as
a TP-free one (one flow per op on an NVSwitch server).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.costmodels.nccl_protocol import IDEAL, LinkClass
from pipesim.profiles.costmodels.ring_topology import ring_set
from pipesim.profiles.costmodels.tensor_parallel import TpCollective
from pipesim.simulator.network import Network

__all__ = [
    "CommPart",
    "CommRun",
    "TpComm",
    "TpRing",
    "alone_s",
    "collectives_part",
    "joined",
    "part_alone_s",
    "ring_part",
    "tp_ring",
]


class TpRing(NamedTuple):
    """A TP group's ring(s) as flows: ``flows`` the routes (link indices, the union of the
    hops of one link-disjoint hop set), ``shares`` each flow's share of a hop's bytes (``1 / R``
    on ``R`` rings), ``hop_latency_s`` the slowest hop's route latency, seconds (where the ring
    was built with link classes, its network links' latency only: NCCL's per-step hand-off
    covers the rest, :func:`collectives_part`), and ``members`` the group's size ``n``."""

    flows: tuple[tuple[int, ...], ...]
    shares: tuple[float, ...]
    hop_latency_s: float
    members: int


class CommPart(NamedTuple):
    """One collective of an op as flows, all started at once (module docstring).

    Attributes:
        flows: routes of the flows (link indices).
        flow_bytes: bytes each flow carries.
        latency_s: seconds each flow waits before its bytes flow (the summed per-step latencies).
    """

    flows: tuple[tuple[int, ...], ...]
    flow_bytes: tuple[float, ...]
    latency_s: float


class TpComm(NamedTuple):
    """The communication of one compute op of a TP (or CP) stage: its ``parts`` run one after
    another (the context-parallel ring exchange, then the TP collectives), launched ``hidden_s``
    seconds before the op's compute ends; ``nbytes`` are the bytes the trace shows (the TP
    collectives' full tensors and the ring's chunks)."""

    parts: tuple[CommPart, ...]
    hidden_s: float
    nbytes: float


def tp_ring(
    group: Sequence[int],
    route: Callable[[int, int], tuple[int, ...]],
    bandwidth: Callable[[int], float],
    latency: Callable[[int], float],
    *,
    several: bool = True,
    link_class: Callable[[int], LinkClass] | None = None,
) -> TpRing:
    """The flows of ``group``'s ring(s) (``group`` in ring order, two devices or more).

    Args:
        group: the TP group's devices.
        route: ``route(src, dst)`` link indices.
        bandwidth: ``bandwidth(link)`` bytes/s.
        latency: ``latency(link)`` seconds.
        several: run a direct-link mesh's several rings
            (:func:`~pipesim.profiles.costmodels.ring_topology.ring_set`, as NCCL's collectives
            do); ``False``: the one ring in the given order (the context-parallel ring exchange).
        link_class: ``link_class(link)``, NCCL's class of each link: only network links' latency
            counts in ``hop_latency_s`` (the collectives' hand-off by class is the rest, as in
            :func:`~pipesim.profiles.costmodels.collective.allreduce_curves` with ``link_class``);
            without it every link's (the ring exchange's point-to-point sends).
    """
    n = len(group)
    rings = ring_set(group, route, bandwidth) if several else (tuple(group),)
    flows: list[tuple[int, ...]] = []
    shares: list[float] = []
    slowest = 0.0
    for ring in rings:
        hop_sets: list[tuple[set[int], list[int]]] = []  # (links held, route) per flow
        for i in range(n):
            hop = route(ring[i], ring[(i + 1) % n])
            slowest = max(slowest, sum(latency(link) for link in hop
                                       if link_class is None or link_class(link) is LinkClass.NET))
            for held, links in hop_sets:
                if held.isdisjoint(hop):
                    held.update(hop)
                    links.extend(hop)
                    break
            else:
                hop_sets.append((set(hop), list(hop)))
        for _, links in hop_sets:
            flows.append(tuple(links))
            shares.append(1.0 / len(rings))
    return TpRing(flows=tuple(flows), shares=tuple(shares), hop_latency_s=slowest, members=n)


def ring_part(ring: TpRing, steps: float, hop_bytes: float) -> CommPart:
    """``steps`` ring steps moving ``hop_bytes`` bytes over every hop in all, as one
    :class:`CommPart`: each flow waits ``steps`` hop latencies, then carries its share."""
    return CommPart(
        flows=ring.flows,
        flow_bytes=tuple(hop_bytes * share for share in ring.shares),
        latency_s=steps * ring.hop_latency_s,
    )


def collectives_part(
    ring: TpRing, collectives: Sequence[TpCollective], curves: AllReduceCurves | None = None
) -> CommPart | None:
    """``collectives`` (run one after another) as one :class:`CommPart` on ``ring``: the
    summed per-call latencies and the summed steps' bytes (module docstring); ``None`` without
    collectives.

    Each call runs with the NCCL protocol its size gets on the group's ring ``curves``
    (:meth:`~pipesim.profiles.costmodels.collective.AllReduceCurves.protocol_for`; none given:
    ideal): its launch (half of it for a reduce-scatter or all-gather, as the planner's half of
    an all-reduce) and its hand-off per step join the waited latency, its wire factor the bytes.
    The hand-off is the curves' (:meth:`~pipesim.profiles.costmodels.collective.AllReduceCurves.handoff_s`):
    with link classes NCCL's figure for the ring's class, added to ``ring``'s network latency
    (build both with the same classes), else the NVLink figure added to its route latency.
    """
    if not collectives or ring.members < 2:
        return None
    n = ring.members
    latency = 0.0
    weighted = 0.0
    for c in collectives:
        units = 2 if c.kind == "all-reduce" else 1
        if curves is None:
            protocol, handoff = IDEAL, 0.0
        else:
            protocol = curves.protocol_for(c.nbytes, AllReduceAlgorithm.RING)
            handoff = curves.handoff_s(protocol, AllReduceAlgorithm.RING)
        step_s = ring.hop_latency_s + handoff
        latency += units * (protocol.ring_launch_s / 2 + (n - 1) * step_s)
        weighted += units * protocol.wire_factor * c.nbytes
    hop_bytes = (n - 1) / n * weighted
    return CommPart(
        flows=ring.flows,
        flow_bytes=tuple(hop_bytes * share for share in ring.shares),
        latency_s=latency,
    )


def joined(first: CommPart, others: Sequence[CommPart]) -> CommPart:
    """``first`` and the other ranks' parts ``others`` as one part, every flow at once (the part
    ends with the last; module docstring), with ``first``'s latency (the ranks' rings are laid
    out alike)."""
    return CommPart(
        flows=first.flows + tuple(f for x in others for f in x.flows),
        flow_bytes=first.flow_bytes + tuple(b for x in others for b in x.flow_bytes),
        latency_s=first.latency_s,
    )


def part_alone_s(part: CommPart, rate: Callable[[tuple[int, ...]], float]) -> float:
    """Seconds ``part`` takes when nothing else uses its links and its flows do not share one:
    the latency plus the slowest flow's bytes at ``rate(route)`` (its route's bandwidth, bytes/s)."""
    out = 0.0
    for route, nbytes in zip(part.flows, part.flow_bytes, strict=True):
        bandwidth = rate(route)
        flow_s = nbytes / bandwidth if math.isfinite(bandwidth) and nbytes > 0 else 0.0
        out = max(out, part.latency_s + flow_s)
    return out


def alone_s(comm: TpComm, rate: Callable[[tuple[int, ...]], float]) -> float:
    """Seconds ``comm``'s parts take one after another when nothing else uses their links
    (:func:`part_alone_s`)."""
    return sum(part_alone_s(part, rate) for part in comm.parts)


class CommRun:
    """One launch of a :class:`TpComm` on a :class:`~pipesim.simulator.network.Network`: its
    parts one after another, each part's flows all at once after the part's latency;
    ``on_done()`` is called as the last flow of the last part arrives.

    A plain object whose bound methods are the flows' callbacks (no closure that refers to
    itself): nothing of it outlives the run without the cyclic collector, which the
    simulator pauses while it runs.
    """

    __slots__ = ("_comm", "_left", "_network", "_next", "_on_done")

    def __init__(self, network: Network, comm: TpComm, on_done: Callable[[], None]) -> None:
        self._network = network
        self._comm = comm
        self._on_done = on_done
        self._next = 0
        self._left = 0

    def launch(self) -> None:
        """Start the next part now (or report the end after the last)."""
        parts = self._comm.parts
        if self._next == len(parts):
            self._on_done()
            return
        part = parts[self._next]
        self._next += 1
        self._left = len(part.flows)
        transfer, arrived = self._network.transfer, self._arrived
        for route, nbytes in zip(part.flows, part.flow_bytes, strict=True):
            transfer(route, nbytes, latency_s=part.latency_s).callbacks.append(arrived)

    def _arrived(self, _event: object) -> None:
        self._left -= 1
        if not self._left:
            self.launch()
