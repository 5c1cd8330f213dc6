"""pipesim's PaSE port against numbers produced by running an older PaSE itself (issue 8).

Golden values were produced by running PaSE (github.com/baidu-research/PaSE) outside this
repository: ``nn_ops.py`` and ``scheduler.py`` at commit
02d69157d6b28c8531c5fa803ac71348f6d727fa, ``graph.py`` at commit
03468935b7c82c1ef95e5afca258900366d2ab1e (the newest mutually consistent revisions that could be
read; the revision whose README documents ``--flops/--bw`` could not), under Python 3.11,
numpy 1.26.4, pandas 1.5.3, networkx 3.6.1, ``PYTHONHASHSEED=0``. Each run was
``CreateGraph(graph, batch=128, 128, p, arch=0)`` followed by ``Processor(G).ProcessGraph()``
(``scheduler.py --algo 0``), i.e. ``scheduler.py -g GRAPH -p P -b 128``, with

* ``r = 13568`` FLOP per word: PaSE's own ``--arch 0`` constants (P100: 10.6 TFLOP/s, Infiniband
  6.25 GB/s read as 6.25 / 8 GWords/s), unmodified, i.e. PaSE's ``--flops 10.6 --bw 6.25``;
* ``r = 2500``: ``nn_ops.WordsToFlops.bw_to_flops`` preset to 2500 before the graph is built, the
  ratio PaSE's ``GB/s / 8`` conversion gives for ``--flops 10 --bw 32``.

pipesim reads ``--flops/--bw`` as PaSE does (8-byte words in ``r``), so every golden value is
checked here through those same flags: ``--flops 10.6 --bw 6.25`` and ``--flops 10 --bw 32``.

Only the CNNs are checked here: their graph definitions are unchanged in PaSE's current main
branch. PaSE's current ``transformer`` and ``rnnlm`` (and totals for every graph at p = 4..32 at
PaSE's default flags) are checked against PaSE commit 32aa761 in ``test_pase_main.py``.

The strategy digest is the first 16 hex digits of the SHA-256 of every vertex's split factors in
PaSE's node order (``"4,1,1;4,1;..."``), taken from PaSE's printed strategy.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from pipesim.cli import main
from pipesim.planner.pase import CostParams, PaseGraph, build_graph, search

ARCH0 = (10.6, 6.25)
"""PaSE ``--arch 0`` as ``(--flops TFLOP/s, --bw GB/s)``: P100 and Infiniband."""
R_PASE_ARCH0 = 13568.0
"""PaSE ``WordsToFlops`` with ``arch = 0``: 10,600 GFLOP/s / (6.25 / 8 GWords/s)."""
BW32 = (10.0, 32.0)
"""``--flops 10 --bw 32``: r = 10,000 GFLOP/s / (32 / 8 GWords/s)."""
R_DEFAULT = 2500.0
"""The ratio of :data:`BW32` (PaSE's defaults ``--flops 10 --bw 16`` give 5,000)."""

# (graph, p, (--flops, --bw)): (PaSE's total cost, digest of PaSE's per-layer strategy)
GOLDEN: dict[tuple[str, int, tuple[float, float]], tuple[float, str]] = {
    ("alexnet", 4, ARCH0): (208011185408.0, "004fee6c18582fbe"),
    ("alexnet", 8, ARCH0): (166471010048.0, "0af53a54510396d5"),
    ("resnet101", 4, ARCH0): (3184693598464.0, "473a640d9d7b6acb"),
    ("resnet101", 8, ARCH0): (3093983299840.0, "26af0b6430133b8e"),
    ("inception3", 4, ARCH0): (1729790592256.0, "b871b4fbf676e35d"),
    ("inception3", 8, ARCH0): (1648480076544.0, "52c7da6960fa8cd1"),
    ("alexnet", 4, BW32): (128639279552.0, "12e5c6c3b0f6ef59"),
    ("alexnet", 8, BW32): (75814956512.0, "d3ffaf7552754a06"),
    ("resnet101", 4, BW32): (1291002007936.0, "473a640d9d7b6acb"),
    ("resnet101", 8, BW32): (928459449920.0, "3a1f09e0136fd16c"),
    ("inception3", 4, BW32): (769952204608.0, "b871b4fbf676e35d"),
    ("inception3", 8, BW32): (529357142432.0, "52c7da6960fa8cd1"),
}

# PaSE's printed strategy for AlexNet (node id: split factors), written out in full.
ALEXNET_P8_DEFAULT = {
    **dict.fromkeys((0, 2, 4, 5, 6), (8, 1, 1, 1, 1, 1, 1)),
    **dict.fromkeys((1, 3, 7, 8), (8, 1, 1, 1)),
    9: (8, 1),
    10: (1, 2, 4),
    11: (1, 4, 2),
    12: (1, 2, 4),
    13: (1, 2),
}

# Sums over every configuration of PaSE's vertex and edge cost tables (p = 8, r = 2500), and the
# table sizes: (vertex-cost sum, edge-cost sum, configurations, edges).
TABLE_SUMS = {
    "alexnet": (18122144126805.332, 41910824960000.0, 234, 13),
    "resnet101": (149480396983648.3, 2526640497440000.0, 4360, 277),
    "inception3": (186396884235279.38, 1330839114153143.0, 4299, 253),
}


def _digest(graph: PaseGraph, choice: tuple[int, ...]) -> str:
    text = ";".join(",".join(str(int(x)) for x in v.configs[choice[v.id]]) for v in graph.vertices)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@pytest.mark.parametrize(("key", "expected"), sorted(GOLDEN.items()), ids=lambda x: str(x))
def test_search_matches_pase(key: tuple[str, int, tuple[float, float]], expected: tuple[float, str]) -> None:
    name, p, (flops, bw) = key
    cost, digest = expected
    graph = build_graph(name, p, 128)
    result = search(graph, CostParams.from_pase_flags(flops, bw).flop_per_word)
    assert result.cost == pytest.approx(cost, rel=1e-12)
    assert _digest(graph, result.choice) == digest


@pytest.mark.parametrize(
    ("graph", "p", "flags"),
    [("alexnet", 8, ARCH0), ("alexnet", 4, BW32), ("inception3", 4, ARCH0), ("resnet101", 4, BW32)],
)
def test_cli_flags_give_pase_total_cost(
    graph: str, p: int, flags: tuple[float, float], capsys: pytest.CaptureFixture[str]
) -> None:
    # `pipesim strategy -g G -p P -b 128 --flops F --bw B` == PaSE with the same flags
    flops, bw = flags
    argv = ["strategy", "-g", graph, "-p", str(p), "-b", "128", "--flops", str(flops), "--bw", str(bw)]
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    cost, digest = GOLDEN[(graph, p, flags)]
    assert data["total_cost"] == pytest.approx(cost, rel=1e-12)
    splits = ";".join(",".join(str(c) for c in lay["split"].values()) for lay in data["layers"])
    assert hashlib.sha256(splits.encode()).hexdigest()[:16] == digest


def test_alexnet_strategy_layer_by_layer() -> None:
    graph = build_graph("alexnet", 8, 128)
    result = search(graph, R_DEFAULT)
    chosen = {v.id: tuple(int(x) for x in v.configs[result.choice[v.id]]) for v in graph.vertices}
    assert chosen == ALEXNET_P8_DEFAULT


@pytest.mark.parametrize("name", sorted(TABLE_SUMS))
def test_cost_tables_match_pase(name: str) -> None:
    vsum, esum, n_configs, n_edges = TABLE_SUMS[name]
    graph = build_graph(name, 8, 128)
    assert sum(v.n_configs for v in graph.vertices) == n_configs
    assert len(graph.edges) == n_edges
    assert float(sum(v.cost(R_DEFAULT).sum() for v in graph.vertices)) == pytest.approx(vsum, rel=1e-12)
    assert float(sum(e.cost(R_DEFAULT).sum() for e in graph.edges)) == pytest.approx(esum, rel=1e-12)


def test_flag_values_reproduce_pase_ratios() -> None:
    # PaSE's WordsToFlops: r = GFLOP/s / (GB/s / 8); pipesim's flags mean the same
    assert CostParams.from_pase_flags(*ARCH0).flop_per_word == pytest.approx(R_PASE_ARCH0, rel=1e-12)
    assert CostParams.from_pase_flags(*BW32).flop_per_word == pytest.approx(R_DEFAULT, rel=1e-12)
    assert CostParams.from_pase_flags(10.0, 16.0).flop_per_word == pytest.approx(5000.0, rel=1e-12)
