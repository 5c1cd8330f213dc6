"""Per-layer parallelization strategies (PaSE): plan, express in seconds, and simulate.

Glue between :mod:`pipesim.planner.pase` (graphs, costs, the search) and
:mod:`pipesim.simulator.strategy` (bulk-synchronous execution on a cluster): it lowers a chosen
strategy to neutral steps (per-device compute seconds, re-distribution transfers, collectives
among device groups) and runs them.

Placement: a layer whose configuration is ``(c_1, ..., c_n)`` runs on devices ``0 .. prod(c) - 1``,
device ``i`` at the row-major coordinate of ``i`` in the ``c_1 x ... x c_n`` grid. A tensor block
a device needs but does not hold comes from a device holding it (among several replicas, replica
``t mod count`` for target ``t``, which spreads the load); the gradient goes back the same way.
"""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipesim.errors import Infeasible, check_count, invalid
from pipesim.planner.pase import (
    ELEMENT_BYTES,
    CostParams,
    PaseGraph,
    SearchResult,
    Vertex,
    build_graph,
    data_parallel_choice,
    search,
)
from pipesim.planner.pase.graph import TensorMap
from pipesim.profiles.hardware.catalog import DeviceSpec
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import ClusterLike, resolve_cluster
from pipesim.simulator.strategy import (
    CollectiveSpec,
    StrategySimResult,
    StrategyStep,
    TransferSpec,
    simulate_strategy,
)

__all__ = [
    "StrategyPlan",
    "bottleneck_bandwidth",
    "estimate_seconds",
    "lower_strategy",
    "pase_text",
    "plan_strategy",
    "simulate_plan",
    "slowest_device",
]

_DTYPE = "float32"
"""PaSE models fp32 training: every element moved is ``ELEMENT_BYTES`` (4) bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategyPlan:
    """A PaSE strategy and its baseline.

    Attributes:
        graph: the layer graph.
        params: the machine of the cost model.
        result: the search's optimal strategy.
        data_parallel: configuration indices of pure data parallelism.
        data_parallel_cost: its FLOP-equivalent cost.
        search_time_s: wall-clock seconds the search took.

    ``result.cost`` and ``data_parallel_cost`` are FLOP-equivalent (``r`` with PaSE's 8-byte
    words, as PaSE reports them); :meth:`seconds` gives a strategy's time with fp32 elements.
    """

    graph: PaseGraph
    params: CostParams
    result: SearchResult
    data_parallel: tuple[int, ...]
    data_parallel_cost: float
    search_time_s: float

    @property
    def speedup(self) -> float:
        """Data-parallel cost over the strategy's cost."""
        return self.data_parallel_cost / self.result.cost if self.result.cost > 0 else 1.0

    def seconds(self, choice: tuple[int, ...] | None = None) -> float:
        """A strategy's time on the cost model's machine (peak FLOP/s and bandwidth), moving
        ``params.element_bytes`` (fp32) per element sent; default: the found strategy."""
        compute, words = self.graph.totals(self.result.choice if choice is None else choice)
        return self.params.seconds(compute, words)

    def layers(self, choice: tuple[int, ...] | None = None) -> list[dict[str, Any]]:
        """Per layer: name, kind, iteration space and split factors (default: the strategy's)."""
        choice = self.result.choice if choice is None else choice
        out = []
        for v in self.graph.vertices:
            cfg = v.configs[choice[v.id]]
            out.append(
                {
                    "name": v.name,
                    "kind": v.kind,
                    "dims": dict(zip(v.dim_names, v.dom, strict=True)),
                    "split": {n: int(c) for n, c in zip(v.dim_names, cfg, strict=True)},
                    "devices": int(np.prod(cfg)),
                }
            )
        return out


def plan_strategy(
    graph: str,
    n_procs: int,
    batch: int,
    *,
    model_size: int | None = None,
    params: CostParams | None = None,
    warmup: int = 0,
    repeats: int = 1,
) -> StrategyPlan:
    """Find PaSE's strategy for a built-in graph and price pure data parallelism beside it.

    Args:
        graph: built-in graph name (``alexnet``, ``resnet101``, ``inception3``, ``rnnlm``,
            ``transformer``).
        n_procs: devices, >= 1.
        batch: global batch size.
        model_size: PaSE's ``-m``: checked, read by none of the graphs (as in PaSE).
        params: the cost model's machine (default: PaSE's 10 TFLOP/s, 16 GB/s, 8-byte words
            for ``r``, fp32 elements for seconds).
        warmup: untimed searches first (PaSE's ``--measure``: 2).
        repeats: timed searches; ``search_time_s`` is their mean (PaSE's ``--measure``: 5).

    Raises:
        UnknownNameError: unknown graph.
        InputError: bad ``n_procs``/``batch``/``model_size``/``warmup``/``repeats``, or a batch
            too small to split ``n_procs`` ways.
        Infeasible: the search's tables would be too large.
    """
    params = params or CostParams()
    pase_graph = build_graph(graph, n_procs, batch, model_size=model_size)
    dp = data_parallel_choice(pase_graph)
    r = params.flop_per_word
    check_count("warmup", warmup, minimum=0)
    check_count("repeats", repeats)
    for _ in range(warmup):
        search(pase_graph, r)
    start = time.perf_counter()
    for _ in range(repeats):
        result = search(pase_graph, r)
    elapsed = (time.perf_counter() - start) / repeats
    return StrategyPlan(
        graph=pase_graph,
        params=params,
        result=result,
        data_parallel=dp,
        data_parallel_cost=pase_graph.total_cost(dp, r),
        search_time_s=elapsed,
    )


_PASE_TYPES = {
    "add": "Elementwise",
    "batchnorm": "Norm",
    "concat": "Concat",
    "conv": "Conv",
    "einsum": "Einsum",
    "fc": "FC",
    "lstm": "LSTM",
    "mean": "ReduceMean",
    "norm": "Norm",
    "pool": "Pooling",
    "ravel": "Ravel",
    "softmax": "Softmax",
    "stack": "Stack",
    "unravel": "Unravel",
    "unstack": "Unstack",
    "xent": "SoftmaxCrossEntropy",
}
"""pipesim vertex kinds as PaSE's op class names (``nn_ops.py``)."""


def pase_text(plan: StrategyPlan) -> str:
    """What PaSE's ``scheduler.py`` prints for the plan (commit 32aa761), as one string.

    One ``Node: i; Type: T; Configs: n`` line per vertex, ``Processing time:`` (the mean search
    time as a ``datetime.timedelta``), the strategy (each vertex's split factors in PaSE's layout
    of a pandas Series) between ``=====`` lines, and ``Total cost: %0.2f``. PaSE's
    ``Einsum domain:`` lines are not printed.
    """
    lines = [
        f"Node: {v.id}; Type: {_PASE_TYPES.get(v.kind, v.kind)}; Configs: {len(v.configs)}"
        for v in plan.graph.vertices
    ]
    lines += ["", f"Processing time:  {datetime.timedelta(seconds=plan.search_time_s)}", ""]
    index = [str(v.id) for v in plan.graph.vertices]
    values = [str(tuple(int(c) for c in v.configs[plan.result.choice[v.id]])) for v in plan.graph.vertices]
    wi = max(map(len, index), default=0)
    wv = max(map(len, values), default=0)
    lines += ["Strategy with minimum cost:", "====="]
    lines += [f"{i:<{wi}}    {val:>{wv}}" for i, val in zip(index, values, strict=True)]
    lines += ["=====", f"Total cost: {plan.result.cost:0.2f}"]
    return "\n".join(lines)


def estimate_seconds(
    graph: PaseGraph,
    choice: tuple[int, ...],
    device: DeviceSpec,
    bandwidth_bytes_per_s: float,
    element_bytes: int = ELEMENT_BYTES,
) -> float:
    """PaSE's cost of a strategy in seconds on a real device and link.

    Compute at the device's achievable fp32 FLOP/s (peak x ``compute_efficiency``); every element
    PaSE counts as sent moves ``element_bytes`` bytes (default 4, fp32; not PaSE's 8-byte
    cost-model word) at ``bandwidth_bytes_per_s``.
    """
    flop_per_s = device.achievable_flop_per_s(_DTYPE)
    compute, words = graph.totals(choice)
    return compute / flop_per_s + words * element_bytes / bandwidth_bytes_per_s


def slowest_device(cluster: Cluster, n_devices: int) -> DeviceSpec:
    """The GPU model with the least achievable fp32 FLOP/s among the first ``n_devices``
    devices: a synchronous strategy's layers wait for it (the cluster's only model when it is
    homogeneous).

    Raises:
        InputError: ``n_devices`` exceeds the cluster.
    """
    specs = [cluster.device_spec(d) for d in range(n_devices)]
    return min(specs, key=lambda spec: spec.achievable_flop_per_s(_DTYPE), default=cluster.device)


def bottleneck_bandwidth(cluster: Cluster, n_devices: int) -> float:
    """Smallest route bandwidth between any two of the first ``n_devices`` devices, bytes/s."""
    best = math.inf
    for a in range(n_devices):
        for b in range(n_devices):
            if a != b:
                best = min(best, cluster.route_bandwidth_bytes_per_s(a, b))
    return best if math.isfinite(best) else cluster.nic.effective_bandwidth_bytes_per_s


# --------------------------------------------------------------------------------- lowering
def _tile_index(coords: np.ndarray, cfg: np.ndarray, tmap: TensorMap) -> tuple[np.ndarray, np.ndarray]:
    """Per device (rows of ``coords``) and tensor axis: block index and block count."""
    idx = np.zeros((len(coords), len(tmap)), dtype=np.int64)
    cnt = np.ones(len(tmap), dtype=np.int64)
    for a, dims in enumerate(tmap):
        for d in dims:
            idx[:, a] = idx[:, a] * cfg[d] + coords[:, d]
            cnt[a] *= cfg[d]
    return idx, cnt


def _boxes(shape: tuple[int, ...], idx: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    size = np.asarray(shape, dtype=np.int64)
    return idx * size // cnt, (idx + 1) * size // cnt


def _grid(v: Vertex, k: int) -> tuple[np.ndarray, np.ndarray]:
    cfg = v.configs[k]
    q = int(np.prod(cfg))
    coords = (
        np.stack(np.unravel_index(np.arange(q), tuple(int(c) for c in cfg)), axis=1)
        if q
        else np.zeros((0, 0))
    )
    return cfg, coords


def _groups(coords: np.ndarray, group_dims: tuple[int, ...]) -> list[tuple[int, ...]]:
    others = [d for d in range(coords.shape[1]) if d not in set(group_dims)]
    buckets: dict[tuple[int, ...], list[int]] = {}
    for dev, row in enumerate(coords):
        buckets.setdefault(tuple(int(row[d]) for d in others), []).append(dev)
    return [tuple(m) for m in buckets.values()]


def lower_strategy(
    graph: PaseGraph,
    choice: tuple[int, ...],
    device: DeviceSpec | Sequence[DeviceSpec],
    element_bytes: int = ELEMENT_BYTES,
) -> list[StrategyStep]:
    """Lower a strategy to simulator steps: one forward step per layer, one backward step per
    layer with incoming re-distributions (their gradients), in reverse order.

    The forward step of a layer holds its input re-distributions, all its compute (PaSE does not
    split forward from backward compute) at each device's achievable fp32 FLOP/s, and its
    all-reduces and exchanges (each all-reduce group: the devices that differ only in the
    coordinates of the split dimensions being reduced). Every element moved is
    ``element_bytes`` bytes (default 4, fp32).

    Args:
        device: the GPU model of every device, or one per device id ``0 .. n_procs - 1`` (a
            heterogeneous cluster: each device computes at its own rate).

    Raises:
        InputError: fewer device models than the graph's ``n_procs``.
    """
    specs = [device] * graph.n_procs if isinstance(device, DeviceSpec) else list(device)
    if len(specs) < graph.n_procs:
        rule = f"must name a device model for each of the {graph.n_procs} devices"
        raise invalid("devices", len(specs), rule)
    flop_per_s = [spec.achievable_flop_per_s(_DTYPE) for spec in specs]
    grids = [_grid(v, choice[v.id]) for v in graph.vertices]
    fwd: dict[int, list[TransferSpec]] = {v.id: [] for v in graph.vertices}
    bwd: dict[int, list[TransferSpec]] = {v.id: [] for v in graph.vertices}
    for e in graph.edges:
        src, dst = graph.vertices[e.src], graph.vertices[e.dst]
        s_cfg, s_coords = grids[e.src]
        d_cfg, d_coords = grids[e.dst]
        s_idx, s_cnt = _tile_index(s_coords, s_cfg, src.out_maps[e.src_out])
        d_idx, d_cnt = _tile_index(d_coords, d_cfg, dst.in_maps[e.dst_in])
        s_lo, s_hi = _boxes(e.shape, s_idx, s_cnt)
        d_lo, d_hi = _boxes(e.shape, d_idx, d_cnt)
        holders: dict[tuple[int, ...], list[int]] = {}
        for dev, row in enumerate(s_idx):
            holders.setdefault(tuple(int(x) for x in row), []).append(dev)
        tiles = list(holders)
        t_lo = np.array([s_lo[holders[t][0]] for t in tiles])
        t_hi = np.array([s_hi[holders[t][0]] for t in tiles])
        for t in range(len(d_coords)):
            extent = np.clip(np.minimum(t_hi, d_hi[t]) - np.maximum(t_lo, d_lo[t]), 0, None)
            volume = np.prod(extent, axis=1)
            for j in np.flatnonzero(volume > 0):
                owners = holders[tiles[j]]
                if t in owners:
                    continue
                owner = owners[t % len(owners)]
                nbytes = float(volume[j]) * element_bytes
                fwd[dst.id].append(TransferSpec(src=owner, dst=t, nbytes=nbytes))
                bwd[dst.id].append(TransferSpec(src=t, dst=owner, nbytes=nbytes))
    steps = []
    for v in graph.vertices:
        k = choice[v.id]
        coords = grids[v.id][1]
        flop = float(v.compute_flop[k])
        colls = []
        for term in v.comm:
            payload = float(term.payload_words[k]) * element_bytes
            if payload <= 0 or float(term.words[k]) <= 0:
                continue
            for members in _groups(coords, term.group_dims):
                if len(members) > 1:
                    colls.append(CollectiveSpec(kind=term.kind, members=members, nbytes=payload))
        steps.append(
            StrategyStep(
                name=v.name,
                compute_s={d: flop / flop_per_s[d] for d in range(len(coords))},
                transfers=tuple(fwd[v.id]),
                collectives=tuple(colls),
            )
        )
    for v in reversed(graph.vertices):
        if bwd[v.id]:
            steps.append(StrategyStep(name=f"{v.name}.grad", transfers=tuple(bwd[v.id])))
    return steps


def simulate_plan(
    plan: StrategyPlan,
    cluster: ClusterLike,
    *,
    overrides: Mapping[str, object] | None = None,
    data_parallel: bool = False,
) -> StrategySimResult:
    """Simulate the plan's strategy (or its data-parallel baseline) on ``cluster``.

    Args:
        plan: the strategy.
        cluster: a :class:`Cluster`, preset name or cluster TOML file; compute runs at its
            device's achievable fp32 FLOP/s (PaSE's graphs carry FLOP counts, not measured
            times, so there is no profile to re-target).
        overrides: what-if changes to the cluster (see
            :func:`pipesim.profiles.inputs.resolve_cluster`).
        data_parallel: simulate the data-parallel baseline instead of the strategy.

    Raises:
        Infeasible: the cluster has fewer devices than the plan's ``n_procs``.
        InputError: a bad cluster or override.
    """
    cluster = resolve_cluster(cluster, overrides)
    if cluster.num_devices < plan.graph.n_procs:
        raise Infeasible(
            f"cluster {cluster.name!r} has {cluster.num_devices} devices; the strategy needs "
            f"p={plan.graph.n_procs}"
        )
    choice = plan.data_parallel if data_parallel else plan.result.choice
    devices = [cluster.device_spec(d) for d in range(plan.graph.n_procs)]
    steps = lower_strategy(plan.graph, choice, devices, plan.params.element_bytes)
    return simulate_strategy(steps, cluster)
