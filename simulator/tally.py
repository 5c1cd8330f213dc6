"""The tally: what an executor of a lowered program counts on the fly, and the result it makes.

Both executors (the SimPy engine and the contention-free fast path) report into one
:class:`Tally`, so their results are built the same way. With ``record`` off nothing grows with
the number of micro-batches: no trace events, and each memory curve keeps its start, its peak and
its end only.
"""

from __future__ import annotations

from operator import itemgetter

from pipesim.profiles.hardware.cluster import Cluster
from pipesim.simulator.program import Compute, Program
from pipesim.simulator.trace import (
    DeviceMetrics,
    EventKind,
    MemoryCurve,
    SimulationResult,
    TraceEvent,
    new_event,
)

__all__ = ["OP_KIND", "Tally"]

OP_KIND = {
    "F": EventKind.FORWARD,
    "B": EventKind.BACKWARD,
    "I": EventKind.INPUT_GRAD,
    "W": EventKind.WEIGHT_GRAD,
}
"""The trace kind of each compute op."""


_EVENT_ORDER = itemgetter(
    TraceEvent._fields.index("start_s"),
    TraceEvent._fields.index("resource"),
    TraceEvent._fields.index("end_s"),
)
"""Trace order: by start, then resource, then end (fields of the :class:`TraceEvent` tuple)."""


class Tally:
    """Counters, memory curves and (optionally) trace events of one executed program.

    Args:
        program: the program being executed.
        record: keep every trace event and every memory change.
    """

    def __init__(self, program: Program, *, record: bool) -> None:
        self.program = program
        self.record = record
        self.events: list[TraceEvent] = []
        static = program.static_memory_bytes
        self.memory_now = dict(static)
        self.memory_peak = {d: (0.0, b) for d, b in static.items()}  # device -> (time, peak bytes)
        self.memory_log: dict[int, list[tuple[float, float]]] = {d: [(0.0, b)] for d, b in static.items()}
        self.busy: dict[int, float] = {}
        self.comm_wait: dict[int, float] = {}
        self.allreduce_time: dict[int, float] = {}
        self.last_backward_end = 0.0
        self.num_ops = 0  # compute ops and transfers simulated
        self.end_time = 0.0

    def compute(self, device: int, ins: Compute, start: float, end: float) -> None:
        """Count one compute op that ran from ``start`` to ``end`` seconds: its memory (allocated
        at the start, freed at the end), its trace event, and the end of a backward."""
        now = self.memory_now[device]
        peak_t, peak = self.memory_peak[device]
        record = self.record
        log_ = self.memory_log[device]
        for nbytes in ins.alloc_bytes:
            now += nbytes
            if now > peak:
                peak_t, peak = start, now
            if record:
                if log_[-1][0] == start:
                    log_[-1] = (start, now)
                else:
                    log_.append((start, now))
        for nbytes in ins.free_bytes:
            now -= nbytes
            if record:
                if log_[-1][0] == end:
                    log_[-1] = (end, now)
                else:
                    log_.append((end, now))
        self.memory_now[device] = now
        self.memory_peak[device] = (peak_t, peak)
        self.num_ops += 1
        if record:
            kind = OP_KIND[ins.op]
            tp = self.program.tp_comm(device, ins) if self.program.tp is not None else None
            if tp is not None:  # the op's exposed TP collectives, on the communication row
                comm_s, nbytes = tp
                self.events.append(
                    new_event(f"gpu{device}.comm", EventKind.TP_COLLECTIVE, end - comm_s, end, device,
                              ins.stage, ins.microbatch, nbytes, None)
                )
                end -= comm_s
            self.events.append(
                new_event(f"gpu{device}", kind, start, end, device, ins.stage, ins.microbatch, 0.0, None)
            )
        if (ins.op == "B" or ins.op == "W") and end > self.last_backward_end:
            self.last_backward_end = end

    def send(
        self, device: int, kind: str, stage: int, mb: int, nbytes: float, peer: int, start: float, end: float
    ) -> None:
        """Record one delivered transfer's trace event (when recording)."""
        if self.record:
            event_kind = EventKind.SEND_ACTIVATION if kind == "act" else EventKind.SEND_GRADIENT
            resource = f"gpu{device}.comm"
            self.events.append(new_event(resource, event_kind, start, end, device, stage, mb, nbytes, peer))

    def collective(
        self, members: tuple[int, ...], stage: int, nbytes: float, start: float, end: float
    ) -> None:
        """Count one all-reduce among ``members`` from ``start`` to ``end`` seconds."""
        for device in members:
            self.allreduce_time[device] = self.allreduce_time.get(device, 0.0) + (end - start)
            if self.record:
                self.events.append(
                    TraceEvent(
                        resource=f"gpu{device}.comm",
                        kind=EventKind.ALL_REDUCE,
                        start_s=start,
                        end_s=end,
                        device=device,
                        stage=stage,
                        nbytes=nbytes,
                    )
                )
        self.end_time = max(self.end_time, end)

    def stream_done(self, device: int, busy: float, comm_wait: float, end: float) -> None:
        """A device's compute stream has run its last instruction at ``end`` seconds."""
        self.busy[device] = busy
        self.comm_wait[device] = comm_wait
        self.end_time = max(self.end_time, end)

    def result(self, cluster: Cluster, link_names: tuple[str, ...]) -> SimulationResult:
        """The :class:`SimulationResult` of the executed program."""
        program = self.program
        plan = program.plan
        iteration = self.end_time
        capacity = float(cluster.device.memory_bytes)
        device_stages: dict[int, list[int]] = {}
        for stage in program.stages:
            for device in stage.devices:
                device_stages.setdefault(device, []).append(stage.index)
        metrics: list[DeviceMetrics] = []
        memory: dict[int, MemoryCurve] = {}
        for device in sorted(program.static_memory_bytes):
            curve = self.memory_log[device]
            if not self.record:  # no per-op records: the start, the peak and the end
                peak_t, peak = self.memory_peak[device]
                curve = [curve[0]]
                if peak > curve[0][1]:
                    curve = [(0.0, peak)] if peak_t == 0 else [curve[0], (peak_t, peak)]
                if self.memory_now[device] != curve[-1][1]:
                    curve.append((max(iteration, curve[-1][0]), self.memory_now[device]))
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
                    static_memory_bytes=program.static_memory_bytes[device],
                    peak_memory_bytes=self.memory_peak[device][1],
                    memory_capacity_bytes=capacity,
                )
            )
        stage_peak = tuple(max(self.memory_peak[d][1] for d in stage.devices) for stage in program.stages)
        events = sorted(self.events, key=_EVENT_ORDER)
        return SimulationResult(
            iteration_time_s=iteration,
            global_batch_size=plan.global_batch_size,
            devices=tuple(metrics),
            events=tuple(events),
            memory=memory,
            schedule=program.schedule.name,
            num_stages=plan.num_stages,
            num_microbatches=plan.num_microbatches,
            exposed_allreduce_time_s=max(0.0, iteration - self.last_backward_end),
            stage_peak_memory_bytes=stage_peak,
            num_events=self.num_ops,
            link_names=link_names,
        )
