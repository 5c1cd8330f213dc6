"""Issue 15's Gantt/trace bullet for the Chrome/Perfetto export: a TP x DP plan's TP collectives
are slices on each stream device's communication track (named, with their bytes), beside its
compute track, in its server's process (which Perfetto collapses); the Gantt chart's collapse
and expansion of replicas and TP ranks is tests/reports/test_gantt.py::
test_tp_and_cp_ranks_collapse_per_stage_and_expand_per_device."""

from __future__ import annotations

import pipesim
from pipesim.plan import Plan, StagePlan
from pipesim.reports.chrome import chrome_trace
from pipesim.simulator.trace import EventKind


def test_tp_collectives_are_on_the_chrome_trace_comm_tracks() -> None:
    gpt = "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000"
    profile, cluster = pipesim.resolve_inputs(gpt, "dgx-a100-x2")
    stages = tuple(StagePlan(first_layer=a, last_layer=b, replicas=2, tensor_parallel=4)
                   for a, b in ((0, 2), (3, 5)))
    plan = Plan(stages=stages, global_batch_size=8, num_microbatches=4, schedule="1f1b")
    result = pipesim.simulate(plan, profile, cluster, pipesim.SimOptions(record_trace=True))
    trace = chrome_trace(result, server_of=cluster.server_of)
    events = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    tp = [e for e in events if e["ph"] == "X" and e["args"]["kind"] == EventKind.TP_COLLECTIVE.value]
    # every F and B of the 2 stages' 2 replicas and 4 micro-batches: one slice each
    assert len(tp) == 2 * 2 * 2 * 4
    streams = {0, 4, 8, 12}  # each replica's first TP rank runs the stream (stage 0 on 0-7, stage 1 on 8-15)
    assert {e["args"]["device"] for e in tp} == streams
    for e in tp:
        device = e["args"]["device"]
        assert threads[(e["pid"], e["tid"])].startswith(f"gpu{device} comm")
        assert processes[e["pid"]] == f"server {cluster.server_of(device)}"
        assert e["name"] == f"TP collectives {e['args']['microbatch']}"
        assert e["args"]["bytes"] > 0
        assert e["dur"] > 0
    # the compute ops sit on the compute tracks of the same devices
    compute = [e for e in events if e["ph"] == "X" and e["args"]["kind"] in ("F", "B")]
    assert {threads[(e["pid"], e["tid"])] for e in compute} == {f"gpu{d} compute" for d in streams}
