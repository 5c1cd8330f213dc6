"""`pipesim strategy` against PaSE's current main branch (issue 18).

Reference totals were measured by running PaSE itself, github.com/baidu-research/PaSE at commit
32aa761c47fd1ca1b7288abb44b473f40a45cf73 (main), unmodified, outside this repository: a throwaway
venv with Python 3.11.7, numpy 1.26.4, pandas 1.5.3, networkx 3.6.1, and
``python -O scheduler.py -g GRAPH -p P`` (its defaults: batch 128, ``-m 128``, ``--flops 10``,
``--bw 16``, ``--algo 0``), reading its ``Total cost: %0.2f`` line. ``-O`` only silences PaSE's
``if __debug__`` progress prints. The AlexNet strategy block is PaSE's printed output for
``-g alexnet -p 4``, copied verbatim.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.planner.pase import CostParams, build_graph, search

PASE_COMMIT = "32aa761c47fd1ca1b7288abb44b473f40a45cf73"
R_PASE_DEFAULT = 5000.0
"""PaSE's defaults ``--flops 10 --bw 16``: 10,000 GFLOP/s / (16 / 8 GWords/s)."""

# (graph, p): PaSE's "Total cost:" at its defaults (batch 128, --flops 10, --bw 16)
PASE_TOTALS: dict[tuple[str, int], str] = {
    ("alexnet", 4): "148215719552.00",
    ("alexnet", 8): "97098296512.00",
    ("alexnet", 16): "70320712672.00",
    ("alexnet", 32): "53136349552.00",
    ("resnet101", 4): "1718742247936.00",
    ("resnet101", 8): "1425262849920.00",
    ("resnet101", 16): "1244493633088.00",
    ("resnet101", 32): "1086268826784.00",
    ("inception3", 4): "986757044608.00",
    ("inception3", 8): "782140602432.00",
    ("inception3", 16): "673045949344.00",
    ("inception3", 32): "602425599824.00",
    ("rnnlm", 4): "13247562153984.00",
    ("rnnlm", 8): "7462723813376.00",
    ("rnnlm", 16): "4322906226688.00",
    ("rnnlm", 32): "2625038401536.00",
    ("transformer", 4): "3943828242432.00",
    ("transformer", 8): "2340308361216.00",
    ("transformer", 16): "1496646348800.00",
}

PASE_ALEXNET_P4_NODES = """\
Node: 0; Type: Conv; Configs: 7
Node: 1; Type: Pooling; Configs: 9
Node: 2; Type: Conv; Configs: 11
Node: 3; Type: Pooling; Configs: 6
Node: 4; Type: Conv; Configs: 11
Node: 5; Type: Conv; Configs: 12
Node: 6; Type: Conv; Configs: 11
Node: 7; Type: Pooling; Configs: 6
Node: 8; Type: Ravel; Configs: 3
Node: 9; Type: Unravel; Configs: 3
Node: 10; Type: FC; Configs: 11
Node: 11; Type: FC; Configs: 10
Node: 12; Type: FC; Configs: 10
Node: 13; Type: SoftmaxCrossEntropy; Configs: 6"""

PASE_ALEXNET_P4_STRATEGY = """\
Strategy with minimum cost:
=====
0     (4, 1, 1, 1, 1, 1, 1)
1              (4, 1, 1, 1)
2     (4, 1, 1, 1, 1, 1, 1)
3              (4, 1, 1, 1)
4     (4, 1, 1, 1, 1, 1, 1)
5     (4, 1, 1, 1, 1, 1, 1)
6     (4, 1, 1, 1, 1, 1, 1)
7              (4, 1, 1, 1)
8              (4, 1, 1, 1)
9                    (4, 1)
10                (1, 1, 4)
11                (1, 4, 1)
12                (1, 1, 4)
13                   (1, 1)
=====
Total cost: 148215719552.00"""


def test_default_flags_are_pases() -> None:
    assert CostParams.from_pase_flags(10.0, 16.0).flop_per_word == R_PASE_DEFAULT


@pytest.mark.parametrize(("graph", "p"), sorted(PASE_TOTALS))
def test_total_cost_equals_pase_main(graph: str, p: int) -> None:
    result = search(build_graph(graph, p, 128), R_PASE_DEFAULT)
    assert f"{result.cost:0.2f}" == PASE_TOTALS[(graph, p)]


def test_pase_output_prints_what_pase_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-g", "alexnet", "-p", "4", "--pase-output"]) == 0
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    # everything but the measured time is PaSE's output, line for line
    assert "\n".join(lines[:14]) == PASE_ALEXNET_P4_NODES
    assert lines[14] == ""
    assert lines[15].startswith("Processing time:  0:00:")
    assert lines[16] == ""
    assert "\n".join(lines[17:]) == PASE_ALEXNET_P4_STRATEGY


@pytest.mark.parametrize(("graph", "p"), [("rnnlm", 4), ("transformer", 4)])
def test_scripts_parsing_total_cost_keep_working(
    graph: str, p: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["strategy", "-g", graph, "-p", str(p), "--pase-output"]) == 0
    (total,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Total cost:")]
    assert total == f"Total cost: {PASE_TOTALS[(graph, p)]}"


def test_defaults_and_ignored_model_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-g", "transformer", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert (default["procs"], default["batch"], default["model_size"]) == (8, 128, 128)
    assert main(["strategy", "-g", "transformer", "-m", "1024", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total_cost"] == default["total_cost"]


def test_pase_flags_are_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["strategy", "-g", "rnnlm", "-p", "4", "--pase-output"]
    assert main([*argv, "-d", "--algo", "1", "--measure", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "Graph written to graph.dot." in out
    assert (tmp_path / "graph.dot").read_text().startswith('digraph "rnnlm"')
    assert "function calls" in out  # the cProfile report
    assert out.rstrip("\n").endswith(f"Total cost: {PASE_TOTALS[('rnnlm', 4)]}")


def test_bad_flag_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "--algo", "2"]) == 2
    assert "--algo" in capsys.readouterr().err
    assert main(["strategy", "--pase-output", "--json"]) == 2
    assert "--pase-output" in capsys.readouterr().err
