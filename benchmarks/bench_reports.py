"""Report rendering speed: the Gantt chart of 64 stages x 256 micro-batches (target < 5 s, PNG).

Usage: ``python benchmarks/bench_reports.py``; exits 1 when the target is missed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipesim.reports.gantt import write_gantt
from tests.simulator._fake_result import pipeline_result

TARGET_S = 5.0


def main() -> int:
    """Render the case three times and print the best wall time."""
    result = pipeline_result(p=64, m=256, schedule="1f1b", gpus_per_server=8)
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in ("png", "png", "png", "svg", "pdf"):
            start = time.perf_counter()
            write_gantt(result, Path(tmp) / f"big.{fmt}")
            times.append((fmt, time.perf_counter() - start))
    for fmt, t in times:
        print(f"gantt 64 stages x 256 micro-batches ({len(result.events)} events) {fmt}: {t:.2f} s")
    best = min(t for fmt, t in times if fmt == "png")
    print(f"best PNG {best:.2f} s (target < {TARGET_S:.0f} s)")
    return 0 if best < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
