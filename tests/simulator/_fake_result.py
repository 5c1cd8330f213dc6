"""Hand-built SimulationResults for the output tests (chrome trace, Gantt): no simulator needed.

``pipeline_result`` list-schedules GPipe or 1F1B on p devices (one stage each) with fixed F/B
times and a fixed link time, and records what an engine would: compute events, sends on each
device's comm stream, link events, a closing all-reduce per device and memory curves
(static + one stash per in-flight micro-batch).
"""

from __future__ import annotations

from pipesim.simulator.trace import DeviceMetrics, EventKind, MemoryCurve, SimulationResult, TraceEvent
from pipesim.units import GIB, MIB


def stage_order(schedule: str, stage: int, p: int, m: int) -> list[tuple[str, int]]:
    """The compute order of one stage: [("F", 0), ("F", 1), ..., ("B", 0), ...]."""
    if schedule == "gpipe":
        return [("F", j) for j in range(m)] + [("B", j) for j in range(m)]
    warmup = min(p - 1 - stage, m)
    order = [("F", j) for j in range(warmup)]
    f, b = warmup, 0
    while b < m:
        if f < m:
            order.append(("F", f))
            f += 1
        order.append(("B", b))
        b += 1
    return order


def link_names(src: int, dst: int, gpus_per_server: int) -> list[str]:
    a, b = src // gpus_per_server, dst // gpus_per_server
    if a == b:
        return [f"s{a}.nvlink{src}->{dst}"]
    return [f"s{a}.nic0->switch", f"switch->s{b}.nic0"]


def pipeline_result(
    *,
    p: int = 4,
    m: int = 4,
    schedule: str = "gpipe",
    fwd_s: float = 1e-3,
    bwd_s: float = 2e-3,
    link_s: float = 0.25e-3,
    allreduce_s: float = 0.5e-3,
    activation_bytes: float = 64 * MIB,
    static_bytes: float = 2 * GIB,
    capacity_bytes: float = 16 * GIB,
    gpus_per_server: int = 2,
) -> SimulationResult:
    """A plausible result of p stages on p devices running ``schedule`` ("gpipe" or "1f1b")."""
    orders = [stage_order(schedule, s, p, m) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, mb) -> end time
    free = [0.0] * p
    comm_free = [0.0] * p
    nxt = [0] * p
    events: list[TraceEvent] = []
    deltas: dict[int, list[tuple[float, float]]] = {s: [] for s in range(p)}
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        progressed = False
        for s in range(p):
            if nxt[s] >= len(orders[s]):
                continue
            kind, j = orders[s][nxt[s]]
            if kind == "F":
                dep = 0.0 if s == 0 else done.get(("F", s - 1, j), -1.0)
                if dep < 0:
                    continue
                ready = dep + (link_s if s > 0 else 0.0)
            else:
                dep = done.get(("F", s, j), -1.0) if s == p - 1 else done.get(("B", s + 1, j), -1.0)
                if dep < 0:
                    continue
                ready = dep + (link_s if s < p - 1 else 0.0)
            start = max(free[s], ready)
            end = start + (fwd_s if kind == "F" else bwd_s)
            free[s] = end
            done[(kind, s, j)] = end
            nxt[s] += 1
            progressed = True
            ek = EventKind.FORWARD if kind == "F" else EventKind.BACKWARD
            events.append(
                TraceEvent(
                    resource=f"gpu{s}", kind=ek, start_s=start, end_s=end, device=s, stage=s, microbatch=j
                )
            )
            if kind == "F":
                deltas[s].append((start, activation_bytes))
            else:
                deltas[s].append((end, -activation_bytes))
            peer = s + 1 if kind == "F" else s - 1
            if 0 <= peer < p:
                send_start = max(end, comm_free[s])
                comm_free[s] = send_start + link_s
                sk = EventKind.SEND_ACTIVATION if kind == "F" else EventKind.SEND_GRADIENT
                events.append(
                    TraceEvent(
                        resource=f"gpu{s}.comm",
                        kind=sk,
                        start_s=send_start,
                        end_s=send_start + link_s,
                        device=s,
                        stage=s,
                        microbatch=j,
                        nbytes=activation_bytes,
                        peer=peer,
                    )
                )
                for link in link_names(s, peer, gpus_per_server):
                    events.append(
                        TraceEvent(
                            resource=link,
                            kind=EventKind.LINK,
                            start_s=send_start,
                            end_s=send_start + link_s,
                            microbatch=j,
                            nbytes=activation_bytes,
                        )
                    )
        assert progressed, "schedule deadlocked"
    for s in range(p):
        start = max(free[s], comm_free[s])
        events.append(
            TraceEvent(
                resource=f"gpu{s}.comm",
                kind=EventKind.ALL_REDUCE,
                start_s=start,
                end_s=start + allreduce_s,
                device=s,
                stage=s,
                nbytes=256 * MIB,
            )
        )
        comm_free[s] = start + allreduce_s
    iteration = max(comm_free)
    events.sort(key=lambda e: (e.start_s, e.resource))
    memory: dict[int, MemoryCurve] = {}
    metrics = []
    busy_s: dict[str, float] = {}  # compute time per device row, summed in one pass over the events
    for e in events:
        busy_s[e.resource] = busy_s.get(e.resource, 0.0) + e.duration_s
    for s in range(p):
        times, values = [0.0], [static_bytes]
        for t, d in sorted(deltas[s], key=lambda td: (td[0], td[1])):
            times.append(t)
            values.append(values[-1] + d)
        memory[s] = MemoryCurve(tuple(times), tuple(values))
        busy = busy_s.get(f"gpu{s}", 0.0)
        metrics.append(
            DeviceMetrics(
                device=s,
                stages=(s,),
                busy_time_s=busy,
                comm_wait_time_s=0.0,
                bubble_time_s=iteration - busy,
                allreduce_time_s=allreduce_s,
                static_memory_bytes=static_bytes,
                peak_memory_bytes=memory[s].peak_bytes,
                memory_capacity_bytes=capacity_bytes,
            )
        )
    last_b = max(done[k] for k in done if k[0] == "B")
    links = sorted({e.resource for e in events if e.kind is EventKind.LINK})
    return SimulationResult(
        iteration_time_s=iteration,
        global_batch_size=8 * m,
        devices=tuple(metrics),
        events=tuple(events),
        memory=memory,
        schedule=schedule,
        num_stages=p,
        num_microbatches=m,
        exposed_allreduce_time_s=iteration - last_b,
        stage_peak_memory_bytes=tuple(memory[s].peak_bytes for s in range(p)),
        num_events=len(events),
        link_names=tuple(links),
    )
