"""The record of one simulated iteration: timed events on devices and links, and memory over time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import NamedTuple

__all__ = ["DeviceMetrics", "EventKind", "MemoryCurve", "SimulationResult", "TraceEvent", "new_event"]


class EventKind(str, Enum):
    """What a trace event is: compute on a GPU stream, or traffic on a link or collective."""

    FORWARD = "F"
    BACKWARD = "B"  # full backward (input and weight gradients)
    INPUT_GRAD = "I"  # zero-bubble split: input gradient only
    WEIGHT_GRAD = "W"  # zero-bubble split: weight gradient only
    OPTIMIZER = "optimizer"  # the optimizer step at the end of the iteration (docs/optimizer.md)
    SEND_ACTIVATION = "send_act"
    SEND_GRADIENT = "send_grad"
    ALL_REDUCE = "allreduce"  # one device's part in its stage's gradient all-reduce
    TP_COLLECTIVE = "tp"  # a TP stage's exposed tensor-parallel collectives of one op (docs/parallelism.md)
    LINK = "link"  # a link busy carrying one or more flows (per-link tracks)

    @property
    def is_compute(self) -> bool:
        """True for F, B, I, W and the optimizer step (work on a device's compute stream)."""
        return self in (
            EventKind.FORWARD,
            EventKind.BACKWARD,
            EventKind.INPUT_GRAD,
            EventKind.WEIGHT_GRAD,
            EventKind.OPTIMIZER,
        )


class TraceEvent(NamedTuple):
    """One interval of activity (an immutable record; build it with keywords).

    A named tuple rather than a dataclass: a traced 1024-GPU run makes a million of them, and a
    tuple is made in a third of the time.

    Attributes:
        resource: where it ran: ``"gpu3"`` for a device's compute stream, ``"gpu3.comm"`` for its
            communication, or a link name such as ``"s0.nic0->switch"``.
        kind: what it was.
        start_s: start time in seconds from the start of the iteration.
        end_s: end time in seconds.
        device: the device id, or ``None`` for link events.
        stage: the (virtual) pipeline stage, or ``None``.
        microbatch: the micro-batch index, or ``None`` (e.g. all-reduce).
        nbytes: bytes moved (transfers, all-reduce), 0 for compute.
        peer: the other device of a transfer, or ``None``.
    """

    resource: str
    kind: EventKind
    start_s: float
    end_s: float
    device: int | None = None
    stage: int | None = None
    microbatch: int | None = None
    nbytes: float = 0.0
    peer: int | None = None

    @property
    def duration_s(self) -> float:
        """``end_s - start_s``, seconds."""
        return self.end_s - self.start_s


new_event = TraceEvent.__new__.__get__(TraceEvent)
"""``new_event(resource, kind, start_s, end_s, device, stage, microbatch, nbytes, peer)``: a
:class:`TraceEvent` from positional fields, without the keyword handling (the hot path)."""


@dataclass(frozen=True, slots=True)
class MemoryCurve:
    """A device's allocated bytes over time as a step function.

    ``times_s[k]`` is when the allocation changed to ``bytes[k]``; the value holds until the next
    time. The first point is at time 0 with the static memory (weights, gradients, optimizer state).
    """

    times_s: tuple[float, ...]
    bytes: tuple[float, ...]

    @property
    def peak_bytes(self) -> float:
        """The highest allocation, bytes."""
        return max(self.bytes) if self.bytes else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceMetrics:
    """What one device did in the iteration.

    Attributes:
        device: device id.
        stages: the pipeline stages placed on it (several for interleaved schedules).
        busy_time_s: time its compute stream was running F/B/I/W, seconds.
        comm_wait_time_s: time its compute stream sat idle with its next op waiting for data
            from another device, seconds.
        bubble_time_s: the rest of the iteration its compute stream was idle, seconds (pipeline
            fill/drain and waiting for its all-reduce at the end).
        allreduce_time_s: wall time of its stage's gradient all-reduce(s), seconds.
        static_memory_bytes: weights + gradients + optimizer state, bytes.
        peak_memory_bytes: highest allocation over the iteration, bytes.
        memory_capacity_bytes: the device's memory, bytes.
    """

    device: int
    stages: tuple[int, ...]
    busy_time_s: float
    comm_wait_time_s: float
    bubble_time_s: float
    allreduce_time_s: float
    static_memory_bytes: float
    peak_memory_bytes: float
    memory_capacity_bytes: float

    @property
    def fits(self) -> bool:
        """True when the peak allocation fits in the device's memory."""
        return self.peak_memory_bytes <= self.memory_capacity_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulationResult:
    """The outcome of simulating one training iteration of a plan.

    Attributes:
        iteration_time_s: from the first op to the end of the last all-reduce, seconds.
        global_batch_size: samples per iteration.
        devices: per-device metrics, by device id.
        events: every trace event, sorted by (start, resource, end); a sequence that behaves as
            the tuple of events (from a simulation, a :class:`~pipesim.simulator.trace_log.TraceEvents`
            that makes them on first read); ``()`` without a trace.
        memory: each device's memory curve, keyed by device id.
        schedule: the schedule name that ran.
        num_stages: pipeline stages (virtual stages for interleaved schedules).
        num_microbatches: micro-batches per iteration.
        exposed_allreduce_time_s: time from the last backward to the end of the last stream or gradient
            collective before the optimizer steps,
            seconds (gradient synchronisation not hidden behind compute).
        stage_peak_memory_bytes: the highest peak among each stage's devices, by stage.
        num_events: simulation events processed (for benchmarks).
    """

    iteration_time_s: float
    global_batch_size: int
    devices: tuple[DeviceMetrics, ...]
    events: Sequence[TraceEvent]
    memory: dict[int, MemoryCurve]
    schedule: str
    num_stages: int
    num_microbatches: int
    exposed_allreduce_time_s: float
    stage_peak_memory_bytes: tuple[float, ...] = ()
    num_events: int = 0
    link_names: Sequence[str] = field(default_factory=tuple)

    @property
    def throughput_samples_per_s(self) -> float:
        """Samples per second: global batch over iteration time."""
        return self.global_batch_size / self.iteration_time_s if self.iteration_time_s > 0 else float("inf")

    @property
    def bubble_fraction(self) -> float:
        """Share of device-time the compute streams were not computing: 1 - busy / (devices x time)."""
        if not self.devices or self.iteration_time_s <= 0:
            return 0.0
        busy = sum(d.busy_time_s for d in self.devices)
        # (at least 0: busy time summed op by op may pass the iteration by a rounding error)
        return max(0.0, 1.0 - busy / (len(self.devices) * self.iteration_time_s))

    @property
    def peak_memory_bytes(self) -> float:
        """The highest peak over all devices, bytes."""
        return max((d.peak_memory_bytes for d in self.devices), default=0.0)

    @property
    def fits(self) -> bool:
        """True when every device's peak fits in its memory."""
        return all(d.fits for d in self.devices)
