"""The tally: what an executor of a lowered program counts on the fly, and the result it makes.

Both executors (the SimPy engine and the contention-free fast path) report into one
:class:`Tally`, so their results are built the same way. With ``record`` off nothing grows with
the number of micro-batches: no trace events, and each memory curve keeps its start, its peak and
its end only.
"""

from __future__ import annotations

import struct
from array import array

from pipesim.profiles.hardware.cluster import Cluster
from pipesim.simulator.instructions import Compute
from pipesim.simulator.link_records import LinkStretches
from pipesim.simulator.program import Program
from pipesim.simulator.trace import DeviceMetrics, EventKind, MemoryCurve, SimulationResult, TraceEvent
from pipesim.simulator.trace_log import (
    ALL_REDUCE,
    OP_CODE,
    SEND_ACTIVATION,
    SEND_GRADIENT,
    TP_COLLECTIVE,
    TraceEvents,
    TraceLog,
)

__all__ = ["OP_KIND", "Tally"]

_PACK_COMPUTE = struct.Struct("6d").pack
_PACK_COMM = struct.Struct("8d").pack
"""A trace record's fields as the machine's doubles, to append to a log column with
``frombytes`` (the same values ``extend`` stores, converted in one call rather than one item at a
time)."""

OP_KIND = {
    "F": EventKind.FORWARD,
    "B": EventKind.BACKWARD,
    "I": EventKind.INPUT_GRAD,
    "W": EventKind.WEIGHT_GRAD,
    "O": EventKind.OPTIMIZER,
}
"""The trace kind of each compute op."""


class Tally:
    """Counters, memory curves and (optionally) trace events of one executed program.

    Args:
        program: the program being executed.
        record: keep every trace event and every memory change.
    """

    def __init__(self, program: Program, *, record: bool) -> None:
        self.program = program
        self.record = record
        self.log = TraceLog()  # trace records, in columns (see trace_log), when recording
        self._compute_record = self.log.compute.frombytes
        self._comm_record = self.log.comm.frombytes
        static = program.static_memory_bytes
        self.memory_now = dict(static)
        self.memory_peak = {d: (0.0, b) for d, b in static.items()}  # device -> (time, peak bytes)
        # when recording, each device's memory curve as two columns: times, bytes
        self.memory_times = {d: array("d", (0.0,)) for d in static} if record else {}
        self.memory_bytes = {d: array("d", (b,)) for d, b in static.items()} if record else {}
        self.busy: dict[int, float] = {}
        self.comm_wait: dict[int, float] = {}
        self.allreduce_time: dict[int, float] = {}
        self.last_backward_end = 0.0
        self.num_ops = 0  # compute ops and transfers simulated
        self.end_time = 0.0
        self.comm_end = 0.0  # the end of the last stream before its optimizer step, or collective

    def compute(
        self, device: int, ins: Compute, start: float, end: float, compute_end: float | None = None
    ) -> None:
        """Count one compute op that ran from ``start`` to ``end`` seconds: its memory (allocated
        at the start, freed at the end), its trace record (the compute until ``compute_end``
        when the op then waited for its TP collectives), and the end of a backward."""
        now = self.memory_now[device]
        peak_t, peak = self.memory_peak[device]
        if self.record:
            times = self.memory_times[device]
            values = self.memory_bytes[device]
            for nbytes in ins.alloc_bytes:
                now += nbytes
                if now > peak:
                    peak_t, peak = start, now
                if times[-1] == start:
                    values[-1] = now
                else:
                    times.append(start)
                    values.append(now)
            for nbytes in ins.free_bytes:
                now -= nbytes
                if times[-1] == end:
                    values[-1] = now
                else:
                    times.append(end)
                    values.append(now)
            op_end = end if compute_end is None else compute_end
            self._compute_record(
                _PACK_COMPUTE(device, OP_CODE[ins.op], ins.stage, ins.microbatch, start, op_end)
            )
        else:
            for nbytes in ins.alloc_bytes:
                now += nbytes
                if now > peak:
                    peak_t, peak = start, now
            for nbytes in ins.free_bytes:
                now -= nbytes
        self.memory_now[device] = now
        self.memory_peak[device] = (peak_t, peak)
        self.num_ops += 1
        if (ins.op == "B" or ins.op == "W") and end > self.last_backward_end:
            self.last_backward_end = end

    def tp_collective(self, device: int, ins: Compute, nbytes: float, start: float, end: float) -> None:
        """Count op ``ins``'s TP collectives (``nbytes`` of full tensors) that ran from ``start`` to
        ``end`` seconds among ``device``'s group, on its communication row when recording."""
        self.num_ops += 1
        if self.record:
            self._comm_record(
                _PACK_COMM(device, TP_COLLECTIVE, ins.stage, ins.microbatch, nbytes, -1, start, end)
            )

    def send(
        self, device: int, kind: str, stage: int, mb: int, nbytes: float, peer: int, start: float, end: float
    ) -> None:
        """Record one delivered transfer's trace event (when recording)."""
        if self.record:
            code = SEND_ACTIVATION if kind == "act" else SEND_GRADIENT
            self._comm_record(_PACK_COMM(device, code, stage, mb, nbytes, peer, start, end))

    def collective(
        self, members: tuple[int, ...], stage: int, nbytes: float, start: float, end: float
    ) -> None:
        """Count one all-reduce among ``members`` from ``start`` to ``end`` seconds."""
        for device in members:
            self.allreduce_time[device] = self.allreduce_time.get(device, 0.0) + (end - start)
            if self.record:
                self._comm_record(_PACK_COMM(device, ALL_REDUCE, stage, -1, nbytes, -1, start, end))
        self.end_time = max(self.end_time, end)
        self.comm_end = max(self.comm_end, end)

    def stream_done(
        self, device: int, busy: float, comm_wait: float, end: float, before_update: float | None = None
    ) -> None:
        """A device's compute stream has run its last instruction at ``end`` seconds (the one
        before its optimizer step at ``before_update``, if it had one)."""
        self.busy[device] = busy
        self.comm_wait[device] = comm_wait
        self.end_time = max(self.end_time, end)
        self.comm_end = max(self.comm_end, end if before_update is None else before_update)

    def result(
        self, cluster: Cluster, link_names: tuple[str, ...], links: LinkStretches | None = None
    ) -> SimulationResult:
        """The :class:`SimulationResult` of the executed program, with the link busy stretches
        ``links`` (when recording) among its events."""
        program = self.program
        plan = program.plan
        iteration = self.end_time
        device_stages: dict[int, list[int]] = {}
        for stage in program.stages:
            for device in stage.devices:
                device_stages.setdefault(device, []).append(stage.index)
        metrics: list[DeviceMetrics] = []
        memory: dict[int, MemoryCurve] = {}
        for device in sorted(program.static_memory_bytes):
            if self.record:
                memory[device] = MemoryCurve(
                    tuple(self.memory_times[device]), tuple(self.memory_bytes[device])
                )
            else:  # no per-op records: the start, the peak and the end
                peak_t, peak = self.memory_peak[device]
                curve = [(0.0, program.static_memory_bytes[device])]
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
                    memory_capacity_bytes=float(cluster.device_spec(device).memory_bytes),
                )
            )
        stage_peak = tuple(max(self.memory_peak[d][1] for d in stage.devices) for stage in program.stages)
        events: tuple[TraceEvent, ...] | TraceEvents = (
            TraceEvents(self.log, links, link_names) if self.record else ()
        )
        return SimulationResult(
            iteration_time_s=iteration,
            global_batch_size=plan.global_batch_size,
            devices=tuple(metrics),
            events=events,
            memory=memory,
            schedule=program.schedule.name,
            num_stages=plan.num_stages,
            num_microbatches=plan.num_microbatches,
            exposed_allreduce_time_s=max(0.0, self.comm_end - self.last_backward_end),
            stage_peak_memory_bytes=stage_peak,
            num_events=self.num_ops,
            link_names=link_names,
        )
