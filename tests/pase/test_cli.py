"""``pipesim strategy``: output, JSON keys, dot dump and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-g", "alexnet", "-p", "8", "-b", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_cost"] <= data["data_parallel_cost"]
    assert data["total_cost_s"] == pytest.approx(data["total_cost"] / 10e12)
    assert data["flop_per_word"] == pytest.approx(2500.0)
    assert data["layers"][0]["name"] == "conv1"
    assert set(data["layers"][0]["split"]) == {"b", "c", "h", "w", "r", "s", "n"}


def test_text_simulate_and_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dot = tmp_path / "g.dot"
    code = main(
        [
            "strategy",
            "-g",
            "rnnlm",
            "-p",
            "4",
            "-b",
            "32",
            "--simulate",
            "--cluster",
            "dgx1-v100",
            "--device",
            "v100",
            "--link",
            "NVLink2",
            "--dump-graph",
            str(dot),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "speedup over data parallelism" in out
    assert "simulated on dgx1-v100" in out
    assert dot.read_text().startswith('digraph "rnnlm"')


def test_json_simulation_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-g", "alexnet", "-p", "4", "-b", "32", "--json", "--simulate"]) == 0
    sim = json.loads(capsys.readouterr().out)["simulation"]
    assert sim["cluster"] == "dgx-h100-x4"
    assert sim["step_time_s"] > 0
    assert sim["estimate_s"] > 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-g", "vgg"], "unknown graph 'vgg'"),
        (["-p", "0"], "procs=0"),
        (["-p", "32", "-b", "16"], "batch=16"),
        (["--cluster", "dgx1-v100"], "needs --simulate"),
        (["--device", "v100"], "give both"),
    ],
)
def test_bad_input_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", *argv]) == 2
    assert message in capsys.readouterr().err
