"""PaSE's dynamic program: exact against brute force, and the chain DP on chains."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import Infeasible, InputError
from pipesim.planner.pase import (
    GraphBuilder,
    PaseGraph,
    brute_force,
    build_graph,
    chain_search,
    data_parallel_choice,
    elimination_order,
    search,
)


def _random_graph(ops: list[tuple[int, int, int]]) -> PaseGraph:
    """A small DAG of (8, 8) tensors: each op reads one or two earlier tensors."""
    g = GraphBuilder("random", 4, 8, cutoff=2)
    tensors = [g.fc(g.input((8, 8)), 8)]
    for kind, a, b in ops:
        x = tensors[a % len(tensors)]
        y = tensors[b % len(tensors)]
        if kind == 0:
            t = g.fc(x, 8, pw_op_cnt=1)
        elif kind == 1:
            t = g.elementwise(x, y)
        elif kind == 2:
            t = g.softmax(x, 1)
        else:
            t = g.norm(x)
        tensors.append(t)
    return g.build()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 9)), min_size=1, max_size=3),
    st.sampled_from([0.01, 1.0, 50.0, 2500.0]),
)
def test_dp_equals_brute_force(ops: list[tuple[int, int, int]], r: float) -> None:
    graph = _random_graph(ops)
    dp = search(graph, r)
    ref = brute_force(graph, r)
    assert dp.cost == pytest.approx(ref.cost, rel=1e-9)
    assert graph.total_cost(dp.choice, r) == pytest.approx(dp.cost, rel=1e-9)


def _chain(n: int) -> PaseGraph:
    g = GraphBuilder("chain", 8, 32)
    x = g.input((32, 64))
    for i in range(n):
        x = g.fc(x, 64 if i % 2 else 32, pw_op_cnt=1)
    return g.build()


@pytest.mark.parametrize("r", [1.0, 100.0, 2500.0, 1e5])
def test_chain_dp_matches_and_any_order_same_cost(r: float) -> None:
    graph = _chain(6)
    dp = search(graph, r)
    chain = chain_search(graph, r)
    assert dp.cost == pytest.approx(chain.cost, rel=1e-12)
    assert graph.total_cost(chain.choice, r) == pytest.approx(chain.cost, rel=1e-12)
    backwards = search(graph, r, order=list(range(len(graph.vertices)))[::-1])
    assert backwards.cost == pytest.approx(dp.cost, rel=1e-12)


def test_chain_search_rejects_branches() -> None:
    with pytest.raises(InputError, match="not a chain"):
        chain_search(build_graph("resnet101", 4, 16), 1.0)


def test_elimination_order_min_dependents_first() -> None:
    graph = _chain(4)
    order = elimination_order(graph)
    assert order[0] == 0  # an end of the chain: one neighbour, lowest id
    assert sorted(order) == [0, 1, 2, 3]


def test_search_never_worse_than_data_parallel() -> None:
    for name in ("alexnet", "rnnlm", "resnet101"):
        graph = build_graph(name, 8, 64)
        r = 2500.0
        best = search(graph, r)
        assert best.cost <= graph.total_cost(data_parallel_choice(graph), r) * (1 + 1e-12)


def test_alexnet_picks_hybrid() -> None:
    # PaSE finds data parallelism for AlexNet's convolutions and model parallelism for its FC layers
    graph = build_graph("alexnet", 8, 128)
    best = search(graph, 2500.0)
    names = {v.name: v.configs[best.choice[v.id]].tolist() for v in graph.vertices}
    assert names["conv1"][0] == 8
    assert names["fc6"][0] < 8


def test_table_limit_is_infeasible() -> None:
    with pytest.raises(Infeasible, match="table"):
        search(build_graph("alexnet", 8, 128), 2500.0, max_table=10)


def test_data_parallel_needs_big_enough_batch() -> None:
    with pytest.raises(InputError, match="batch=64: must be a multiple of p=32"):
        data_parallel_choice(build_graph("alexnet", 32, 64))
