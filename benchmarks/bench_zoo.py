"""Benchmark of building zoo models from scratch: wall time per model.

For each fixed zoo model (and two ``gpt:`` specs) it clears the zoo's cache and builds the model at
its default micro-batch and precision (the layers and their batch points), which is what every
command that names a model pays once per process. Target: each build under 0.5 s (a plan or a
simulation must not wait on the model); the script exits 1 when a target is missed.

Usage: ``python benchmarks/bench_zoo.py [SPEC ...]``
"""

from __future__ import annotations

import argparse
import sys
import time

from pipesim.profiles.models.zoo import _build as zoo_cache  # the lru cache of built models
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.roofline import roofline_for

BUILD_TARGET_S = 0.5
SPECS = (
    "amoebanet36",
    "bert48",
    "gnmt16",
    "resnet50",
    "vgg19",
    "xlnet36",
    "bert48:framework=tf1",
    "gpt",
    "gpt:layers=64,hidden=4096,heads=32,seq=2048,vocab=50257",
)


def bench(spec: str, repeats: int = 3) -> float:
    """The best of ``repeats`` fresh builds of ``spec``, seconds."""
    roofline_for("float32")  # the catalog's import is not the model's cost
    best = float("inf")
    for _ in range(repeats):
        zoo_cache.cache_clear()
        start = time.perf_counter()
        zoo_model(spec)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one line per model; exit status 1 when a target is missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", default=list(SPECS), help="zoo model names or gpt: specs")
    args = parser.parse_args(argv)
    missed = False
    for spec in args.specs:
        seconds = bench(spec)
        flag = "" if seconds < BUILD_TARGET_S else f"  MISSED: >= {BUILD_TARGET_S} s"
        missed |= bool(flag)
        print(f"{spec}: {seconds * 1e3:.1f} ms{flag}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
