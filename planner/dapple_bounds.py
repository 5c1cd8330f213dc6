"""Lower bounds the DAPPLE search prunes with (see :mod:`pipesim.planner.dapple_dp`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from pipesim.planner.cost_tables import ShareTable

__all__ = ["FLOOR_MARGIN", "bottleneck_floors"]

FLOOR_MARGIN = 1.0 - 1e-7
"""Scale of a floor computed from prefix sums in another order than the cost it bounds: the
rounding of either is many orders of magnitude below this margin."""


def bottleneck_floors(
    tables: Mapping[int, ShareTable],
    positions: Sequence[int],
    devices: int,
    params: Sequence[float],
    multiplier: float,
    memory_limit_bytes: float,
) -> tuple[tuple[float, ...], ...]:
    """The least slowest stage of a prefix of layers, per device count, seconds.

    Index ``[d][k]`` (``d = 0..devices``): the least, over the ways to cut layers
    ``[0, positions[k])`` into stages starting at ``positions`` with replica counts of ``tables``
    that sum to at most ``d``, of the slowest stage's forward-plus-backward time (each stage at
    its share's :class:`ShareTable`), scaled down by :data:`FLOOR_MARGIN`; ``inf`` where no
    cut fits. A stage counts only where one replica fits in ``memory_limit_bytes`` with one
    micro-batch in flight: ``params`` (prefix sums of the layers' parameter bytes) times
    ``multiplier`` (weights, gradients, optimizer state), plus the kept bytes of one micro-batch,
    plus the largest working set of its layers, the least that the DAPPLE search charges a stage
    with at least one micro-batch in flight.

    A min-max dynamic program over (stage start, devices), vectorised over the replica counts and
    device counts: ``O(len(positions)^2 x len(tables) x devices)``.
    """
    counts = sorted(tables)
    npos = len(positions)
    pos = list(positions)
    nrep = len(counts)
    inf = math.inf
    fb = np.array([[tables[r].fwd[p] + tables[r].bwd[p] for p in pos] for r in counts])  # (R, P)
    kept = np.array([[tables[r].stashed[p] + tables[r].held[p] for p in pos] for r in counts])
    static = np.array([params[p] for p in pos], dtype=float) * multiplier
    # the largest working set of each block between two stage starts, per replica count
    blocks = np.zeros((nrep, max(npos - 1, 0)))
    for ri, r in enumerate(counts):
        acts = tables[r].acts
        for j in range(npos - 1):
            blocks[ri, j] = max(acts[pos[j] : pos[j + 1]], default=0.0)
    # stage[k', k, ri]: the stage of layers positions[k'] .. positions[k] - 1 on counts[ri]
    # replicas, its forward-plus-backward time, or inf where one replica does not fit
    stage = np.full((npos, npos, nrep), inf)
    for k0 in range(npos - 1):
        largest = np.maximum.accumulate(blocks[:, k0:], axis=1).T  # (npos - 1 - k0, R)
        weights = (static[k0 + 1 :] - static[k0])[:, None]
        mem = weights + (kept[:, k0 + 1 :] - kept[:, k0 : k0 + 1]).T + largest
        time_s = (fb[:, k0 + 1 :] - fb[:, k0 : k0 + 1]).T
        stage[k0, k0 + 1 :] = np.where(mem * FLOOR_MARGIN > memory_limit_bytes, inf, time_s)
    # before[k', ri, d] = best[k', d - counts[ri]] (inf where d < counts[ri]): one gather
    shift = np.arange(devices + 1)[None, :] - np.array(counts)[:, None] + 1  # (R, D + 1)
    shift[shift < 0] = 0
    best = np.full((npos, devices + 2), inf)  # column 0: inf, column d + 1: d devices
    best[0, 1:] = 0.0
    for k in range(1, npos):
        before = best[:k][:, shift]  # (k, R, D + 1)
        best[k, 1:] = np.maximum(before, stage[:k, k, :, None]).min(axis=(0, 1))
    scaled = best[:, 1:].T * FLOOR_MARGIN
    return tuple(tuple(row) for row in scaled.tolist())
