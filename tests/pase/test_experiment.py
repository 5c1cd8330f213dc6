"""experiments/pase_speedup.py at a small size: CSV rows, figure, and speedups within bounds."""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pase_speedup", ROOT / "experiments" / "pase_speedup.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_small_run(tmp_path: Path) -> None:
    exp = _load()
    assert (
        exp.main(["--out", str(tmp_path), "--graphs", "alexnet,rnnlm", "--procs", "4,8", "--batch", "64"])
        == 0
    )
    with open(tmp_path / "pase_speedup.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["graph"], int(r["procs"])) for r in rows] == [
        ("alexnet", 4),
        ("alexnet", 8),
        ("rnnlm", 4),
        ("rnnlm", 8),
    ]
    for row in rows:
        speedup = float(row["speedup"])
        assert speedup == pytest.approx(float(row["data_parallel_cost"]) / float(row["cost"]), rel=1e-12)
        assert speedup >= 1.0 - 1e-12  # the search can always pick data parallelism
    alex = {int(r["procs"]): float(r["speedup"]) for r in rows if r["graph"] == "alexnet"}
    # AlexNet's FC layers gain from model parallelism, more with more devices (PaSE Fig. 5 trend)
    assert 1.5 < alex[4] < alex[8] < 12.0
    assert (tmp_path / "pase_speedup.png").stat().st_size > 1000
