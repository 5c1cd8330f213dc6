"""Benchmark of building large clusters: wall time and memory of the presets up to 16,384 GPUs.

For each preset (``dgx-a100-1024``, ``dgx-h100-16384``) it reads the preset's TOML afresh (the
preset cache is bypassed), builds the cluster and reports the build time and the memory the
build allocates (``tracemalloc`` peak), then the time of 100,000 routes between random device
pairs (computed on demand and cached), and the time to make every link once (what the simulator's
engine does when it reads the link table) against the table's bandwidth and latency columns
(``LinkTable.bandwidths_bytes_per_s``/``latencies_s``, made from the templates). Targets (issue
15): building the 16,384-GPU H100 cluster in well under 1 s and under 200 MiB; the script exits 1
when a target is missed.

Usage: ``python benchmarks/bench_cluster.py [--routes N]``
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc

from pipesim.profiles.hardware.catalog import data_text
from pipesim.profiles.hardware.cluster_file import cluster_from_toml

BUILD_TARGET_S = 1.0
MEMORY_TARGET_BYTES = 200 * 2**20


def bench(name: str, n_routes: int) -> dict[str, float]:
    """Build preset ``name`` from its TOML and time its queries; the figures, SI units."""
    text = data_text("data", "clusters", f"{name}.toml")
    tracemalloc.start()
    start = time.perf_counter()
    cluster = cluster_from_toml(text, name=name)
    build_s = time.perf_counter() - start
    _, build_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rng = random.Random(0)
    n = cluster.num_devices
    pairs = [(rng.randrange(n), rng.randrange(n)) for _ in range(n_routes)]
    start = time.perf_counter()
    hops = sum(len(cluster.route(a, b)) for a, b in pairs)
    routes_s = time.perf_counter() - start
    fresh = cluster_from_toml(text, name=name)  # the cache's memory, measured apart from the time
    tracemalloc.start()
    for a, b in pairs:
        fresh.route(a, b)
    _, routes_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del fresh
    gc.collect()  # the cached routes' garbage-collection passes are not the tables' cost
    start = time.perf_counter()
    total_bw = sum(link.bandwidth_bytes_per_s for link in cluster.links)
    links_s = time.perf_counter() - start
    gc.collect()
    start = time.perf_counter()
    columns = cluster.links.bandwidths_bytes_per_s(), cluster.links.latencies_s()
    columns_s = time.perf_counter() - start
    assert hops > 0
    assert sum(columns[0]) == total_bw
    return {
        "gpus": n,
        "links": len(cluster.links),
        "build_s": build_s,
        "build_peak_bytes": build_peak,
        "routes": n_routes,
        "routes_s": routes_s,
        "routes_peak_bytes": routes_peak,
        "all_links_s": links_s,
        "columns_s": columns_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--routes", type=int, default=100_000, help="random routes to compute")
    args = parser.parse_args()
    ok = True
    for name in ("dgx-a100-1024", "dgx-h100-16384"):
        f = bench(name, args.routes)
        print(
            f"{name}: {f['gpus']:.0f} GPUs, {f['links']:.0f} links; build {f['build_s'] * 1e3:.1f} ms, "
            f"{f['build_peak_bytes'] / 2**20:.2f} MiB peak; {f['routes']:.0f} routes "
            f"{f['routes_s'] * 1e3:.0f} ms ({f['routes_peak_bytes'] / 2**20:.1f} MiB cached); "
            f"every link made once {f['all_links_s'] * 1e3:.0f} ms, "
            f"bandwidth and latency columns {f['columns_s'] * 1e3:.1f} ms"
        )
        if name == "dgx-h100-16384":
            if f["build_s"] >= BUILD_TARGET_S:
                print(f"  MISSED: build {f['build_s']:.3f} s >= {BUILD_TARGET_S} s")
                ok = False
            if f["build_peak_bytes"] >= MEMORY_TARGET_BYTES:
                print(f"  MISSED: build memory {f['build_peak_bytes'] / 2**20:.1f} MiB >= 200 MiB")
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
