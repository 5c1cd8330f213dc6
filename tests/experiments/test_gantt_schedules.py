"""Four schedules on one plan: bubbles, times and memory in the expected order; files written."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

from experiments import gantt_schedules


@pytest.fixture(scope="module")
def rows() -> dict[str, dict[str, Any]]:
    return {r["schedule"]: r for r in gantt_schedules.run(small=True)}


def test_bubble_order(rows: dict[str, dict[str, Any]]) -> None:
    bubble = {name: r["bubble_fraction"] for name, r in rows.items()}
    assert bubble["zb-h1"] < bubble["interleaved"] < bubble["dapple"] <= bubble["gpipe"] + 0.01
    # 4 stages, 8 micro-batches: (p-1)/(m+p-1) = 3/11 for equal stages and free links; the real
    # split and links add a little.
    assert 3 / 11 <= bubble["dapple"] <= 3 / 11 + 0.05
    assert bubble["zb-h1"] < 0.75 * bubble["dapple"]


def test_iteration_time_and_memory(rows: dict[str, dict[str, Any]]) -> None:
    time = {name: r["iteration_time_s"] for name, r in rows.items()}
    assert time["zb-h1"] < time["dapple"] <= time["gpipe"]
    assert time["interleaved"] < time["dapple"]
    assert rows["gpipe"]["speedup_vs_gpipe"] == 1.0
    peak = {name: r["peak_memory_bytes"] for name, r in rows.items()}
    assert peak["dapple"] < 0.6 * peak["gpipe"]
    assert peak["zb-h1"] < 0.6 * peak["gpipe"]
    # GPipe's 8 stashed micro-batches overflow the 16 GB V100; the others fit.
    assert [name for name, r in rows.items() if not r["fits"]] == ["gpipe"]
    assert rows["interleaved"]["stages"] == 2 * rows["dapple"]["stages"] == 8


def test_main_writes_csv_and_gantt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gantt_schedules.main(["--out", str(tmp_path)]) == 0
    assert "zb-h1" in capsys.readouterr().out
    with open(tmp_path / "gantt_schedules.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [row["schedule"] for row in table] == list(gantt_schedules.SCHEDULES)
    assert (tmp_path / "gantt_schedules.png").read_bytes().startswith(b"\x89PNG")
