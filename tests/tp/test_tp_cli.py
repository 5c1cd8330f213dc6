"""``--tp``, ``--sp`` and ``--zero`` on simulate, plan and compare."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.plan_file import load_plan

GPT = "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=32000"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_simulate_with_tp_sp_zero(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["simulate", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "16", "--microbatches", "4",
            "--stages", "2", "--replicas", "2,2", "--json"]
    code, out, _ = run(capsys, *base)
    assert code == 0
    plain = json.loads(out)
    code, out, _ = run(capsys, *base, "--tp", "4", "--sp", "--zero", "1")
    assert code == 0
    tp = json.loads(out)
    assert tp["iteration_time_s"] < plain["iteration_time_s"]


def test_tp_on_a_model_without_shapes_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", "--model", "resnet50", "--cluster", "dgx-a100-x2", "--gbs", "16",
                       "--microbatches", "4", "--stages", "2", "--tp", "2")
    assert code == 2
    assert "shape" in err
    assert "Traceback" not in err


def test_sp_without_tp_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "simulate", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "16",
                       "--microbatches", "4", "--stages", "2", "--sp")
    assert code == 2
    assert "sequence_parallel" in err


def test_plan_megatron_with_pins_writes_a_3d_plan(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_file = tmp_path / "plan.json"
    code, out, _ = run(capsys, "plan", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "32", "--planner",
                       "megatron", "--tp", "8", "--zero", "distributed", "--top", "2", "-o", str(out_file))
    assert code == 0
    assert "tp8" in out
    plan = load_plan(out_file)
    assert all(s.tensor_parallel == 8 and s.sharding.value == "distributed" for s in plan.stages)
    code, _, err = run(capsys, "plan", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "32", "--tp", "2")
    assert code == 2
    assert "megatron" in err


def test_compare_with_tp(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["compare", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "32", "--planner", "megatron"]
    args += ["--tp", "4", "--schedules", "1f1b,gpipe", "--out", str(tmp_path), "--json"]
    code, out, _ = run(capsys, *args)
    assert code == 0
    rows = json.loads(out)
    assert len(rows) == 2


def test_simulate_summary_names_the_parallelism(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "simulate", "--model", GPT, "--cluster", "dgx-a100-x2", "--gbs", "16",
                       "--microbatches", "4", "--stages", "2", "--tp", "2", "--zero", "zero2")
    assert code == 0
    assert "tensor parallel 2,2, sharding zero2" in out.splitlines()[0]
