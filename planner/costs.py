"""The planner's cost model: stage, transfer and all-reduce times, the pipeline latency, memory.

One :class:`CostModel` per (profile, cluster, optimizer, recompute, all-reduce algorithm) answers
every question a planner asks, with caches so a search pays for each distinct question once:

* **Stage compute**: a replica's forward and backward time for its share of a micro-batch,
  ``sum(profile.fwd_times_s(share)[layers])``, from prefix sums per share (the simulator's rule:
  the replicas split every micro-batch with :func:`pipesim.plan.split_samples`; the largest share
  sets the stage's time).
* **Transfers** between consecutive stages (DAPPLE's pseudo-stages): every source replica sends
  the overlap of its sample range with each destination replica's range, all pieces at once;
  each piece takes its route's latency plus its bytes at ``min over its links of (bandwidth /
  pieces of this transfer on the link)``; the transfer takes the slowest piece. Exact for the
  simulator's network when nothing else uses those links.
* **All-reduce** of a stage's gradients among its replicas: the same per-step estimate as the
  simulator's ``auto`` choice (ring over the replicas in their order: ``2 (n - 1)`` steps of
  ``S / n`` bytes; hierarchical for even servers: intra reduce-scatter + inter rings +
  intra all-gather; each step the slowest of its concurrent chunks on shared links).
* **Pipeline latency** (:func:`pipeline_time_s`): DAPPLE's warm-up + steady + ending phases, see
  ``docs/planner.md``; GPipe's two flow-shop phases.
* **Memory** per device: ``static + K * stash + work`` with the simulator's memory model
  (:func:`pipesim.profiles.memory.static_memory_multiplier`,
  :func:`pipesim.profiles.memory.stage_activation_bytes`),
  ``K = min(S - i, M)`` micro-batches in flight on stage ``i`` of ``S`` under dapple/1f1b, ``M``
  under gpipe.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

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
    backward_end_times,
    ending_with_sharing,
    in_flight,
    list_schedule,
    pipeline_time_s,
    prepend,
)
from pipesim.profiles.cluster import Cluster
from pipesim.profiles.memory import stage_activation_bytes, static_memory_multiplier
from pipesim.profiles.model import ModelProfile
from pipesim.schedules import make_schedule

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

Lines = tuple[tuple[float, float], ...]
"""A convex piecewise-linear time: ``max(a + b * x for a, b in lines)`` (0 when empty)."""


def eval_lines(lines: Lines, x: float) -> float:
    """``max(a + b * x)`` over ``lines``, 0 for no lines."""
    best = 0.0
    for a, b in lines:
        t = a + b * x
        if t > best:
            best = t
    return best


def _prune_lines(lines: list[tuple[float, float]]) -> Lines:
    """Drop the lines another one beats everywhere on x >= 0 (same max for every x >= 0)."""
    uniq = sorted(set(lines), key=lambda ab: (-ab[1], -ab[0]))
    kept: list[tuple[float, float]] = []
    for a, b in uniq:
        if any(a2 >= a and b2 >= b for a2, b2 in kept):
            continue
        kept.append((a, b))
    return tuple(kept)


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


class CostModel:
    """Cached cost queries for one profile on one cluster (see the module docstring).

    Args:
        profile: the model.
        cluster: the devices and links.
        optimizer: ``sgd``, ``momentum`` or ``adam`` (optimizer-state memory).
        recompute: activation recomputation (memory only; the time of the recomputation is not
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
        recompute: bool = False,
        allreduce: str = "auto",
    ) -> None:
        if allreduce not in ALLREDUCE_ALGORITHMS:
            raise invalid("allreduce", allreduce, f"must be one of {', '.join(ALLREDUCE_ALGORITHMS)}")
        self.profile = profile
        self.cluster = cluster
        self.optimizer = optimizer
        self.recompute = recompute
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
        self._ar_cache: dict[tuple[int, ...], tuple[Lines, Lines | None, Lines | None]] = {}
        self._servers_of: dict[tuple[int, ...], int] = {}
        self.memo: dict[tuple[object, ...], object] = {}
        """Results planners keep per model (e.g. the data-parallel baseline of a batch size)."""
        self._xfer_cache: dict[tuple[tuple[int, ...], tuple[int, ...]], Lines] = {}
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
    def _step_lines(self, routes: Sequence[tuple[int, ...]], scale: float) -> Lines:
        """Lines of one step where a chunk of ``x * scale`` bytes crosses each route at once."""
        uses: dict[int, int] = {}
        for r in routes:
            for link in set(r):
                uses[link] = uses.get(link, 0) + 1
        lines: list[tuple[float, float]] = []
        for r in routes:
            if not r:
                continue
            rate = min(self._bw[link] / uses[link] for link in set(r))
            lat = sum(self._lat[link] for link in r)
            lines.append((lat, scale / rate if rate < math.inf else 0.0))
        return _prune_lines(lines)

    def _allreduce_lines(self, devices: tuple[int, ...]) -> tuple[Lines, Lines | None, Lines | None]:
        """(ring step lines, hierarchical intra step lines, inter step lines) for ``devices``."""
        cached = self._ar_cache.get(devices)
        if cached is not None:
            return cached
        route = self.cluster.route
        n = len(devices)
        ring = self._step_lines([route(devices[i], devices[(i + 1) % n]) for i in range(n)], 1.0 / n)
        groups: dict[int, list[int]] = {}
        for d in devices:
            groups.setdefault(self.cluster.server_of(d), []).append(d)
        grp = list(groups.values())
        intra: Lines | None = None
        inter: Lines | None = None
        if len({len(x) for x in grp}) == 1 and len(grp) > 1 and len(grp[0]) > 1:
            k, g = len(grp), len(grp[0])
            intra = self._step_lines([route(x[i], x[(i + 1) % g]) for x in grp for i in range(g)], 1.0 / g)
            inter = self._step_lines(
                [route(grp[s][j], grp[(s + 1) % k][j]) for j in range(g) for s in range(k)], 1.0 / (g * k)
            )
        elif len(grp) > 1 and len({len(x) for x in grp}) > 1:
            # uneven servers: the simulator's hierarchical falls back to a ring ordered by server
            flat = [d for x in grp for d in x]
            intra = self._step_lines([route(flat[i], flat[(i + 1) % n]) for i in range(n)], 1.0 / n)
        result = (ring, intra, inter)
        self._ar_cache[devices] = result
        self._servers_of[devices] = len(grp)
        return result

    def allreduce_s(self, devices: Sequence[int], nbytes: float, algorithm: str | None = None) -> float:
        """Estimated gradient all-reduce time of ``nbytes`` among ``devices`` (in ring order), seconds.

        ``auto`` picks the smaller of ring and hierarchical, as the simulator does (ties: ring).
        """
        devs = tuple(devices)
        n = len(devs)
        if n <= 1:
            return 0.0
        algo = algorithm or self.allreduce
        ring_l, intra_l, inter_l = self._allreduce_lines(devs)
        ring = 2 * (n - 1) * eval_lines(ring_l, nbytes)
        if algo == "ring" or intra_l is None:
            return ring
        if inter_l is None:  # uneven servers: a ring ordered by server
            hier = 2 * (n - 1) * eval_lines(intra_l, nbytes)
            return hier if algo == "hierarchical" else ring
        k = self._servers_of[devs]
        g = n // k
        hier = 2 * (g - 1) * eval_lines(intra_l, nbytes) + 2 * (k - 1) * eval_lines(inter_l, nbytes)
        if algo == "hierarchical":
            return hier
        return hier if hier < ring else ring

    # ------------------------------------------------------------------------------ transfers
    def transfer_lines(self, src: tuple[int, ...], dst: tuple[int, ...]) -> Lines:
        """Lines of a transfer of ``x`` total bytes split evenly over ``src`` to ``dst`` replicas."""
        key = (src, dst)
        cached = self._xfer_cache.get(key)
        if cached is not None:
            return cached
        ra, rb = len(src), len(dst)
        pieces: list[tuple[tuple[int, ...], Fraction]] = []
        for i, a in enumerate(src):
            lo_a, hi_a = Fraction(i, ra), Fraction(i + 1, ra)
            for k, b in enumerate(dst):
                overlap = min(hi_a, Fraction(k + 1, rb)) - max(lo_a, Fraction(k, rb))
                if overlap > 0 and a != b:
                    pieces.append((self.cluster.route(a, b), overlap))
        uses: dict[int, int] = {}
        for r, _ in pieces:
            for link in set(r):
                uses[link] = uses.get(link, 0) + 1
        lines = []
        for r, w in pieces:
            rate = min(self._bw[link] / uses[link] for link in set(r))
            lines.append((sum(self._lat[link] for link in r), float(w) / rate if rate < math.inf else 0.0))
        result = _prune_lines(lines)
        self._xfer_cache[key] = result
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
        uses: dict[int, int] = {}
        for r, _ in pieces:
            for link in set(r):
                uses[link] = uses.get(link, 0) + 1
        worst = 0.0
        for r, nbytes in pieces:
            rate = min(self._bw[link] / uses[link] for link in set(r))
            worst = max(worst, sum(self._lat[link] for link in r) + (nbytes / rate if nbytes > 0 else 0.0))
        return worst

    # ------------------------------------------------------------------------------ plans
    def _list_scheduled(
        self,
        plan: Plan,
        fwd: list[float],
        bwd: list[float],
        ar: list[float],
        nic_links: list[frozenset[int]],
        contention: bool,
    ) -> float:
        """Iteration time from the list-scheduled timeline plus the all-reduce ending phase."""
        sched = make_schedule(
            plan.schedule,
            num_ranks=plan.num_stages,
            num_microbatches=plan.num_microbatches,
            **dict(plan.schedule_options),
        ).compute_only()
        makespan, last_b = list_schedule(
            [[(a.op.value, a.stage, a.microbatch or 0) for a in rank] for rank in sched.ranks],
            fwd[0::2],
            bwd[0::2],
            fwd[1::2],
            bwd[1::2],
        )
        jobs = [(last_b[s], ar[2 * s], nic_links[s]) for s in range(plan.num_stages)]
        if contention:
            ending = ending_with_sharing(jobs)
        else:
            ending = max((start + dur for start, dur, _ in jobs), default=0.0)
        return max(makespan, ending)

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
            contention: model the stages' gradient all-reduces sharing NIC links when they overlap
                in the ending phase (:func:`ending_with_sharing`); ``False`` gives the
                decomposable cost model the DAPPLE dynamic program optimises exactly.
            exact_schedule: time the compute and transfers by list-scheduling the plan's actual
                schedule (:func:`pipesim.schedules.evaluate`, transfers independent) instead of
                DAPPLE's closed-form latency (:func:`pipeline_time_s`, the DP's model).

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
        if exact_schedule and num > 1:
            time_s = self._list_scheduled(plan, fwd, bwd, ar, nic_links, contention)
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
