"""PaSE configurations and cost formulas: exact small cases against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from pipesim.errors import InputError, UnknownNameError
from pipesim.planner.pase import (
    CostParams,
    GraphBuilder,
    allowed_factors,
    build_graph,
    graph_names,
    split_configs,
)
from pipesim.planner.pase.configs import contiguous_configs
from pipesim.planner.pase.cost_model import allreduce_words, edge_words


def test_allowed_factors_follow_pase_cutoff() -> None:
    # divisors c of d with d / c >= 4 and c <= p
    assert allowed_factors(96, 32) == [1, 2, 3, 4, 6, 8, 12, 16, 24]
    assert allowed_factors(128, 8) == [1, 2, 4, 8]
    assert allowed_factors(3, 32) == [1]  # 3 / 1 < 4: never split
    assert allowed_factors(11, 64) == [1]
    assert allowed_factors(16, 64) == [1, 2, 4]
    with pytest.raises(InputError, match="n_procs=0"):
        allowed_factors(8, 0)


def test_split_configs_products_and_fixed_dims() -> None:
    cfgs = split_configs((16, 16), 4)
    assert sorted(map(tuple, cfgs.tolist())) == [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (4, 1)]
    fixed = split_configs((16, 16, 16), 8, fixed=(1,))
    assert set(fixed[:, 1].tolist()) == {1}
    assert (np.prod(fixed, axis=1) <= 8).all()


def test_contiguous_configs_for_reshape() -> None:
    cfgs = split_configs((16, 8, 8), 8)
    kept = {tuple(r) for r in contiguous_configs((16, 8, 8), cfgs).tolist()}
    assert kept == {(1, 1, 1), (2, 1, 1), (4, 1, 1)}


def test_cost_params_ratio() -> None:
    # PaSE's words are 8 bytes: 10e12 / (16e9 / 8) = 5000 FLOP per word
    assert CostParams().flop_per_word == pytest.approx(5000.0)
    assert CostParams.from_pase_flags(10, 16) == CostParams()
    assert CostParams.from_pase_flags(20, 8).flop_per_word == pytest.approx(20000.0)
    assert CostParams(pase_word_bytes=4).flop_per_word == pytest.approx(2500.0)
    with pytest.raises(InputError, match="bw=0"):
        CostParams.from_pase_flags(10, 0)
    with pytest.raises(InputError, match="element_bytes=0"):
        CostParams(element_bytes=0)


def test_cost_params_seconds_use_fp32_elements() -> None:
    params = CostParams.from_pase_flags(10, 16)
    assert (params.pase_word_bytes, params.element_bytes) == (8, 4)
    assert params.seconds(1e10, 0.0) == pytest.approx(1e-3)
    # 1e9 elements x 4 bytes over 16 GB/s; the cost model charges them as 8-byte words
    assert params.seconds(0.0, 1e9) == pytest.approx(0.25)
    assert params.flop_per_word * 1e9 / params.peak_flop_per_s == pytest.approx(0.5)


def test_allreduce_words_ring() -> None:
    assert allreduce_words(np.array([100.0]), np.array([4]))[0] == pytest.approx(150.0)
    assert allreduce_words(np.array([100.0]), np.array([1]))[0] == 0.0


def test_fc_cost_matches_hand_computation() -> None:
    g = GraphBuilder("fc", 4, 32)
    g.fc(g.input((32, 64)), 16, pw_op_cnt=1)
    v = g.build().vertices[0]
    assert v.dom == (32, 16, 64)
    k = v.config_index((2, 2, 1))  # m = 16, n = 8, k = 64 per device
    assert v.compute_flop[k] == pytest.approx(3 * 16 * 8 * 64 + 3 * 16 * 8)
    # forward: no k split; input gradient m x k over n-split 2; weight gradient n x k over m-split 2
    assert v.comm_words[k] == pytest.approx(16 * 64 * 2 * 1 / 2 + 8 * 64 * 2 * 1 / 2)
    r = 10.0
    assert v.cost(r)[k] == pytest.approx(v.compute_flop[k] + r * v.comm_words[k])


def test_edge_words_area_needed() -> None:
    src = np.array([[4, 1], [1, 1]])
    tgt = np.array([[4, 1], [1, 4], [2, 1]])
    w = edge_words((16, 16), src, tgt)
    # same layout: nothing; (4,1) -> (1,4): 4x16 block minus 4x4 overlap, twice
    assert w[0, 0] == 0.0
    assert w[0, 1] == pytest.approx(2 * (64 - 16))
    # target uses more devices (2 > 1): whole target block
    assert w[1, 2] == pytest.approx(2 * 128)
    # fewer target devices than source: block 8x16 minus overlap 4x16
    assert w[0, 2] == pytest.approx(2 * (128 - 64))


def test_conv_keeps_image_unsplit_and_shapes() -> None:
    g = GraphBuilder("c", 8, 32)
    out = g.conv(g.input((32, 3, 227, 227)), (96, 3, 11, 11), stride=4)
    v = g.build().vertices[0]
    assert out.shape == (32, 96, 55, 55)
    assert set(v.configs[:, 2].tolist()) == {1}
    assert set(v.configs[:, 3].tolist()) == {1}


def test_builtin_graphs_build() -> None:
    sizes = {}
    for name in graph_names():
        g = build_graph(name, 4, 16)
        sizes[name] = len(g.vertices)
        assert g.edges
        assert all(
            e.words.shape == (g.vertices[e.src].n_configs, g.vertices[e.dst].n_configs) for e in g.edges
        )
    assert sizes["alexnet"] == 14
    assert sizes["rnnlm"] == 4
    alex = build_graph("alexnet", 4, 16)
    assert alex.vertices[7].out_shapes[0] == (16, 256, 6, 6)  # pool5
    assert "digraph" in alex.to_dot()


def test_bad_graph_inputs() -> None:
    with pytest.raises(UnknownNameError, match="valid graph names: alexnet"):
        build_graph("vgg", 4, 16)
    with pytest.raises(InputError, match="procs=0"):
        build_graph("alexnet", 0, 16)
    with pytest.raises(InputError, match="model_size"):
        build_graph("transformer", 4, 16, model_size=0)
