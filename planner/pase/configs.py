"""Configurations: how a layer's iteration space is split across devices (PaSE's rules).

A configuration of a layer whose iteration space has sizes ``(d_1, ..., d_n)`` is a tuple of
split factors ``(c_1, ..., c_n)``; the layer then runs on ``c_1 * ... * c_n <= p`` devices, each
holding a ``d_1/c_1 x ... x d_n/c_n`` block.

Which factors PaSE allows (Elango, "PaSE: Parallelization Strategies for Efficient DNN Training",
IPDPS 2021, and its public implementation, ``nn_ops.GetConfigs``): for every dimension, the
divisors ``c`` of ``d`` that leave at least ``cutoff`` elements per device (``d / c >= cutoff``,
with ``cutoff = 4``); a dimension with no such divisor is not split (``c = 1``); the product of
all factors is at most ``p``. Factors are therefore not restricted to powers of two (a dimension
of 96 may be split 3 ways), and a configuration need not use all ``p`` devices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from pipesim.errors import invalid

__all__ = ["DEFAULT_CUTOFF", "allowed_factors", "contiguous_configs", "split_configs"]

DEFAULT_CUTOFF = 4
"""Fewest elements per device along a split dimension (PaSE ``Ops.cutoff = 4``)."""


def allowed_factors(size: int, n_procs: int, cutoff: int = DEFAULT_CUTOFF) -> list[int]:
    """Split factors PaSE allows for one dimension of ``size`` elements, ascending.

    Args:
        size: the dimension's extent, >= 1.
        n_procs: devices available, >= 1 (no factor exceeds it).
        cutoff: fewest elements per device, >= 1.

    Returns:
        The divisors ``c <= n_procs`` of ``size`` with ``size / c >= cutoff``; ``[1]`` if none.

    Raises:
        InputError: a non-positive argument.
    """
    for field, value in (("size", size), ("n_procs", n_procs), ("cutoff", cutoff)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise invalid(field, value, "must be an integer >= 1")
    root = math.isqrt(size)
    divisors = {d for i in range(1, root + 1) if size % i == 0 for d in (i, size // i)}
    found = sorted(c for c in divisors if c <= n_procs and size >= cutoff * c)
    return found or [1]


def split_configs(
    dom: Sequence[int], n_procs: int, cutoff: int = DEFAULT_CUTOFF, *, fixed: Sequence[int] = ()
) -> np.ndarray:
    """Every configuration of an iteration space, in lexicographic order of the factors.

    Args:
        dom: the iteration-space sizes.
        n_procs: devices available (the product of the factors is at most this).
        cutoff: fewest elements per device along a split dimension.
        fixed: dimension indices that are never split (PaSE keeps, e.g., a convolution's image
            height and width and an LSTM's sequence unsplit).

    Returns:
        An ``(n_configs, len(dom))`` int64 array; the first row is all ones.

    Raises:
        InputError: a bad size, ``n_procs`` or ``cutoff``.
    """
    fixed_set = set(fixed)
    choices = [[1] if i in fixed_set else allowed_factors(int(d), n_procs, cutoff) for i, d in enumerate(dom)]
    rows = [c for c in itertools.product(*choices) if math.prod(c) <= n_procs]
    return np.array(rows, dtype=np.int64).reshape(len(rows), len(dom))


def contiguous_configs(dom: Sequence[int], configs: np.ndarray) -> np.ndarray:
    """The configurations that split a row-major array into contiguous blocks (for reshapes).

    PaSE (``ConfigureReshape``) keeps a configuration when, after the leading dimensions that
    are split completely (``c == d``), only the first remaining dimension may be split.

    Args:
        dom: the iteration-space sizes.
        configs: candidate configurations, ``(n, len(dom))``.

    Returns:
        The rows of ``configs`` that qualify, in their order.
    """
    keep = []
    for row in configs:
        k = 0
        while k < len(dom) and int(dom[k]) == int(row[k]):
            k += 1
        keep.append(all(int(c) == 1 for c in row[k + 1 :]))
    kept: np.ndarray = configs[np.array(keep, dtype=bool)]
    return kept
