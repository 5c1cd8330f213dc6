"""GPipe vs DAPPLE on the same plan: about the same throughput, far less memory for DAPPLE."""

from __future__ import annotations

from typing import Any

import pytest

from experiments import gpipe_vs_dapple


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return gpipe_vs_dapple.run(small=True)


def pairs(rows: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    out: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for model, _ in gpipe_vs_dapple.SMALL_POINTS:
        (g,) = [r for r in rows if r["model"] == model and r["schedule"] == "gpipe"]
        (d,) = [r for r in rows if r["model"] == model and r["schedule"] == "dapple"]
        out[model] = (g, d)
    return out


def test_same_plan_both_schedules(rows: list[dict[str, Any]]) -> None:
    assert len(rows) == 2 * len(gpipe_vs_dapple.SMALL_POINTS)
    for g, d in pairs(rows).values():
        for key in ("stages", "replicas", "microbatches", "global_batch_size"):
            assert g[key] == d[key]
        assert g["throughput_vs_gpipe"] == 1.0
        assert g["memory_vs_gpipe"] == 1.0


def test_throughput_about_the_same(rows: list[dict[str, Any]]) -> None:
    for g, d in pairs(rows).values():
        # within 15%: the order changes how communication overlaps the computation and, on
        # unequal stages, the bubble. Measured 2026-11-24 (main 0060781), DAPPLE / GPipe: vgg19
        # 1.11 (15|1 replicas, 1.10 even with free links), resnet50 1.14 (level with free links),
        # bert48 1.01 (experiments/README.md); before, FIFO sends made GPipe faster (vgg19 0.89)
        assert d["throughput_samples_per_s"] / g["throughput_samples_per_s"] == pytest.approx(1.0, abs=0.15)
        assert d["throughput_vs_gpipe"] == pytest.approx(
            d["throughput_samples_per_s"] / g["throughput_samples_per_s"], rel=1e-12
        )


def test_dapple_needs_less_memory(rows: list[dict[str, Any]]) -> None:
    for g, d in pairs(rows).values():
        assert d["peak_memory_bytes"] <= g["peak_memory_bytes"]
        assert d["fits"] is True
    # bert48 (2 stages of 8 replicas since the DGX-1's all-reduce runs NCCL's 6 rings, 8
    # micro-batches): DAPPLE stashes at most 2 per stage, GPipe all 8.
    g, d = pairs(rows)["bert48"]
    assert d["microbatches"] > d["stages"]
    assert d["peak_memory_bytes"] < 0.6 * g["peak_memory_bytes"]
