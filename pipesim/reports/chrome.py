"""Chrome/Perfetto trace export: a simulated iteration as Trace Event Format JSON.

The output opens in https://ui.perfetto.dev and in ``chrome://tracing``. Its layout:

* one process per server (``"server 0"``, ``"server 1"``, ...), holding for each of its GPUs a
  compute track (``"gpu3 compute"``: F/B/I/W) and a communication track (``"gpu3 comm"``: sends
  and all-reduce), then the links that leave that server and carried traffic (idle links get no
  track); where events on one resource overlap (concurrent sends), the extra ones go to
  numbered tracks under it (``"gpu3 comm #2"``), as Perfetto cannot show overlapping slices on
  one track;
* a ``"network"`` process for links that belong to no server (switch ports, fabric links);
* one counter track per GPU, ``"gpu3 memory (MiB)"``, in its server's process.

Events are ``"X"`` (complete) events with ``ts`` and ``dur`` in microseconds, named ``"F3"`` /
``"B3"`` (kind and micro-batch) with the stage, micro-batch, device, peer and bytes in ``args``.
Flow arrows (``"s"``/``"f"`` pairs, category ``"dependency"``) join each op to what it unblocks:
the op that produced a transfer to its send, the send to the op on the peer that consumed it, and
on one device a stage's op to the next stage's op of the same micro-batch (chunks sharing a
device, and the last stage's forward to its backward). The trace records no explicit edges, so
they are derived: a send's producer is the latest op on its device with the same micro-batch and
stage that ended by the send's start (a forward for activations, a backward or input-gradient
pass for gradients), its consumer the earliest such op on the peer that started after the send
ended, preferring the next (activations) or previous (gradients) stage.
Process and track names and their order come from ``"M"`` metadata events. Same result in, same
bytes out: the events are sorted and the keys are written in sorted order.

Reference: the Trace Event Format document (Google, "Trace Event Format", the ``X``, ``C`` and
``M`` phases and the ``process_name`` / ``thread_name`` / ``*_sort_index`` metadata names).
"""

from __future__ import annotations

import gzip
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipesim.errors import invalid
from pipesim.fileio import atomic_write_bytes, json_text
from pipesim.simulator.trace import EventKind, SimulationResult, TraceEvent
from pipesim.units import MIB

__all__ = [
    "chrome_trace",
    "default_link_server",
    "dependency_edges",
    "trace_event_name",
    "write_chrome_trace",
]

log = logging.getLogger(__name__)

_US_PER_S = 1e6
_TS_DECIMALS = 3  # nanosecond resolution in microsecond fields: keeps float noise out of the file
_MIB_DECIMALS = 6
_GPU_RESOURCE = re.compile(r"^gpu(\d+)(?:\.(.+))?$")
_SERVER_PREFIX = re.compile(r"^s(\d+)\.")
_VALID_SUFFIXES = (".json", ".json.gz")


def default_link_server(link: str) -> int | None:
    """The server a link leaves from, read from its name: ``"s1.nic0->switch"`` -> 1.

    Args:
        link: a link name.

    Returns:
        The number after a leading ``s`` and before the first dot, or ``None`` when the name does
        not start that way (the link then goes to the ``"network"`` process).
    """
    match = _SERVER_PREFIX.match(link)
    return int(match.group(1)) if match else None


def trace_event_name(event: TraceEvent) -> str:
    """A short readable name for an event: ``"F3"``, ``"B3"``, ``"send act 3"``, ``"all-reduce"``.

    Compute events are the kind letter and the micro-batch; transfers say what they carry and for
    which micro-batch; an all-reduce names its stage when known.
    """
    mb = "" if event.microbatch is None else str(event.microbatch)
    kind = event.kind
    if kind is EventKind.OPTIMIZER:
        return "optimizer step"
    if kind.is_compute:
        return f"{kind.value}{mb}"
    if kind is EventKind.SEND_ACTIVATION:
        return f"send act {mb}".rstrip()
    if kind is EventKind.SEND_GRADIENT:
        return f"send grad {mb}".rstrip()
    if kind is EventKind.ALL_REDUCE:
        return "all-reduce" if event.stage is None else f"all-reduce s{event.stage}"
    if kind is EventKind.TP_COLLECTIVE:
        return f"TP collectives {mb}".rstrip()
    if event.device is not None and event.peer is not None:
        return f"gpu{event.device}->gpu{event.peer}"
    return f"transfer {mb}".rstrip() if mb else "busy"


def _us(seconds: float) -> float:
    return round(seconds * _US_PER_S, _TS_DECIMALS)


def _event_args(event: TraceEvent) -> dict[str, Any]:
    args: dict[str, Any] = {"kind": event.kind.value}
    for key, value in (
        ("device", event.device),
        ("stage", event.stage),
        ("microbatch", event.microbatch),
        ("peer", event.peer),
    ):
        if value is not None:
            args[key] = value
    if event.nbytes:
        args["bytes"] = event.nbytes
    return args


def _lanes(result: SimulationResult) -> tuple[list[int], dict[str, int]]:
    """Split each resource's events into lanes with no overlap (greedy interval partitioning).

    Perfetto nests ``X`` events on one track as a call stack and rejects partial overlaps, but
    concurrent transfers on a comm stream (or flows on a link) do overlap; each lane becomes its
    own track. Returns each event's lane (by position in ``result.events``) and each resource's
    number of lanes.
    """
    order = sorted(
        range(len(result.events)),
        key=lambda i: (
            result.events[i].resource,
            _us(result.events[i].start_s),
            _us(result.events[i].end_s),
            i,
        ),
    )
    lane_of = [0] * len(result.events)
    ends: dict[str, list[float]] = {}  # resource -> end time (us) of each lane's last event
    for i in order:
        event = result.events[i]
        start, end = _us(event.start_s), _us(event.end_s)
        lanes = ends.setdefault(event.resource, [])
        lane = next((k for k, busy_until in enumerate(lanes) if busy_until <= start), len(lanes))
        if lane == len(lanes):
            lanes.append(end)
        else:
            lanes[lane] = end
        lane_of[i] = lane
    return lane_of, {resource: len(lanes) for resource, lanes in ends.items()}


class _Layout:
    """Assigns pids and tids: servers, then the network process; per process GPUs then links."""

    def __init__(
        self,
        result: SimulationResult,
        lanes: dict[str, int],
        server_of: Callable[[int], int],
        link_server: Callable[[str], int | None],
    ) -> None:
        devices: set[int] = {d.device for d in result.devices} | set(result.memory)
        links: set[str] = set()
        # device -> stream suffixes besides compute ("comm" and anything else the engine uses)
        streams: dict[int, set[str]] = {}
        for resource in lanes:
            device = self.device_of(resource)
            if device is None:
                links.add(resource)
            else:
                devices.add(device)
                if "." in resource:
                    streams.setdefault(device, set()).add(resource.split(".", 1)[1])
        server: dict[int, int] = {}
        for device in sorted(devices):
            value = server_of(device)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise invalid(f"server_of({device})", value, "must be an int >= 0")
            server[device] = value
        link_home: dict[str, int | None] = {}
        for link in sorted(links):
            home = link_server(link)
            if home is not None and (not isinstance(home, int) or isinstance(home, bool) or home < 0):
                raise invalid(f"link_server({link!r})", home, "must be an int >= 0 or None")
            link_home[link] = home
        servers = sorted(set(server.values()) | {h for h in link_home.values() if h is not None})
        self.pid_of_server = {s: i + 1 for i, s in enumerate(servers)}
        self.network_pid = len(servers) + 1
        self.processes: list[tuple[int, str]] = [(self.pid_of_server[s], f"server {s}") for s in servers]
        if any(h is None for h in link_home.values()):
            self.processes.append((self.network_pid, "network"))
        self.device_pid = {d: self.pid_of_server[s] for d, s in server.items()}
        # (resource, lane) -> (pid, tid, track name); tids count up over the trace in display order
        self.tracks: dict[tuple[str, int], tuple[int, int, str]] = {}
        tid = 0

        def add(pid: int, resource: str, name: str) -> None:
            nonlocal tid
            for lane in range(max(lanes.get(resource, 0), 1)):
                tid += 1
                self.tracks[(resource, lane)] = (pid, tid, name if lane == 0 else f"{name} #{lane + 1}")

        for pid, _ in self.processes:
            for device in sorted(d for d, p in self.device_pid.items() if p == pid):
                add(pid, f"gpu{device}", f"gpu{device} compute")
                for stream in sorted(streams.get(device, set()) | {"comm"}):
                    add(pid, f"gpu{device}.{stream}", f"gpu{device} {stream}")
            for link in sorted(k for k, h in link_home.items() if self._pid(h) == pid):
                add(pid, link, link)

    def _pid(self, server: int | None) -> int:
        return self.network_pid if server is None else self.pid_of_server[server]

    @staticmethod
    def device_of(resource: str) -> int | None:
        match = _GPU_RESOURCE.match(resource)
        return int(match.group(1)) if match else None


def chrome_trace(
    result: SimulationResult,
    *,
    server_of: Callable[[int], int] | None = None,
    link_server: Callable[[str], int | None] | None = None,
) -> dict[str, Any]:
    """Build the Chrome/Perfetto trace of a simulated iteration.

    Args:
        result: the simulation result.
        server_of: maps a device id to its server index (>= 0); default: every device on server 0.
        link_server: maps a link name to the server it leaves from, or ``None`` to put the link in
            the ``"network"`` process; default :func:`default_link_server` (``"s1.nic0->switch"``
            -> 1, ``"switch->s1.nic0"`` -> ``None``).

    Returns:
        A JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.
        ``ts`` and ``dur`` are microseconds (rounded to the nanosecond); memory counters are MiB.
        Events are ordered: metadata, then complete events by (ts, pid, tid), then flow event
        pairs (``"s"`` then ``"f"``, by flow id), then counters by (pid, name, ts).

    Raises:
        InputError: ``server_of`` or ``link_server`` returns something other than a non-negative
            int (or ``None`` for ``link_server``), or a memory curve's times decrease or its
            times and values differ in number.
    """
    lane_of, lanes = _lanes(result)
    layout = _Layout(result, lanes, server_of or (lambda _device: 0), link_server or default_link_server)
    metadata: list[dict[str, Any]] = []
    for index, (pid, name) in enumerate(layout.processes):
        metadata.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}})
        metadata.append(
            {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": index}}
        )
    for pid, tid, name in sorted(layout.tracks.values()):
        metadata.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        metadata.append(
            {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}}
        )

    complete: list[dict[str, Any]] = []
    for event, lane in zip(result.events, lane_of, strict=True):
        pid, tid, _ = layout.tracks[(event.resource, lane)]
        start_us = _us(event.start_s)
        complete.append(
            {
                "ph": "X",
                "name": trace_event_name(event),
                "cat": event.kind.value,
                "pid": pid,
                "tid": tid,
                "ts": start_us,
                "dur": max(0.0, round(_us(event.end_s) - start_us, _TS_DECIMALS)),
                "args": _event_args(event),
            }
        )
    complete.sort(key=lambda e: (e["ts"], e["pid"], e["tid"], e["dur"], e["name"]))
    flows = _flow_events(
        result,
        [layout.tracks[(e.resource, lane)][:2] for e, lane in zip(result.events, lane_of, strict=True)],
    )

    counters: list[dict[str, Any]] = []
    for device in sorted(result.memory):
        curve = result.memory[device]
        pid = layout.device_pid[device]
        name = f"gpu{device} memory (MiB)"
        points: dict[float, float] = {}  # ts -> MiB; a later change at the same time wins
        previous = float("-inf")
        if len(curve.times_s) != len(curve.bytes):
            raise invalid(
                f"memory[{device}].bytes",
                len(curve.bytes),
                f"must have one value per time ({len(curve.times_s)})",
            )
        for time_s, nbytes in zip(curve.times_s, curve.bytes, strict=True):
            if time_s < previous:
                raise invalid(f"memory[{device}].times_s", curve.times_s, "must be non-decreasing")
            previous = time_s
            points[_us(time_s)] = round(nbytes / MIB, _MIB_DECIMALS)
        counters.extend(
            {"ph": "C", "name": name, "pid": pid, "tid": 0, "ts": ts, "args": {"MiB": mib}}
            for ts, mib in sorted(points.items())
        )

    other = {
        "schedule": result.schedule,
        "iteration_time_s": result.iteration_time_s,
        "num_stages": result.num_stages,
        "num_microbatches": result.num_microbatches,
        "global_batch_size": result.global_batch_size,
        "generator": "pipesim",
    }
    log.debug(
        "chrome trace: %d tracks, %d events, %d flow arrows, %d counter points",
        len(layout.tracks),
        len(complete),
        len(flows) // 2,
        len(counters),
    )
    events = metadata + complete + flows + counters
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


_EPS_S = 1e-12


def dependency_edges(result: SimulationResult) -> list[tuple[int, int]]:
    """The dependencies shown as flow arrows, as ``(from, to)`` positions in ``result.events``.

    Derived from the events (see the module docstring): producer op -> send, send -> consumer op
    on the peer, and on one device a stage's op -> the next stage's op of the same micro-batch.
    Sorted; each pair once.
    """
    events = result.events
    compute: dict[tuple[int, int], list[int]] = {}  # (device, microbatch) -> compute event positions
    for i, e in enumerate(events):
        if e.kind.is_compute and e.device is not None and e.microbatch is not None:
            compute.setdefault((e.device, e.microbatch), []).append(i)
    forward_kinds = (EventKind.FORWARD,)
    backward_kinds = (EventKind.BACKWARD, EventKind.INPUT_GRAD)
    edges: set[tuple[int, int]] = set()
    for i, e in enumerate(events):
        if e.kind not in (EventKind.SEND_ACTIVATION, EventKind.SEND_GRADIENT):
            continue
        if e.device is None or e.microbatch is None:
            continue
        kinds = forward_kinds if e.kind is EventKind.SEND_ACTIVATION else backward_kinds
        step = 1 if e.kind is EventKind.SEND_ACTIVATION else -1
        mine = [
            j
            for j in compute.get((e.device, e.microbatch), [])
            if events[j].kind in kinds
            and events[j].end_s <= e.start_s + _EPS_S
            and (e.stage is None or events[j].stage == e.stage)
        ]
        if mine:
            edges.add((max(mine, key=lambda j: (events[j].end_s, j)), i))
        if e.peer is None:
            continue
        theirs = [
            j
            for j in compute.get((e.peer, e.microbatch), [])
            if events[j].kind in kinds and events[j].start_s >= e.end_s - _EPS_S
        ]
        if e.stage is not None and any(events[j].stage == e.stage + step for j in theirs):
            theirs = [j for j in theirs if events[j].stage == e.stage + step]
        if theirs:
            edges.add((i, min(theirs, key=lambda j: (events[j].start_s, j))))
    last_stage = result.num_stages - 1
    for positions in compute.values():
        by_stage = {(events[j].kind, events[j].stage): j for j in positions}
        for j in positions:
            e = events[j]
            if e.stage is None:
                continue
            if e.kind is EventKind.FORWARD:
                nxt = by_stage.get((EventKind.FORWARD, e.stage + 1))
                if nxt is None and e.stage == last_stage:
                    nxt = by_stage.get((EventKind.BACKWARD, e.stage))
            elif e.kind is EventKind.BACKWARD:
                nxt = by_stage.get((EventKind.BACKWARD, e.stage - 1))
            else:
                continue
            if nxt is not None and events[nxt].start_s >= e.end_s - _EPS_S:
                edges.add((j, nxt))
    return sorted(edges)


def _flow_events(result: SimulationResult, track_of: list[tuple[int, int]]) -> list[dict[str, Any]]:
    """``"s"``/``"f"`` flow event pairs for :func:`dependency_edges`, each bound to its slice.

    Each end sits at the middle of its slice (a point the slice encloses); the ``"f"`` end has
    ``"bp": "e"`` (bind to the enclosing slice, not the next one).
    """
    out: list[dict[str, Any]] = []
    for flow_id, (a, b) in enumerate(dependency_edges(result), start=1):
        src, dst = result.events[a], result.events[b]
        name = f"{trace_event_name(src)} -> {trace_event_name(dst)}"
        for event, phase, (pid, tid) in ((src, "s", track_of[a]), (dst, "f", track_of[b])):
            start = _us(event.start_s)
            middle = round(start + (_us(event.end_s) - start) / 2, _TS_DECIMALS)
            flow: dict[str, Any] = {
                "ph": phase,
                "id": flow_id,
                "name": name,
                "cat": "dependency",
                "pid": pid,
                "tid": tid,
                "ts": middle,
            }
            if phase == "f":
                flow["bp"] = "e"
            out.append(flow)
    return out


def write_chrome_trace(
    result: SimulationResult,
    path: str | os.PathLike[str],
    *,
    server_of: Callable[[int], int] | None = None,
    link_server: Callable[[str], int | None] | None = None,
) -> Path:
    """Write :func:`chrome_trace` of ``result`` to ``path`` atomically.

    The file is written to a temporary file in the same directory and moved into place with
    ``os.replace``, so a failure never leaves half a file. A ``.json.gz`` path is gzip-compressed
    (with a zero timestamp in the gzip header, so the bytes are reproducible).

    Args:
        result: the simulation result.
        path: where to write; must end in ``.json`` or ``.json.gz``.
        server_of: see :func:`chrome_trace`.
        link_server: see :func:`chrome_trace`.

    Returns:
        The path written.

    Raises:
        InputError: the extension is neither ``.json`` nor ``.json.gz``, or :func:`chrome_trace`
            rejects the mapping functions.
        OSError: the file cannot be written.
    """
    target = Path(path)
    name = target.name.lower()
    if not name.endswith(_VALID_SUFFIXES):
        extension = "".join(target.suffixes) or "(none)"
        raise invalid(
            "path", str(target), f"extension {extension} is not one of {', '.join(_VALID_SUFFIXES)}"
        )
    trace = chrome_trace(result, server_of=server_of, link_server=link_server)
    data = json_text(trace, what="Chrome trace", indent=None, sort_keys=True, separators=(",", ":")).encode(
        "utf-8"
    )
    if name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(target, data)
    return target
