"""The planner's cost model: stage, transfer and all-reduce times, the pipeline latency, memory.

One :class:`CostModel` per (profile, cluster, optimizer, recompute, all-reduce algorithm) answers
every question a planner asks, with caches so a search pays for each distinct question once:

* **Stage compute**: a replica's forward and backward time for its share of a micro-batch,
  ``sum(profile.fwd_times_s(share)[layers])``, from prefix sums per share (the simulator's rule:
  the replicas split every micro-batch with :func:`pipesim.plan.split_samples`). When the shares
  are unequal the estimate gives each class of replicas in step its own timeline
  (:mod:`pipesim.planner.replicas`); memory uses the largest share.
* **Transfers** between consecutive stages (DAPPLE's pseudo-stages): every source replica sends
  the overlap of its sample range with each destination replica's range, all pieces at once;
  each piece takes its route's latency plus its bytes at ``min over its links of (bandwidth /
  pieces of this transfer on the link)``; the transfer takes the slowest piece. Exact for the
  simulator's network when nothing else uses those links.
* **All-reduce** of a stage's gradients among its replicas: the route-based estimate of
  :mod:`pipesim.profiles.costmodels.collective` (ring over the replicas in their order, or
  hierarchical for even servers, ``auto`` taking the faster as the simulator does), cached per
  placement up to renumbering the servers.
* **Pipeline latency**: the plan's schedule list-scheduled per class of replicas in step, with
  transfers (bundles of pieces) and all-reduces as fluid flows sharing links max-min fairly
  (:func:`pipesim.planner.latency.timeline_schedule`), or
  (:func:`pipeline_time_s`, the DP's model) DAPPLE's warm-up + steady + ending phases, see
  ``docs/planner.md``; GPipe's two flow-shop phases.
* **Memory** per device: ``static + K * stash + work`` with the simulator's memory model
  (:func:`pipesim.profiles.costmodels.memory.static_memory_multiplier`,
  :func:`pipesim.profiles.costmodels.memory.stage_activation_bytes`),
  ``K = min(S - i, M)`` micro-batches in flight on stage ``i`` of ``S`` under dapple/1f1b, ``M``
  under gpipe.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from pipesim.errors import InputError, invalid
from pipesim.plan import (
    ALLREDUCE_ALGORITHMS,
    Estimate,
    Plan,
    split_samples,
)
from pipesim.planner.latency import (
    FLUSH_SCHEDULES,
    NEG_INF,
    Flow,
    backward_end_times,
    ending_with_sharing,
    in_flight,
    pipeline_time_s,
    prepend,
    timeline_schedule,
)
from pipesim.planner.replicas import overlaps, replica_classes
from pipesim.profiles.costmodels.collective import (
    AllReduceCurves,
    Lines,
    allreduce_curves,
    eval_lines,
    prune_lines,
)
from pipesim.profiles.costmodels.memory import Recompute, stage_activation_bytes, static_memory_multiplier
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules import make_schedule

_ORDERS_CACHE = 256
"""Schedules whose compute-only action orders are kept (per name, stages, micro-batches, options)."""

_DEVICE_CACHE_LIMIT = 1 << 16
"""Most device tuples whose all-reduce curves are also cached by identity (beyond the canonical cache)."""

__all__ = [
    "FLUSH_SCHEDULES",
    "NEG_INF",
    "CostModel",
    "Lines",
    "StageCosts",
    "eval_lines",
    "in_flight",
    "pipeline_time_s",
    "prepend",
]


def _canonical(*groups: Sequence[int], g: int) -> tuple[tuple[int, ...], ...]:
    """``groups`` with servers renumbered in order of first appearance (local GPU ids kept).

    Servers are identical and joined by one non-blocking switch, so any collective or transfer
    costs the same after renumbering: the key lets one computation serve every placement.
    """
    ranks: dict[int, int] = {}
    out = []
    for group in groups:
        key = []
        for d in group:
            srv, local = divmod(d, g)
            rank = ranks.get(srv)
            if rank is None:
                rank = ranks[srv] = len(ranks)
            key.append(rank * g + local)
        out.append(tuple(key))
    return tuple(out)


def even_pieces(ra: int, rb: int) -> list[tuple[int, int, Fraction]]:
    """``(source index, destination index, fraction)`` of a transfer split evenly over ``ra``
    source and ``rb`` destination replicas: source ``i`` holds ``[i/ra, (i+1)/ra)`` of the
    samples, destination ``k`` needs ``[k/rb, (k+1)/rb)``; one piece per non-empty overlap (at
    most ``ra + rb - 1``, found by merging the two partitions)."""
    out: list[tuple[int, int, Fraction]] = []
    i = k = 0
    lo = 0
    total = ra * rb  # source i spans [i*rb, (i+1)*rb), destination k spans [k*ra, (k+1)*ra)
    while i < ra and k < rb:
        hi = min((i + 1) * rb, (k + 1) * ra)
        if hi > lo:
            out.append((i, k, Fraction(hi - lo, total)))
        lo = hi
        if hi == (i + 1) * rb:
            i += 1
        if hi == (k + 1) * ra:
            k += 1
    return out


@dataclass(frozen=True, slots=True)
class _ShareTable:
    """Prefix sums of per-layer costs at one share size (samples per replica per micro-batch)."""

    fwd: tuple[float, ...]  # fwd[i] = sum of layers < i
    bwd: tuple[float, ...]
    stashed: tuple[float, ...]
    acts: tuple[float, ...]  # per layer (not a prefix)


@dataclass(frozen=True, slots=True, kw_only=True)
class StageCosts:
    """The estimator's view of one stage of a plan.

    Attributes:
        fwd_s: forward time of the slowest replica for one micro-batch, seconds.
        bwd_s: backward time, seconds.
        allreduce_s: gradient all-reduce among the replicas, seconds (0 for one replica).
        peak_memory_bytes: peak bytes of the fullest replica.
    """

    fwd_s: float
    bwd_s: float
    allreduce_s: float
    peak_memory_bytes: float


@functools.lru_cache(maxsize=_ORDERS_CACHE)
def _action_orders(
    schedule: str, num_stages: int, num_microbatches: int, options: tuple[tuple[str, Any], ...]
) -> tuple[tuple[tuple[str, int, int], ...], ...]:
    """Each rank's compute ``(op, stage, microbatch)`` order of a schedule (cached: pure)."""
    sched = make_schedule(
        schedule, num_ranks=num_stages, num_microbatches=num_microbatches, **dict(options)
    ).compute_only()
    return tuple(tuple((a.op.value, a.stage, a.microbatch or 0) for a in rank) for rank in sched.ranks)


MAX_CLASS_TIMELINES = 48
"""Most replica classes (timelines) the estimate refines a plan into (:meth:`CostModel.replica_classes`).

Telling replicas apart by the traffic on their links can end at one class per replica on large
clusters (a stage of 32 feeding one of 64 makes every server's NIC traffic a little different);
past this many timelines the refinement stops at the last coarser step, keeping the estimate of
a 1024-GPU plan to about a second."""


def _num_classes(classes: Sequence[Sequence[int]]) -> int:
    return sum(max(c, default=-1) + 1 for c in classes)


_Piece = tuple[tuple[int, ...], float]
"""A piece of a transfer: ``(route, bytes)``."""


class CostModel:
    """Cached cost queries for one profile on one cluster (see the module docstring).

    Args:
        profile: the model.
        cluster: the devices and links.
        optimizer: ``sgd``, ``momentum`` or ``adam`` (optimizer-state memory).
        recompute: activation recomputation, ``none`` or ``full`` (``True`` is ``full``;
            memory only; the time of the recomputation is not
            modelled, as in the simulator).
        allreduce: ``auto``, ``ring`` or ``hierarchical``.

    Raises:
        InputError: unknown optimizer or all-reduce algorithm.
    """

    def __init__(
        self,
        profile: ModelProfile,
        cluster: Cluster,
        *,
        optimizer: str = "adam",
        recompute: Recompute | str | bool = Recompute.NONE,
        allreduce: str = "auto",
    ) -> None:
        if allreduce not in ALLREDUCE_ALGORITHMS:
            raise invalid("allreduce", allreduce, f"must be one of {', '.join(ALLREDUCE_ALGORITHMS)}")
        self.profile = profile
        self.cluster = cluster
        self.optimizer = optimizer
        self.recompute = Recompute.parse(recompute)
        self.allreduce = allreduce
        multiplier = static_memory_multiplier(profile.dtype, optimizer)
        params = [0.0]
        for layer in profile.layers:
            params.append(params[-1] + layer.parameter_bytes)
        self._params = params
        self._multiplier = multiplier
        self.cut_bytes_per_sample = [c.crossing_bytes / profile.profile_batch_size for c in profile.cuts()]
        self._shares: dict[float, _ShareTable] = {}
        self._bw = [link.bandwidth_bytes_per_s for link in cluster.links]
        self._lat = [link.latency_s for link in cluster.links]
        self._g = cluster.gpus_per_server
        self._ar_cache: dict[tuple[int, ...], AllReduceCurves] = {}
        self._ar_by_devices: dict[tuple[int, ...], AllReduceCurves] = {}
        self._loads_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], tuple[tuple[int, float], ...]] = {}
        self._route_keys: dict[tuple[int, int], tuple[float, float] | None] = {}
        self.memo: dict[tuple[object, ...], object] = {}
        """Results planners keep per model (e.g. the data-parallel baseline of a batch size)."""
        self._xfer_cache: dict[tuple[tuple[int, ...], ...], Lines] = {}
        self.linear = not profile.batch_points
        self._network_links = {link.index for link in cluster.links if link.kind.value == "network"}

    # ------------------------------------------------------------------------------ compute
    def share_table(self, samples: float) -> _ShareTable:
        """Prefix sums of forward, backward and saved bytes at ``samples`` per replica."""
        table = self._shares.get(samples)
        if table is None:
            p = self.profile

            def prefix(values: list[float]) -> tuple[float, ...]:
                out = [0.0]
                for v in values:
                    out.append(out[-1] + v)
                return tuple(out)

            table = _ShareTable(
                fwd=prefix(p.fwd_times_s(samples)),
                bwd=prefix(p.bwd_times_s(samples)),
                stashed=prefix(p.stashed_bytes(samples)),
                acts=tuple(p.activation_bytes(samples)),
            )
            self._shares[samples] = table
        return table

    def parameter_bytes(self, first: int, last: int) -> float:
        """Parameter bytes of layers ``first..last``."""
        return self._params[last + 1] - self._params[first]

    def static_bytes(self, first: int, last: int) -> float:
        """Weights + gradients + optimizer state of layers ``first..last`` on one replica, bytes."""
        return (self._params[last + 1] - self._params[first]) * self._multiplier

    def activation_bytes(self, first: int, last: int, samples: float) -> tuple[float, float]:
        """``(stash, work)`` of a replica for one micro-batch share (see ``stage_activation_bytes``)."""
        return stage_activation_bytes(self.profile, first, last, samples, self.recompute)

    # ------------------------------------------------------------------------------ all-reduce
    def allreduce_curves(self, devices: Sequence[int]) -> AllReduceCurves:
        """Ring and hierarchical all-reduce time curves among ``devices`` (in ring order).

        From :func:`pipesim.profiles.costmodels.collective.allreduce_curves` on the cluster's routes,
        cached per placement up to renumbering the servers.
        """
        devs = tuple(devices)
        found = self._ar_by_devices.get(devs)
        if found is not None:
            return found
        (key,) = _canonical(devs, g=self._g)
        found = self._ar_cache.get(key)
        if found is None:
            cluster = self.cluster
            found = allreduce_curves(
                devs,
                cluster.route,
                self._bw.__getitem__,
                self._lat.__getitem__,
                server_of=cluster.server_of,
            )
            self._ar_cache[key] = found
        if len(self._ar_by_devices) < _DEVICE_CACHE_LIMIT:
            self._ar_by_devices[devs] = found
        return found

    def allreduce_s(self, devices: Sequence[int], nbytes: float, algorithm: str | None = None) -> float:
        """Estimated gradient all-reduce time of ``nbytes`` among ``devices`` (in ring order), seconds.

        ``auto`` picks hierarchical when it applies and is strictly faster, as the simulator does.
        """
        if len(devices) <= 1:
            return 0.0
        return self.allreduce_curves(devices).time_s(nbytes, algorithm or self.allreduce)

    # ------------------------------------------------------------------------------ transfers
    def _pieces(self, src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[tuple[int, ...], Fraction]]:
        return [
            (self.cluster.route(src[i], dst[k]), w)
            for i, k, w in even_pieces(len(src), len(dst))
            if src[i] != dst[k]
        ]

    def transfer_lines(self, src: tuple[int, ...], dst: tuple[int, ...]) -> Lines:
        """Lines of a transfer of ``x`` total bytes split evenly over ``src`` to ``dst`` replicas.

        All pieces go at once (:func:`even_pieces`); see :meth:`_piece_lines`.
        """
        key = _canonical(src, dst, g=self._g)
        cached = self._xfer_cache.get(key)
        if cached is not None:
            return cached
        lines = self._piece_lines([(r, float(w)) for r, w in self._pieces(src, dst)])
        self._xfer_cache[key] = lines
        return lines

    def _piece_lines(self, pieces: Sequence[tuple[tuple[int, ...], float]]) -> Lines:
        """The time of pieces ``(route, weight)`` sent at once, as lines of the bytes per weight.

        The last piece arrives no sooner than any piece alone (its route latency plus its bytes
        at its slowest link) and than any link can carry all the pieces crossing it (their bytes
        over its bandwidth, after the latest latency among them): the max-min fair network's
        completion time when the pieces share one bottleneck, equal or not.
        """
        lines: list[tuple[float, float]] = []
        on_link: dict[int, tuple[float, float]] = {}
        bw, lat = self._bw, self._lat
        for r, w in pieces:
            if not r:
                continue
            route_lat = sum(lat[link] for link in r)
            slowest = min(bw[link] for link in r)
            lines.append((route_lat, w / slowest if slowest < math.inf else 0.0))
            for link in set(r):
                if bw[link] < math.inf:
                    a, total = on_link.get(link, (0.0, 0.0))
                    on_link[link] = (max(a, route_lat), total + w)
        for link, (a, total) in on_link.items():
            lines.append((a, total / bw[link]))
        return prune_lines(lines)

    def transfer_link_loads(
        self, src: tuple[int, ...], dst: tuple[int, ...]
    ) -> tuple[tuple[int, float], ...]:
        """Seconds each link is busy per byte of a transfer from ``src`` to ``dst`` replicas.

        ``(link, s_per_byte)``: the bytes of every piece crossing the link over its bandwidth
        (links of infinite bandwidth are left out). The list scheduler books these on shared
        links, so transfers of different stage boundaries that cross one NIC queue there.
        """
        key = (src, dst)
        cached = self._loads_cache.get(key)
        if cached is not None:
            return cached
        load: dict[int, float] = {}
        for r, w in self._pieces(src, dst):
            for link in set(r):
                if self._bw[link] < math.inf:
                    load[link] = load.get(link, 0.0) + float(w) / self._bw[link]
        result = tuple(sorted(load.items()))
        self._loads_cache[key] = result
        return result

    def transfer_s(
        self, src: Sequence[int], dst: Sequence[int], samples: int, bytes_per_sample: float
    ) -> float:
        """Time to move one micro-batch of ``samples`` across a cut between two stages, seconds.

        Each source replica holds its :func:`split_samples` range and sends the overlap with each
        destination replica's range; all pieces go at once (see the module docstring).
        """
        ra, rb = len(src), len(dst)
        if samples % ra == 0 and samples % rb == 0:
            return eval_lines(self.transfer_lines(tuple(src), tuple(dst)), samples * bytes_per_sample)
        pieces = []
        for (lo_a, hi_a), a in zip(split_samples(samples, ra), src, strict=True):
            for (lo_b, hi_b), b in zip(split_samples(samples, rb), dst, strict=True):
                overlap = min(hi_a, hi_b) - max(lo_a, lo_b)
                if overlap > 0 and a != b:
                    pieces.append((self.cluster.route(a, b), overlap * bytes_per_sample))
        return eval_lines(self._piece_lines(pieces), 1.0)

    # ------------------------------------------------------------------------------ plans
    def _stage_orders(self, plan: Plan) -> list[list[tuple[str, int]]]:
        """Each stage's compute ``(op, microbatch)`` order under the plan's schedule."""
        orders = _action_orders(
            plan.schedule,
            plan.num_stages,
            plan.num_microbatches,
            tuple(sorted(plan.schedule_options.items())),
        )
        by_stage: list[list[tuple[str, int]]] = [[] for _ in range(plan.num_stages)]
        for rank in orders:
            for op, s, k in rank:
                by_stage[s].append((op, k))
        return by_stage

    def _run_timelines(
        self,
        orders: list[list[tuple[str, int]]],
        fwd: list[float],
        bwd: list[float],
        flows: list[Flow],
        stage_of: list[int],
        ar: list[float],
        nic_links: list[frozenset[int]],
        contention: bool,
    ) -> float:
        """Iteration time of timelines ``u`` (of stage ``stage_of[u]``) joined by ``flows``, seconds.

        Stage ``s``'s gradient all-reduce (``ar[2 * s]`` seconds alone) starts when all its
        timelines have finished their last backward; it fully uses the NIC links ``nic_links[s]``
        (empty without ``contention``), sharing them with the other all-reduces and with the
        activations and gradients still in flight (:func:`timeline_schedule`).
        """
        units: list[list[int]] = [[] for _ in nic_links]
        for u, s in enumerate(stage_of):
            units[s].append(u)
        tails = [
            (units[s], ar[2 * s], tuple((link, ar[2 * s]) for link in sorted(nic_links[s])))
            for s in range(len(nic_links))
            if ar[2 * s] > 0
        ]
        makespan, _ = timeline_schedule(orders, fwd, bwd, flows, shared_links=contention, tails=tails)
        return makespan

    def _list_scheduled(
        self,
        plan: Plan,
        fwd: list[float],
        bwd: list[float],
        ar: list[float],
        nic_links: list[frozenset[int]],
    ) -> float:
        """Iteration time from one timeline per stage, each transfer its own FIFO link, seconds.

        ``fwd``, ``bwd`` and ``ar`` alternate stages and transfers (DAPPLE's pseudo-stages); the
        estimate without ``contention`` (with it, :meth:`_replica_scheduled` shares links).
        """
        flows = []
        for s in range(plan.num_stages - 1):
            flows.append(Flow("F", s, s + 1, fwd[2 * s + 1]))
            flows.append(Flow("B", s + 1, s, bwd[2 * s + 1]))
        stages = list(range(plan.num_stages))
        return self._run_timelines(
            self._stage_orders(plan), fwd[0::2], bwd[0::2], flows, stages, ar, nic_links, False
        )

    def _route_key(self, src: int, dst: int) -> tuple[float, float] | None:
        """``(latency, slowest bandwidth)`` of the route from ``src`` to ``dst`` (None: same device)."""
        key = (src, dst)
        if key in self._route_keys:
            return self._route_keys[key]
        route = self.cluster.route(src, dst) if src != dst else ()
        out = None
        if route:
            out = (round(sum(self._lat[link] for link in route), 15), min(self._bw[link] for link in route))
        self._route_keys[key] = out
        return out

    def replica_classes(
        self, placement: Sequence[tuple[int, ...]], samples: int, nic_links: Sequence[frozenset[int]] = ()
    ) -> list[list[int]]:
        """The class of every replica of every stage (:func:`pipesim.planner.replicas.replica_classes`).

        Replicas are timed apart when their shares of a micro-batch differ, their pieces take
        routes of different latency or bandwidth, or those routes cross links that carry
        different traffic (colour refinement of the links by the classes of the pieces crossing
        them and the all-reduces ``nic_links[s]`` using them): such replicas drift apart in the
        simulator. Replicas alike up to renumbering servers stay one class. The refinement
        stops at the last step with at most :data:`MAX_CLASS_TIMELINES` classes (the shares
        alone if routes already give more). All zeros: every stage runs in step.
        """
        shares = [split_samples(samples, len(devices)) for devices in placement]
        bw = self._bw
        route = self.cluster.route
        pieces: list[list[tuple[int, int, Hashable, tuple[int, ...], tuple[int, ...]]]] = []
        for s in range(1, len(placement)):
            src, dst = placement[s - 1], placement[s]
            row: list[tuple[int, int, Hashable, tuple[int, ...], tuple[int, ...]]] = []
            for i, k, _ in overlaps(shares[s - 1], shares[s]):
                a, b = src[i], dst[k]
                ahead = tuple(x for x in route(a, b) if bw[x] < math.inf) if a != b else ()
                back = tuple(x for x in route(b, a) if bw[x] < math.inf) if a != b else ()
                row.append((i, k, (self._route_key(a, b), self._route_key(b, a)), ahead, back))
            pieces.append(row)
        base: dict[int, list[Hashable]] = {}
        for s, links in enumerate(nic_links):
            for link in links:
                base.setdefault(link, []).append(("ar", s))
        classes = replica_classes(shares, [[p[2] for p in row] for row in pieces])
        if _num_classes(classes) > MAX_CLASS_TIMELINES:
            return replica_classes(shares)
        count = -1
        while True:
            seen: dict[int, list[Hashable]] = {link: list(v) for link, v in base.items()}
            for s, row in enumerate(pieces):
                for i, k, key, ahead, back in row:
                    tag = (s, classes[s][i], classes[s + 1][k], key)
                    for link in ahead:
                        seen.setdefault(link, []).append(("F", tag))
                    for link in back:
                        seen.setdefault(link, []).append(("B", tag))
            ids: dict[Hashable, int] = {}
            color: dict[int, int] = {}
            for link, users in seen.items():
                color[link] = ids.setdefault(frozenset(Counter(users).items()), len(ids))
            keys = [
                [
                    (key, tuple(sorted(color[x] for x in ahead)), tuple(sorted(color[x] for x in back)))
                    for _, _, key, ahead, back in row
                ]
                for row in pieces
            ]
            finer = replica_classes(shares, keys)
            if _num_classes(finer) > MAX_CLASS_TIMELINES:
                return classes
            classes = finer
            new_count = len(ids) + _num_classes(classes)
            if new_count == count:
                return classes
            count = new_count

    def _replica_scheduled(
        self,
        plan: Plan,
        placement: Sequence[tuple[int, ...]],
        samples: int,
        classes: list[list[int]],
        ar: list[float],
        nic_links: list[frozenset[int]],
        contention: bool,
    ) -> float:
        """Like :meth:`_list_scheduled` with one timeline per class of replicas in step.

        For stages whose replicas hold unequal shares of a micro-batch or send over unlike
        routes (:meth:`replica_classes`): each class computes at its own share, and the pieces
        between each pair of classes are one transfer, ready when its source class finishes.
        """
        by_stage = self._stage_orders(plan)
        shares = [split_samples(samples, len(devices)) for devices in placement]
        base = [0]
        for cls in classes:
            base.append(base[-1] + max(cls) + 1)
        unit_orders: list[list[tuple[str, int]]] = []
        fwd: list[float] = []
        bwd: list[float] = []
        stage_of: list[int] = []
        for s, stage in enumerate(plan.stages):
            seen: set[int] = set()
            for k, c in enumerate(classes[s]):
                if c in seen:
                    continue
                seen.add(c)
                lo, hi = shares[s][k]
                table = self.share_table(hi - lo)
                unit_orders.append(by_stage[s])
                fwd.append(table.fwd[stage.last_layer + 1] - table.fwd[stage.first_layer])
                bwd.append(table.bwd[stage.last_layer + 1] - table.bwd[stage.first_layer])
                stage_of.append(s)
        route = self.cluster.route
        flows: list[Flow] = []
        for s in range(1, plan.num_stages):
            per_sample = self.cut_bytes_per_sample[plan.stages[s].first_layer - 1]
            src, dst = placement[s - 1], placement[s]
            groups: dict[tuple[int, int], tuple[list[_Piece], list[_Piece]]] = {}
            for i, k, n in overlaps(shares[s - 1], shares[s]):
                pair = groups.setdefault((classes[s - 1][i], classes[s][k]), ([], []))
                if src[i] != dst[k]:
                    pair[0].append((route(src[i], dst[k]), n * per_sample))
                    pair[1].append((route(dst[k], src[i]), n * per_sample))
            for (ca, cb), (ahead, back) in groups.items():
                a, b = base[s - 1] + ca, base[s] + cb
                if contention:
                    flows.append(self._piece_flow("F", a, b, ahead))
                    flows.append(self._piece_flow("B", b, a, back))
                else:
                    flows.append(Flow("F", a, b, eval_lines(self._piece_lines(ahead), 1.0)))
                    flows.append(Flow("B", b, a, eval_lines(self._piece_lines(back), 1.0)))
        return self._run_timelines(unit_orders, fwd, bwd, flows, stage_of, ar, nic_links, contention)

    def _piece_flow(self, op: str, src: int, dst: int, pieces: Sequence[_Piece]) -> Flow:
        """The fluid flow of pieces ``(route, bytes)`` sent at once between two timelines.

        Each piece alone waits its route's latency, then moves its bytes at its route's slowest
        link (the simulator's transfer); the flow starts after the longest latency and takes the
        slowest piece's byte time alone (``solo_s``), while every link is busy for the bytes of
        all the pieces crossing it (``loads``, not capped: a link ``k`` equal pieces cross
        takes ``k`` times a piece's time, and shares with other flows per piece). Links of
        infinite bandwidth are left out.
        """
        bw, lat = self._bw, self._lat
        solo = 0.0
        latency = 0.0
        load: dict[int, float] = {}
        for r, nbytes in pieces:
            if not r:
                continue
            latency = max(latency, sum(lat[link] for link in r))
            slowest = min(bw[link] for link in r)
            if slowest < math.inf:
                solo = max(solo, nbytes / slowest)
            for link in set(r):
                if bw[link] < math.inf:
                    load[link] = load.get(link, 0.0) + nbytes / bw[link]
        return Flow(op, src, dst, solo, tuple(sorted(load.items())) if solo > 0 else (), latency)

    def allreduce_network_links(self, devices: Sequence[int]) -> frozenset[int]:
        """The inter-server (NIC) links a stage's all-reduce crosses (ring and hierarchical alike)."""
        devs = list(devices)
        n = len(devs)
        route = self.cluster.route
        used: set[int] = set()
        for i in range(n):
            used.update(route(devs[i], devs[(i + 1) % n]))
        groups: dict[int, list[int]] = {}
        for d in devs:
            groups.setdefault(self.cluster.server_of(d), []).append(d)
        grp = list(groups.values())
        if len(grp) > 1 and len({len(x) for x in grp}) == 1:
            k = len(grp)
            for j in range(len(grp[0])):
                for t in range(k):
                    used.update(route(grp[t][j], grp[(t + 1) % k][j]))
        return frozenset(used & self._network_links)

    def estimate(self, plan: Plan, *, contention: bool = True, exact_schedule: bool = True) -> Estimate:
        """The analytic estimate of a plan: iteration time, throughput and peak memory per device.

        Args:
            plan: a plan with ``chunks == 1`` and a dapple, 1f1b or gpipe schedule.
            contention: model links shared across stage boundaries: activation and gradient
                transfers book every link they cross in the list-scheduled timeline (so those of
                different boundaries queue on a shared NIC), and the stages' gradient all-reduces
                share NIC links with each other and with the transfers still in flight
                (:func:`ending_with_sharing` without ``exact_schedule``); ``False`` gives the
                decomposable cost model the DAPPLE dynamic program optimises exactly.
            exact_schedule: time the compute and transfers by list-scheduling the plan's actual
                schedule, one timeline per class of replicas in step
                (:func:`pipesim.planner.latency.timeline_schedule`), instead of DAPPLE's
                closed-form latency (:func:`pipeline_time_s`, the DP's model, every replica at
                the largest share).

        Raises:
            InputError: interleaved plans, an unknown schedule, or a plan that does not fit the
                model or cluster.
            Infeasible: the plan needs more devices than the cluster has.
        """
        profile = self.profile
        plan.check_against(profile.num_layers, self.cluster.num_devices)
        if plan.chunks != 1:
            raise invalid("chunks", plan.chunks, "the planner's estimate covers chunks=1 plans only")
        if plan.schedule not in FLUSH_SCHEDULES:
            raise invalid(
                "schedule", plan.schedule, f"the planner estimates only {', '.join(FLUSH_SCHEDULES)}"
            )
        warmup = dict(plan.schedule_options).get("warmup", "default")
        if warmup != "default":
            raise InputError(
                f"schedule_options.warmup={warmup!r}: the estimate models the default warm-up only"
            )
        placement = plan.placement(self.cluster.num_devices)
        samples = max(plan.microbatch_samples())
        m = plan.num_microbatches
        fwd: list[float] = []
        bwd: list[float] = []
        ar: list[float] = []
        device_peak: dict[int, float] = {}
        nic_links: list[frozenset[int]] = []
        num = plan.num_stages
        for s, stage in enumerate(plan.stages):
            devices = placement[s]
            share = -(-samples // stage.replicas)
            table = self.share_table(share)
            first, last = stage.first_layer, stage.last_layer
            if s > 0:
                c = self.cut_bytes_per_sample[first - 1]
                t_f = self.transfer_s(placement[s - 1], devices, samples, c)
                t_b = self.transfer_s(devices, placement[s - 1], samples, c)
                fwd.append(t_f)
                bwd.append(t_b)
                ar.append(0.0)
            fwd.append(table.fwd[last + 1] - table.fwd[first])
            bwd.append(table.bwd[last + 1] - table.bwd[first])
            ar.append(self.allreduce_s(devices, self.parameter_bytes(first, last), plan.allreduce))
            nic_links.append(
                self.allreduce_network_links(devices) if contention and len(devices) > 1 else frozenset()
            )
            stash, work = self.activation_bytes(first, last, share)
            k = in_flight(plan.schedule, s, num, m)
            peak = self.static_bytes(first, last) + k * stash + work
            for d in devices:
                device_peak[d] = peak
        uneven = any(samples % stage.replicas for stage in plan.stages)
        if exact_schedule and num > 1 and contention:
            classes = self.replica_classes(placement, samples, nic_links)
            time_s = self._replica_scheduled(plan, placement, samples, classes, ar, nic_links, contention)
        elif exact_schedule and num > 1 and uneven:
            shares = [split_samples(samples, len(devices)) for devices in placement]
            classes = replica_classes(shares)
            time_s = self._replica_scheduled(plan, placement, samples, classes, ar, nic_links, contention)
        elif exact_schedule and num > 1:
            time_s = self._list_scheduled(plan, fwd, bwd, ar, nic_links)
        else:
            time_s = pipeline_time_s(fwd, bwd, ar, m, plan.schedule)
            if contention and sum(1 for x in nic_links if x) > 1:
                zero = [0.0] * len(ar)
                ends = backward_end_times(fwd, bwd, m, plan.schedule)
                jobs = [(ends[2 * s], ar[2 * s], nic_links[s]) for s in range(num)]
                time_s = max(pipeline_time_s(fwd, bwd, zero, m, plan.schedule), ending_with_sharing(jobs))
        return Estimate(
            iteration_time_s=time_s,
            throughput_samples_per_s=plan.global_batch_size / time_s if time_s > 0 else math.inf,
            peak_memory_bytes=max(device_peak.values()),
            device_peak_memory_bytes=dict(sorted(device_peak.items())),
        )
