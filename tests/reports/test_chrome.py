"""Chrome/Perfetto trace export: format, timing, tracks, counters, golden output, atomic writes."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.reports.chrome import (
    chrome_trace,
    default_link_server,
    dependency_edges,
    trace_event_name,
    write_chrome_trace,
)
from pipesim.simulator.trace import DeviceMetrics, EventKind, MemoryCurve, SimulationResult, TraceEvent
from pipesim.units import MIB
from tests.simulator._fake_result import pipeline_result

REQUIRED = {
    "X": {"ph", "name", "cat", "pid", "tid", "ts", "dur", "args"},
    "M": {"ph", "name", "pid", "tid", "args"},
    "C": {"ph", "name", "pid", "ts", "args"},
    "s": {"ph", "name", "cat", "id", "pid", "tid", "ts"},
    "f": {"ph", "name", "cat", "id", "pid", "tid", "ts", "bp"},
}


def two_servers(device: int) -> int:
    return device // 2


def by_phase(trace: dict[str, Any], ph: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def thread_names(trace: dict[str, Any]) -> dict[tuple[int, int], str]:
    return {
        (e["pid"], e["tid"]): e["args"]["name"] for e in by_phase(trace, "M") if e["name"] == "thread_name"
    }


def process_names(trace: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in by_phase(trace, "M") if e["name"] == "process_name"}


def track_of_resource(name: str) -> str:
    """The thread name the exporter gives a resource."""
    if name.startswith("gpu"):
        return name.replace(".", " ") if "." in name else f"{name} compute"
    return name


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_every_event_has_required_keys_and_json_types(schedule: str) -> None:
    trace = chrome_trace(pipeline_result(schedule=schedule), server_of=two_servers)
    assert json.loads(json.dumps(trace)) == trace
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["schedule"] == schedule
    for event in trace["traceEvents"]:
        assert set(event) >= REQUIRED[event["ph"]], event
        assert isinstance(event["pid"], int)
        if event["ph"] in "XC":
            assert isinstance(event["ts"], float)
            assert event["ts"] >= 0
        if event["ph"] == "X":
            assert event["dur"] >= 0


def test_ts_and_dur_are_microseconds_of_the_events() -> None:
    result = pipeline_result(p=4, m=3)
    trace = chrome_trace(result, server_of=two_servers)
    names = thread_names(trace)
    got = sorted((names[(e["pid"], e["tid"])], e["ts"], e["dur"], e["name"]) for e in by_phase(trace, "X"))
    want = sorted(
        (track_of_resource(e.resource), e.start_s * 1e6, e.duration_s * 1e6, trace_event_name(e))
        for e in result.events
    )
    assert len(got) == len(want) == len(result.events)
    for (g_track, g_ts, g_dur, g_name), (w_track, w_ts, w_dur, w_name) in zip(got, want, strict=True):
        assert (g_track, g_name) == (w_track, w_name)
        assert g_ts == pytest.approx(w_ts, abs=1e-3)
        assert g_dur == pytest.approx(w_dur, abs=2e-3)
    # F0 on gpu0 starts at 0 and lasts 1 ms = 1000 us exactly (after rounding to the nanosecond)
    first = next(
        e for e in by_phase(trace, "X") if e["name"] == "F0" and names[(e["pid"], e["tid"])] == "gpu0 compute"
    )
    assert (first["ts"], first["dur"]) == (0.0, 1000.0)
    assert first["args"] == {"kind": "F", "device": 0, "stage": 0, "microbatch": 0}


def test_transfer_args_carry_bytes_and_peer() -> None:
    trace = chrome_trace(pipeline_result(p=2, m=1), server_of=two_servers)
    send = next(e for e in by_phase(trace, "X") if e["name"] == "send act 0")
    assert send["cat"] == "send_act"
    assert send["args"] == {
        "kind": "send_act",
        "device": 0,
        "stage": 0,
        "microbatch": 0,
        "peer": 1,
        "bytes": 64 * MIB,
    }


def test_processes_per_server_and_tracks_per_stream_and_link() -> None:
    trace = chrome_trace(pipeline_result(p=4, m=2), server_of=two_servers)
    procs = process_names(trace)
    assert sorted(procs.values()) == ["network", "server 0", "server 1"]
    pid = {name: p for p, name in procs.items()}
    names = thread_names(trace)
    tracks = defaultdict(list)
    for (p, _tid), name in sorted(names.items()):
        tracks[procs[p]].append(name)
    assert tracks["server 0"] == [
        "gpu0 compute",
        "gpu0 comm",
        "gpu1 compute",
        "gpu1 comm",
        "s0.nic0->switch",
        "s0.nvlink0->1",
        "s0.nvlink1->0",
    ]
    assert tracks["server 1"] == [
        "gpu2 compute",
        "gpu2 comm",
        "gpu3 compute",
        "gpu3 comm",
        "s1.nic0->switch",
        "s1.nvlink2->3",
        "s1.nvlink3->2",
    ]
    assert tracks["network"] == ["switch->s0.nic0", "switch->s1.nic0"]
    # every X event sits on a named track; tids are unique over the trace; sort indexes exist
    for event in by_phase(trace, "X"):
        assert (event["pid"], event["tid"]) in names
    assert len({tid for _, tid in names}) == len(names)
    sort_index = {(e["pid"], e["tid"]) for e in by_phase(trace, "M") if e["name"] == "thread_sort_index"}
    assert sort_index == set(names)
    assert {e["pid"] for e in by_phase(trace, "M") if e["name"] == "process_sort_index"} == set(procs)
    # memory counters live in the device's server process
    counter_pids = {e["name"]: e["pid"] for e in by_phase(trace, "C")}
    assert counter_pids == {
        "gpu0 memory (MiB)": pid["server 0"],
        "gpu1 memory (MiB)": pid["server 0"],
        "gpu2 memory (MiB)": pid["server 1"],
        "gpu3 memory (MiB)": pid["server 1"],
    }


def test_defaults_put_devices_on_server_0_and_links_by_name() -> None:
    trace = chrome_trace(pipeline_result(p=4, m=1))
    procs = process_names(trace)
    names = thread_names(trace)
    by_proc = defaultdict(set)
    for (p, _), name in names.items():
        by_proc[procs[p]].add(name)
    assert {f"gpu{d} compute" for d in range(4)} <= by_proc["server 0"]
    assert by_proc["server 1"] == {"s1.nic0->switch", "s1.nvlink2->3", "s1.nvlink3->2"}
    assert default_link_server("s12.nvlink0->1") == 12
    assert default_link_server("switch->s1.nic0") is None


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_counters_are_monotone_and_follow_the_memory_curve(schedule: str) -> None:
    result = pipeline_result(p=4, m=4, schedule=schedule)
    trace = chrome_trace(result)
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for event in by_phase(trace, "C"):
        series[event["name"]].append((event["ts"], event["args"]["MiB"]))
    assert sorted(series) == [f"gpu{d} memory (MiB)" for d in range(4)]
    for device, curve in result.memory.items():
        points = series[f"gpu{device} memory (MiB)"]
        stamps = [ts for ts, _ in points]
        assert stamps == sorted(set(stamps)), "counter times must strictly increase"
        # value at each stamp = the curve's last value at that time
        last: dict[float, float] = {}
        for t, b in zip(curve.times_s, curve.bytes, strict=True):
            last[round(t * 1e6, 3)] = b / MIB
        assert [ts for ts, _ in points] == sorted(last)
        assert [v for _, v in points] == pytest.approx([last[t] for t in sorted(last)])
        assert max(v for _, v in points) == pytest.approx(curve.peak_bytes / MIB)


def tiny_result() -> SimulationResult:
    """Two GPUs on one server, one micro-batch: F0, send, F0, B0, send back, B0, all-reduce."""
    ms = 1e-3
    ev = [
        TraceEvent(
            resource="gpu0",
            kind=EventKind.FORWARD,
            start_s=0.0,
            end_s=1 * ms,
            device=0,
            stage=0,
            microbatch=0,
        ),
        TraceEvent(
            resource="gpu0.comm",
            kind=EventKind.SEND_ACTIVATION,
            start_s=1 * ms,
            end_s=1.5 * ms,
            device=0,
            stage=0,
            microbatch=0,
            nbytes=1024.0,
            peer=1,
        ),
        TraceEvent(
            resource="s0.nvlink0->1", kind=EventKind.LINK, start_s=1 * ms, end_s=1.5 * ms, nbytes=1024.0
        ),
        TraceEvent(
            resource="gpu1",
            kind=EventKind.FORWARD,
            start_s=1.5 * ms,
            end_s=2.5 * ms,
            device=1,
            stage=1,
            microbatch=0,
        ),
        TraceEvent(
            resource="gpu1",
            kind=EventKind.BACKWARD,
            start_s=2.5 * ms,
            end_s=4.5 * ms,
            device=1,
            stage=1,
            microbatch=0,
        ),
        TraceEvent(
            resource="gpu1.comm",
            kind=EventKind.SEND_GRADIENT,
            start_s=4.5 * ms,
            end_s=5 * ms,
            device=1,
            stage=1,
            microbatch=0,
            nbytes=1024.0,
            peer=0,
        ),
        TraceEvent(
            resource="gpu0",
            kind=EventKind.BACKWARD,
            start_s=5 * ms,
            end_s=7 * ms,
            device=0,
            stage=0,
            microbatch=0,
        ),
        TraceEvent(
            resource="gpu0.comm",
            kind=EventKind.ALL_REDUCE,
            start_s=7 * ms,
            end_s=7.25 * ms,
            device=0,
            stage=0,
            nbytes=2048.0,
        ),
    ]
    dev = [
        DeviceMetrics(
            device=d,
            stages=(d,),
            busy_time_s=3 * ms,
            comm_wait_time_s=0.0,
            bubble_time_s=4.25 * ms,
            allreduce_time_s=0.25 * ms if d == 0 else 0.0,
            static_memory_bytes=MIB,
            peak_memory_bytes=2 * MIB,
            memory_capacity_bytes=4 * MIB,
        )
        for d in (0, 1)
    ]
    memory = {
        0: MemoryCurve((0.0, 0.0, 7 * ms), (MIB, 2 * MIB, MIB)),
        1: MemoryCurve((0.0, 1.5 * ms, 4.5 * ms), (MIB, 2 * MIB, MIB)),
    }
    return SimulationResult(
        iteration_time_s=7.25 * ms,
        global_batch_size=4,
        devices=tuple(dev),
        events=tuple(ev),
        memory=memory,
        schedule="gpipe",
        num_stages=2,
        num_microbatches=1,
        exposed_allreduce_time_s=0.25 * ms,
        link_names=("s0.nvlink0->1",),
    )


def m(meta: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"ph": "M", "name": meta, "pid": pid, "tid": tid, "args": args}


def x(name: str, cat: str, tid: int, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {"ph": "X", "name": name, "cat": cat, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def c(device: int, ts: float, mib: float) -> dict[str, Any]:
    return {
        "ph": "C",
        "name": f"gpu{device} memory (MiB)",
        "pid": 1,
        "tid": 0,
        "ts": ts,
        "args": {"MiB": mib},
    }


def flow(flow_id: int, name: str, src: tuple[int, float], dst: tuple[int, float]) -> list[dict[str, Any]]:
    common = {"id": flow_id, "name": name, "cat": "dependency", "pid": 1}
    return [
        {"ph": "s", **common, "tid": src[0], "ts": src[1]},
        {"ph": "f", **common, "tid": dst[0], "ts": dst[1], "bp": "e"},
    ]


GOLDEN_TINY = {
    "displayTimeUnit": "ms",
    "otherData": {
        "generator": "pipesim",
        "global_batch_size": 4,
        "iteration_time_s": 7.25e-3,
        "num_microbatches": 1,
        "num_stages": 2,
        "schedule": "gpipe",
    },
    "traceEvents": [
        m("process_name", 1, 0, name="server 0"),
        m("process_sort_index", 1, 0, sort_index=0),
        m("thread_name", 1, 1, name="gpu0 compute"),
        m("thread_sort_index", 1, 1, sort_index=1),
        m("thread_name", 1, 2, name="gpu0 comm"),
        m("thread_sort_index", 1, 2, sort_index=2),
        m("thread_name", 1, 3, name="gpu1 compute"),
        m("thread_sort_index", 1, 3, sort_index=3),
        m("thread_name", 1, 4, name="gpu1 comm"),
        m("thread_sort_index", 1, 4, sort_index=4),
        m("thread_name", 1, 5, name="s0.nvlink0->1"),
        m("thread_sort_index", 1, 5, sort_index=5),
        x("F0", "F", 1, 0.0, 1000.0, kind="F", device=0, stage=0, microbatch=0),
        x(
            "send act 0",
            "send_act",
            2,
            1000.0,
            500.0,
            kind="send_act",
            device=0,
            stage=0,
            microbatch=0,
            peer=1,
            bytes=1024.0,
        ),
        x("busy", "link", 5, 1000.0, 500.0, kind="link", bytes=1024.0),
        x("F0", "F", 3, 1500.0, 1000.0, kind="F", device=1, stage=1, microbatch=0),
        x("B0", "B", 3, 2500.0, 2000.0, kind="B", device=1, stage=1, microbatch=0),
        x(
            "send grad 0",
            "send_grad",
            4,
            4500.0,
            500.0,
            kind="send_grad",
            device=1,
            stage=1,
            microbatch=0,
            peer=0,
            bytes=1024.0,
        ),
        x("B0", "B", 1, 5000.0, 2000.0, kind="B", device=0, stage=0, microbatch=0),
        x("all-reduce s0", "allreduce", 2, 7000.0, 250.0, kind="allreduce", device=0, stage=0, bytes=2048.0),
        # flow arrows: F0 -> its send -> F0 on gpu1 -> B0 (last stage) -> send back -> B0 on gpu0
        *flow(1, "F0 -> send act 0", (1, 500.0), (2, 1250.0)),
        *flow(2, "send act 0 -> F0", (2, 1250.0), (3, 2000.0)),
        *flow(3, "F0 -> B0", (3, 2000.0), (3, 3500.0)),
        *flow(4, "B0 -> send grad 0", (3, 3500.0), (4, 4750.0)),
        *flow(5, "send grad 0 -> B0", (4, 4750.0), (1, 6000.0)),
        c(0, 0.0, 2.0),
        c(0, 7000.0, 1.0),
        c(1, 0.0, 1.0),
        c(1, 1500.0, 2.0),
        c(1, 4500.0, 1.0),
    ],
}


def test_golden_tiny_trace(tmp_path: Path) -> None:
    assert chrome_trace(tiny_result()) == GOLDEN_TINY
    path = write_chrome_trace(tiny_result(), tmp_path / "tiny.json")
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == GOLDEN_TINY
    assert text.startswith('{"displayTimeUnit":"ms","otherData":{"generator":"pipesim"')  # sorted keys


def test_write_json_and_gz_are_identical_and_deterministic(tmp_path: Path) -> None:
    result = pipeline_result(p=4, m=4, schedule="1f1b")
    a = write_chrome_trace(result, tmp_path / "a.json", server_of=two_servers)
    b = write_chrome_trace(result, tmp_path / "b.json", server_of=two_servers)
    z1 = write_chrome_trace(result, tmp_path / "a.json.gz", server_of=two_servers)
    z2 = write_chrome_trace(result, tmp_path / "b.JSON.GZ", server_of=two_servers)
    assert a.read_bytes() == b.read_bytes()
    assert z1.read_bytes() == z2.read_bytes()
    assert z1.read_bytes()[:2] == b"\x1f\x8b"
    assert gzip.decompress(z1.read_bytes()) == a.read_bytes()
    assert json.loads(a.read_text(encoding="utf-8")) == json.loads(
        json.dumps(chrome_trace(result, server_of=two_servers))
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "a.json.gz", "b.JSON.GZ", "b.json"]


@pytest.mark.parametrize("name", ["trace.txt", "trace", "trace.gz", "trace.json.zip"])
def test_bad_extension_names_it_and_the_valid_ones(tmp_path: Path, name: str) -> None:
    with pytest.raises(InputError, match=r"extension .* is not one of \.json, \.json\.gz"):
        write_chrome_trace(tiny_result(), tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text("old", encoding="utf-8")
    with pytest.raises(InputError, match=r"server_of\(0\)=-1: must be an int >= 0"):
        write_chrome_trace(tiny_result(), path, server_of=lambda d: -1)
    assert path.read_text(encoding="utf-8") == "old"
    with pytest.raises(FileNotFoundError):
        write_chrome_trace(tiny_result(), tmp_path / "missing" / "t.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_bad_link_server_and_decreasing_memory_are_rejected() -> None:
    with pytest.raises(InputError, match=r"link_server\('s0.nvlink0->1'\)='x'"):
        chrome_trace(tiny_result(), link_server=lambda name: "x")  # type: ignore[arg-type,return-value]
    r = tiny_result()
    bad = SimulationResult(
        iteration_time_s=r.iteration_time_s,
        global_batch_size=4,
        devices=r.devices,
        events=r.events,
        memory={0: MemoryCurve((0.0, 2.0, 1.0), (1.0, 2.0, 1.0))},
        schedule="gpipe",
        num_stages=2,
        num_microbatches=1,
        exposed_allreduce_time_s=0.0,
    )
    with pytest.raises(InputError, match=r"memory\[0\]\.times_s=.*non-decreasing"):
        chrome_trace(bad)
    uneven = replace(bad, memory={0: MemoryCurve((0.0, 1.0), (1.0,))})
    with pytest.raises(InputError, match=r"memory\[0\]\.bytes=1: must have one value per time \(2\)"):
        chrome_trace(uneven)


@settings(max_examples=20, deadline=None)
@given(
    p=st.integers(1, 6),
    m=st.integers(1, 6),
    schedule=st.sampled_from(["gpipe", "1f1b"]),
    per_server=st.integers(1, 4),
)
def test_structure_invariants(p: int, m: int, schedule: str, per_server: int) -> None:
    result = pipeline_result(p=p, m=m, schedule=schedule, gpus_per_server=per_server)
    trace = chrome_trace(result, server_of=lambda d: d // per_server)
    names = thread_names(trace)
    complete = by_phase(trace, "X")
    assert len(complete) == len(result.events)
    assert all((e["pid"], e["tid"]) in names for e in complete)
    assert [(e["ts"], e["pid"], e["tid"]) for e in complete] == sorted(
        (e["ts"], e["pid"], e["tid"]) for e in complete
    )
    assert max(e["ts"] + e["dur"] for e in complete) == pytest.approx(result.iteration_time_s * 1e6, abs=1e-2)
    assert sum(n.endswith("compute") for n in names.values()) == p
    no_overlap_per_track(trace)
    servers = {d // per_server for d in range(p)}
    assert {v for v in process_names(trace).values() if v.startswith("server")} == {
        f"server {s}" for s in servers
    }


def no_overlap_per_track(trace: dict[str, Any]) -> None:
    by_track: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in by_phase(trace, "X"):
        by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start + 1e-6


def test_overlapping_transfers_get_numbered_tracks_and_idle_links_none() -> None:
    base = tiny_result()
    ms = 1e-3
    extra = (
        TraceEvent(resource="gpu0.comm", kind=EventKind.SEND_ACTIVATION, start_s=1.2 * ms, end_s=1.8 * ms,
                   device=0, stage=0, microbatch=1, nbytes=1024.0, peer=1),
        TraceEvent(resource="gpu0.comm", kind=EventKind.SEND_ACTIVATION, start_s=1.3 * ms, end_s=1.4 * ms,
                   device=0, stage=0, microbatch=2, nbytes=1024.0, peer=1),
        TraceEvent(resource="gpu0.comm", kind=EventKind.SEND_ACTIVATION, start_s=1.5 * ms, end_s=1.6 * ms,
                   device=0, stage=0, microbatch=3, nbytes=1024.0, peer=1),
    )  # fmt: skip
    result = replace(base, events=base.events + extra, link_names=(*base.link_names, "s0.nvlink1->0"))
    trace = chrome_trace(result)
    names = thread_names(trace)
    assert sorted(n for n in names.values() if n.startswith("gpu0 comm")) == [
        "gpu0 comm",
        "gpu0 comm #2",
        "gpu0 comm #3",
    ]
    assert "s0.nvlink1->0" not in names.values()  # carried nothing
    lane = {
        e["name"]: names[(e["pid"], e["tid"])]
        for e in by_phase(trace, "X")
        if e["name"].startswith("send act")
    }
    # [1, 1.5] and [1.2, 1.8] overlap; [1.3, 1.4] overlaps both; [1.5, 1.6] fits after [1, 1.5]
    assert lane == {
        "send act 0": "gpu0 comm",
        "send act 1": "gpu0 comm #2",
        "send act 2": "gpu0 comm #3",
        "send act 3": "gpu0 comm",
    }
    no_overlap_per_track(trace)


def check_trace_event_format(trace: dict[str, Any]) -> None:
    """Check a trace against the Trace Event Format document's rules for the phases we write:
    JSON object form with ``traceEvents``; every event has ``ph``, ``pid``, ``tid`` (ints) and
    ``ts`` (microseconds, >= 0) except metadata; ``X`` has ``dur`` >= 0; flow events come in
    ``s``/``f`` pairs sharing ``id``, ``cat`` and ``name``, the start before the finish, each
    inside an ``X`` slice on its own thread (``bp: "e"`` binds the finish to the enclosing slice),
    and ``displayTimeUnit`` is ``"ms"`` or ``"ns"``."""
    assert set(trace) >= {"traceEvents"}
    assert trace.get("displayTimeUnit", "ms") in ("ms", "ns")
    slices: dict[tuple[int, int], list[tuple[float, float]]] = {}
    flows: dict[int, dict[str, dict[str, Any]]] = {}
    for event in trace["traceEvents"]:
        ph = event["ph"]
        assert ph in REQUIRED, f"unknown phase {ph!r}"
        assert set(event) >= REQUIRED[ph], event
        assert isinstance(event["pid"], int)
        if ph != "C":
            assert isinstance(event["tid"], int)
        if ph != "M":
            assert isinstance(event["ts"], float)
            assert event["ts"] >= 0
        if ph == "X":
            assert event["dur"] >= 0
            slices.setdefault((event["pid"], event["tid"]), []).append(
                (event["ts"], event["ts"] + event["dur"])
            )
        if ph in "sf":
            assert ph not in flows.setdefault(event["id"], {}), f"flow {event['id']} has two {ph!r} events"
            flows[event["id"]][ph] = event
            if ph == "f":
                assert event["bp"] == "e"
    for flow_id, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {flow_id} is not a pair"
        start, finish = pair["s"], pair["f"]
        assert (start["cat"], start["name"]) == (finish["cat"], finish["name"])
        assert start["ts"] <= finish["ts"]
        for end in (start, finish):
            spans = slices.get((end["pid"], end["tid"]), [])
            assert any(a <= end["ts"] <= b for a, b in spans), f"flow {flow_id} end outside any slice"


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_trace_follows_the_trace_event_format_with_flows(schedule: str) -> None:
    result = pipeline_result(p=4, m=4, schedule=schedule)
    trace = chrome_trace(result, server_of=two_servers)
    check_trace_event_format(trace)
    starts = [e for e in trace["traceEvents"] if e["ph"] == "s"]
    sends = [e for e in result.events if e.kind in (EventKind.SEND_ACTIVATION, EventKind.SEND_GRADIENT)]
    # every send has an arrow in (from its producer) and out (to its consumer)
    assert sum(1 for e in starts if e["name"].startswith("send")) == len(sends)
    assert sum(1 for e in starts if " -> send" in e["name"]) == len(sends)


def test_flow_edges_join_each_send_to_its_consumer() -> None:
    result = pipeline_result(p=3, m=2, schedule="1f1b")
    events = result.events
    for a, b in dependency_edges(result):
        src, dst = events[a], events[b]
        assert src.microbatch == dst.microbatch
        assert dst.start_s >= src.end_s - 1e-12
        if src.kind is EventKind.SEND_ACTIVATION:
            assert (dst.kind, dst.device, dst.stage) == (EventKind.FORWARD, src.peer, src.stage + 1)
        if src.kind is EventKind.SEND_GRADIENT:
            assert dst.kind in (EventKind.BACKWARD, EventKind.INPUT_GRAD)
            assert (dst.device, dst.stage) == (src.peer, src.stage - 1)


def test_real_simulation_trace_is_valid(tmp_path: Path) -> None:
    import pipesim

    profile, cluster = pipesim.resolve_inputs(
        "gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1000", "dgx1-v100"
    )
    plan = pipesim.make_plan(
        profile, cluster, global_batch_size=32, num_microbatches=4, stages=2, replicas=[2, 2]
    )
    result = pipesim.simulate(plan, profile, cluster)
    path = write_chrome_trace(result, tmp_path / "t.json", server_of=cluster.server_of)
    trace = json.loads(path.read_text())
    check_trace_event_format(trace)
    assert len([e for e in trace["traceEvents"] if e["ph"] == "s"]) >= 2 * 16  # 16 sends, in and out
