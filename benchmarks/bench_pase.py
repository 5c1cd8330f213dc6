"""Benchmark of PaSE's search (pipesim.planner.pase): graph build and dynamic-program time.

Targets: issue 8's, alexnet p=8 under 0.1 s, resnet101 and transformer p=8 under 5 s, transformer
p=32 under 60 s (graph build + search); and issue 18's, the search at least 50 times faster than
PaSE's own (github.com/baidu-research/PaSE commit 32aa761, ``scheduler.py -g G -p P``, its
"Processing time", which also times the search alone). PaSE's times below were measured on the
project's 2-core development machine while another job ran (see benchmarks/README.md).

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

MIN_SPEEDUP_OVER_PASE = 50.0
"""Issue 18: pipesim's search at least this many times faster than PaSE's."""

PASE_SEARCH_S = {
    ("alexnet", 4): 0.062,
    ("alexnet", 8): 0.070,
    ("alexnet", 16): 0.066,
    ("alexnet", 32): 0.194,
    ("resnet101", 4): 7.05,
    ("resnet101", 8): 51.0,
    ("resnet101", 16): 164.7,
    ("resnet101", 32): 224.9,
    ("inception3", 4): 2.13,
    ("inception3", 8): 3.90,
    ("inception3", 16): 8.79,
    ("inception3", 32): 25.2,
    ("rnnlm", 4): 0.016,
    ("rnnlm", 8): 0.018,
    ("rnnlm", 16): 0.053,
    ("rnnlm", 32): 0.034,
    ("transformer", 4): 4.05,
    ("transformer", 8): 20.9,
    ("transformer", 16): 171.8,
}
"""PaSE's own search time ("Processing time", batch 128, default flags), seconds, one run each:
PaSE commit 32aa761 under Python 3.11.7, numpy 1.26.4, pandas 1.5.3, networkx 3.6.1, on the
project's 2-core machine with another job on the second core (2026-11-24)."""


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
        default=",".join(
            f"{g}:{p}"
            for g in ("alexnet", "resnet101", "inception3", "rnnlm", "transformer")
            for p in (4, 8, 16, 32)
        )
        + ",transformer:64",
    )
    args = parser.parse_args()
    header = ("graph", "p", "vertices", "build s", "search s", "max table", "target", "PaSE s", "x PaSE")
    widths = (3, 8, 8, 9, 11, 8, 8, 9)
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
        pase_s = PASE_SEARCH_S.get((name, procs))
        pase_text = "" if pase_s is None else f"{pase_s:g}"
        ratio = "" if pase_s is None else f"{pase_s / row['search_s']:.0f}x"
        if pase_s is not None and pase_s / row["search_s"] < MIN_SPEEDUP_OVER_PASE:
            ratio += " MISS"
        print(
            f"{name:12} {procs:>3} {int(row['vertices']):>8} {row['build_s']:>8.3f} {row['search_s']:>9.4f} "
            f"{int(row['max_table']):>11,} {verdict:>8} {pase_text:>8} {ratio:>9}"
        )


if __name__ == "__main__":
    main()
