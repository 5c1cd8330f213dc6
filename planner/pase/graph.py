"""The PaSE graph: layers (vertices) with their configurations and costs, and tensor edges.

A :class:`Vertex` holds, for every configuration of its iteration space, the FLOP per device and
the communication terms (all-reduces and halo exchanges) with the words each device sends. An
:class:`Edge` holds the re-distribution words for every pair of neighbouring configurations.
Both are independent of the machine: :meth:`Vertex.cost` and :meth:`Edge.cost` join them with
the FLOP-to-word ratio ``r`` of :class:`~pipesim.planner.pase.cost_model.CostParams`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipesim.errors import invalid

__all__ = ["CommTerm", "Edge", "PaseGraph", "TensorMap", "Vertex", "tensor_configs"]

TensorMap = tuple[tuple[int, ...], ...]
"""For each axis of a tensor, the iteration-space dimensions whose splits split that axis (in
row-major order; empty: the axis is not split)."""


def tensor_configs(configs: np.ndarray, tmap: TensorMap) -> np.ndarray:
    """The split factors of a tensor under every configuration of its layer, ``(n, rank)``."""
    cols = [np.prod(configs[:, list(dims)], axis=1) if dims else np.ones(len(configs)) for dims in tmap]
    return np.stack(cols, axis=1).astype(np.int64) if cols else np.ones((len(configs), 0), dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class CommTerm:
    """One communication a layer does, for every configuration.

    Attributes:
        kind: ``"allreduce"`` (ring all-reduce among the group) or ``"exchange"`` (each member
            sends to its ring neighbour: halos, cell re-shapes).
        group_dims: iteration-space dimensions whose splits form one group (devices that differ
            only in these coordinates communicate).
        words: words each device sends, per configuration (what PaSE charges).
        payload_words: per configuration, the size each member all-reduces (``allreduce``) or
            sends (``exchange``), words; 0 where there is no communication.
    """

    kind: str
    group_dims: tuple[int, ...]
    words: np.ndarray
    payload_words: np.ndarray


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Vertex:
    """One layer (operator) of a PaSE graph.

    Attributes:
        id: position in :attr:`PaseGraph.vertices` (creation order, as PaSE numbers its nodes).
        name: display name, unique in the graph.
        kind: operator kind (``conv``, ``fc``, ``einsum``, ``pool``, ...).
        dom: iteration-space sizes.
        dim_names: one short name per iteration-space dimension.
        batch_dim: the dimension data parallelism splits, or ``None``.
        configs: ``(n_configs, len(dom))`` split factors.
        compute_flop: FLOP per device, per configuration.
        comm: communication terms.
        in_maps: per input tensor, how the configuration splits it.
        out_maps: per output tensor, how the configuration splits it.
        out_shapes: the output tensors' shapes.
    """

    id: int
    name: str
    kind: str
    dom: tuple[int, ...]
    dim_names: tuple[str, ...]
    batch_dim: int | None
    configs: np.ndarray
    compute_flop: np.ndarray
    comm: tuple[CommTerm, ...]
    in_maps: tuple[TensorMap, ...]
    out_maps: tuple[TensorMap, ...]
    out_shapes: tuple[tuple[int, ...], ...]
    comm_words: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        n = len(self.configs)
        if n == 0 or self.configs.shape[1] != len(self.dom) or len(self.dim_names) != len(self.dom):
            raise invalid(f"{self.name}.configs", self.configs.shape, f"must be (n >= 1, {len(self.dom)})")
        total = np.zeros(n)
        for term in self.comm:
            total = total + term.words
        object.__setattr__(self, "comm_words", total)

    @property
    def n_configs(self) -> int:
        """Number of configurations."""
        return len(self.configs)

    def cost(self, flop_per_word: float) -> np.ndarray:
        """FLOP-equivalent cost per configuration: compute + ``r`` x words sent."""
        return self.compute_flop + flop_per_word * self.comm_words

    def config_index(self, config: Sequence[int]) -> int:
        """Row of ``config`` in :attr:`configs`.

        Raises:
            InputError: not a configuration of this vertex.
        """
        hits = np.flatnonzero((self.configs == np.asarray(config)).all(axis=1))
        if len(hits) == 0:
            raise invalid(f"{self.name}.config", tuple(config), "is not an allowed configuration")
        return int(hits[0])


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Edge:
    """A tensor from one layer to another, with its re-distribution words.

    Attributes:
        src, dst: vertex ids.
        src_out: which output of ``src``.
        dst_in: which input of ``dst``.
        shape: the tensor's shape.
        words: ``(src.n_configs, dst.n_configs)`` words per device (forward and backward).
    """

    src: int
    dst: int
    src_out: int
    dst_in: int
    shape: tuple[int, ...]
    words: np.ndarray

    def cost(self, flop_per_word: float) -> np.ndarray:
        """FLOP-equivalent cost matrix: ``r`` x words."""
        return flop_per_word * self.words


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PaseGraph:
    """A layer graph built for ``n_procs`` devices.

    Attributes:
        name: the graph's name.
        n_procs: devices the configurations may use.
        batch: the global batch size it was built for.
        vertices: layers in creation order.
        edges: one per ordered pair of connected layers (when one layer feeds another twice,
            the last tensor added stands for the pair, as in PaSE's ``networkx.DiGraph``).
    """

    name: str
    n_procs: int
    batch: int
    vertices: tuple[Vertex, ...]
    edges: tuple[Edge, ...]

    def neighbors(self) -> list[set[int]]:
        """Undirected neighbour sets, indexed by vertex id."""
        out: list[set[int]] = [set() for _ in self.vertices]
        for e in self.edges:
            out[e.src].add(e.dst)
            out[e.dst].add(e.src)
        return out

    def total_cost(self, choice: Sequence[int], flop_per_word: float) -> float:
        """FLOP-equivalent cost of a strategy given as one configuration index per vertex."""
        total = 0.0
        for v in self.vertices:
            total += float(v.cost(flop_per_word)[choice[v.id]])
        for e in self.edges:
            total += float(flop_per_word * e.words[choice[e.src], choice[e.dst]])
        return total

    def totals(self, choice: Sequence[int]) -> tuple[float, float]:
        """A strategy's compute FLOP and words sent, per device, summed over layers and edges.

        ``total_cost(choice, r) == compute + r x words`` (up to rounding). Words are tensor
        elements; the bytes they take depend on the caller (see ``CostParams``).
        """
        compute = sum(float(v.compute_flop[choice[v.id]]) for v in self.vertices)
        words = sum(float(v.comm_words[choice[v.id]]) for v in self.vertices)
        words += sum(float(e.words[choice[e.src], choice[e.dst]]) for e in self.edges)
        return compute, words

    def to_dot(self) -> str:
        """The graph in Graphviz dot form (vertex label: name, kind, iteration space)."""
        lines = [f'digraph "{self.name}" {{', "  node [shape=box];"]
        for v in self.vertices:
            dims = ",".join(f"{n}={d}" for n, d in zip(v.dim_names, v.dom, strict=True))
            lines.append(f'  {v.id} [label="{v.name}\\n{v.kind} ({dims})\\n{v.n_configs} configs"];')
        for e in self.edges:
            shape = "x".join(str(s) for s in e.shape)
            lines.append(f'  {e.src} -> {e.dst} [label="{shape}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"
