"""Dynamic micro-batching benchmarks (issue 7): planning time of a 4096-sample global batch.

DynaPipe overlaps planning with training, so planning must cost less than an iteration; the target
is under 1 s for the dynamic program (sort + exact DP) of 4096 samples, and the whole
``run_dynamic`` (plan, order, cost and simulate pad, pack and dynamic) is reported alongside.

Cases (4 stages on dapple-2x8-v100, default memory limit):

(a) bert48 (fp32), flan-like mixture, 4096 samples;
(b) bert48 (fp32), glue-like mixture, 4096 samples;
(c) gpt:layers=24,hidden=1024,heads=16,seq=2048 (fp16), long-tail mixture, 4096 samples.

Usage: ``python benchmarks/bench_dynamic.py [a] [b] [c]`` (default: all). The sequence cost
model's one-off calibration (about 0.2 s per model, cached) is excluded from the planning time.
"""

from __future__ import annotations

import json
import sys
import time

TARGET_PLAN_S = 1.0
CASES = {
    "a": ("bert48", "float32", "flan-like"),
    "b": ("bert48", "float32", "glue-like"),
    "c": ("gpt:layers=24,hidden=1024,heads=16,seq=2048", "float16", "long-tail"),
}


def run_case(case: str, samples: int = 4096) -> dict[str, float | int | str]:
    from pipesim.dynamic import default_memory_limit, run_dynamic, setup_costs
    from pipesim.planner.dynamic import dynamic_microbatches, generate_mix
    from pipesim.profiles.hardware.cluster import get_cluster

    model, dtype, mix = CASES[case]
    cluster = get_cluster("dapple-2x8-v100")
    costs = setup_costs(model, 4, dtype=dtype)  # calibration, cached
    limit = default_memory_limit(costs, cluster)
    batch = generate_mix(mix, samples, seed=0, max_len=costs.model.max_seq_len)
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        plan = dynamic_microbatches(batch, costs, memory_limit_bytes=limit)
        best = min(best, time.perf_counter() - start)
    start = time.perf_counter()
    report = run_dynamic(model, cluster, batch, num_stages=4, dtype=dtype)
    total = time.perf_counter() - start
    dyn = next(s for s in report.strategies if s.name == "dynamic")
    return {
        "case": case,
        "model": model,
        "mix": mix,
        "samples": samples,
        "plan_s": round(best, 3),
        "target_s": TARGET_PLAN_S,
        "microbatches": len(plan.microbatches),
        "padding_fraction": round(plan.padding_fraction, 4),
        "run_dynamic_s": round(total, 3),
        "iteration_time_s": round(dyn.iteration_time_s, 3),
    }


def main() -> int:
    cases = sys.argv[1:] or sorted(CASES)
    failed = False
    for case in cases:
        result = run_case(case)
        print(json.dumps(result))
        failed |= float(result["plan_s"]) > TARGET_PLAN_S
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
