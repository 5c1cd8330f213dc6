"""Micro-batching strategies for one global batch of variable-length samples: pad, pack, dynamic.

- ``pad``: samples in their given order, a fixed number per micro-batch, each micro-batch padded
  to its longest sample. The default size is the largest whose micro-batch of the batch's
  longest sample fits the memory limit (what one would tune a fixed micro-batch size to).
- ``pack``: samples concatenated into rows of ``row_len`` tokens (best-fit decreasing; a
  sample is never split), a fixed number of rows (a fixed token budget) per micro-batch; the
  unused end of each row is padding. Attention is counted over whole rows by default
  (``attention="full"``: a packed row of ``R`` tokens costs ``R^2`` in the attention term, as
  when packed samples share one sequence under a causal or full mask); ``attention="per-sample"``
  counts only each sample's own block (``sum s_i^2`` plus the padding's block), as with
  block-diagonal (variable-length) attention kernels. A row is one sequence for the per-sequence
  cost term either way.
- ``dynamic``: DynaPipe's dynamic program (:mod:`pipesim.planner.dynamic.dp`): samples sorted by
  length, cut into micro-batches of similar lengths that minimise the estimated pipeline time,
  each padded to its longest sample and within the memory limit.

Every strategy returns a :class:`MicrobatchPlan` whose micro-batches list the samples they hold.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import Infeasible, InputError, UnknownNameError, invalid
from pipesim.planner.dynamic.dp import partition_sorted
from pipesim.planner.dynamic.lengths import LengthBatch
from pipesim.planner.dynamic.stage_costs import MicrobatchShape, PipelineCosts

__all__ = [
    "PACK_ATTENTION",
    "Microbatch",
    "MicrobatchPlan",
    "Strategy",
    "dynamic_microbatches",
    "make_microbatches",
    "pack_microbatches",
    "pad_microbatches",
]

PACK_ATTENTION = ("full", "per-sample")
"""How the attention of packed rows is counted (see the module docstring)."""


class Strategy(str, Enum):
    """The micro-batching strategies."""

    PAD = "pad"
    PACK = "pack"
    DYNAMIC = "dynamic"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True, kw_only=True)
class Microbatch:
    """One micro-batch: which samples, and the shape it is computed in.

    Attributes:
        samples: indices of its samples in the global batch.
        rows: attention sequences (padded samples, or packed rows).
        row_len: tokens per row after padding.
        real_tokens: tokens of its samples (no padding).
        square_tokens: the attention term's sum of squared sequence lengths.
    """

    samples: tuple[int, ...]
    rows: int
    row_len: int
    real_tokens: int
    square_tokens: int

    def __post_init__(self) -> None:
        if not self.samples:
            raise invalid("samples", [], "a micro-batch holds at least one sample")
        if self.rows < 1 or self.row_len < 1 or self.real_tokens > self.rows * self.row_len:
            raise invalid(
                "rows", self.rows, f"{self.rows} rows of {self.row_len} cannot hold {self.real_tokens} tokens"
            )

    @property
    def computed_tokens(self) -> int:
        """Tokens computed, padding included."""
        return self.rows * self.row_len

    @property
    def shape(self) -> MicrobatchShape:
        """The cost-relevant shape."""
        return MicrobatchShape(rows=self.rows, tokens=self.computed_tokens, square_tokens=self.square_tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class MicrobatchPlan:
    """The micro-batches of one strategy for one global batch, in execution order.

    Attributes:
        strategy: ``pad``, ``pack`` or ``dynamic``.
        microbatches: the micro-batches.
        estimate_s: the planner's estimate of the iteration time (``sum t + (p-1) max t``), seconds.
        planning_time_s: wall time the strategy took, seconds (0 unless measured).
    """

    strategy: str
    microbatches: tuple[Microbatch, ...]
    estimate_s: float = 0.0
    planning_time_s: float = 0.0

    @property
    def sizes(self) -> tuple[int, ...]:
        """Samples per micro-batch."""
        return tuple(len(mb.samples) for mb in self.microbatches)

    @property
    def real_tokens(self) -> int:
        """Real tokens of the batch."""
        return sum(mb.real_tokens for mb in self.microbatches)

    @property
    def computed_tokens(self) -> int:
        """Tokens computed, padding included."""
        return sum(mb.computed_tokens for mb in self.microbatches)

    @property
    def padding_fraction(self) -> float:
        """Share of computed tokens that are padding."""
        computed = self.computed_tokens
        return 1.0 - self.real_tokens / computed if computed else 0.0

    def reordered(self, order: Sequence[int]) -> MicrobatchPlan:
        """The same micro-batches in execution order ``order`` (a permutation of indices).

        Raises:
            InputError: ``order`` is not a permutation.
        """
        if sorted(order) != list(range(len(self.microbatches))):
            raise invalid("order", list(order), f"must be a permutation of 0..{len(self.microbatches) - 1}")
        return MicrobatchPlan(
            strategy=self.strategy,
            microbatches=tuple(self.microbatches[i] for i in order),
            estimate_s=self.estimate_s,
            planning_time_s=self.planning_time_s,
        )


def _estimate(costs: PipelineCosts, mbs: Sequence[Microbatch]) -> float:
    times = [costs.time_s(mb.shape) for mb in mbs]
    return sum(times) + (costs.num_stages - 1) * max(times)


def _padded(indices: Sequence[int], tokens: Sequence[int]) -> Microbatch:
    longest = max(tokens[i] for i in indices)
    return Microbatch(
        samples=tuple(indices),
        rows=len(indices),
        row_len=longest,
        real_tokens=sum(tokens[i] for i in indices),
        square_tokens=len(indices) * longest * longest,
    )


def pad_microbatches(
    batch: LengthBatch, costs: PipelineCosts, *, memory_limit_bytes: float, microbatch_size: int | None = None
) -> MicrobatchPlan:
    """Fixed-size micro-batches in the batch's order, each padded to its longest sample.

    Args:
        batch: the global batch.
        costs: the pipeline's costs.
        memory_limit_bytes: activation memory one micro-batch may use, bytes (sets the default size).
        microbatch_size: samples per micro-batch (the last may be smaller); default: the most
            samples of the batch's longest length that fit ``memory_limit_bytes``.

    Raises:
        Infeasible: one sample of the longest length does not fit the memory limit.
        InputError: ``microbatch_size`` below 1.
    """
    tokens = batch.tokens
    longest = max(tokens)
    fit = costs.max_samples(longest, memory_limit_bytes)
    size = min(fit, len(tokens)) if microbatch_size is None else microbatch_size
    if size < 1:
        raise invalid("microbatch_size", microbatch_size, "must be >= 1")
    mbs = tuple(_padded(range(a, min(a + size, len(tokens))), tokens) for a in range(0, len(tokens), size))
    return MicrobatchPlan(strategy="pad", microbatches=mbs, estimate_s=_estimate(costs, mbs))


def pack_microbatches(
    batch: LengthBatch,
    costs: PipelineCosts,
    *,
    memory_limit_bytes: float,
    row_len: int | None = None,
    rows_per_microbatch: int | None = None,
    attention: str = "full",
) -> MicrobatchPlan:
    """Pack samples into rows of ``row_len`` tokens, a fixed number of rows per micro-batch.

    Args:
        batch: the global batch.
        costs: the pipeline's costs.
        memory_limit_bytes: activation memory one micro-batch may use, bytes.
        row_len: tokens per packed row; default the model's maximum sequence length.
        rows_per_microbatch: rows per micro-batch (the token budget is ``rows * row_len``);
            default the most rows that fit ``memory_limit_bytes``.
        attention: ``"full"`` (default) or ``"per-sample"``, see the module docstring.

    Raises:
        InputError: a sample longer than ``row_len``, a bad ``attention``, or a count below 1.
        Infeasible: one row does not fit the memory limit.
    """
    if attention not in PACK_ATTENTION:
        raise invalid("attention", attention, f"must be one of {', '.join(PACK_ATTENTION)}")
    tokens = batch.tokens
    length = costs.model.max_seq_len if row_len is None else row_len
    if length < 1:
        raise invalid("row_len", row_len, "must be >= 1")
    if max(tokens) > length:
        raise invalid("row_len", length, f"must be >= the longest sample ({max(tokens)} tokens)")
    probe = MicrobatchShape(rows=1, tokens=length, square_tokens=length * length)
    if costs.memory_bytes(probe) > memory_limit_bytes:
        need = costs.memory_bytes(probe)
        raise Infeasible(
            f"memory_limit_bytes={memory_limit_bytes:.6g} ({memory_limit_bytes / 2**30:.3g} GiB): "
            f"smaller than one packed row of {length} tokens needs, {need:.6g} bytes ({need / 2**30:.3g} GiB)"
        )
    rows_fit = costs.max_samples(length, memory_limit_bytes)
    per_mb = rows_fit if rows_per_microbatch is None else rows_per_microbatch
    if per_mb < 1:
        raise invalid("rows_per_microbatch", rows_per_microbatch, "must be >= 1")
    # best-fit decreasing: each sample, longest first (ties by index), goes to the fullest row
    # it fits in; rows are kept sorted by free room for a binary search
    order = sorted(range(len(tokens)), key=lambda i: (-tokens[i], i))
    rows: list[list[int]] = []
    room: list[tuple[int, int]] = []  # (free tokens, row index), ascending
    for i in order:
        k = bisect.bisect_left(room, (tokens[i], -1))
        if k < len(room):
            free, r = room.pop(k)
            rows[r].append(i)
        else:
            r, free = len(rows), length
            rows.append([i])
        bisect.insort(room, (free - tokens[i], r))
    mbs = []
    for a in range(0, len(rows), per_mb):
        group = rows[a : a + per_mb]
        real = sum(tokens[i] for row in group for i in row)
        if attention == "full":
            square = len(group) * length * length
        else:
            square = sum(tokens[i] ** 2 for row in group for i in row)
            square += sum((length - sum(tokens[i] for i in row)) ** 2 for row in group)
        mbs.append(
            Microbatch(
                samples=tuple(i for row in group for i in row),
                rows=len(group),
                row_len=length,
                real_tokens=real,
                square_tokens=square,
            )
        )
    return MicrobatchPlan(strategy="pack", microbatches=tuple(mbs), estimate_s=_estimate(costs, mbs))


def dynamic_microbatches(
    batch: LengthBatch,
    costs: PipelineCosts,
    *,
    memory_limit_bytes: float,
    bubble_weight: float | None = None,
) -> MicrobatchPlan:
    """DynaPipe's micro-batches: sort by length, split by the exact dynamic program.

    Micro-batches come out in ascending length order; :func:`pipesim.planner.dynamic.ordering.best_order`
    picks an execution order.

    Args:
        batch: the global batch.
        costs: the pipeline's costs.
        memory_limit_bytes: activation memory one micro-batch may use, bytes.
        bubble_weight: the weight of the largest micro-batch time (default ``p - 1``).

    Raises:
        Infeasible: the longest sample alone does not fit the memory limit.
    """
    tokens = batch.tokens
    order = sorted(range(len(tokens)), key=lambda i: (tokens[i], i))
    lengths = [tokens[i] for i in order]
    part = partition_sorted(
        lengths, costs, memory_limit_bytes=memory_limit_bytes, bubble_weight=bubble_weight
    )
    mbs = tuple(_padded(order[a:b], tokens) for a, b in part.bounds)
    return MicrobatchPlan(strategy="dynamic", microbatches=mbs, estimate_s=part.objective_s)


def make_microbatches(
    strategy: str | Strategy,
    batch: LengthBatch,
    costs: PipelineCosts,
    *,
    memory_limit_bytes: float,
    microbatch_size: int | None = None,
    pack_rows: int | None = None,
    pack_attention: str = "full",
) -> MicrobatchPlan:
    """Run the named strategy (``pad``, ``pack`` or ``dynamic``), see the functions above.

    Raises:
        UnknownNameError: an unknown strategy.
        InputError, Infeasible: see the strategy.
    """
    try:
        key = Strategy(str(strategy).strip().lower())
    except ValueError:
        raise UnknownNameError("strategy", str(strategy), [s.value for s in Strategy]) from None
    if memory_limit_bytes <= 0:
        raise InputError(f"memory_limit_bytes={memory_limit_bytes!r}: must be > 0")
    if key is Strategy.PAD:
        return pad_microbatches(
            batch, costs, memory_limit_bytes=memory_limit_bytes, microbatch_size=microbatch_size
        )
    if key is Strategy.PACK:
        return pack_microbatches(
            batch,
            costs,
            memory_limit_bytes=memory_limit_bytes,
            rows_per_microbatch=pack_rows,
            attention=pack_attention,
        )
    return dynamic_microbatches(batch, costs, memory_limit_bytes=memory_limit_bytes)
