"""The planner-speedup experiment at its small size: planners against each other and the simulator."""

from __future__ import annotations

import math
from typing import Any

import pytest

from experiments import planner_speedup

DEVICES = 16  # dapple-2x8-v100


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return planner_speedup.run(small=True)


def pick(rows: list[dict[str, Any]], model: str, gbs: int, planner: str) -> dict[str, Any]:
    (row,) = [r for r in rows if (r["model"], r["global_batch_size"], r["planner"]) == (model, gbs, planner)]
    return row


def test_shape(rows: list[dict[str, Any]]) -> None:
    points = sum(len(planner_speedup.SMALL_BATCHES[m]) for m in planner_speedup.SMALL_MODELS)
    assert len(rows) == points * len(planner_speedup.PLANNERS)
    assert {r["cluster"] for r in rows} == set(planner_speedup.SMALL_CLUSTERS)
    for r in rows:
        if r["status"] == "infeasible":
            assert r["speedup"] is None
            assert r["estimated_speedup"] is None
        else:
            assert r["status"] == "ok"
            assert r["fits"] is True
            assert 0 < r["speedup"] <= DEVICES
            assert r["devices"] <= DEVICES


def test_dapple_beats_dp_on_bert48_at_the_biggest_batch(rows: list[dict[str, Any]]) -> None:
    gbs = max(planner_speedup.SMALL_BATCHES["bert48"])
    dapple, dp = pick(rows, "bert48", gbs, "dapple"), pick(rows, "bert48", gbs, "dp")
    assert dapple["speedup"] >= 1.2 * dp["speedup"]


def test_dapple_estimate_never_below_dp_estimate(rows: list[dict[str, Any]]) -> None:
    # Pure data parallelism is one point of DAPPLE's search space.
    for model in planner_speedup.SMALL_MODELS:
        for gbs in planner_speedup.SMALL_BATCHES[model]:
            dapple, dp = pick(rows, model, gbs, "dapple"), pick(rows, model, gbs, "dp")
            assert dapple["estimated_speedup"] >= dp["estimated_speedup"] * (1 - 1e-9)


def test_estimates_track_the_simulation(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["status"] != "ok":
            continue
        ratio = float(r["estimated_speedup"]) / r["speedup"]
        # the bound: estimate within 5 % of the simulation for every returned plan
        assert ratio == pytest.approx(1.0, abs=0.05), r


def test_single_device_baseline_is_shared_by_the_planners(rows: list[dict[str, Any]]) -> None:
    for model in planner_speedup.SMALL_MODELS:
        for gbs in planner_speedup.SMALL_BATCHES[model]:
            group = [pick(rows, model, gbs, p) for p in planner_speedup.PLANNERS]
            singles = {r["single_device_samples_per_s"] for r in group}
            assert len(singles) == 1
            (single,) = singles
            assert math.isfinite(single)
            assert single > 0
