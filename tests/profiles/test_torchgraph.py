"""The PipeDream/DAPPLE TorchGraph importer: every grammar feature, ordering, and error messages."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import FormatError, InputError
from pipesim.profiles.models.fileformat import load_profile_file, save_profile
from pipesim.profiles.models.torchgraph import load_torchgraph, parse_torchgraph, pbs_from_filename
from pipesim.units import MS


def _node(nid: str, desc: str, f: str = "1.0", b: str = "2.0", a: str = "100.0", p: str = "0.0") -> str:
    return (
        f"{nid} -- {desc} -- forward_compute_time={f}, backward_compute_time={b}, "
        f"activation_size={a}, parameter_size={p}"
    )


CHAIN = "\n".join(
    [
        _node("node1", "Input", "3.4", "0.000", "19000000.000", "0.000"),
        _node(
            "node2",
            "Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
            "3.4",
            "6.8",
            "384000000.000",
            "7168.000",
        ),
        _node("node3", "ReLU(inplace=True)", "0.25", "0.5", "384000000.000", "0.000"),
        _node(
            "node4",
            "Linear(in_features=4096, out_features=1000, bias=True)",
            "0.05",
            "0.1",
            "128000.4",
            "16388000.0",
        ),
        "\tnode1 -- node2",
        "\tnode2 -- node3",
        "\tnode3 -- node4",
        "",
    ]
)


def _write(tmp_path: Path, name: str, text: str, newline: str = "\n") -> Path:
    path = tmp_path / name
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def test_chain_file(tmp_path: Path) -> None:
    profile = load_torchgraph(_write(tmp_path, "tiny-vgg-pbs-32.txt", CHAIN))
    assert profile.name == "tiny-vgg"
    assert profile.profile_batch_size == 32
    assert profile.dtype == "float32"
    assert profile.reference_device == "V100-SXM2-16GB"
    assert profile.edges is None
    assert profile.stage_ids is None
    assert "tiny-vgg-pbs-32.txt" in profile.description
    names = [layer.name for layer in profile.layers]
    assert names == [
        "Input",
        "Conv2d(3, 64, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))",
        "ReLU(inplace=True)",
        "Linear(in_features=4096, out_features=1000, bias=True)",
    ]
    conv = profile.layers[1]
    assert conv.fwd_time_s == 3.4 * MS
    assert conv.bwd_time_s == 6.8 * MS
    assert conv.activation_bytes == 384_000_000
    assert conv.parameter_bytes == 7168
    assert profile.layers[0].bwd_time_s == 0.0
    assert profile.layers[3].activation_bytes == 128000  # 128000.4 rounds to whole bytes
    assert profile.layers[3].parameter_bytes == 16388000
    assert [c.crossing_bytes for c in profile.cuts()] == [19_000_000, 384_000_000, 384_000_000]


def test_crlf_trailing_spaces_blank_lines_and_bom(tmp_path: Path) -> None:
    messy = "\ufeff\n" + "\n\n".join(line + "  \t" for line in CHAIN.split("\n")) + "\n   \n"
    path = _write(tmp_path, "tiny-vgg-pbs-32.txt", messy, newline="\r\n")
    clean = load_torchgraph(_write(tmp_path, "clean-pbs-32.txt", CHAIN))
    assert load_torchgraph(path).layers == clean.layers


def test_edge_lines_with_spaces_or_tabs() -> None:
    text = "\n".join([_node("a", "A"), _node("b", "B"), _node("c", "C"), "  a -- b", "\t \tb   --\tc"])
    assert parse_torchgraph(text, pbs=1).edges is None


BRANCHING = "\n".join(
    [
        # listed out of order: the join comes first, edges name nodes defined further down
        _node("n5", "Add", a="5.0"),
        "\tn2 -- n5",
        _node("n1", "Input", a="1.0"),
        _node("n3", "Conv2d(8, 8, kernel_size=(1, 1))", a="3.0"),
        "\tn1 -- n2",
        "\tn1 -- n3",
        "\tn3 -- n4",
        _node("n2", "Identity", a="[1.0; 1.0]"),
        _node("n4", "Conv2d(8, 8, kernel_size=(3, 3))", a="4.0"),
        "\tn4 -- n5",
        "\tn4 -- n5",  # a repeated edge counts once
    ]
)


def test_branching_file_ordered_topologically() -> None:
    profile = parse_torchgraph(BRANCHING, pbs=4)
    # Kahn with ties broken by file order: n1 first (only source); then n3 (line 4) before n2 (line 9).
    assert [layer.name for layer in profile.layers] == [
        "Input",
        "Conv2d(8, 8, kernel_size=(1, 1))",
        "Identity",
        "Conv2d(8, 8, kernel_size=(3, 3))",
        "Add",
    ]
    # n1=0, n3=1, n2=2, n4=3, n5=4
    assert profile.edges == ((0, 1), (0, 2), (1, 3), (2, 4), (3, 4))
    assert profile.layers[2].activation_bytes == 2
    assert [c.crossing_bytes for c in profile.cuts()] == [1, 1 + 3, 2 + 3, 2 + 4]
    assert profile.name == "torchgraph"


def test_file_order_kept_when_already_topological() -> None:
    # sources tie: the one listed first goes first, even if its id sorts later
    text = "\n".join([_node("z", "Z"), _node("a", "A"), _node("m", "M"), "\tz -- m", "\ta -- m"])
    profile = parse_torchgraph(text, pbs=2)
    assert [layer.name for layer in profile.layers] == ["Z", "A", "M"]
    assert profile.edges == ((0, 2), (1, 2))


def test_isolated_nodes_give_empty_edges() -> None:
    text = "\n".join([_node("a", "A"), _node("b", "B")])
    assert parse_torchgraph(text, pbs=1).edges == ()
    assert parse_torchgraph(_node("a", "A"), pbs=1).edges is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("[1024.0; 2048.0]", 3072),
        ("[1.5; 2.5; 3.0]", 7),
        ("[12976128.0]", 12976128),
        ("[ 10 ;20 ]", 30),
        ("[1, 2]", 3),
        ("[]", 0),
        ("12976128.0", 12976128),
        ("1e3", 1000),
        ("2.5", 2),  # round half to even
        ("3.5", 4),
    ],
)
def test_activation_values(value: str, expected: int) -> None:
    profile = parse_torchgraph(_node("a", "A", a=value), pbs=1)
    assert profile.layers[0].activation_bytes == expected


def test_stage_ids_are_kept_in_layer_order() -> None:
    text = "\n".join(
        [
            _node("b", "B") + " -- stage_id=1",
            _node("a", "A") + " -- stage_id=0",
            _node("c", "C") + " -- stage_id=1   ",
            "\ta -- b",
            "\tb -- c",
        ]
    )
    profile = parse_torchgraph(text, pbs=1)
    assert [layer.name for layer in profile.layers] == ["A", "B", "C"]
    assert profile.stage_ids == (0, 1, 1)
    assert profile.edges is None


def test_layer_names_made_unique() -> None:
    text = "\n".join(
        [
            _node("n1", "ReLU()"),
            _node("n2", "ReLU()"),
            _node("n3", "ReLU() [n1]"),  # clashes with the name made for n1
            _node("n4", ""),
            _node("n5", "Linear(a -- b)"),  # ' -- ' inside a description still parses
        ]
    )
    profile = parse_torchgraph(text, pbs=1)
    assert [layer.name for layer in profile.layers] == [
        "ReLU() [n1]",
        "ReLU() [n2]",
        "ReLU() [n1]#2",
        "n4",
        "Linear(a -- b)",
    ]


def test_pbs_sources(tmp_path: Path) -> None:
    assert pbs_from_filename("vgg-19-pbs-32.txt") == 32
    assert pbs_from_filename("dir/bert-pbs-6") == 6
    assert pbs_from_filename("/x-pbs-7/model.txt") is None  # only the file name counts
    assert pbs_from_filename("model.txt") is None
    path = _write(tmp_path, "net-pbs-16.txt", CHAIN)
    assert load_torchgraph(path, pbs=64).profile_batch_size == 64  # the argument wins
    nameless = _write(tmp_path, "net.txt", CHAIN)
    assert load_torchgraph(nameless, pbs=8).profile_batch_size == 8
    with pytest.raises(InputError, match=r"profile batch size of '.*net\.txt' unknown.*no '-pbs-N'"):
        load_torchgraph(nameless)
    with pytest.raises(InputError, match=r"TorchGraph text unknown"):
        parse_torchgraph(CHAIN)
    for bad in (0, -2, 1.5, True):
        with pytest.raises(InputError, match=r"pbs=.*: must be an integer >= 1"):
            load_torchgraph(path, pbs=bad)  # type: ignore[arg-type]


def test_converts_to_pipesim_format(tmp_path: Path) -> None:
    profile = parse_torchgraph(BRANCHING.replace("n1 -- n2", "n1 -- n2"), pbs=4)
    save_profile(profile, tmp_path / "b.json")
    assert load_profile_file(tmp_path / "b.json") == profile


# ---------------------------------------------------------------------------------------------
# Errors: file, line and what was expected
@pytest.mark.parametrize(
    ("lines", "match"),
    [
        (["node1 -- Input"], r"g-pbs-1\.txt:1: expected a node line 'ID -- DESC -- forward_compute_time=F"),
        (
            [_node("a", "A"), "just some words"],
            r"g-pbs-1\.txt:2: expected a node line .*got 'just some words'",
        ),
        (
            ["a -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=1"],
            r":1: expected 'ID -- DESC' before the measurements",
        ),
        ([_node("a", "A"), "\ta -> b"], r":2: expected an edge line 'SRC -- DST' after leading whitespace"),
        ([_node("a", "A"), "\ta -- b -- c"], r":2: expected an edge line"),
        ([_node("a", "A", f="fast")], r":1: forward_compute_time='fast': expected a number"),
        ([_node("a", "A", b="1_000")], r":1: backward_compute_time='1_000': expected a number"),
        ([_node("a", "A", f="-1.0")], r":1: forward_compute_time='-1\.0': must be a finite number >= 0"),
        ([_node("a", "A", p="nan")], r":1: parameter_size='nan': must be a finite number >= 0"),
        ([_node("a", "A", a="inf")], r":1: activation_size='inf': must be a finite"),
        ([_node("a", "A", a="[1.0; -2.0]")], r":1: activation_size='-2\.0': must be a finite"),
        (
            [_node("a", "A", a="[1.0; 2.0")],
            r":1: activation_size='\[1\.0; 2\.0': expected a number or a list",
        ),
        (
            ["a -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1"],
            r":1: missing parameter_size; expected a node line",
        ),
        (
            [
                "a -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, "
                "parameter_size=1, flops=3"
            ],
            r":1: unexpected field 'flops=3'; expected forward_compute_time, backward_compute_time",
        ),
        (
            ["a -- A -- forward_compute_time=1, forward_compute_time=1, activation_size=1, parameter_size=1"],
            r":1: field 'forward_compute_time' given twice",
        ),
        ([_node("a", "A") + " -- stage_id=x"], r":1: stage_id='x': expected an integer >= 0"),
        ([_node("a", "A") + " -- stage_id=-1"], r":1: stage_id='-1': expected an integer >= 0"),
        (
            [_node("a", "A") + " -- stage_id=0", _node("b", "B"), "\ta -- b"],
            r":2: node 'b' has no stage_id but other nodes do",
        ),
        (
            [_node("a", "A"), _node("b", "B"), _node("a", "A2")],
            r":3: duplicate node id 'a' \(first defined on line 1\)",
        ),
        ([_node("a", "A"), "\ta -- ghost"], r":2: edge a -- ghost names unknown node 'ghost'"),
        ([_node("a", "A"), "\tghost -- a"], r":2: edge ghost -- a names unknown node 'ghost'"),
        (
            [_node("a", "A"), _node("b", "B"), _node("c", "C"), "\ta -- b", "\tb -- c", "\tc -- b"],
            r":6: the graph has a cycle: b -> c -> b",
        ),
        ([_node("a", "A"), "\ta -- a"], r":2: the graph has a cycle: a -> a"),
        ([_node("a", "A"), "", "   ", "\tx -- y"], r":4: edge x -- y names unknown node 'x'"),
        (["", ""], r"g-pbs-1\.txt: no node lines found"),
    ],
)
def test_format_errors(tmp_path: Path, lines: list[str], match: str) -> None:
    path = _write(tmp_path, "g-pbs-1.txt", "\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=match):
        load_torchgraph(path)


def test_error_attributes_and_cycle_line(tmp_path: Path) -> None:
    text = "\n".join([_node("a", "A"), _node("b", "B"), _node("c", "C"), "\ta -- b", "\tc -- a", "\tb -- c"])
    path = _write(tmp_path, "cyc-pbs-2.txt", text)
    with pytest.raises(FormatError, match=r"cycle: a -> b -> c -> a") as info:
        load_torchgraph(path)
    assert info.value.path == str(path)
    assert info.value.line == 5  # the edge c -- a closes the cycle


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "x-pbs-1.txt"
    path.write_bytes(_node("a", "A").encode() + b"\n" + _node("b", "B").encode().replace(b"B", b"caf\xe9"))
    with pytest.raises(FormatError, match=r"x-pbs-1\.txt:2: not UTF-8 text"):
        load_torchgraph(path)


# ---------------------------------------------------------------------------------------------
# Property: any listing order of a DAG gives a topological order with the same edges
@st.composite
def _listed_dags(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], int]:
    n = draw(st.integers(1, 10))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True) if pairs else st.just([]))
    return n, edges, draw(st.integers(0, 2**32))


@settings(max_examples=100, deadline=None)
@given(_listed_dags())
def test_any_listing_order_is_sorted_topologically(dag: tuple[int, list[tuple[int, int]], int]) -> None:
    n, edges, seed = dag
    rng = random.Random(seed)
    lines = [_node(f"v{i}", f"L{i}", a=str(10 * i)) for i in range(n)]
    lines += [f"\tv{s} -- v{d}" for s, d in edges]
    rng.shuffle(lines)
    profile = parse_torchgraph("\n".join(lines), pbs=1)
    position = {int(layer.name[1:]): k for k, layer in enumerate(profile.layers)}
    for s, d in edges:
        assert position[s] < position[d]
    mapped = sorted((position[s], position[d]) for s, d in edges)
    if profile.edges is None:
        assert mapped == [(k, k + 1) for k in range(n - 1)]
    else:
        assert list(profile.edges) == mapped
    # determinism: parsing again gives the same profile
    assert parse_torchgraph("\n".join(lines), pbs=1) == profile
