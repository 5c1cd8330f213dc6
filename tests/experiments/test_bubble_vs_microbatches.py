"""Simulated bubble fractions equal (p-1)/(m+p-1) exactly, and the script writes its files."""

from __future__ import annotations

import csv
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

from experiments import bubble_vs_microbatches as bubble

ROOT = Path(__file__).resolve().parents[2]


def test_exact_agreement_with_the_closed_form() -> None:
    rows = bubble.run(small=True)
    assert len(rows) == len(bubble.STAGES) * len(bubble.SMALL_MICROBATCHES) * len(bubble.SCHEDULES)
    for r in rows:
        p, m = r["stages"], r["microbatches"]
        assert r["exact"] is True
        assert r["iteration_time_s"] == r["closed_form_iteration_time_s"] == (m + p - 1) * 0.75
        assert abs(r["bubble_fraction"] - (p - 1) / (m + p - 1)) <= 1e-12
    assert bubble.closed_form_bubble(4, 1) == Fraction(3, 4)


def test_bubble_shrinks_with_more_microbatches_and_grows_with_depth() -> None:
    rows = bubble.run(stages=(4, 8), microbatches=(2, 8))
    value = {(r["stages"], r["microbatches"], r["schedule"]): r["bubble_fraction"] for r in rows}
    for schedule in bubble.SCHEDULES:
        assert value[(4, 8, schedule)] < value[(4, 2, schedule)]
        assert value[(8, 8, schedule)] > value[(4, 8, schedule)]


def test_script_writes_csv_and_figure(tmp_path: Path) -> None:
    # Run as the README says (a fresh interpreter, the script path), which also checks that the
    # script finds the experiments package without the repository on sys.path.
    script = ROOT / "experiments" / "bubble_vs_microbatches.py"
    done = subprocess.run(
        [sys.executable, str(script), "--small", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert "18/18 exact" in done.stdout
    with open(tmp_path / "bubble_vs_microbatches.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == 18
    assert all(row["exact"] == "True" for row in table)
    png = (tmp_path / "bubble_vs_microbatches.png").read_bytes()
    assert png.startswith(b"\x89PNG")
