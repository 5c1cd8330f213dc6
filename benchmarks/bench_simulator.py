"""Simulator benchmarks (issue 4): wall time, simulated ops per second and peak RSS.

(a) bert48 on dapple-2x8-v100, 4 stages x 4 replicas, 32 micro-batches, dapple schedule;
(b) a GPT-style model (64 layers, hidden 4096) on 1024 V100 (128 servers x 8), 16 stages x 64
    replicas, 64 micro-batches, 1F1B, hierarchical all-reduce;
(c) a bare pipeline: 16 equal stages, 1024 micro-batches, 1F1B, free links, run as the CLI
    (``pipesim simulate`` on a 16-layer profile file), timed in-process after a first
    ``pipesim simulate --help`` and ``import pipesim.api`` (the CLI's start-up: its imports,
    including the simulator's, which the CLI defers to its first run) are left out;
(d) bert48 on dapple-2x8-v100, 4 stages, 100,000 micro-batches of one sample, dapple schedule,
    no trace (``record_trace=False``); (d10k) the same with 10,000 micro-batches, to show that
    the simulator's memory does not grow with the micro-batch count.

Usage: ``python benchmarks/bench_simulator.py [a] [b] [c] [d] [d10k]`` (default: all). Each case
runs in a fresh process so its peak RSS is its own. Each row gives the wall time of the run
(the target's measure) and its CPU time (the process's, less sensitive to other jobs on a shared
machine); a traced case also gives the time its trace takes to read (the events are made on
first read, ``simulator/trace_log.py``; not counted against the target). ``--dynapipe PATH``
also times DynaPipe's event-driven schedule simulator (its ``1F1B`` scheduler through
``dynapipe.model.get_simulator``) on case (c), from a checkout of
github.com/awslabs/optimizing-multitask-training-through-dynamic-pipelines at PATH (not part of
this project; nothing of it is copied here).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

TARGETS_S = {"a": 1.0, "b": 5.0, "c": 0.12, "d": 10.0, "d10k": 10.0}

_BARE16 = {
    "format": "pipesim-profile",
    "version": 1,
    "name": "bare16",
    "profile_batch_size": 1,
    "layers": [
        {"name": f"l{i}", "fwd_time_s": 1e-3, "bwd_time_s": 2e-3, "activation_bytes": 1, "parameter_bytes": 0}
        for i in range(16)
    ],
}


def run_cli_case() -> dict[str, float | str]:
    """Case (c) as a CLI run, timed after the imports."""
    import contextlib
    import io
    import os
    import tempfile

    from pipesim.cli import main as cli_main

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bare16.json")
        with open(path, "w") as f:
            json.dump(_BARE16, f)
        argv = (
            f"simulate --model {path} --cluster dapple-2x8-v100 --set servers=2 --gbs 1024 "
            "--microbatches 1024 --stages 16 --schedule 1f1b --free-links --json"
        ).split()
        out = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli_main(["simulate", "--help"])  # the CLI's start-up (its imports), left out
        import pipesim.api  # noqa: F401  (imports the CLI defers to its first run, left out too)

        start, start_cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stdout(out):
            code = cli_main(argv)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    if code != 0:
        raise SystemExit(f"pipesim simulate exited with {code}")
    data = json.loads(out.getvalue())
    ops = 32768
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "case": "c",
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events": 0,
        "read_s": 0.0,
        "ops": ops,
        "ops_per_s": round(ops / wall),
        "peak_rss_mib": round(rss_mib),
        "target_s": TARGETS_S["c"],
        "iteration_time_s": float(data["iteration_time_s"]),
    }


def run_dynapipe(path: str) -> float:
    """DynaPipe's 1F1B schedule simulator on case (c), seconds after its imports."""
    sys.path.insert(0, path)
    from dynapipe.model import (  # type: ignore[import-not-found]
        DynaPipeMicrobatch,
        DynaPipeMinibatch,
        get_simulator,
        get_uniform_cluster,
    )

    n = 16
    start = time.perf_counter()
    microbatches = []
    for i in range(1024):
        mb = DynaPipeMicrobatch(str(i))
        mb.set_fw_exec_times([1000.0] * n)  # microseconds, as DynaPipe takes them
        mb.set_bw_exec_times([2000.0] * n)
        mb.set_fw_comm_size([0.0] * (n - 1))
        mb.set_bw_comm_size([0.0] * (n - 1))
        mb.set_model_state_memory([0] * n)
        mb.set_model_stored_activation_memory([1] * n)
        mb.set_model_peak_activation_memory([1] * n)
        mb.set_activation_shapes([[(1, 1, 1)]] * n)
        microbatches.append(mb)
    simulator = get_simulator(
        "1F1B",
        DynaPipeMinibatch("c", microbatches),
        get_uniform_cluster(n),
        list(range(n)),
        include_memory_stats=False,
    )
    simulator.schedule()
    wall = time.perf_counter() - start
    makespan_s = simulator.get_makespan() / 1e6
    if abs(makespan_s - (1024 + 15) * 3e-3) > 1e-9:
        raise SystemExit(f"DynaPipe makespan {makespan_s} s, expected {(1024 + 15) * 3e-3} s")
    return wall


CASES = ("a", "b", "c", "d", "d10k")
"""The cases, in the order a run without arguments takes them."""


def run_case(case: str) -> dict[str, float | str]:
    if case == "c":
        return run_cli_case()
    from pipesim.api import make_plan
    from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
    from pipesim.profiles.models.zoo import zoo_model
    from pipesim.simulator import SimOptions, simulate

    if case == "a":
        profile = zoo_model("bert48")
        cluster = get_cluster("dapple-2x8-v100")
        plan = make_plan(
            profile,
            global_batch_size=256,
            num_microbatches=32,
            stages=4,
            replicas=[4, 4, 4, 4],
            schedule="dapple",
        )
        options = SimOptions()
    elif case == "b":
        profile = zoo_model("gpt:layers=64,hidden=4096,heads=32,seq=2048,vocab=51200")
        cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 128})
        plan = make_plan(
            profile,
            global_batch_size=64 * 64,
            num_microbatches=64,
            stages=16,
            replicas=[64] * 16,
            schedule="1f1b",
            allreduce="hierarchical",
        )
        options = SimOptions()
    else:
        m = 100_000 if case == "d" else 10_000
        profile = zoo_model("bert48")
        cluster = get_cluster("dapple-2x8-v100")
        plan = make_plan(profile, global_batch_size=m, num_microbatches=m, stages=4, schedule="dapple")
        options = SimOptions(record_trace=False)
    start, start_cpu = time.perf_counter(), time.process_time()
    result = simulate(plan, profile, cluster, options)
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # reading the trace: its events are made on first read (simulator/trace_log.py), not timed above
    start = time.perf_counter()
    if result.events:
        result.events[0]
    read = time.perf_counter() - start
    read_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "case": case,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "events": len(result.events),
        "read_s": round(read, 3),
        "read_rss_mib": round(read_rss_mib),
        "ops": result.num_events,
        "ops_per_s": round(result.num_events / wall),
        "peak_rss_mib": round(rss_mib),
        "target_s": TARGETS_S[case],
        "iteration_time_s": result.iteration_time_s,
    }


def main() -> int:
    args = sys.argv[1:]
    if len(args) == 1 and args[0].startswith("--one="):
        print(json.dumps(run_case(args[0][6:])))
        return 0
    if len(args) == 1 and args[0].startswith("--dynapipe-one="):
        print(json.dumps({"wall_s": run_dynapipe(args[0][15:])}))
        return 0
    dynapipe = None
    if "--dynapipe" in args:
        at = args.index("--dynapipe")
        dynapipe = args[at + 1]
        del args[at : at + 2]
    if any(a in ("-h", "--help") for a in args):
        print(__doc__)
        return 0
    unknown = [a for a in args if a not in CASES]
    if unknown:
        print(f"bench_simulator: unknown case {unknown[0]!r}: choose from {', '.join(CASES)} "
              "(and --dynapipe PATH)", file=sys.stderr)
        return 2
    cases = args or list(CASES)
    failed = False
    for case in cases:
        out = subprocess.run(
            [sys.executable, __file__, f"--one={case}"], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        ok = row["wall_s"] <= row["target_s"]
        failed |= not ok
        trace = (
            f", trace of {row['events']} events read in {row['read_s']:.3f} s "
            f"(peak RSS then {row['read_rss_mib']} MiB)"
            if row["events"]
            else ""
        )
        print(
            f"({case}) wall {row['wall_s']:.3f} s (target {row['target_s']} s, {'ok' if ok else 'MISSED'}), "
            f"CPU {row['cpu_s']:.3f} s, {row['ops']} ops, {row['ops_per_s']} ops/s, "
            f"peak RSS {row['peak_rss_mib']} MiB, simulated iteration {row['iteration_time_s']:.4f} s{trace}"
        )
    if dynapipe is not None:
        out = subprocess.run(
            [sys.executable, __file__, f"--dynapipe-one={dynapipe}"],
            capture_output=True,
            text=True,
            check=True,
        )
        wall = json.loads(out.stdout.strip().splitlines()[-1])["wall_s"]
        print(f"DynaPipe 1F1B simulator on case (c): {wall:.3f} s after its imports")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
