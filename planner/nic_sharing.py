"""Other traffic on a cross-server TP ring's links, for the 3D estimate (:mod:`pipesim.planner.three_d`).

A tensor-parallel group that spans servers runs its ring's hops over NICs. In the simulation
those links are shared max-min fairly with every flow on them (``simulator/network.py``); the
flows that run *while* the ring's collectives run, on a ring whose bottleneck link they cross, are
ZeRO's per-unit collectives: ZeRO-3's parameter gathers and gradient reduce-scatters during
every forward and backward, ZeRO-2's reduce-scatters during the last backward
(``simulator/zero_lowering.py``). Gradient collectives after the backward (no sharding, ZeRO-1,
the distributed optimizer) start when the rank's own TP collectives are over; they meet the TP
blocks of *other* ranks that are still in their backward, and two ranks' (or two replicas')
straddling rings can meet on one NIC (servers with one NIC): :func:`ring_sharers` finds them,
:func:`concurrent_delay_s` and :func:`shared_op_s` charge them. Pipeline sends are a small share
of a ring's bytes (``act / (t c)`` against ``4 (t - 1) / t`` activations per layer), but where
the TP ranks' sends of a replica leave one NIC every rank's send crosses it (the simulator runs
them all: ``simulator/tp_lowering.py`` ``TpLowering.rank_sends``), ``t`` times the bytes: a
straddling ring's rank is charged, per micro-batch, the sends to and from it on its bottleneck
links (:func:`pipeline_sends`, :func:`concurrent_delay_s`; a TP block on NICs holds them most of
the op). The replicas' sends, issued together, share the links they cross, and so do the TP
ranks' sends of each replica where their routes meet (:func:`send_terms`, the estimate's
pipeline hop).

A rank's own gradient collective meets two more of its flows where its rings cross the same
NIC (servers with one NIC): its last backward's gradient send to the rank before it, which
leaves as the collective starts (:func:`drain_sends`, :func:`drain_delay_s`: rank 0's last
backward waits that much longer, each rank of the cool-down chain adding its own), and, on a
rank of several stages (interleaved), the TP blocks of the cool-down backwards that follow a
stage's last one, whose reduction is already running (:attr:`RingSharers.own_dp`,
:func:`~pipesim.planner.three_d_tail.cooldown_ends_s`; every TP rank's ring is one flow, so a
block beside ``k`` of them gets ``1 / (k + 1)`` of the link).

The model is the fluid one of two elastic flows that start together on one link: each gets half
the link while both run, so the shorter one, of ``a`` and ``b`` seconds alone, is slowed by
``min(a, b)`` (:func:`shared_op_s`), and so is the longer (the link carries ``a + b`` either way).
A unit's exposed TP collectives (``a``) share the link with the DP collectives in flight during
that unit (``b``): in the forward the next unit's gather (prefetch depth 1), in the backward the
next unit's gather and the previous unit's reduce-scatter. Both sides are charged the overlap.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

from pipesim.profiles.costmodels.dp_rings import replica_sends
from pipesim.profiles.costmodels.tensor_parallel import TpStageTimes
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.schedules.placement import stage_ranks

__all__ = [
    "RingSharers",
    "concurrent_delay_s",
    "dp_left_s",
    "drain_delay_s",
    "drain_sends",
    "fair_share",
    "last_backward_delay_s",
    "pipeline_edges",
    "pipeline_sends",
    "ring_sharers",
    "send_terms",
    "shared_ends_s",
    "shared_op_s",
    "shares_ring_link",
    "steady_delay_s",
    "zero_transfers",
]


def shared_op_s(
    start_s: float, tp_s: float, wire_s: float, transfers: Sequence[tuple[float, float]]
) -> float:
    """An op's time when its TP collectives share the TP ring's bottleneck link with
    data-parallel transfers, seconds.

    As the simulator runs them (``simulator/tp_collectives.py``), the op's TP collectives are one
    block of ``tp_s`` seconds (alone) launched ``start_s`` seconds into the op (after its
    compute, less the part of the block the compute hides), and the op ends with the block. The
    block first waits its calls' latencies (``tp_s - wire_s``), the link free, then carries its
    bytes for ``wire_s`` seconds. The DP ``transfers`` (``(issue s, seconds alone)``) still to go
    then (:func:`dp_left_s`) share the link with it, each getting half while both run, which
    delays the block by that remainder, at most ``wire_s``:
    ``start_s + tp_s + min(wire_s, left)``."""
    wire = min(max(0.0, wire_s), tp_s)
    left = dp_left_s(transfers, start_s + tp_s - wire)
    return start_s + tp_s + min(wire, left)


def dp_left_s(transfers: Sequence[tuple[float, float]], at_s: float) -> float:
    """Seconds of data-parallel transfers left at ``at_s`` (seconds into an op): ``transfers``
    are ``(issue s, seconds alone on the link)``, carried one after another in issue order as
    the link frees (a work-conserving link; those issued at or after ``at_s`` count whole)."""
    free = 0.0
    left = 0.0
    for issue, length in sorted(transfers):
        begin = max(free, issue)
        free = begin + length
        left += length if begin >= at_s else max(0.0, free - at_s)
    return left


def zero_transfers(
    compute_s: Sequence[float], gather_s: Sequence[float] | None, scatter_s: Sequence[float] | None,
    backward: bool, at_end_s: float = 0.0,
) -> list[tuple[float, float]]:
    """The data-parallel transfers of one op of ZeRO units (layer order; ``compute_s`` each
    unit's compute) as ``(issue s, seconds)`` for :func:`dp_left_s`, as the simulator's ZeRO
    lowering issues them (``simulator/zero_lowering.py``, prefetch depth 1): each unit's
    gather when the unit before it in run order starts (the first unit's was issued during the
    op before), each unit's reduce-scatter (``backward``) when its compute ends, and
    ``at_end_s`` seconds (the next op's first gather) when the op's compute ends."""
    order = list(range(len(compute_s)))
    if backward:
        order.reverse()
    out: list[tuple[float, float]] = []
    clock = 0.0
    for k, u in enumerate(order):
        if gather_s is not None and k + 1 < len(order):
            out.append((clock, gather_s[order[k + 1]]))
        clock += compute_s[u]
        if scatter_s is not None:
            out.append((clock, scatter_s[u]))
    if at_end_s > 0:
        out.append((clock, at_end_s))
    return out


def _ring_hops(ring: Sequence[int]) -> list[tuple[int, int]]:
    n = len(ring)
    return [] if n < 2 else [(ring[k], ring[(k + 1) % n]) for k in range(n)]


def shares_ring_link(cluster: Cluster, tp_groups: Sequence[Sequence[int]], dp_ring: Sequence[int]) -> bool:
    """Whether a link on which one of ``tp_groups``' rings (members in ring order) has its
    bottleneck (the lowest route bandwidth of its hops) also carries ``dp_ring``'s ring
    (members in ring order), in the same direction.

    Both rings as the simulator's lowering runs them: each replica's TP group
    (:meth:`~pipesim.plan.Plan.tp_groups`) and the rank's data-parallel group (every replica's
    CP ranks' first devices, :meth:`~pipesim.plan.Plan.cp_groups`).
    """
    dp_links = {link for a, b in _ring_hops(dp_ring) for link in cluster.route(a, b)}
    if not dp_links:
        return False
    for group in tp_groups:
        hops = _ring_hops(group)
        if not hops:
            continue
        bandwidth = [cluster.route_bandwidth_bytes_per_s(a, b) for a, b in hops]
        slowest = min(bandwidth)
        for (a, b), bw in zip(hops, bandwidth, strict=True):
            if bw == slowest and dp_links.intersection(cluster.route(a, b)):
                return True
    return False


# ------------------------------------------------------------------------------------------------
# Other ranks' traffic on a rank's TP ring: their TP rings and their gradient collectives


class RingSharers(NamedTuple):
    """Who else crosses the bottleneck links of each pipeline rank's TP rings
    (:func:`ring_sharers`).

    Attributes:
        tp: per rank, per bottleneck link that another rank's TP ring crosses (in the same
            direction), those ranks (sorted; one tuple per distinct set).
        dp: per rank, the other ranks whose gradient-collective ring crosses one of the rank's
            bottleneck links.
        own: per rank, the most of its own replicas' TP rings that cross one of those links
            (1: each ring has its bottleneck to itself; the replicas run in lock step, so ``k``
            rings on one link each move at ``1/k`` of it).
        sends: per rank whose TP rings leave their servers, per bottleneck link that the
            pipeline sends of one micro-batch to and from the rank cross (each replica's, and
            each TP rank's where their routes meet: :func:`pipeline_sends`), their seconds per
            byte of one rank's share on it (how many cross it over its bandwidth); empty
            where none do, or not asked for.
        own_dp: per rank whose TP rings leave their servers, the most of its own gradient
            rings (every TP rank's, as the simulator runs them) that cross one of its
            bottleneck links: while a stage's
            gradient collective runs there, each of the rank's TP blocks gets ``1 / (k + 1)`` of
            the link (:func:`~pipesim.planner.three_d_tail.cooldown_delays_s`); 0 where none do.
        drain: per rank whose TP rings leave their servers, how much its gradient collective,
            starting with its last backward's gradient send to the rank before it, slows that
            send, seconds per byte of one rank's share (:func:`drain_sends`); empty where the
            sends are not asked for.
    """

    tp: tuple[tuple[tuple[int, ...], ...], ...]
    dp: tuple[tuple[int, ...], ...]
    own: tuple[int, ...] = ()
    sends: tuple[tuple[float, ...], ...] = ()
    own_dp: tuple[int, ...] = ()
    drain: tuple[float, ...] = ()


def _bottleneck_links(cluster: Cluster, group: Sequence[int]) -> set[int]:
    """The links that limit ``group``'s ring: on each of its slowest hops, the route's links of
    the hop's bandwidth."""
    hops = _ring_hops(group)
    if not hops:
        return set()
    bandwidth = [cluster.route_bandwidth_bytes_per_s(a, b) for a, b in hops]
    slowest = min(bandwidth)
    out: set[int] = set()
    for (a, b), bw in zip(hops, bandwidth, strict=True):
        if bw == slowest:
            out.update(i for i in cluster.route(a, b) if cluster.links[i].bandwidth_bytes_per_s <= slowest)
    return out


def ring_sharers(
    cluster: Cluster, tp_groups: Sequence[Sequence[Sequence[int]]], dp_rings: Sequence[Sequence[int]],
    send_ranks: int = 0, edges: Sequence[tuple[int, int]] = (),
) -> RingSharers:
    """Per pipeline rank, the other ranks whose TP rings and gradient-collective rings cross the
    links that limit the rank's TP rings, and the pipeline sends on them (:class:`RingSharers`).

    Args:
        tp_groups: per rank, per replica, its TP group in ring order
            (:meth:`~pipesim.plan.Plan.tp_groups`, the rings the simulator's lowering runs).
        dp_rings: per rank, its data-parallel group in ring order (every replica's CP ranks'
            first devices, :meth:`~pipesim.plan.Plan.cp_groups`).
        send_ranks: the TP x CP ranks a pipeline send is split over (0: the sends are not
            asked for, :attr:`RingSharers.sends` empty).
        edges: the pipeline's transfers between ranks of one micro-batch, ``(from, to)`` of
            each activation (its gradient goes back), as :func:`pipeline_edges` gives them.

    The simulator runs each TP ring as one flow over its hops' links and shares every link
    max-min fairly (``simulator/tp_collectives.py``): a ring whose bottleneck link another
    rank's ring or a pipeline send crosses runs at its share while both run.
    """
    crossing: dict[int, dict[int, int]] = {}  # link -> rank -> how many of its TP rings cross it
    for r, groups in enumerate(tp_groups):
        for group in groups:
            for link in {link for a, b in _ring_hops(group) for link in cluster.route(a, b)}:
                counts = crossing.setdefault(link, {})
                counts[r] = counts.get(r, 0) + 1
    dp_links = [{link for a, b in _ring_hops(ring) for link in cluster.route(a, b)} for ring in dp_rings]
    tp_out: list[tuple[tuple[int, ...], ...]] = []
    dp_out: list[tuple[int, ...]] = []
    own_out: list[int] = []
    bottlenecks: list[set[int]] = []
    for r, groups in enumerate(tp_groups):
        links: set[int] = set()
        for group in groups:
            links |= _bottleneck_links(cluster, group)
        bottlenecks.append(links)
        sets = {tuple(sorted(set(crossing.get(link, {})) - {r})) for link in links}
        tp_out.append(tuple(sorted(x for x in sets if x)))
        dp_out.append(tuple(q for q, held in enumerate(dp_links) if q != r and not links.isdisjoint(held)))
        own_out.append(max((crossing.get(link, {}).get(r, 1) for link in links), default=1))
    sends = pipeline_sends(cluster, tp_groups, bottlenecks, send_ranks, edges) if send_ranks else ()
    # every TP rank's gradient ring (TP rank j's members at each lead + j), per link how many
    grad_rings = [_rank_rings(cluster, groups, ring)
                  for groups, ring in zip(tp_groups, dp_rings, strict=True)]
    own_dp = tuple(max((held.get(link, 0) for link in links), default=0) if _straddles(cluster, groups) else 0
                   for held, links, groups in zip(grad_rings, bottlenecks, tp_groups, strict=True))
    drain = drain_sends(cluster, tp_groups, grad_rings, send_ranks, edges) if send_ranks else ()
    return RingSharers(tp=tuple(tp_out), dp=tuple(dp_out), own=tuple(own_out), sends=sends, own_dp=own_dp,
                       drain=drain)


def _straddles(cluster: Cluster, groups: Sequence[Sequence[int]]) -> bool:
    """Whether one of a rank's TP ``groups`` spans servers (its ring crosses NICs; inside a
    server the estimate keeps the ring's exact form, :func:`pipeline_sends`)."""
    return any(len({cluster.server_of(x) for x in g}) > 1 for g in groups)


def _rank_rings(cluster: Cluster, groups: Sequence[Sequence[int]], ring: Sequence[int]) -> dict[int, int]:
    """Per link, how many of a rank's gradient rings cross it: every TP rank's ring (the
    simulator's lowering reduces each TP rank's shard on its own ring,
    ``simulator/dp_collectives.py``), TP rank ``j``'s the members of ``ring`` (each replica's
    first devices, ring order) plus ``j``; a link crossed twice by one ring counts twice."""
    t = max((len(g) for g in groups), default=1)
    out: dict[int, int] = {}
    for j in range(t):
        for a, b in _ring_hops([x + j for x in ring]):
            for link in cluster.route(a, b):
                out[link] = out.get(link, 0) + 1
    return out


def drain_sends(
    cluster: Cluster, tp_groups: Sequence[Sequence[Sequence[int]]], grad_rings: Sequence[dict[int, int]],
    send_ranks: int, edges: Sequence[tuple[int, int]],
) -> tuple[float, ...]:
    """:attr:`RingSharers.drain`: per rank ``r`` whose TP groups leave their servers and that
    sends gradients to rank ``r - 1`` (``(r - 1, r)`` in ``edges``), how much its gradient
    collective (``grad_rings[r]``: per link its rings' count, :func:`_rank_rings`) slows its
    last backward's gradient send, seconds per byte of one rank's share: the rank's stage
    posts its reduction as that backward ends, when the send leaves too
    (``simulator/dp_collectives.py``), so on a link that ``n`` of the rings and ``s`` of the
    sends (each replica's, each TP rank's where their routes meet, decided over every replica's
    sends at once: :func:`~pipesim.profiles.costmodels.dp_rings.replica_sends`) cross, each
    send gets ``1 / (n + s)`` of it, not ``1 / s``: ``n / bandwidth`` per byte more (the fluid
    share of the module docstring, while the reduction lasts), the worst such link's; 0 where none meet."""
    caps = cluster.links

    def bandwidth(link: int) -> float:
        return caps[link].bandwidth_bytes_per_s

    out: list[float] = []
    for r, groups in enumerate(tp_groups):
        if r == 0 or not _straddles(cluster, groups) or (r - 1, r) not in edges or not grad_rings[r]:
            out.append(0.0)
            continue
        sends: dict[int, int] = {}
        pairs = [(a[0], b[0]) for a, b in zip(groups, tp_groups[r - 1], strict=False)]
        decided = replica_sends(pairs, send_ranks, cluster.route, bandwidth)
        for pair, apart in zip(pairs, decided, strict=True):
            for x, y in apart or (pair,):
                for link in set(cluster.route(x, y)):
                    sends[link] = sends.get(link, 0) + 1
        out.append(max((grad_rings[r].get(link, 0) / bandwidth(link) for link in sends), default=0.0))
    return tuple(out)


def pipeline_edges(placement: str, num_stages: int, num_ranks: int) -> tuple[tuple[int, int], ...]:
    """The transfers between ranks of one micro-batch, ``(from, to)`` of each activation
    between consecutive stages on different ranks (each gradient goes back), for a schedule's
    stage ``placement`` (``looped``, ``v``, ...; :func:`~pipesim.schedules.placement.stage_ranks`)."""
    where = stage_ranks(placement, num_stages, num_ranks)
    return tuple((a, b) for a, b in itertools.pairwise(where) if a != b)


def pipeline_sends(
    cluster: Cluster, tp_groups: Sequence[Sequence[Sequence[int]]], bottlenecks: Sequence[set[int]],
    send_ranks: int, edges: Sequence[tuple[int, int]],
) -> tuple[tuple[float, ...], ...]:
    """:attr:`RingSharers.sends`: per rank whose TP groups leave their servers, per link of its
    ``bottlenecks`` that one micro-batch's pipeline sends to and from it cross, their seconds
    per byte of one rank's share.

    Each edge ``(a, b)`` of ``edges`` sends an activation from every replica of rank ``a`` to
    the same replica of rank ``b`` (their first devices, ``tp_groups``) and its gradient back,
    split over ``send_ranks`` ranks: every rank's send where their routes meet, decided over
    every replica's sends at once (:func:`~pipesim.profiles.costmodels.dp_rings.replica_sends`,
    as the simulator runs them),
    else the first rank's (the others on links of their own). Inside a server the sends meet
    NVLink/NVSwitch rings: not counted there (their TP blocks hold the links a small share of
    the time; the estimate keeps its exact form for rings inside servers)."""
    server_of = cluster.server_of
    caps = cluster.links

    def bandwidth(link: int) -> float:
        return caps[link].bandwidth_bytes_per_s

    straddles = [any(len({server_of(x) for x in g}) > 1 for g in groups) for groups in tp_groups]
    counts: list[dict[int, int]] = [{} for _ in tp_groups]
    for a, b in edges:
        if not (straddles[a] or straddles[b]):
            continue
        firsts = [(ga[0], gb[0]) for ga, gb in zip(tp_groups[a], tp_groups[b], strict=False)]
        for way in (firsts, [(y, x) for x, y in firsts]):  # every replica's sends at once, each way
            apart = replica_sends(way, send_ranks, cluster.route, bandwidth)
            for (src, dst), sends in zip(way, apart, strict=True):
                for x, y in sends or ((src, dst),):
                    for link in set(cluster.route(x, y)):
                        for r in (a, b):
                            if straddles[r] and link in bottlenecks[r]:
                                counts[r][link] = counts[r].get(link, 0) + 1
    return tuple(tuple(n / caps[link].bandwidth_bytes_per_s for link, n in sorted(got.items()))
                 for got in counts)


def drain_delay_s(sharers: RingSharers | None, share_bytes: float, reduce_s: Callable[[int], float]) -> float:
    """How much later rank 0's last backward starts because each later rank's gradient
    collective slows its last backward's gradient send to the rank before it
    (:attr:`RingSharers.drain`), seconds: rank ``q``'s by ``share_bytes`` (one rank's share of
    the activation) times its :attr:`~RingSharers.drain`, at most its collective's
    ``reduce_s(q)`` seconds (the send is slowed only while it lasts); the sends of a 1F1B
    cool-down chain, each rank's last backward waiting for the next rank's gradient, so they
    add up. 0 without ``sharers``."""
    if sharers is None:
        return 0.0
    return sum(min(share_bytes * x, reduce_s(q)) for q, x in enumerate(sharers.drain) if x > 0)


def concurrent_delay_s(wire_s: float, others_s: Sequence[Sequence[float]]) -> float:
    """How much a TP block whose bytes hold its bottleneck link ``wire_s`` seconds alone is
    delayed by other rings' blocks that run at the same time: per shared link the other rings'
    seconds on it (``others_s``, one list per link), each getting an equal share while both run
    (module docstring's fluid model), so the block waits ``min(wire_s, sum)`` more on the worst
    link, seconds."""
    wire = max(0.0, wire_s)
    return max((min(wire, sum(x)) for x in others_s), default=0.0)


def steady_delay_s(slow_s: Sequence[float], fwd_s: Sequence[float], bwd_s: Sequence[float], m: int) -> float:
    """What other ranks' TP blocks beside each rank's add to the ``m - 1`` steady cycles of an
    order, seconds: per rank its delay per micro-batch ``slow_s`` (:func:`concurrent_delay_s`
    of their blocks, and of the pipeline sends on its links) over its forwards ``fwd_s`` and
    backwards ``bwd_s`` (seconds per micro-batch); each cycle is the slowest rank's, and only
    its excess over the slowest forward and backward counts (``tests/tp/test_nic_sharing_estimate.py``)."""
    if not any(slow_s):
        return 0.0
    cycle = max(f + b + x for f, b, x in zip(fwd_s, bwd_s, slow_s, strict=True))
    return (m - 1) * max(0.0, cycle - max(fwd_s) - max(bwd_s))


def fair_share(
    work: Sequence[float], rank: int, others: Sequence[int], loads: Sequence[Sequence[float]] | None = None
) -> float:
    """The share of a link rank ``rank``'s flows get while they run throughout beside the flows
    of ranks ``others`` on it, each carrying its ``work`` (any unit) per period: max-min sharing
    (processor sharing) ends the rank's ``a`` after ``a + sum(min(a, b))`` for the others' ``b``
    (the link carries all of a shorter other's, and as much of a longer one's as its own).

    ``loads``: per link, per rank (indexed as ``work``) the share of its flows' time alone that
    the link carries (:func:`shared_ends_s`; 0 where none of them cross it). The ranks' flows
    move at one pace on a link (equal flows, max-min), so on link ``x`` the rank ends after
    ``sum(load_q min(a, b_q))`` over itself and the others there, and never before ``a``: the
    share is ``a`` over the largest of these (a rank with two of its four rings on a NIC that
    another rank's four cross gets 2/3 of its pace alone, not 1/2). None: the one-link form."""
    own = work[rank]
    if own <= 0 or not others:
        return 1.0
    if loads is None:
        return own / (own + sum(min(own, work[q]) for q in others))
    ranks = (rank, *others)
    end = max((sum(x[q] * min(own, work[q]) for q in ranks) for x in loads if x[rank] > 0), default=own)
    return own / max(own, end)


def shared_ends_s(
    starts_s: Sequence[float], works_s: Sequence[float], loads: Sequence[Sequence[float]] | None = None
) -> list[float]:
    """When each of the collectives that share one link ends, seconds: collective ``i`` starts at
    ``starts_s[i]`` and takes ``works_s[i]`` seconds alone; while ``k`` of them run each gets
    ``1/k`` of the link (the module docstring's fluid model, for any number of flows and start
    times). Two that start together, of ``a <= b`` seconds, end at ``2a`` and ``a + b``.

    ``loads``: per link, per collective the share of its time alone that the link carries (its
    rings on the link over the link's bandwidth against the same on its own most loaded link:
    1 on its bottleneck, 1/2 where half its rings cross it; 0 where none do). Every ring is one
    flow of equal share (max-min, as the simulator's network runs them), so on link ``x`` the
    running collectives all move at ``1 / sum(load)`` of their pace alone; each moves at the
    slowest of its links' paces, never faster than alone (a collective of four rings beside one
    whose two cross its NIC: both at 2/3). None: all on one link, each ``1/k``."""
    rows = [[1.0] * len(works_s)] if loads is None else loads  # (one link: each running one 1/k)
    left = [max(0.0, w) for w in works_s]
    ends = [math.inf] * len(left)
    pending = sorted(range(len(left)), key=lambda i: starts_s[i])
    running: list[int] = []
    now = starts_s[pending[0]] if pending else 0.0
    while pending or running:
        while pending and starts_s[pending[0]] <= now:
            running.append(pending.pop(0))
        if not running:
            now = starts_s[pending[0]]
            continue
        # each running one at 1 / slow of its pace alone: the most loaded of its links, never
        # faster than alone (one link: k, so the arithmetic is the one-link form's)
        held = [sum(x[j] for j in running) for x in rows]
        slow = {i: max([1.0, *(h for x, h in zip(rows, held, strict=True) if x[i] > 0)]) for i in running}
        done_at = min(now + left[i] * slow[i] for i in running)  # the first running one to finish
        until = min(done_at, starts_s[pending[0]]) if pending else done_at
        for i in running:
            left[i] -= (until - now) / slow[i]
        now = until
        for i in [i for i in running if left[i] <= 1e-12]:  # (1 ps: rounding)
            running.remove(i)
            ends[i] = now
    return ends


def last_backward_delay_s(
    times: TpStageTimes, replay_s: float, wire_s: float, transfers: Sequence[tuple[float, float]]
) -> float:
    """How much a rank's last backward (its chunk's TP x CP ``times``, ``replay_s`` of replayed
    forward, ``wire_s`` seconds of TP bytes on the ring's bottleneck) is delayed by other ranks'
    gradient collectives on that link, seconds: ``transfers`` as ``(issue s relative to the
    backward's start, seconds alone)``; its TP block shares the link with what is left of them
    when its bytes start (:func:`shared_op_s`)."""
    b_op = times.bwd_tp_s + times.bwd_comm_s + replay_s
    start = b_op - times.bwd_split_comm_s
    return shared_op_s(start, times.bwd_split_comm_s, wire_s, transfers) - (start + times.bwd_split_comm_s)


def send_terms(
    pairs: Sequence[tuple[int, int]], route: Callable[[int, int], tuple[int, ...]],
    bandwidth: Callable[[int], float], latency: Callable[[int, int], float], ranks: int = 1,
) -> tuple[tuple[float, float], ...]:
    """The pipeline sends of a rank's replicas, issued together (the replicas run in lock step),
    as ``(latency s, seconds per byte)`` per distinct pair: ``pairs`` the ``(src, dst)`` devices
    (each replica's first ranks'), ``route(src, dst)`` link indices, ``bandwidth(link)`` bytes/s,
    ``latency(src, dst)`` the route's seconds. A link that ``k`` of the sends cross gives each
    ``1/k`` of its bandwidth (the max-min share of equal flows, as the simulator's network
    gives them), so replicas whose sends leave one NIC (servers with fewer NICs than GPUs) each
    take ``k`` times as long, from the first of them reaching the link (routes of different
    latencies: the link is busy from then on); the time of ``n`` bytes (one rank's share) is
    ``max(latency + n x per_byte)``. ``ranks``: the TP (and CP) ranks each pair's send is split
    over; where their routes cross a link too narrow for them, every replica's sends at once
    (:func:`~pipesim.profiles.costmodels.dp_rings.replica_sends`) every rank's send counts, as
    the simulator runs them (``simulator/tp_lowering.py`` ``TpLowering.rank_sends``)."""
    if ranks > 1:
        apart = replica_sends(pairs, ranks, route, bandwidth)
        pairs = [x for (a, b), sends in zip(pairs, apart, strict=True) for x in (sends or ((a, b),))]
    routes = [route(a, b) for a, b in pairs]
    latencies = [latency(a, b) for a, b in pairs]
    load: dict[int, int] = {}
    start: dict[int, float] = {}  # per link, when the first of its sends' bytes reach it
    for links, lat in zip(routes, latencies, strict=True):
        for link in set(links):
            load[link] = load.get(link, 0) + 1
            start[link] = min(start.get(link, lat), lat)
    out: set[tuple[float, float]] = set()
    for links, lat in zip(routes, latencies, strict=True):
        if links:
            worst = max(links, key=lambda link: load[link] / bandwidth(link))
            # alone at its slowest link; together, the link carries every send's bytes from the
            # first one's arrival (work-conserving): the last ends ``load / bandwidth`` per byte later
            out.add((lat, max(1.0 / bandwidth(link) for link in links)))
            out.add((start[worst], load[worst] / bandwidth(worst)))
    return tuple(sorted(out))
