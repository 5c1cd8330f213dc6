"""`--recompute none|full|selective` on plan, simulate, compare and sweep; plan files keep the mode."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.api import make_plan
from pipesim.cli import main
from pipesim.errors import FormatError, InputError
from pipesim.plan import Recompute
from pipesim.plan_file import load_plan, plan_from_dict, plan_to_dict, save_plan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.loader import load_model
from pipesim.sweep import parse_sweep_config

SMALL = ["--model", "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000", "--cluster", "dgx1-v100"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _simulate_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    code, out, err = run(
        capsys, "simulate", *SMALL, "--gbs", "16", "--microbatches", "8", "--stages", "4",
        "--schedule", "gpipe", "--json", *extra,
    )  # fmt: skip
    assert code == 0, err
    data: dict[str, object] = json.loads(out)
    return data


def test_simulate_time_rises_and_memory_falls(capsys: pytest.CaptureFixture[str]) -> None:
    runs = {mode: _simulate_json(capsys, "--recompute", mode) for mode in ("none", "selective", "full")}
    time = {mode: float(r["iteration_time_s"]) for mode, r in runs.items()}  # type: ignore[arg-type]
    peak = {mode: max(d["peak_memory_bytes"] for d in r["devices"]) for mode, r in runs.items()}  # type: ignore[attr-defined]
    assert time["none"] < time["selective"] < time["full"]
    assert peak["full"] < peak["selective"] < peak["none"]
    assert _simulate_json(capsys, "--recompute")["iteration_time_s"] == time["full"]  # alone: full
    assert _simulate_json(capsys)["iteration_time_s"] == time["none"]


def test_plan_writes_the_mode_and_simulate_reads_or_replaces_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "plan.json"
    code, _, err = run(
        capsys, "plan", *SMALL, "--gbs", "16", "--rerank", "none", "--recompute", "selective", "-o", str(out)
    )
    assert code == 0, err
    assert json.loads(out.read_text())["recompute"] == "selective"
    assert load_plan(out).recompute is Recompute.SELECTIVE
    code, text, err = run(capsys, "simulate", *SMALL, "--plan", str(out), "--json")
    assert code == 0, err
    kept = json.loads(text)["iteration_time_s"]
    code, text, err = run(capsys, "simulate", *SMALL, "--plan", str(out), "--json", "--recompute", "none")
    assert code == 0, err
    assert json.loads(text)["iteration_time_s"] < kept


def test_text_output_names_the_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = [*SMALL, "--gbs", "16"]
    code, out, err = run(capsys, "simulate", *argv, "--microbatches", "4", "--stages", "2", "--recompute")
    assert code == 0, err
    assert out.splitlines()[0].endswith("schedule dapple, recompute full")
    code, out, err = run(capsys, "simulate", *argv, "--microbatches", "4", "--stages", "2")
    assert code == 0, err
    assert "recompute" not in out.splitlines()[0]
    code, out, err = run(
        capsys, "compare", *argv, "--rerank", "none", "--recompute", "selective", "--out", str(tmp_path)
    )
    assert code == 0, err
    assert ", recompute selective (dapple plan)" in out.splitlines()[0]


def test_compare_takes_the_mode(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # one plan held fixed (the planner may pick another plan per mode): 4 GPipe stages
    profile = load_model(SMALL[1])
    fixed = make_plan(profile, get_cluster("dgx1-v100"), global_batch_size=16, num_microbatches=8, stages=4)
    save_plan(fixed, tmp_path / "fixed.json")
    rows = {}
    for mode in ("none", "full"):
        code, out, err = run(
            capsys, "compare", *SMALL, "--gbs", "16", "--rerank", "none", "--schedules", "gpipe",
            "--plan", str(tmp_path / "fixed.json"), "--recompute", mode, "--json",
            "--out", str(tmp_path / mode),
        )  # fmt: skip
        assert code == 0, err
        (rows[mode],) = json.loads(out)
    assert rows["full"]["iteration_time_s"] > rows["none"]["iteration_time_s"]
    assert rows["full"]["peak_memory_bytes"] < rows["none"]["peak_memory_bytes"]


@pytest.mark.parametrize("command", ["plan", "simulate", "compare"])
def test_unknown_mode_exits_2(capsys: pytest.CaptureFixture[str], command: str) -> None:
    code, _, err = run(capsys, command, *SMALL, "--gbs", "16", "--recompute", "partial")
    assert code == 2
    assert "argument --recompute: invalid choice: 'partial' (choose from 'none', 'full', 'selective')" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "--model", "vgg19", "--cluster", "dgx1-v100", "--gbs", "64", "--recompute", "selective"],
        ["simulate", "--model", "vgg19", "--cluster", "dgx1-v100", "--gbs", "64", "--microbatches", "4",
         "--stages", "2", "--recompute", "selective"],
        ["compare", "--model", "vgg19", "--cluster", "dgx1-v100", "--gbs", "64", "--recompute", "selective"],
    ],
)  # fmt: skip
def test_selective_without_transformer_shapes_exits_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], tmp_path: Path
) -> None:
    if argv[0] == "compare":
        argv = [*argv, "--out", str(tmp_path)]
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert "recompute='selective': selective recomputation needs transformer layer shapes" in err
    assert "'vgg19'" in err
    assert "Traceback" not in err


def test_plan_file_round_trip_of_every_mode(tmp_path: Path) -> None:
    for mode in Recompute:
        plan = make_plan("bert48", global_batch_size=16, num_microbatches=4, stages=2, recompute=mode.value)
        path = tmp_path / f"{mode.value}.json"
        save_plan(plan, path)
        assert json.loads(path.read_text())["recompute"] == mode.value
        assert load_plan(path) == plan
    data = plan_to_dict(make_plan("bert48", global_batch_size=16, num_microbatches=4, stages=2))
    with pytest.raises(
        InputError, match=r"recompute=0: expected a recompute mode name \(none, full, selective\)"
    ):
        plan_from_dict(dict(data, recompute=0), source="plan.json")
    with pytest.raises(InputError, match=r"unknown recompute mode 'some'"):
        plan_from_dict(dict(data, recompute="some"), source="plan.json")


def test_sweep_config_recompute_axis() -> None:
    base = {"models": ["bert48"], "clusters": ["dgx1-v100"], "global_batch_sizes": [64]}
    config = parse_sweep_config({**base, "recompute": ["none", "Full"], "schedules": ["gpipe"]})
    assert config.recompute == ("none", "full")
    assert [p.recompute for p in config.points()] == ["none", "full"]
    assert parse_sweep_config(base).recompute == ("none",)
    assert parse_sweep_config({**base, "recompute": "selective"}).recompute == ("selective",)
    with pytest.raises(FormatError, match=r"recompute='sometimes': must be one of none, full, selective"):
        parse_sweep_config({**base, "recompute": "sometimes"}, path="sweep.toml")
    with pytest.raises(FormatError, match=r"recompute=\[.full., .full.\]: must not repeat a value"):
        parse_sweep_config({**base, "recompute": ["full", "full"]}, path="sweep.toml")


def test_sweep_runs_the_recompute_axis(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from pipesim.sweep.store import read_results

    config = tmp_path / "rc.toml"
    config.write_text(
        f'models = ["{SMALL[1]}"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [16]\n'
        'schedules = ["gpipe"]\nrecompute = ["none", "full"]\n'
    )
    out = tmp_path / "rc.csv"
    code, _, err = run(capsys, "sweep", str(config), "--out", str(out), "--workers", "1", "-q")
    assert code == 0, err
    rows = {row["recompute"]: row for row in read_results(out)}
    assert set(rows) == {"none", "full"}
    # each point is planned for its mode, so the plans may differ: both run, and they are two points
    assert rows["none"]["status"] == rows["full"]["status"] == "ok"
    assert rows["none"]["key"] != rows["full"]["key"]
    only = tmp_path / "only.csv"
    code, _, err = run(
        capsys, "sweep", str(config), "--out", str(only), "--workers", "1", "-q", "--recompute", "selective"
    )
    assert code == 0, err
    assert [row["recompute"] for row in read_results(only)] == ["selective"]
