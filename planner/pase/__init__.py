"""PaSE: per-layer parallelization strategies found by a dynamic program (Elango, IPDPS 2021).

Every layer's iteration space is split across ``p`` devices by a configuration of split factors;
the search picks one configuration per layer minimising compute, intra-layer all-reduces and the
re-distribution of tensors between layers whose configurations differ. See docs/pase.md.
"""

from pipesim.planner.pase.configs import DEFAULT_CUTOFF, allowed_factors, split_configs
from pipesim.planner.pase.cost_model import ELEMENT_BYTES, PASE_WORD_BYTES, CostParams
from pipesim.planner.pase.graph import CommTerm, Edge, PaseGraph, Vertex
from pipesim.planner.pase.graphs import build_graph, graph_names
from pipesim.planner.pase.ops import GraphBuilder, Tensor
from pipesim.planner.pase.search import (
    SearchResult,
    brute_force,
    chain_search,
    data_parallel_choice,
    elimination_order,
    search,
)

__all__ = [
    "DEFAULT_CUTOFF",
    "ELEMENT_BYTES",
    "PASE_WORD_BYTES",
    "CommTerm",
    "CostParams",
    "Edge",
    "GraphBuilder",
    "PaseGraph",
    "SearchResult",
    "Tensor",
    "Vertex",
    "allowed_factors",
    "brute_force",
    "build_graph",
    "chain_search",
    "data_parallel_choice",
    "elimination_order",
    "graph_names",
    "search",
    "split_configs",
]
