"""DynaPipe's micro-batch construction: an exact dynamic program over length-sorted samples.

Samples are sorted by length; a micro-batch is a contiguous run of the sorted samples, padded to
its longest (last) one. For micro-batches with slowest-stage times ``t_1 .. t_m`` (forward +
backward, :meth:`PipelineCosts.time_s`), the pipeline's iteration time is estimated as

    T = sum_k t_k + w * max_k t_k,      w = p - 1 for p stages,

the estimate DynaPipe's micro-batch construction minimises (Jiang et al., "DynaPipe: Optimizing
Multi-task Training through Dynamic Pipelines", EuroSys 2024): each micro-batch passes the
bottleneck stage once, and the fill and drain of the pipeline cost about ``p - 1`` times the
largest one. Every micro-batch's activation memory (:meth:`PipelineCosts.memory_bytes`) must fit
the memory limit.

The program is exact for that objective over all partitions of the sorted order into contiguous
runs. For a bound ``B`` on the largest micro-batch time, ``S(B)`` = the least sum of times with
every ``t_k <= B`` is a textbook O(n K) dynamic program (``K`` the most samples a micro-batch can
hold); the optimum is ``min_B S(B) + w B`` over the values ``B`` a micro-batch time can take.
``S`` does not increase with ``B``, so a block of candidate bounds between two evaluated ones,
``x_a < B < x_b``, cannot beat ``S(x_b) + w * (smallest candidate above x_a)``; blocks whose bound
is no better than the best found are dropped, the rest are probed (up to ``max_probes`` bounds at
once, evaluated together in one vectorised pass) until none are left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.errors import invalid
from pipesim.planner.dynamic.stage_costs import PipelineCosts

__all__ = ["Partition", "partition_objective", "partition_sorted"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Partition:
    """A split of the sorted samples into contiguous micro-batches.

    Attributes:
        bounds: ``(start, stop)`` index ranges into the sorted lengths, in order.
        objective_s: the estimated iteration time ``sum t_k + w max t_k``, seconds.
        sum_s: ``sum t_k``, seconds.
        max_s: ``max t_k``, seconds.
        probes: bounds the search evaluated (for benchmarks).
    """

    bounds: tuple[tuple[int, int], ...]
    objective_s: float
    sum_s: float
    max_s: float
    probes: int = 0


class _Rows:
    """Times of ``b = 1..K`` samples padded to each distinct length, shared by all probes."""

    def __init__(self, lengths: np.ndarray, costs: PipelineCosts, memory_limit_bytes: float) -> None:
        self.n = len(lengths)
        distinct, inverse = np.unique(lengths, return_inverse=True)
        self.index = inverse  # sample j -> distinct length index
        last = np.searchsorted(lengths, distinct, side="right")  # samples up to and including it
        self.rows: list[np.ndarray] = []
        for u, seq_len in enumerate(distinct):
            k = min(costs.max_samples(int(seq_len), memory_limit_bytes), int(last[u]))
            self.rows.append(costs.padded_times_s(int(seq_len), k))

    def row(self, j: int) -> np.ndarray:
        """Times of the micro-batches ending with sample ``j - 1`` (1-based end), by size 1..K."""
        r: np.ndarray = self.rows[self.index[j - 1]]
        return r[: min(len(r), j)]

    def candidates(self) -> np.ndarray:
        """Every time a micro-batch can take, sorted, distinct."""
        values: np.ndarray = np.unique(np.concatenate(self.rows))
        return values


def _sums(rows: _Rows, bounds: np.ndarray) -> np.ndarray:
    """``S(B)`` for every ``B`` in ``bounds`` (inf where infeasible), in one pass over the samples."""
    k = len(bounds)
    n = rows.n
    dp = np.full((k, n + 1), np.inf)
    dp[:, 0] = 0.0
    limit = bounds[:, None]
    for j in range(1, n + 1):
        row = rows.row(j)
        width = len(row)
        prev = dp[:, j - width : j][:, ::-1]
        cand = np.where(row[None, :] <= limit, prev + row[None, :], np.inf)
        dp[:, j] = cand.min(axis=1)
    return dp[:, n]


def _solve(rows: _Rows, bound: float) -> tuple[tuple[int, int], ...]:
    """The partition achieving ``S(bound)``, rebuilt from its choices."""
    n = rows.n
    dp = np.full(n + 1, np.inf)
    dp[0] = 0.0
    choice = np.zeros(n + 1, dtype=np.int64)
    for j in range(1, n + 1):
        row = rows.row(j)
        width = len(row)
        cand = np.where(row <= bound, dp[j - width : j][::-1] + row, np.inf)
        b = int(np.argmin(cand))
        dp[j] = cand[b]
        choice[j] = b + 1
    bounds = []
    j = n
    while j > 0:
        size = int(choice[j])
        bounds.append((j - size, j))
        j -= size
    return tuple(reversed(bounds))


def partition_objective(
    lengths: Sequence[int] | np.ndarray,
    bounds: Sequence[tuple[int, int]],
    costs: PipelineCosts,
    bubble_weight: float,
) -> tuple[float, float, float]:
    """``(objective, sum, max)`` in seconds of a partition of ascending ``lengths`` (see module doc)."""
    times = [float(costs.padded_times_s(int(lengths[b - 1]), b - a)[-1]) for a, b in bounds]
    total, biggest = sum(times), max(times)
    return total + bubble_weight * biggest, total, biggest


def partition_sorted(
    lengths: Sequence[int],
    costs: PipelineCosts,
    *,
    memory_limit_bytes: float,
    bubble_weight: float | None = None,
    max_probes: int = 48,
) -> Partition:
    """The partition of ascending ``lengths`` into contiguous micro-batches that minimises
    ``sum t_k + bubble_weight * max t_k`` with every micro-batch within the memory limit.

    Args:
        lengths: token counts, ascending (>= 1 each).
        costs: the pipeline's per-stage costs.
        memory_limit_bytes: the most activation memory one micro-batch may use on a stage, bytes.
        bubble_weight: ``w``; default ``num_stages - 1``.
        max_probes: bounds evaluated together per pass (speed only; the result is exact).

    Returns:
        The optimal :class:`Partition` (ties broken by the search order, deterministically).

    Raises:
        InputError: no lengths, lengths not ascending, or a negative ``bubble_weight``.
        Infeasible: the longest sample alone exceeds the memory limit.
    """
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size == 0:
        raise invalid("lengths", [], "the global batch is empty; give at least one sample")
    if np.any(np.diff(arr) < 0):
        raise invalid("lengths", "unsorted", "must be in ascending order")
    w = float(costs.num_stages - 1 if bubble_weight is None else bubble_weight)
    if w < 0:
        raise invalid("bubble_weight", bubble_weight, "must be >= 0")
    rows = _Rows(arr, costs, memory_limit_bytes)
    unbounded = _solve(rows, np.inf)
    best_obj, best_sum, best_max = partition_objective(arr, unbounded, costs, w)
    best_bounds = unbounded
    probes = 1
    if w > 0:
        s_inf = best_sum
        cands = rows.candidates()
        floor = float(rows.rows[rows.index[-1]][0])  # the longest sample alone
        cands = cands[cands >= floor]
        done_idx = np.zeros(0, dtype=np.int64)  # evaluated candidate indices, ascending
        done_s = np.zeros(0)  # S at those
        open_idx = np.arange(len(cands))
        best_idx: int | None = None
        while open_idx.size:
            # lower bound of each open bound B: S(next evaluated bound above B) + w B
            pos = np.searchsorted(done_idx, open_idx, side="right")
            s_next = np.append(done_s, s_inf)[pos]
            keep = s_next + w * cands[open_idx] < best_obj
            open_idx = open_idx[keep]
            if not open_idx.size:
                break
            if open_idx.size <= max_probes:
                chosen = open_idx
            else:
                picks = np.linspace(0, open_idx.size - 1, max_probes).round().astype(np.int64)
                chosen = open_idx[np.unique(picks)]
            values = _sums(rows, cands[chosen])
            probes += int(chosen.size)
            for i, s_val in zip(chosen.tolist(), values.tolist(), strict=True):
                obj = s_val + w * float(cands[i])
                if obj < best_obj:
                    best_obj, best_idx = obj, i
            order = np.argsort(np.concatenate([done_idx, chosen]), kind="stable")
            done_idx = np.concatenate([done_idx, chosen])[order]
            done_s = np.concatenate([done_s, values])[order]
            open_idx = np.setdiff1d(open_idx, chosen, assume_unique=True)
        if best_idx is not None:
            best_bounds = _solve(rows, float(cands[best_idx]))
            best_obj, best_sum, best_max = partition_objective(arr, best_bounds, costs, w)
    log.debug(
        "dynamic partition of %d samples: %d micro-batches, %d probes", arr.size, len(best_bounds), probes
    )
    return Partition(bounds=best_bounds, objective_s=best_obj, sum_s=best_sum, max_s=best_max, probes=probes)
