"""`pipesim compare`: the README's main job."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from pipesim.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_default_compare_writes_everything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, "compare", "--out", str(out_dir))
    assert code == 0, err
    assert out.startswith("bert48 on dapple-2x8-v100: global batch 128")
    lines = out.splitlines()
    assert any(line.startswith("gpipe ") for line in lines)
    assert any(line.startswith("dapple ") for line in lines)
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == [
        "gantt.png",
        "memory.png",
        "rows.csv",
        "rows.json",
        "trace_dapple.json",
        "trace_gpipe.json",
    ]
    rows = json.loads((out_dir / "rows.json").read_text())
    assert [r["schedule"] for r in rows] == ["gpipe", "dapple"]
    gpipe, dapple = rows
    # Same plan: DAPPLE's early backward keeps far fewer activations than GPipe at similar speed.
    assert gpipe["split"] == dapple["split"]
    assert dapple["peak_memory_bytes"] < 0.5 * gpipe["peak_memory_bytes"]
    assert dapple["speedup"] == pytest.approx(gpipe["iteration_time_s"] / dapple["iteration_time_s"])
    assert abs(dapple["iteration_time_s"] / gpipe["iteration_time_s"] - 1) < 0.1
    for r in rows:
        assert abs(r["estimated_iteration_time_s"] / r["iteration_time_s"] - 1) < 0.05
    with (out_dir / "rows.csv").open() as handle:
        assert [r["schedule"] for r in csv.DictReader(handle)] == ["gpipe", "dapple"]


def test_more_schedules_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "compare",
        "--model",
        "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1000",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "32",
        "--schedules",
        "1f1b,interleaved,zb-h1,zb-h2",
        "--out",
        str(tmp_path),
        "--json",
    )
    assert code == 0, err
    rows = json.loads(out)
    assert [r["schedule"] for r in rows] == ["1f1b", "interleaved", "zb-h1", "zb-h2"]
    assert rows[0]["speedup"] == 1.0
    assert rows[1]["stages"] == 2 * rows[0]["stages"] or rows[0]["stages"] == 1
    # every schedule now has an analytic estimate (planner.ESTIMATED_SCHEDULES), within reach of
    # the simulation on this small NVLink case
    for row in rows:
        est, sim = row["estimated_iteration_time_s"], row["iteration_time_s"]
        assert est is not None
        assert abs(est - sim) / sim < 0.25, (row["schedule"], est, sim)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--schedules", "gpipe,warp"], "unknown schedule 'warp'"),
        (["--schedules", "gpipe,GPipe"], "must not repeat"),
        (["--planner", "magic"], "unknown planner 'magic'"),
        (["--model", "nosuch"], "unknown model 'nosuch'"),
        (["--set", "nic=1GbE"], "1GbE"),
    ],
)
def test_bad_input_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, "compare", "--out", str(tmp_path / "o"), *argv)
    assert code == 2
    assert "Traceback" not in err
    assert re.search(message, err), err
    assert not (tmp_path / "o").exists()


def test_cost_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "compare",
        "--model",
        "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "16",
        "--out",
        str(tmp_path),
        "--price-per-hour",
        "3.6",
        "--train-samples",
        "1000000",
        "--json",
    )
    assert code == 0, err
    for row in json.loads(out):
        per_s = row["devices"] * 3.6 / 3600
        assert row["cost_per_million_samples_usd"] == pytest.approx(
            per_s / row["throughput_samples_per_s"] * 1e6
        )
        assert row["cost_to_train_usd"] == pytest.approx(row["cost_per_million_samples_usd"])
        assert row["time_to_train_s"] == pytest.approx(1e6 / row["throughput_samples_per_s"])


def test_rows_files_are_typed_like_sweep_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(
        capsys,
        "compare",
        "--model",
        "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1000",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "32",
        "--out",
        str(tmp_path),
    )
    assert code == 0, err
    rows = json.loads((tmp_path / "rows.json").read_text())
    for r in rows:
        assert isinstance(r["replicas"], list)
        assert all(isinstance(n, int) for n in r["replicas"])
        assert r["cluster"] == "dgx1-v100"
        assert r["model"]
    with (tmp_path / "rows.csv").open() as handle:
        table = list(csv.DictReader(handle))
    for r, j in zip(table, rows, strict=True):
        assert r["fits"] == ("true" if j["fits"] else "false")
        assert r["replicas"] == "|".join(str(n) for n in j["replicas"])
        assert r["model"] == j["model"]
        assert float(r["iteration_time_s"]) == j["iteration_time_s"]


def test_paper_size_vector_figures_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(
        capsys,
        "compare",
        "--model",
        "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1000",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "32",
        "--out",
        str(tmp_path),
        "--format",
        "pdf",
        "--figsize",
        "single",
        "--gantt-rows",
        "device",
        "--html",
    )
    assert code == 0, err
    assert (tmp_path / "gantt.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "memory.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert "wrote 7 files" in out
    code, _out, err = run(capsys, "compare", "--out", str(tmp_path), "--figsize", "a4")
    assert code == 2
    assert "--figsize='a4': must be screen, double, single or WxH" in err


def test_planned_compare_takes_the_gradient_dtype(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # without --plan the planners plan with the given gradient dtype: bf16 training reduces fp32
    # gradients by default (Megatron-LM's rule), --grad-reduce-dtype bf16 halves those bytes
    exposed = {}
    for grad in ("fp32", "bf16"):
        code, out, err = run(
            capsys, "compare", "--model", "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1000",
            "--cluster", "dgx-a100-x2", "--gbs", "32", "--schedules", "1f1b", "--dtype", "bf16",
            "--grad-reduce-dtype", grad, "--json", "--out", str(tmp_path / grad),
        )
        assert code == 0, err
        (row,) = json.loads(out)
        exposed[grad] = row["exposed_allreduce_time_s"]
    assert 0 < exposed["bf16"] < exposed["fp32"]
