"""Benchmark of PaSE's search (pipesim.planner.pase): graph build and dynamic-program time.

Targets (issue 8): alexnet p=8 under 0.1 s; resnet101 and transformer p=8 under 5 s; transformer
p=32 under 60 s. For scale: PaSE's own implementation needs about 45 s for transformer at p=8 and
does not finish transformer at p=32 within 10 minutes on a 2-core machine (issue 8).

Each case: the median of ``--repeats`` runs of the search alone (``search``), and once the graph
build (configurations, vertex and edge cost tables), both in wall-clock seconds.

Usage: ``python benchmarks/bench_pase.py [--repeats N] [--batch B] [--cases alexnet:8,...]``
"""

from __future__ import annotations

import argparse
import statistics
import time

from pipesim.planner.pase import CostParams, build_graph, search

TARGETS_S = {("alexnet", 8): 0.1, ("resnet101", 8): 5.0, ("transformer", 8): 5.0, ("transformer", 32): 60.0}
"""Issue 8's search-time targets, seconds."""


def bench_case(graph: str, procs: int, batch: int, repeats: int) -> dict[str, float]:
    """Time one graph at ``procs`` devices: build seconds, median search seconds, largest table."""
    t0 = time.perf_counter()
    g = build_graph(graph, procs, batch)
    build_s = time.perf_counter() - t0
    r = CostParams().flop_per_word  # PaSE's defaults, 10 TFLOP/s and 16 GB/s: r = 5,000
    times = []
    result = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = search(g, r)
        times.append(time.perf_counter() - t0)
    assert result is not None
    return {
        "vertices": float(len(g.vertices)),
        "build_s": build_s,
        "search_s": statistics.median(times),
        "max_table": float(result.max_table),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument(
        "--cases",
        default="alexnet:8,resnet101:8,inception3:8,rnnlm:8,transformer:8,"
        "alexnet:32,resnet101:32,inception3:32,transformer:32,transformer:64",
    )
    args = parser.parse_args()
    header = ("graph", "p", "vertices", "build s", "search s", "max table", "target")
    widths = (3, 8, 8, 9, 11, 8)
    print(f"{header[0]:12} " + " ".join(f"{h:>{w}}" for h, w in zip(header[1:], widths, strict=True)))
    for case in args.cases.split(","):
        name, procs_text = case.split(":")
        procs = int(procs_text)
        row = bench_case(name, procs, max(args.batch, 4 * procs), args.repeats)
        target = TARGETS_S.get((name, procs))
        verdict = (
            ""
            if target is None
            else (f"<{target:g} ok" if row["build_s"] + row["search_s"] < target else f"<{target:g} MISS")
        )
        print(
            f"{name:12} {procs:>3} {int(row['vertices']):>8} {row['build_s']:>8.3f} {row['search_s']:>9.3f} "
            f"{int(row['max_table']):>11,} {verdict:>8}"
        )


if __name__ == "__main__":
    main()
