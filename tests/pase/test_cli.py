"""``pipesim strategy``: output, JSON keys, dot dump and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.pase import PaseGraph, build_graph


def _choice(graph: PaseGraph, layers: list[dict[str, object]]) -> list[int]:
    """Configuration indices of the JSON ``layers`` splits."""
    out = []
    for v, lay in zip(graph.vertices, layers, strict=True):
        split = lay["split"]
        assert isinstance(split, dict)
        out.append(v.config_index(tuple(split.values())))
    return out


def test_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-g", "alexnet", "-p", "8", "-b", "64", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total_cost"] <= data["data_parallel_cost"]
    assert data["flop_per_word"] == pytest.approx(5000.0)  # PaSE: 10 TFLOP/s / (16 GB/s / 8)
    assert (data["pase_word_bytes"], data["element_bytes"]) == (8, 4)
    # seconds move 4-byte elements, so they are below the FLOP-equivalent cost / peak FLOP/s
    # (which charges 8-byte words) and above the compute alone
    graph = build_graph("alexnet", 8, 64)
    choice = tuple(_choice(graph, data["layers"]))
    compute, words = graph.totals(choice)
    assert data["total_cost"] == pytest.approx(compute + 5000.0 * words, rel=1e-9)
    assert data["total_cost_s"] == pytest.approx(compute / 10e12 + words * 4 / 16e9, rel=1e-9)
    assert data["total_cost_s"] < data["total_cost"] / 10e12
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
        (["-p", "0"], "argument -p/--procs: '0' must be >= 1"),
        (["-p", "32", "-b", "16"], "batch=16"),
        (["--cluster", "dgx1-v100"], "needs --simulate"),
        (["--device", "v100"], "give both"),
    ],
)
def test_bad_input_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", *argv]) == 2
    assert message in capsys.readouterr().err
