"""The full trace of a run, to the last bit: events, link busy stretches and memory curves.

The trace is kept in columns while the simulator runs and turned into :class:`TraceEvent` objects
only when read (``simulator/trace_log.py``). These tests run, beside it on the same run, the eager
recorder main had before (at 1786d68: an event built as each record happens, each link's total
re-summed at each re-fill and its stretch closed when the total changes, the memory log as
``(time, bytes)`` pairs, the events sorted by (start, resource, end) at the end), and require the
two to agree in every field of every event and every point of every memory curve, on small GPT
plans whose flows share links: both all-reduce algorithms, every all-reduce overlap, a jittered
zero-bubble run, an interleaved run and the fast path. (When the columns came in, these plans'
full results also hashed the same as main's at 1786d68.)

Times that SimPy gives as the integer 0 (the start of the run) are the float 0.0 in the columns,
as their annotations say; every other value is the same object type and the same bits.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any

import pytest

from pipesim.api import make_plan
from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import EventKind, SimOptions, SimulationResult, TraceEvent, simulate
from pipesim.simulator.instructions import Compute
from pipesim.simulator.network import Network
from pipesim.simulator.tally import OP_KIND, Tally

_GPT = "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=51200"

CASES: dict[str, dict[str, Any]] = {
    **{
        f"{alg}-{overlap}": {"allreduce": alg, "options": {"allreduce_overlap": overlap}}
        for alg in ("hierarchical", "ring")
        for overlap in ("after_backward", "end", "bucketed")
    },
    "zb-h1-jitter": {
        "allreduce": "hierarchical",
        "schedule": "zb-h1",
        "options": {"jitter": 0.1, "seed": 7},
    },
    "interleaved": {"allreduce": "ring", "schedule": "interleaved", "chunks": 2, "options": {}},
    "fast-path": {"allreduce": "ring", "options": {"free_links": True}},
}
"""Small GPT plans on 8 servers x 8 V100: 4 stages x 16 replicas, 8 micro-batches, 1F1B unless
said; stage replicas span servers, so all-reduce and pipeline flows share the NICs."""


def run_case(name: str) -> SimulationResult:
    """Simulate one case of :data:`CASES`, with its trace."""
    case = CASES[name]
    profile = zoo_model(_GPT)
    cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 8})
    chunks = case.get("chunks", 1)
    plan = make_plan(
        profile,
        global_batch_size=16 * 8,
        num_microbatches=8,
        stages=4 * chunks,
        replicas=[16] * 4,
        schedule=case.get("schedule", "1f1b"),
        chunks=chunks,
        allreduce=case["allreduce"],
    )
    options = SimOptions(bucket_bytes=64 * 1024**2, **case["options"])
    return simulate(plan, profile, cluster, options)


class EagerRecorder:
    """The recorder of main at 1786d68, fed by the same calls as the columnar one."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []
        self.memory: dict[int, list[tuple[float, float]]] = {}
        self._rate: dict[tuple[int, int], float] = {}  # (network, link) -> total rate
        self._since: dict[tuple[int, int], float] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Wrap the tally's and the network's recording entry points."""
        compute, send, collective = Tally.compute, Tally.send, Tally.collective
        record_links = Network._record_links
        record_totals = Network._record_totals

        def on_compute(
            tally: Tally, device: int, ins: Compute, start: float, end: float,
            compute_end: float | None = None,
        ) -> None:
            if tally.record:
                self.compute(tally, device, ins, start, end)
            compute(tally, device, ins, start, end, compute_end)

        def on_send(tally: Tally, device: int, kind: str, *rest: Any) -> None:
            if tally.record:
                stage, mb, nbytes, peer, start, end = rest
                event_kind = EventKind.SEND_ACTIVATION if kind == "act" else EventKind.SEND_GRADIENT
                self.events.append(
                    TraceEvent(f"gpu{device}.comm", event_kind, start, end, device, stage, mb, nbytes, peer)
                )
            send(tally, device, kind, *rest)

        def on_collective(
            tally: Tally, members: tuple[int, ...], stage: int, nbytes: float, start: float, end: float
        ) -> None:
            if tally.record:
                for device in members:
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
            collective(tally, members, stage, nbytes, start, end)

        def on_record_links(network: Network, region: set[int], flows: list[Any], now: float) -> None:
            self.links(network, region, flows, now)
            record_links(network, region, flows, now)

        monkeypatch.setattr(Tally, "compute", on_compute)
        monkeypatch.setattr(Tally, "send", on_send)
        monkeypatch.setattr(Tally, "collective", on_collective)
        def on_record_totals(network: Network, links: list[int], total: float, now: float) -> None:
            self.links(network, set(links), [], now)
            record_totals(network, links, total, now)

        monkeypatch.setattr(Network, "_record_links", on_record_links)
        monkeypatch.setattr(Network, "_record_totals", on_record_totals)

    def compute(self, tally: Tally, device: int, ins: Compute, start: float, end: float) -> None:
        """The compute event and the memory log, as main's ``Tally.compute`` made them."""
        now = tally.memory_now[device]
        log_ = self.memory.setdefault(device, [(0.0, tally.program.static_memory_bytes[device])])
        for nbytes in ins.alloc_bytes:
            now += nbytes
            if log_[-1][0] == start:
                log_[-1] = (start, now)
            else:
                log_.append((start, now))
        for nbytes in ins.free_bytes:
            now -= nbytes
            if log_[-1][0] == end:
                log_[-1] = (end, now)
            else:
                log_.append((end, now))
        kind = OP_KIND[ins.op]
        mb = ins.microbatch if ins.microbatch >= 0 else None  # the optimizer step has none
        self.events.append(
            TraceEvent(f"gpu{device}", kind, start, end, device, ins.stage, mb, 0.0, None)
        )

    def links(self, network: Network, region: set[int], flows: list[Any], now: float) -> None:
        """The link stretches main's ``Network._record_links`` closed, with main's engine's
        events for them."""
        links = set(region)
        for f in flows:
            links.update(f.links)
        rate = attrgetter("rate")
        for link in sorted(links):
            key = (id(network), link)
            total = sum(map(rate, network._link_flows[link]))
            old = self._rate.get(key, 0.0)
            if total != old:
                since = self._since.get(key, 0.0)
                if old > 0.0 and now > since:
                    self.events.append(
                        TraceEvent(
                            network.link_name(link), EventKind.LINK, since, now, nbytes=old * (now - since)
                        )
                    )
                self._rate[key] = total
                self._since[key] = now


def _bits(event: TraceEvent) -> tuple[object, ...]:
    """An event's fields: times and bytes as the hex of their float, the rest as they are
    (``None`` or an int, compared with their type)."""
    hexed = {"start_s", "end_s", "nbytes"}
    return tuple(
        float(v).hex() if name in hexed else (type(v).__name__, v)
        for name, v in zip(TraceEvent._fields, event, strict=True)
    )


_ORDER: Callable[[TraceEvent], tuple[Any, ...]] = attrgetter("start_s", "resource", "end_s")


@pytest.mark.parametrize("name", list(CASES))
def test_trace_is_the_eager_recorders_to_the_last_bit(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    eager = EagerRecorder()
    eager.install(monkeypatch)
    result = run_case(name)
    want = sorted(eager.events, key=_ORDER)  # stable: ties keep record order
    assert len(result.events) == len(want)
    assert [_bits(e) for e in result.events] == [_bits(e) for e in want]
    kinds = {e.kind for e in result.events}
    assert EventKind.ALL_REDUCE in kinds
    assert (EventKind.LINK in kinds) == (name != "fast-path")
    assert sorted(result.memory) == sorted(eager.memory)
    for device, curve in result.memory.items():
        log_ = eager.memory[device]
        assert [float(t).hex() for t in curve.times_s] == [float(t).hex() for t, _ in log_]
        assert [b.hex() for b in curve.bytes] == [float(b).hex() for _, b in log_]
        assert all(type(b) is float for b in curve.bytes)
