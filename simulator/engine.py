"""SimPy execution of one training iteration of a plan on a modelled cluster."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from pipesim.errors import InputError, invalid
from pipesim.plan import Plan, split_samples
from pipesim.profiles.costmodels.collective import AllReduceOverlap
from pipesim.profiles.costmodels.memory import stage_activation_bytes, static_memory_bytes
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules import Schedule, make_schedule
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.microbatch_costs import MicrobatchCosts
from pipesim.simulator.network import LinkInterval, Network
from pipesim.simulator.trace import (
    DeviceMetrics,
    EventKind,
    MemoryCurve,
    SimulationResult,
    TraceEvent,
)

__all__ = ["SimOptions", "simulate"]

log = logging.getLogger(__name__)

_OP_KIND = {
    "F": EventKind.FORWARD,
    "B": EventKind.BACKWARD,
    "I": EventKind.INPUT_GRAD,
    "W": EventKind.WEIGHT_GRAD,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SimOptions:
    """How to simulate (what-if knobs). Defaults model the cluster as given.

    Attributes:
        free_links: zero-latency, infinite-bandwidth links (closed-form checks).
        contention: share each link max-min fairly among concurrent flows; ``False`` gives every
            flow the link's full bandwidth (the contention-free model of the analytic evaluator).
        speed_factors: relative compute speed per device id (0.5 = a GPU at half speed).
        jitter: coefficient of variation of a log-normal multiplicative noise on every compute
            op (0 = none); per-op-kind values with a mapping such as ``{"F": 0.05, "B": 0.1}``.
        seed: seed of the jitter's random generator (required when jitter is on).
        allreduce_overlap: an :class:`~pipesim.profiles.costmodels.collective.AllReduceOverlap`
            (a name is accepted and converted): ``"after_backward"`` starts a stage's gradient
            all-reduce as soon as all its replicas finished their last backward (DAPPLE);
            ``"end"`` waits for the whole
            pipeline to drain first; ``"bucketed"`` cuts a stage's gradients into buckets of
            ``bucket_bytes`` (in backward order, as PyTorch DDP does) and all-reduces each bucket,
            one after another, as soon as every replica's last backward has produced it.
        bucket_bytes: bucket size for ``"bucketed"``, bytes (default 25 MiB, DDP's default
            ``bucket_cap_mb``).
        record_trace: keep every trace event (set ``False`` for big sweeps).
    """

    free_links: bool = False
    contention: bool = True
    speed_factors: Mapping[int, float] = field(default_factory=dict)
    jitter: float | Mapping[str, float] = 0.0
    seed: int | None = None
    allreduce_overlap: AllReduceOverlap = AllReduceOverlap.AFTER_BACKWARD
    bucket_bytes: float = 25 * 1024**2
    record_trace: bool = True

    def __post_init__(self) -> None:
        for device, factor in self.speed_factors.items():
            if not (math.isfinite(factor) and factor > 0):
                raise invalid(f"speed_factors[{device}]", factor, "must be a finite number > 0")
        jitter = self.jitter if isinstance(self.jitter, Mapping) else {"*": self.jitter}
        for op, cv in jitter.items():
            if op not in ("*", "F", "B", "I", "W"):
                raise invalid("jitter", op, "keys must be F, B, I or W")
            if not (math.isfinite(cv) and cv >= 0):
                raise invalid(f"jitter[{op}]", cv, "must be a finite number >= 0")
        if any(v > 0 for v in jitter.values()) and self.seed is None:
            raise invalid("seed", None, "jitter needs an explicit seed (same seed, same result)")
        object.__setattr__(self, "allreduce_overlap", AllReduceOverlap.parse(self.allreduce_overlap))
        if not (math.isfinite(self.bucket_bytes) and self.bucket_bytes > 0):
            raise invalid("bucket_bytes", self.bucket_bytes, "must be a finite number > 0")

    def jitter_for(self, op: str) -> float:
        """The coefficient of variation for op ``"F"``, ``"B"``, ``"I"`` or ``"W"``."""
        if isinstance(self.jitter, Mapping):
            return float(self.jitter.get(op, self.jitter.get("*", 0.0)))
        return float(self.jitter)


class _Arrival:
    """Pieces of one tensor (activation or gradient) arriving at one replica of one stage."""

    __slots__ = ("event", "pending", "produced_s")

    def __init__(self, pieces: int) -> None:
        self.event: simpy.Event | None = None  # made only when a device has to wait for it
        self.pending = pieces
        self.produced_s = 0.0


@dataclass(slots=True)
class _Stage:
    """Pre-computed facts of one (virtual) stage."""

    index: int
    rank: int
    layers: range
    devices: tuple[int, ...]
    shares: tuple[tuple[tuple[int, int], ...], ...]  # per micro-batch: per replica (start, stop)
    fwd_s: list[list[float]]  # [microbatch][replica]
    bwd_s: list[list[float]]
    wgrad_fraction: float
    stash_bytes: list[list[float]]  # kept per in-flight micro-batch
    work_bytes: list[list[float]]  # transient during the backward
    out_bytes_per_sample: float  # activation bytes crossing to the next stage per sample
    out_bytes_per_sample_mb: list[float] | None = None  # per micro-batch, with explicit costs
    # per micro-batch, per replica: (receiving replica of the next/previous stage, samples)
    act_out: list[list[list[tuple[int, int]]]] = field(default_factory=list)
    grad_out: list[list[list[tuple[int, int]]]] = field(default_factory=list)
    # per micro-batch, per replica: pieces that must arrive before F (act) or B/I (grad)
    act_in: list[list[int]] = field(default_factory=list)
    grad_in: list[list[int]] = field(default_factory=list)

    def out_per_sample(self, mb: int) -> float:
        """Activation bytes per sample crossing to the next stage for micro-batch ``mb``."""
        if self.out_bytes_per_sample_mb is not None:
            return self.out_bytes_per_sample_mb[mb]
        return self.out_bytes_per_sample


def _overlaps(
    src: tuple[tuple[int, int], ...], dst: tuple[tuple[int, int], ...]
) -> tuple[list[list[tuple[int, int]]], list[int]]:
    """Pieces from each src replica to each dst replica (samples in common), and pieces per dst."""
    out: list[list[tuple[int, int]]] = []
    count = [0] * len(dst)
    for a, b in src:
        row = []
        for k, (c, d) in enumerate(dst):
            common = min(b, d) - max(a, c)
            if common > 0:
                row.append((k, common))
                count[k] += 1
        out.append(row)
    return out, count


class _Run:
    """One simulation: state shared by the device processes."""

    def __init__(
        self,
        plan: Plan,
        profile: ModelProfile,
        cluster: Cluster,
        options: SimOptions,
        schedule: Schedule | None = None,
        costs: MicrobatchCosts | None = None,
    ) -> None:
        plan.check_against(profile.num_layers, cluster.num_devices)
        self.plan = plan
        self.profile = profile
        self.cluster = cluster
        self.options = options
        self.env = simpy.Environment()
        if costs is not None:
            costs.check_shape(plan.num_stages, plan.num_microbatches)
        self.costs = costs
        if schedule is None:
            schedule = make_schedule(
                plan.schedule,
                num_ranks=plan.num_ranks,
                num_microbatches=plan.num_microbatches,
                chunks=plan.chunks,
                **dict(plan.schedule_options),
            )
        elif (schedule.num_ranks, schedule.num_stages, schedule.num_microbatches) != (
            plan.num_ranks,
            plan.num_stages,
            plan.num_microbatches,
        ):
            raise invalid(
                "schedule",
                f"{schedule.num_ranks} ranks, {schedule.num_stages} stages, {schedule.num_microbatches} "
                "micro-batches",
                f"must match the plan's {plan.num_ranks} ranks, {plan.num_stages} stages, "
                f"{plan.num_microbatches} micro-batches",
            )
        self.schedule: Schedule = schedule.compute_only()
        self.placement = plan.placement(cluster.num_devices)
        self.stages = [self._stage(s) for s in range(plan.num_stages)]
        self._link_pieces()
        self.network = Network(
            self.env,
            [link.bandwidth_bytes_per_s for link in cluster.links],
            [link.latency_s for link in cluster.links],
            link_names=[link.name for link in cluster.links],
            free_links=options.free_links,
            contention=options.contention,
            on_link_interval=self._on_link_interval if options.record_trace else None,
        )
        self.events: list[TraceEvent] = []
        self.arrivals: dict[tuple[str, int, int, int], _Arrival] = {}
        self.memory_now: dict[int, float] = {}
        self.memory_log: dict[int, list[tuple[float, float]]] = {}
        self.busy: dict[int, float] = {}
        self.comm_wait: dict[int, float] = {}
        self.allreduce_time: dict[int, float] = {}
        self.last_backward_end = 0.0
        self.num_ops = 0  # compute ops and transfers simulated
        self.end_time = 0.0
        self.backward_left: dict[int, int] = {}  # stage -> replicas still running its backwards
        self.bucket_state: dict[int, tuple[list[int], list[simpy.Event]]] = {}
        self.drained = self.env.event()
        self.ranks_running = sum(len(devs) for devs in self.placement)
        self._apply_jitter()

    # ---------------------------------------------------------------------------------------
    # Set-up
    def _stage(self, s: int) -> _Stage:
        plan, profile = self.plan, self.profile
        spec = plan.stages[s]
        rank = s % plan.num_ranks
        devices = self.placement[rank]
        layers = range(spec.first_layer, spec.last_layer + 1)
        shares = tuple(split_samples(n, len(devices)) for n in plan.microbatch_samples())
        cache: dict[int, tuple[float, float, float, float]] = {}
        out_per_sample = 0.0
        if spec.last_layer < profile.num_layers - 1:
            out_per_sample = profile.cuts()[spec.last_layer].crossing_bytes / profile.profile_batch_size

        def costs(samples: int) -> tuple[float, float, float, float]:
            if samples not in cache:
                fwd = profile.fwd_times_s(samples)
                bwd = profile.bwd_times_s(samples)
                stash, work = stage_activation_bytes(
                    profile, spec.first_layer, spec.last_layer, samples, plan.recompute
                )
                cache[samples] = (sum(fwd[i] for i in layers), sum(bwd[i] for i in layers), stash, work)
            return cache[samples]

        out_mb: list[float] | None = None
        if self.costs is None:
            table = [[costs(stop - start) for start, stop in mb] for mb in shares]
        else:  # explicit per-micro-batch costs, shared among replicas by sample count
            c = self.costs
            table = [
                [
                    (
                        c.fwd_time_s[s][k] * (stop - start) / n,
                        c.bwd_time_s[s][k] * (stop - start) / n,
                        c.stash_bytes[s][k] * (stop - start) / n,
                        c.work_bytes[s][k] * (stop - start) / n,
                    )
                    for start, stop in mb
                ]
                for k, (mb, n) in enumerate(zip(shares, plan.microbatch_samples(), strict=True))
            ]
            out_mb = [c.out_bytes[s][k] / n for k, n in enumerate(plan.microbatch_samples())]
        weights = [profile.layers[i].parameter_bytes for i in layers]
        bwd_total = [profile.layers[i].bwd_time_s for i in layers]
        w_time = sum(
            b * profile.layers[i].weight_grad_fraction for b, i in zip(bwd_total, layers, strict=True)
        )
        wgrad_fraction = w_time / sum(bwd_total) if sum(bwd_total) > 0 else (0.5 if sum(weights) else 0.0)
        return _Stage(
            index=s,
            rank=rank,
            layers=layers,
            devices=devices,
            shares=shares,
            fwd_s=[[c[0] for c in row] for row in table],
            bwd_s=[[c[1] for c in row] for row in table],
            wgrad_fraction=wgrad_fraction,
            stash_bytes=[[c[2] for c in row] for row in table],
            work_bytes=[[c[3] for c in row] for row in table],
            out_bytes_per_sample=out_per_sample,
            out_bytes_per_sample_mb=out_mb,
        )

    def _link_pieces(self) -> None:
        """Pre-compute how each micro-batch's tensors are cut between neighbouring stages."""
        cache: dict[tuple[object, object], tuple[list[list[tuple[int, int]]], list[int]]] = {}

        def overlaps(
            a: tuple[tuple[int, int], ...], b: tuple[tuple[int, int], ...]
        ) -> tuple[list[list[tuple[int, int]]], list[int]]:
            if (a, b) not in cache:
                cache[(a, b)] = _overlaps(a, b)
            return cache[(a, b)]

        m = self.plan.num_microbatches
        for stage in self.stages:
            nxt = self.stages[stage.index + 1] if stage.index + 1 < len(self.stages) else None
            prev = self.stages[stage.index - 1] if stage.index > 0 else None
            stage.act_out = [overlaps(stage.shares[mb], nxt.shares[mb])[0] if nxt else [] for mb in range(m)]
            stage.grad_out = [
                overlaps(stage.shares[mb], prev.shares[mb])[0] if prev else [] for mb in range(m)
            ]
            stage.act_in = [overlaps(prev.shares[mb], stage.shares[mb])[1] if prev else [] for mb in range(m)]
            stage.grad_in = [overlaps(nxt.shares[mb], stage.shares[mb])[1] if nxt else [] for mb in range(m)]

    def _apply_jitter(self) -> None:
        opts = self.options
        factors = opts.speed_factors
        rng = np.random.default_rng(opts.seed) if opts.seed is not None else None
        for stage in self.stages:
            for r, device in enumerate(stage.devices):
                speed = factors.get(device, 1.0)
                for m in range(self.plan.num_microbatches):
                    fwd, bwd = stage.fwd_s[m][r] / speed, stage.bwd_s[m][r] / speed
                    if rng is not None:
                        fwd *= _lognormal(rng, opts.jitter_for("F"))
                        bwd *= _lognormal(rng, opts.jitter_for("B"))
                    stage.fwd_s[m][r], stage.bwd_s[m][r] = fwd, bwd

    # ---------------------------------------------------------------------------------------
    # Helpers used by the device processes
    def arrival(self, kind: str, stage: _Stage, mb: int, replica: int) -> _Arrival:
        key = (kind, stage.index, mb, replica)
        found = self.arrivals.get(key)
        if found is None:
            pieces = (stage.act_in if kind == "act" else stage.grad_in)[mb][replica]
            found = self.arrivals[key] = _Arrival(pieces)
        return found

    def memory(self, device: int, delta: float) -> None:
        now = self.memory_now[device] + delta
        self.memory_now[device] = now
        log_ = self.memory_log[device]
        t = self.env.now
        if log_ and log_[-1][0] == t:
            log_[-1] = (t, now)
        else:
            log_.append((t, now))

    def send(self, kind: str, src_stage: _Stage, dst_stage: _Stage, mb: int, replica: int) -> None:
        """Start the transfers of one replica's output (``act``) or input gradient (``grad``)."""
        src_device = src_stage.devices[replica]
        if kind == "act":
            pieces = src_stage.act_out[mb][replica]
            per_sample = src_stage.out_per_sample(mb)
        else:
            pieces = src_stage.grad_out[mb][replica]
            per_sample = dst_stage.out_per_sample(mb)
        produced = self.env.now
        free = self.options.free_links
        for k, samples in pieces:
            target = self.arrival(kind, dst_stage, mb, k)
            if produced > target.produced_s:
                target.produced_s = produced
            dst_device = dst_stage.devices[k]
            if free or dst_device == src_device:
                self._delivered(target)
                continue
            nbytes = samples * per_sample
            self.num_ops += 1
            done = self.network.transfer(self.cluster.route(src_device, dst_device), nbytes)
            done.callbacks.append(
                self._on_delivery(target, kind, src_stage.index, mb, src_device, dst_device, nbytes, produced)
            )

    def _on_delivery(
        self,
        target: _Arrival,
        kind: str,
        stage: int,
        mb: int,
        src: int,
        dst: int,
        nbytes: float,
        start: float,
    ) -> Callable[[simpy.Event], None]:
        def callback(_: simpy.Event) -> None:
            if self.options.record_trace:
                self.events.append(
                    TraceEvent(
                        resource=f"gpu{src}.comm",
                        kind=EventKind.SEND_ACTIVATION if kind == "act" else EventKind.SEND_GRADIENT,
                        start_s=start,
                        end_s=self.env.now,
                        device=src,
                        stage=stage,
                        microbatch=mb,
                        nbytes=nbytes,
                        peer=dst,
                    )
                )
            self._delivered(target)

        return callback

    def _on_link_interval(self, interval: LinkInterval) -> None:
        if interval.end_s > interval.start_s:
            self.events.append(
                TraceEvent(
                    resource=self.cluster.links[interval.link].name,
                    kind=EventKind.LINK,
                    start_s=interval.start_s,
                    end_s=interval.end_s,
                    nbytes=interval.bytes_per_s * (interval.end_s - interval.start_s),
                )
            )

    @staticmethod
    def _delivered(target: _Arrival) -> None:
        target.pending -= 1
        if target.pending == 0 and target.event is not None:
            target.event.succeed()

    # ---------------------------------------------------------------------------------------
    # Processes
    def device_process(self, rank: int, replica: int) -> Generator[simpy.Event, Any, None]:
        env = self.env
        device = self.placement[rank][replica]
        actions = self.schedule.ranks[rank]
        stages = self.stages
        last = len(stages) - 1
        record = self.options.record_trace
        bucketed = self.options.allreduce_overlap == "bucketed"
        steps = [(a.op.value, stages[a.stage], a.microbatch or 0) for a in actions]  # compute-only
        last_backward_index: dict[int, int] = {}
        for i, (op, stage, _) in enumerate(steps):
            if op in ("B", "W"):
                last_backward_index[stage.index] = i
        busy = 0.0
        wait_comm = 0.0
        for i, (op, stage, mb) in enumerate(steps):
            needed: _Arrival | None = None
            if op == "F" and stage.index > 0:
                needed = self.arrival("act", stage, mb, replica)
            elif op in ("B", "I") and stage.index < last:
                needed = self.arrival("grad", stage, mb, replica)
            if needed is not None and needed.pending:
                free_at = env.now
                needed.event = env.event()
                yield needed.event
                # Time the data spent on the wire after it was produced (or after we were free).
                wait_comm += max(0.0, env.now - max(free_at, needed.produced_s))
            if op == "F":
                duration = stage.fwd_s[mb][replica]
                self.memory(device, stage.stash_bytes[mb][replica])
            elif op == "B":
                duration = stage.bwd_s[mb][replica]
                self.memory(device, stage.work_bytes[mb][replica])
            elif op == "I":
                duration = stage.bwd_s[mb][replica] * (1.0 - stage.wgrad_fraction)
                self.memory(device, stage.work_bytes[mb][replica])
            else:  # W
                duration = stage.bwd_s[mb][replica] * stage.wgrad_fraction
            start = env.now
            if bucketed and last_backward_index.get(stage.index) == i and len(stage.devices) > 1:
                env.process(self._buckets_ready(stage, duration))
            if duration > 0:
                yield env.timeout(duration)
            busy += duration
            self.num_ops += 1
            if record:
                self.events.append(
                    TraceEvent(
                        resource=f"gpu{device}",
                        kind=_OP_KIND[op],
                        start_s=start,
                        end_s=env.now,
                        device=device,
                        stage=stage.index,
                        microbatch=mb,
                    )
                )
            if op == "F":
                if stage.index < last:
                    self.send("act", stage, stages[stage.index + 1], mb, replica)
            elif op in ("B", "I"):
                self.memory(device, -stage.work_bytes[mb][replica])
                if op == "B":
                    self.memory(device, -stage.stash_bytes[mb][replica])
                if stage.index > 0:
                    self.send("grad", stage, stages[stage.index - 1], mb, replica)
            else:
                self.memory(device, -stage.stash_bytes[mb][replica])
            if op in ("B", "W"):
                self.last_backward_end = max(self.last_backward_end, env.now)
                if last_backward_index.get(stage.index) == i:
                    self._backward_finished(stage)
        self.busy[device] = busy
        self.comm_wait[device] = wait_comm
        self.end_time = max(self.end_time, env.now)
        self.ranks_running -= 1
        if self.ranks_running == 0:
            self.drained.succeed()

    def _backward_finished(self, stage: _Stage) -> None:
        left = self.backward_left.get(stage.index, len(stage.devices)) - 1
        self.backward_left[stage.index] = left
        if left == 0 and len(stage.devices) > 1 and self.options.allreduce_overlap != "bucketed":
            grad_bytes = float(sum(self.profile.layers[i].parameter_bytes for i in stage.layers))
            self.env.process(self.allreduce_process(stage, [(grad_bytes, None)]))

    def _buckets(self, stage: _Stage) -> list[tuple[float, float]]:
        """(bytes, fraction of the backward after which the bucket's gradients exist), in order."""
        layers = self.profile.layers
        total_bwd = sum(layers[i].bwd_time_s for i in stage.layers)
        buckets: list[tuple[float, float]] = []
        size = 0.0
        done = 0.0
        for i in reversed(stage.layers):  # the backward runs from the stage's last layer down
            size += layers[i].parameter_bytes
            done += layers[i].bwd_time_s
            if size >= self.options.bucket_bytes:
                buckets.append((size, done / total_bwd if total_bwd > 0 else 1.0))
                size = 0.0
        if size > 0 or not buckets:
            buckets.append((size, 1.0))
        return buckets

    def _buckets_ready(self, stage: _Stage, duration: float) -> Generator[simpy.Event, Any, None]:
        """On one replica: mark each bucket ready as its part of the last backward completes."""
        state = self.bucket_state.get(stage.index)
        if state is None:
            buckets = self._buckets(stage)
            events = [self.env.event() for _ in buckets]
            state = self.bucket_state[stage.index] = ([len(stage.devices)] * len(buckets), events)
            sizes = [nbytes for nbytes, _ in buckets]
            self.env.process(self.allreduce_process(stage, list(zip(sizes, events, strict=True))))
        waiting, events = state
        elapsed = 0.0
        for k, (_, fraction) in enumerate(self._buckets(stage)):
            if fraction * duration > elapsed:
                yield self.env.timeout(fraction * duration - elapsed)
                elapsed = fraction * duration
            waiting[k] -= 1
            if waiting[k] == 0:
                events[k].succeed()

    def allreduce_process(
        self, stage: _Stage, buckets: list[tuple[float, simpy.Event | None]]
    ) -> Generator[simpy.Event, Any, None]:
        """All-reduce a stage's gradient buckets among its replicas, one after another."""
        if self.options.allreduce_overlap == "end" and not self.drained.processed:
            yield self.drained
        for nbytes, ready in buckets:
            if ready is not None and not ready.processed:
                yield ready
            start = self.env.now
            yield self.env.process(
                allreduce(
                    self.env,
                    self.network,
                    list(stage.devices),
                    nbytes,
                    self.cluster.route,
                    server_of=self.cluster.server_of,
                    algorithm=self.plan.allreduce,
                )
            )
            end = self.env.now
            for device in stage.devices:
                self.allreduce_time[device] = self.allreduce_time.get(device, 0.0) + (end - start)
                if self.options.record_trace:
                    self.events.append(
                        TraceEvent(
                            resource=f"gpu{device}.comm",
                            kind=EventKind.ALL_REDUCE,
                            start_s=start,
                            end_s=end,
                            device=device,
                            stage=stage.index,
                            nbytes=nbytes,
                        )
                    )
            self.end_time = max(self.end_time, end)

    # ---------------------------------------------------------------------------------------
    def run(self) -> SimulationResult:
        plan, profile = self.plan, self.profile
        device_layers: dict[int, list[int]] = {}
        device_stages: dict[int, list[int]] = {}
        for stage in self.stages:
            for device in stage.devices:
                device_layers.setdefault(device, []).extend(stage.layers)
                device_stages.setdefault(device, []).append(stage.index)
        static = {
            d: static_memory_bytes(profile, layers, plan.optimizer) for d, layers in device_layers.items()
        }
        for device, value in static.items():
            self.memory_now[device] = value
            self.memory_log[device] = [(0.0, value)]
        for rank, devices in enumerate(self.placement):
            for replica in range(len(devices)):
                self.env.process(self.device_process(rank, replica))
        self.env.run()
        if self.ranks_running:
            raise InputError(
                f"schedule {plan.schedule!r} deadlocked: {self.ranks_running} device streams never "
                "finished (a dependency was never satisfied)"
            )
        iteration = self.end_time
        capacity = float(self.cluster.device.memory_bytes)
        metrics: list[DeviceMetrics] = []
        memory: dict[int, MemoryCurve] = {}
        for device in sorted(static):
            curve = self.memory_log[device]
            memory[device] = MemoryCurve(tuple(t for t, _ in curve), tuple(b for _, b in curve))
            busy = self.busy.get(device, 0.0)
            wait = self.comm_wait.get(device, 0.0)
            metrics.append(
                DeviceMetrics(
                    device=device,
                    stages=tuple(device_stages[device]),
                    busy_time_s=busy,
                    comm_wait_time_s=wait,
                    bubble_time_s=max(0.0, iteration - busy - wait),
                    allreduce_time_s=self.allreduce_time.get(device, 0.0),
                    static_memory_bytes=static[device],
                    peak_memory_bytes=memory[device].peak_bytes,
                    memory_capacity_bytes=capacity,
                )
            )
        stage_peak = tuple(max(memory[d].peak_bytes for d in stage.devices) for stage in self.stages)
        events = sorted(self.events, key=lambda e: (e.start_s, e.resource, e.end_s))
        return SimulationResult(
            iteration_time_s=iteration,
            global_batch_size=plan.global_batch_size,
            devices=tuple(metrics),
            events=tuple(events),
            memory=memory,
            schedule=self.schedule.name,
            num_stages=plan.num_stages,
            num_microbatches=plan.num_microbatches,
            exposed_allreduce_time_s=max(0.0, iteration - self.last_backward_end),
            stage_peak_memory_bytes=stage_peak,
            num_events=self.num_ops,
            link_names=tuple(link.name for link in self.cluster.links),
        )


def _lognormal(rng: np.random.Generator, cv: float) -> float:
    """A multiplicative noise factor with mean 1 and coefficient of variation ``cv``."""
    if cv <= 0:
        return 1.0
    sigma2 = math.log1p(cv * cv)
    return float(rng.lognormal(-sigma2 / 2.0, math.sqrt(sigma2)))


def simulate(
    plan: Plan,
    profile: ModelProfile,
    cluster: Cluster,
    options: SimOptions | None = None,
    *,
    schedule: Schedule | None = None,
    costs: MicrobatchCosts | None = None,
) -> SimulationResult:
    """Simulate one training iteration of ``plan`` for ``profile`` on ``cluster``.

    Every device runs its rank's schedule actions in order on its compute stream; activations
    and gradients travel over the cluster's links as flows that share each link max-min fairly;
    each replicated stage all-reduces its gradients among its replicas with transfers over the
    same links. Memory per device is tracked over time (see :mod:`pipesim.profiles.costmodels.memory`).

    Args:
        plan: the plan to execute.
        profile: the model's per-layer costs (times scaled to each replica's share of a
            micro-batch).
        cluster: devices and links.
        options: what-if knobs (see :class:`SimOptions`).
        schedule: run this explicit schedule (its compute actions) instead of the one
            ``plan.schedule`` names; it must have the plan's ranks, stages and micro-batches.
        costs: per-stage, per-micro-batch costs (:class:`~pipesim.simulator.microbatch_costs.MicrobatchCosts`)
            that replace the ones derived from the profile's layers (variable-length micro-batches);
            the profile still gives parameters, optimizer state and weight-gradient fractions.

    Returns:
        The trace and metrics of the iteration.

    Raises:
        Infeasible: the plan needs more devices than the cluster has, or more stages than layers.
        InputError: the plan does not match the model or the cluster, an unknown schedule, or a
            schedule that deadlocks; a ``schedule`` or ``costs`` whose shape differs from the plan's.
    """
    return _Run(plan, profile, cluster, options or SimOptions(), schedule, costs).run()
