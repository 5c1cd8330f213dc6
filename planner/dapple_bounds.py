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
    fb = np.array([[tables[r].fwd[p] + tables[r].bwd[p] for p in pos] for r in counts])  # (R, P)
    kept = np.array([[tables[r].stashed[p] + tables[r].held[p] for p in pos] for r in counts])
    static = np.array([params[p] for p in pos], dtype=float) * multiplier
    acts = [np.asarray(tables[r].acts, dtype=float) for r in counts]
    best = np.full((npos, devices + 1), math.inf)
    best[0, :] = 0.0
    for k in range(1, npos):
        # best[k', d - r] for every earlier start k' and replica count r (inf where d < r)
        before = np.full((k, nrep, devices + 1), math.inf)
        for ri, r in enumerate(counts):
            if r <= devices:
                before[:, ri, r:] = best[:k, : devices + 1 - r]
        stage = fb[:, k][None, :] - fb[:, :k].T  # (k, R): the stage positions[k'] .. positions[k] - 1
        mem = (static[k] - static[:k])[:, None] + (kept[:, k][None, :] - kept[:, :k].T)
        hi = pos[k]
        for ri in range(nrep):
            largest = np.maximum.accumulate(acts[ri][:hi][::-1])[::-1]  # largest[l] = max(acts[l:hi])
            mem[:, ri] += largest[pos[:k]]
        stage = np.where(mem * FLOOR_MARGIN > memory_limit_bytes, math.inf, stage)
        best[k] = np.maximum(before, stage[:, :, None]).min(axis=(0, 1))
    return tuple(tuple(float(v) * FLOOR_MARGIN for v in best[:, d]) for d in range(devices + 1))

