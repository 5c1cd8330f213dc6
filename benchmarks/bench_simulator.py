"""Simulator benchmarks (issue 4): wall time, simulated ops per second and peak RSS.

(a) bert48 on dapple-2x8-v100, 4 stages x 4 replicas, 32 micro-batches, dapple schedule;
(b) a GPT-style model (64 layers, hidden 4096) on 1024 V100 (128 servers x 8), 16 stages x 64
    replicas, 64 micro-batches, 1F1B, hierarchical all-reduce;
(c) a bare pipeline: 16 equal stages, 1024 micro-batches, 1F1B, free links.

Usage: ``python benchmarks/bench_simulator.py [a] [b] [c]`` (default: all). Each case runs in a
fresh process so its peak RSS is its own.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

TARGETS_S = {"a": 1.0, "b": 30.0, "c": 0.3}


def run_case(case: str) -> dict[str, float | str]:
    from pipesim.api import make_plan
    from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
    from pipesim.profiles.models.profile import Layer, ModelProfile
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
        profile = ModelProfile(
            name="bare16",
            layers=tuple(
                Layer(name=f"l{i}", fwd_time_s=1e-3, bwd_time_s=2e-3, activation_bytes=1, parameter_bytes=0)
                for i in range(16)
            ),
            profile_batch_size=1,
        )
        cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 2})
        plan = make_plan(profile, global_batch_size=1024, num_microbatches=1024, stages=16, schedule="1f1b")
        options = SimOptions(free_links=True)
    start = time.perf_counter()
    result = simulate(plan, profile, cluster, options)
    wall = time.perf_counter() - start
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "case": case,
        "wall_s": round(wall, 3),
        "ops": result.num_events,
        "ops_per_s": round(result.num_events / wall),
        "peak_rss_mib": round(rss_mib),
        "target_s": TARGETS_S[case],
        "iteration_time_s": result.iteration_time_s,
    }


def main() -> int:
    cases = sys.argv[1:] or ["a", "b", "c"]
    if len(cases) == 1 and cases[0].startswith("--one="):
        print(json.dumps(run_case(cases[0][6:])))
        return 0
    failed = False
    for case in cases:
        out = subprocess.run(
            [sys.executable, __file__, f"--one={case}"], capture_output=True, text=True, check=True
        )
        row = json.loads(out.stdout.strip().splitlines()[-1])
        ok = row["wall_s"] <= row["target_s"]
        failed |= not ok
        print(
            f"({case}) wall {row['wall_s']:.3f} s (target {row['target_s']} s, {'ok' if ok else 'MISSED'}), "
            f"{row['ops']} ops, {row['ops_per_s']} ops/s, peak RSS {row['peak_rss_mib']} MiB, "
            f"simulated iteration {row['iteration_time_s']:.4f} s"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
