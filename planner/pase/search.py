"""PaSE's search: an exact dynamic program over a vertex ordering, plus reference searches.

The dynamic program (Elango, IPDPS 2021, Sec. IV, Algorithm 1; ``scheduler.py``
``Processor.SortNodes``/``ProcessVertex``) visits the vertices in an order that greedily keeps
the *dependent set* small: at each step the unvisited vertex with the fewest unvisited vertices
it depends on (its neighbours, plus those of already-visited neighbours it inherits; ties: the
lowest vertex id) goes next. Visiting ``v`` takes the best configuration of ``v`` for every
configuration of its dependent set, given the costs of ``v``, its edges to unvisited
neighbours, and the tables of its visited neighbours. This is variable elimination on the cost
function ``sum_v t_l(v) + sum_(u,v) r t_x(u, v)``, so the result is optimal for the cost model.

Here each table is a dense numpy array over its dependent set's configurations (one axis per
vertex), so one visit is a broadcast sum and a ``min``/``argmin`` along one axis.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.errors import Infeasible, invalid
from pipesim.planner.pase.graph import PaseGraph

__all__ = [
    "DEFAULT_MAX_TABLE",
    "SearchResult",
    "brute_force",
    "chain_search",
    "data_parallel_choice",
    "elimination_order",
    "search",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_TABLE = 200_000_000
"""Largest table (entries) one visit may build before the search gives up (1.6 GB of float64)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """The best strategy found.

    Attributes:
        choice: per vertex (by id), the index of its chosen configuration.
        cost: the strategy's FLOP-equivalent cost.
        order: the vertex visiting order the search used (empty for the reference searches).
        max_table: entries of the largest table built.
    """

    choice: tuple[int, ...]
    cost: float
    order: tuple[int, ...] = ()
    max_table: int = 0


def elimination_order(graph: PaseGraph) -> list[int]:
    """PaSE's vertex order: repeatedly the vertex with the smallest dependent set (ties: lowest id).

    Visiting a vertex merges its dependent set into each of its dependents' sets (minus the two
    vertices), exactly as ``Processor.SortNodes`` does.
    """
    deps = graph.neighbors()
    n = len(deps)
    count = np.array([len(d) for d in deps], dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    order: list[int] = []
    for _ in range(n):
        masked = np.where(done, np.iinfo(np.int64).max, count)
        v = int(np.argmin(masked))
        order.append(v)
        done[v] = True
        for u in deps[v]:
            if done[u]:
                continue
            merged = (deps[u] | deps[v]) - {u, v}
            merged = {w for w in merged if not done[w]}
            deps[u] = merged
            count[u] = len(merged)
    return order


_Factor = tuple[tuple[int, ...], np.ndarray]


def search(
    graph: PaseGraph,
    flop_per_word: float,
    *,
    order: Sequence[int] | None = None,
    max_table: int = DEFAULT_MAX_TABLE,
) -> SearchResult:
    """The optimal strategy of ``graph`` for PaSE's cost model (the dynamic program).

    Args:
        graph: the layer graph.
        flop_per_word: ``r``, FLOP-equivalent cost of one word sent.
        order: vertex order (default: :func:`elimination_order`); any order gives the same cost.
        max_table: the most entries one table may have.

    Returns:
        The optimal strategy, its cost and the order used.

    Raises:
        InputError: ``order`` is not a permutation of the vertices.
        Infeasible: a table would exceed ``max_table`` entries.
    """
    n = len(graph.vertices)
    order = list(order) if order is not None else elimination_order(graph)
    if sorted(order) != list(range(n)):
        raise invalid("order", order, f"must be a permutation of 0..{n - 1}")
    sizes = [v.n_configs for v in graph.vertices]
    position = {v: i for i, v in enumerate(order)}
    # Every factor's scope is kept sorted by visiting position, so scopes merge without sorting.
    by_var: list[list[int]] = [[] for _ in range(n)]
    factors: list[_Factor | None] = []

    def add(scope: tuple[int, ...], table: np.ndarray) -> None:
        perm = sorted(range(len(scope)), key=lambda i: position[scope[i]])
        scope = tuple(scope[i] for i in perm)
        table = np.transpose(table, perm) if perm != list(range(len(perm))) else table
        fid = len(factors)
        factors.append((scope, table))
        by_var[scope[0]].append(fid)

    for vertex in graph.vertices:
        add((vertex.id,), vertex.cost(flop_per_word))
    for edge in graph.edges:
        add((edge.src, edge.dst), edge.cost(flop_per_word))

    constant = 0.0
    biggest = 0
    record: list[tuple[int, tuple[int, ...], np.ndarray]] = []
    for v in order:
        mine = [factors[f] for f in by_var[v]]
        scope_set: set[int] = set()
        for f in mine:
            assert f is not None
            scope_set.update(f[0])
        rest = sorted(scope_set - {v}, key=position.__getitem__)
        axes = [v, *rest]
        shape = [sizes[u] for u in axes]
        entries = math.prod(shape)
        if entries > max_table:
            raise Infeasible(
                f"PaSE search of {graph.name!r}: visiting {graph.vertices[v].name!r} needs a table of "
                f"{entries:,} entries (> {max_table:,}); use fewer devices or a smaller graph"
            )
        biggest = max(biggest, entries)
        index = {u: i for i, u in enumerate(axes)}
        joint = np.zeros(shape)
        for f in mine:
            assert f is not None
            fscope, ftable = f
            view = [1] * len(axes)
            for u in fscope:
                view[index[u]] = sizes[u]
            joint += ftable.reshape(view)  # scopes are sorted by position, as ``axes`` is
        best = joint.argmin(axis=0)
        msg = np.take_along_axis(joint, best[None, ...], axis=0)[0]
        record.append((v, tuple(rest), best))
        if rest:
            add(tuple(rest), msg)
        else:
            constant += float(msg)
    choice = [0] * n
    for v, rest, best in reversed(record):
        choice[v] = int(best[tuple(choice[u] for u in rest)]) if rest else int(best)
    logger.debug("PaSE search %s: %d vertices, largest table %d", graph.name, n, biggest)
    return SearchResult(choice=tuple(choice), cost=constant, order=tuple(order), max_table=biggest)


def brute_force(graph: PaseGraph, flop_per_word: float, *, limit: int = 2_000_000) -> SearchResult:
    """The optimal strategy by trying every combination (reference for small graphs).

    Raises:
        Infeasible: more than ``limit`` combinations.
    """
    total = math.prod(v.n_configs for v in graph.vertices)
    if total > limit:
        raise Infeasible(f"brute force over {total:,} strategies exceeds the limit of {limit:,}")
    best: tuple[float, tuple[int, ...]] | None = None
    for combo in itertools.product(*(range(v.n_configs) for v in graph.vertices)):
        cost = graph.total_cost(combo, flop_per_word)
        if best is None or cost < best[0]:
            best = (cost, combo)
    assert best is not None
    return SearchResult(choice=best[1], cost=best[0])


def chain_search(graph: PaseGraph, flop_per_word: float) -> SearchResult:
    """The optimal strategy of a chain ``0 -> 1 -> ... -> n-1`` by the textbook chain DP.

    Raises:
        InputError: the graph is not that chain.
    """
    n = len(graph.vertices)
    links = {(e.src, e.dst): e for e in graph.edges}
    if len(graph.edges) != n - 1 or any((i, i + 1) not in links for i in range(n - 1)):
        raise invalid("graph", graph.name, "is not a chain 0 -> 1 -> ... -> n-1")
    best = graph.vertices[0].cost(flop_per_word)
    back: list[np.ndarray] = []
    for i in range(1, n):
        total = best[:, None] + links[(i - 1, i)].cost(flop_per_word)
        back.append(total.argmin(axis=0))
        best = total.min(axis=0) + graph.vertices[i].cost(flop_per_word)
    choice = [int(best.argmin())]
    for arg in reversed(back):
        choice.append(int(arg[choice[-1]]))
    return SearchResult(choice=tuple(reversed(choice)), cost=float(best.min()))


def data_parallel_choice(graph: PaseGraph) -> tuple[int, ...]:
    """Pure data parallelism: every layer splits its batch dimension ``n_procs`` ways.

    Raises:
        InputError: some layer cannot split its batch ``n_procs`` ways (the batch is not a
            multiple of ``n_procs`` with at least ``cutoff`` samples per device).
    """
    p = graph.n_procs
    choice = []
    for v in graph.vertices:
        target = np.ones(len(v.dom), dtype=np.int64)
        if v.batch_dim is not None:
            target[v.batch_dim] = p
        hits = np.flatnonzero((v.configs == target).all(axis=1))
        if len(hits) == 0:
            raise invalid(
                "batch",
                graph.batch,
                f"must be a multiple of p={p} with at least 4 samples per device so that layer "
                f"{v.name!r} can be split {p} ways (data parallelism)",
            )
        choice.append(int(hits[0]))
    return tuple(choice)
