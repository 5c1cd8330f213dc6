"""Data-parallel sharding of the training state (ZeRO and Megatron's distributed optimizer).

Mixed-precision Adam keeps 2 + 2 + 12 bytes per parameter: fp16/bf16 weights, fp16/bf16
gradients and 12 bytes of fp32 optimizer state (master weights, momentum, variance); Rajbhandari
et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC'20), Sec. 3.1
and Fig. 1. Over ``d`` data-parallel replicas, with ``K`` the optimizer-state bytes per
parameter byte (:data:`~pipesim.profiles.costmodels.memory.OPTIMIZER_STATE_MULTIPLIER`), the
bytes per parameter byte on one device are

=============  =====================================  ==========================================
sharding       weights + gradients + state            communication per iteration (per device)
=============  =====================================  ==========================================
none           1 + 1 + K                              all-reduce of the gradients: 2 (d-1)/d P
zero1          1 + 1 + K / d                          reduce-scatter + all-gather: 2 (d-1)/d P
zero2          1 + (1 + K) / d                        reduce-scatter + all-gather: 2 (d-1)/d P
zero3          (1 + 1 + K) / d                        all-gather (fwd) + all-gather (bwd) +
                                                      reduce-scatter: 3 (d-1)/d P
distributed    1 + 2 + K / d   (fp32 main gradients)  reduce-scatter + all-gather: 2 (d-1)/d P
=============  =====================================  ==========================================

(ZeRO paper, Sec. 5.1 and 7.2: ZeRO-1/2 keep the all-reduce's volume, ZeRO-3 moves 1.5x; the
table counts one micro-batch: ZeRO-2 and ZeRO-3 keep no full gradient buffer to accumulate
into, so they reduce-scatter, and ZeRO-3 gathers, every micro-batch, as DeepSpeed and FSDP do.)
``distributed`` is Megatron-LM's distributed optimizer, which keeps fp32 main gradients (4
bytes per bf16 parameter: 2 per parameter byte) and shards the 12 bytes of fp32 state:
``6 + 12 / d`` bytes per parameter, the figure of ``num_bytes_per_parameter`` in Megatron-LM's
``megatron/training/theoretical_memory_usage.py`` (commit d98e8a64ddf3, Aug 2026). With an fp32
training dtype the main gradients are the gradients (1 per parameter byte).

**Gradient dtype.** The table's gradient term is for gradients kept in the training dtype. The
data-parallel gradient collectives and the gradient buffer they reduce are in the gradient
reduction dtype (:func:`grad_reduce_dtype`): by default Megatron-LM's rule, in
``megatron/training/arguments.py`` (``megatron/arguments.py`` in older versions): "bfloat16
requires gradient accumulation and all-reduce to be done in fp32", so bf16 training sets
``accumulate_allreduce_grads_in_fp32`` (newer versions let ``--grad-reduce-in-bf16`` opt out) and
fp16 and fp32 training keep their own dtype. Gradient bytes are therefore ``g`` per parameter byte
(:func:`grad_bytes_factor`: 2 for bf16 training by default, else 1) in place of the table's 1:
none ``1 + g + K`` (18 bytes per bf16 parameter, Megatron-LM's non-distributed figure in
``theoretical_memory_usage.py``), zero1 ``1 + g + K / d``, zero2 ``1 + (g + K) / d``, zero3
``(1 + g + K) / d``, distributed ``1 + g + K / d`` (``6 + 12 / d`` for bf16). Where mixed-precision
gradients are not reduced in fp32 (fp16, or bf16 with ``grad_reduce_dtype = bf16``) the
distributed optimizer keeps fp32 main gradients of its shard: ``+ 2 / d`` per parameter byte, the
"fp16 param, fp16 grads" row of Megatron-LM's distributed-optimizer table (``4 + 16 / d`` bytes per
parameter; ``docs/source/api-guide/dist_optimizer.md``). Parameter all-gathers move the parameter
dtype (the training dtype).

**ZeRO-1's gradient collective** (:class:`GradCollective`): a reduce-scatter (ZeRO's, Megatron-LM's
distributed optimizer's) by default; ``all-reduce`` is DeepSpeed's BF16_Optimizer with ZeRO stage 1
(Megatron-DeepSpeed's bf16 runs, BLOOM's): ``runtime/engine.py`` ``allreduce_gradients`` takes the
optimizer's flat fp32 gradients (``bf16_optimizer.py`` ``get_grads_for_reduction``) and all-reduces
them whole (``buffered_allreduce_fallback``); each rank then steps its fp32 partition and the bf16
partitions are all-gathered (``update_lp_params``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import Enum

from pipesim.errors import check_count, parse_name
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.costmodels.grad_dtype import (
    GRAD_REDUCE_DTYPES,
    grad_bytes_factor,
    grad_reduce_dtype,
    parse_grad_reduce_dtype,
)
from pipesim.profiles.costmodels.lines import eval_lines
from pipesim.profiles.costmodels.memory import OPTIMIZER_STATE_MULTIPLIER, Optimizer
from pipesim.profiles.models.profile import DTYPE_BYTES

__all__ = [
    "GRAD_REDUCE_DTYPES",
    "MAX_ZERO_UNITS",
    "SHARDINGS",
    "CollectiveKind",
    "GradCollective",
    "Sharding",
    "gated_time_s",
    "grad_bytes_factor",
    "grad_reduce_dtype",
    "half_algorithm",
    "half_time_s",
    "parse_grad_reduce_dtype",
    "reduce_tail_s",
    "sharded_memory_multiplier",
    "zero3_op_times_s",
    "zero_units",
]

MAX_ZERO_UNITS = 8
"""The most units a stage's layers are grouped into for ZeRO's per-unit collectives (FSDP's
wrapped units, DeepSpeed's prefetch buckets): a bound that keeps a program's collectives
proportional to stages x micro-batches, not to layers."""

DEFAULT_PREFETCH_DEPTH = 1
"""Units gathered ahead of the one in use: FSDP's ``backward_prefetch=BACKWARD_PRE`` and
``forward_prefetch`` issue the next unit's all-gather (one ahead); DeepSpeed's
``stage3_prefetch_bucket_size`` bounds its look-ahead likewise."""


class Sharding(str, Enum):
    """How a stage's data-parallel replicas shard the training state (see the module table)."""

    NONE = "none"
    ZERO1 = "zero1"
    ZERO2 = "zero2"
    ZERO3 = "zero3"
    DISTRIBUTED = "distributed"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> Sharding:
        """The sharding called ``name`` (case-insensitive); ``0``..``3`` name ZeRO stages
        (``0`` is ``none``).

        Raises:
            UnknownNameError: no such sharding; the message lists the valid names.
        """
        if isinstance(name, int) and not isinstance(name, bool) and 0 <= name <= 3:
            return (cls.NONE, cls.ZERO1, cls.ZERO2, cls.ZERO3)[name]
        if isinstance(name, str) and name.strip() in ("0", "1", "2", "3"):
            return cls.parse(int(name.strip()))
        return parse_name("sharding", cls, name)


SHARDINGS: tuple[str, ...] = tuple(s.value for s in Sharding)
"""Sharding names, in :class:`Sharding` order."""


class GradCollective(str, Enum):
    """The gradient collective of a ZeRO-1 stage (module docstring): ``reduce-scatter`` (default)
    or ``all-reduce`` (DeepSpeed's BF16_Optimizer); either way the updated parameters are then
    all-gathered."""

    REDUCE_SCATTER = "reduce-scatter"
    ALL_REDUCE = "all-reduce"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> GradCollective:
        """The collective called ``name`` (case-insensitive; ``_`` reads as ``-``).

        Raises:
            UnknownNameError: not ``reduce-scatter`` or ``all-reduce``.
        """
        if isinstance(name, str) and not isinstance(name, cls):
            try:
                return cls(name.strip().lower().replace("_", "-"))
            except ValueError:
                pass
        return parse_name("zero1_grad_collective", cls, name)


def sharded_memory_multiplier(
    dtype: str,
    optimizer: str | Optimizer,
    sharding: str | Sharding,
    replicas: int,
    grad_dtype: str | None = None,
) -> float:
    """Bytes of weights + gradients + optimizer state per parameter byte on one device, with the
    state sharded over ``replicas`` data-parallel replicas as ``sharding`` says (module table),
    gradients kept in :func:`grad_reduce_dtype` of ``dtype`` and ``grad_dtype`` (the module's
    gradient-dtype paragraph).

    Raises:
        UnknownNameError: unknown optimizer or sharding.
        InputError: ``replicas < 1``, a bad ``grad_dtype``.
    """
    d = check_count("replicas", replicas)
    mixed = dtype != "float32"
    k = OPTIMIZER_STATE_MULTIPLIER[(Optimizer.parse(optimizer).value, mixed)]
    mode = Sharding.parse(sharding)
    g = grad_bytes_factor(dtype, grad_dtype)
    if mode is Sharding.NONE:
        return 1.0 + g + k
    if mode is Sharding.ZERO1:
        return 1.0 + g + k / d
    if mode is Sharding.ZERO2:
        return 1.0 + (g + k) / d
    if mode is Sharding.ZERO3:
        return (1.0 + g + k) / d
    main_copy = DTYPE_BYTES["float32"] / DTYPE_BYTES[dtype] if mixed and g * DTYPE_BYTES[dtype] < 4 else 0.0
    return 1.0 + g + (k + main_copy) / d


class CollectiveKind(str, Enum):
    """What a data-parallel collective does to a buffer of ``S`` bytes per member.

    Per member in ring terms (nccl-tests ``doc/PERFORMANCE.md``, commit a0b82b2260cf: an
    all-reduce's bus bandwidth is ``algbw x 2 (n - 1)/n``, an all-gather's and a
    reduce-scatter's ``algbw x (n - 1)/n``, ``S`` the whole array): an all-reduce sends
    ``2 (n - 1)/n S``, a reduce-scatter (the all-reduce's first half) and an all-gather (its
    second half) ``(n - 1)/n S`` each.
    """

    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"

    def __str__(self) -> str:
        return self.value


def half_algorithm(
    curves: AllReduceCurves, nbytes: float, algorithm: str | AllReduceAlgorithm
) -> AllReduceAlgorithm:
    """The algorithm a reduce-scatter or all-gather of ``nbytes`` runs when ``algorithm`` is
    asked for: ``ring`` or ``hierarchical`` (its intra-server and inter-server halves); NCCL
    runs these collectives on rings (no tree), so ``tree`` and ``nvls`` mean ``ring``;
    ``auto`` takes the faster of ring and hierarchical (even servers only), ties to ring.

    Raises:
        UnknownNameError: unknown algorithm.
    """
    algo = AllReduceAlgorithm.parse(algorithm)
    if algo is AllReduceAlgorithm.HIERARCHICAL:
        return curves.algorithm_for(nbytes, algo)
    if (
        algo is AllReduceAlgorithm.AUTO
        and curves.hierarchical is not None
        and curves.even
        and eval_lines(curves.hierarchical, nbytes) < eval_lines(curves.ring, nbytes)
    ):
        return AllReduceAlgorithm.HIERARCHICAL
    return AllReduceAlgorithm.RING


def half_time_s(curves: AllReduceCurves, nbytes: float, algorithm: str | AllReduceAlgorithm) -> float:
    """Time of a reduce-scatter or an all-gather of a buffer of ``nbytes`` per member, seconds:
    half the all-reduce of :func:`half_algorithm` (``n - 1`` of the ring's ``2 (n - 1)`` steps;
    hierarchical: ``g - 1`` intra-server and ``k - 1`` inter-server steps).

    Raises:
        UnknownNameError: unknown algorithm.
    """
    return curves.time_s(nbytes, half_algorithm(curves, nbytes, algorithm)) / 2.0


def zero_units(parameter_bytes: Sequence[float], max_units: int = MAX_ZERO_UNITS) -> tuple[range, ...]:
    """The units (consecutive layer positions) a stage's layers are grouped into: at most
    ``max_units``, each closed once it holds ``1 / max_units`` of the stage's parameter bytes
    (layers without parameters join the unit being filled), so units are near-equal in bytes.

    Args:
        parameter_bytes: the stage's layers' parameter bytes on one device, in layer order.
        max_units: the most units (>= 1).

    Returns:
        Ranges of positions in ``parameter_bytes`` covering it in order (one empty-stage unit
        for no layers).

    Raises:
        InputError: ``max_units < 1``.
    """
    limit = check_count("max_units", max_units)
    n = len(parameter_bytes)
    total = float(sum(parameter_bytes))
    if n == 0:
        return (range(0, 0),)
    target = total / limit
    units: list[range] = []
    start, size = 0, 0.0
    for i, nbytes in enumerate(parameter_bytes):
        size += nbytes
        if size >= target and size > 0 and len(units) < limit - 1 and i < n - 1:
            units.append(range(start, i + 1))
            start, size = i + 1, 0.0
    if units and size == 0:  # a tail without parameters joins the unit before it
        start = units.pop().start
    units.append(range(start, n))
    return tuple(units)


def gated_time_s(
    compute_s: Sequence[float],
    comm_s: Sequence[float],
    depth: int,
    lead_s: float,
    on_demand_s: Sequence[float] | None = None,
) -> float:
    """Time of one op whose units each wait for their own collective (ZeRO-3's gathers), seconds.

    Unit ``j`` computes for ``compute_s[j]`` once its collective (``comm_s[j]``) has ended; the
    collectives run one after another on their own stream, collective ``j`` issued when unit
    ``j - depth`` starts, the first ``depth`` ones ``lead_s`` before the op (issued during the
    op before it). Unit ``j`` thus exposes ``max(0, comm - compute it overlaps)``; with
    ``depth = 1``: ``sum_j max(compute_s[j - 1], comm_s[j])`` after the first unit. A unit's
    ``on_demand_s`` part (default none) is a second collective issued when the unit is reached,
    after its prefetched one on the same stream, and waited for (DeepSpeed's gathers that no
    prefetch covered).

    Raises:
        InputError: ``depth < 1``.
    """
    return _gated_starts(compute_s, comm_s, depth, lead_s, on_demand_s)[-1]


def _gated_starts(
    compute_s: Sequence[float],
    comm_s: Sequence[float],
    depth: int,
    lead_s: float,
    on_demand_s: Sequence[float] | None = None,
) -> list[float]:
    """:func:`gated_time_s`'s unit starts, seconds into the op, then its end."""
    k = check_count("depth", depth)
    starts: list[float] = []
    t = 0.0
    comm_end = -lead_s
    for j, (compute, comm) in enumerate(zip(compute_s, comm_s, strict=True)):
        issued = starts[j - k] if j >= k else -lead_s
        comm_end = max(issued, comm_end) + comm
        if on_demand_s is not None and on_demand_s[j] > 0:
            comm_end = max(t, comm_end) + on_demand_s[j]
        start = max(t, comm_end)
        starts.append(start)
        t = start + compute
    return [*starts, t]


def reduce_tail_s(backward_units_s: Sequence[float], scatter_s: Sequence[float]) -> float:
    """How long the reduce-scatters of a backward's units outlast it, seconds: unit ``j``'s
    (``scatter_s[j]``, in the order the units run) is issued when the unit ends and they run one
    after another on their own stream.
    """
    t = reduce_end = 0.0
    for compute, scatter in zip(backward_units_s, scatter_s, strict=True):
        t += compute
        reduce_end = max(reduce_end, t) + scatter
    return max(0.0, reduce_end - t)


class _Stream:
    """One collective stream of :func:`_shared_backward_s`: its transfers ``[issue s, seconds
    left alone]`` in issue order, the index of the first unfinished, and each one's end."""

    __slots__ = ("ends", "head", "items")

    def __init__(self) -> None:
        self.items: list[list[float]] = []
        self.head = 0
        self.ends: list[float] = []

    def active(self, now: float) -> bool:
        return self.head < len(self.items) and self.items[self.head][0] <= now

    def next_issue(self) -> float:
        return self.items[self.head][0] if self.head < len(self.items) else math.inf


def _advance(streams: tuple[_Stream, _Stream], now: float, until: _Stream, count: int) -> float:
    """Run the two streams from ``now`` until ``until`` has ended ``count`` transfers, sharing the
    links half and half while both carry one (each alone at full speed); returns the time
    reached, seconds."""
    while len(until.ends) < count:
        on = [x for x in streams if x.active(now)]
        if not on:
            now = min(x.next_issue() for x in streams)
            if math.isinf(now):
                raise AssertionError("waiting on a transfer never issued")
            continue
        rate = 1.0 / len(on)
        step = min(x.items[x.head][1] / rate for x in on)
        waiting = [x.next_issue() for x in streams if x not in on]
        step = min([step, *(w - now for w in waiting)])
        for x in on:
            x.items[x.head][1] -= step * rate
        now += step
        for x in on:
            if x.items[x.head][1] <= 1e-15:
                x.ends.append(now)
                x.head += 1
    return now


def _shared_backward_s(
    compute_s: Sequence[float], gather_s: Sequence[float], scatter_s: Sequence[float], depth: int,
    lead_s: float, on_demand_s: Sequence[float], next_s: Sequence[float] = (),
) -> tuple[float, float, float]:
    """A ZeRO-3 backward of units in run order, seconds, and how long its reduce-scatters outlast
    it, seconds, as the simulator runs them: unit ``j`` computes once its gather (issued as unit
    ``j - depth`` starts, the first ``depth`` ``lead_s`` before the op) and its on-demand part
    (issued as it is reached, after the gather on the same stream) have ended; its reduce-scatter
    is issued as it ends, on a second stream; the two streams share the links half and half while
    both carry a transfer (the max-min share of two flows on one bottleneck), each alone at full
    speed. ``next_s`` (one figure or none): the next op's first gather, issued ``depth`` units
    before the op's end on the gather stream; its end relative to the op's end is returned
    third (``-inf`` without it); with ``depth`` 1 the tail is the one without it (the last
    backward's), else with it."""
    k = check_count("depth", depth)
    gathers, scatters = _Stream(), _Stream()
    streams = (gathers, scatters)
    for j in range(min(k, len(compute_s))):
        gathers.items.append([-lead_s, gather_s[j]])
    own = list(range(len(gathers.items)))  # per unit, its gather's place on the gather stream
    now = -lead_s
    end = 0.0
    for j, compute in enumerate(compute_s):
        need = own[j] + 1
        if on_demand_s[j] > 0:  # issued as the unit is reached, after what the stream holds
            gathers.items.append([end, on_demand_s[j]])
            need = len(gathers.items)
        now = _advance(streams, now, gathers, need)
        start = max(end, gathers.ends[need - 1])
        if j + k < len(compute_s):
            own.append(len(gathers.items))
            gathers.items.append([start, gather_s[j + k]])
        if next_s and j + k == len(compute_s):  # the next op's first gather, depth units ahead
            own.append(len(gathers.items))
            gathers.items.append([start, next_s[0]])
        end = start + compute
        scatters.items.append([end, scatter_s[j]])
    if next_s and k == 1:  # the tail without the next gather (the last backward's), from here
        alone = _Stream()
        alone.items, alone.head, alone.ends = [list(x) for x in gathers.items[:-1]], gathers.head, []
        rest = _Stream()
        rest.items, rest.head = [list(x) for x in scatters.items], scatters.head
        rest.ends = list(scatters.ends)
        _advance((alone, rest), now, rest, len(rest.items))
        last = rest.ends[-1]
    now = _advance(streams, now, scatters, len(scatters.items))
    if not (next_s and k == 1):
        last = scatters.ends[-1] if scatters.ends else end
    tail = max(0.0, last - end)
    if not next_s:
        return end, tail, -math.inf
    now = _advance(streams, now, gathers, own[-1] + 1)
    return end, tail, gathers.ends[own[-1]] - end


def zero3_op_times_s(
    fwd_units_s: Sequence[float],
    bwd_units_s: Sequence[float],
    gather_s: Sequence[float],
    scatter_s: Sequence[float],
    depth: int = DEFAULT_PREFETCH_DEPTH,
    bwd_gather_s: Sequence[float] | None = None,
    fwd_on_demand_s: Sequence[float] | None = None,
    bwd_on_demand_s: Sequence[float] | None = None,
) -> tuple[float, float, float, float]:
    """ZeRO-3's forward and backward of one stage and micro-batch with their gathers, seconds
    (:func:`gated_time_s`), for units in layer order (the backward runs them in reverse).

    In the steady state the op's first gathers are issued during the op before (in 1F1B a
    forward follows a backward, whose last unit is unit 0, and the other way round). In the
    backward the gathers and the reduce-scatters run on two streams as the simulator runs them
    (:func:`_shared_backward_s`): a unit's gather meets the reduce-scatters issued before it
    ends (the previous unit's) and the two share the links half and half while both run; the
    reduce-scatters left when the backward's compute ends are its tail; in the steady state they
    share the links with the next forward's first gather, issued as the backward's last unit
    starts, which sets the forward's lead. (It charged each unit
    ``gather + its own scatter`` and every scatter again in a tail taken against the bare
    compute: 1.26-1.32x the simulation where the gathers outlast the compute,
    ``tests/tp/test_zero3_wide_estimate.py``.) ``bwd_gather_s`` gives the backward's gathers where they differ
    from the forward's (DeepSpeed's re-gathers after a replay,
    :class:`~pipesim.profiles.costmodels.zero3_runtime.UnitCalls`); default ``gather_s``. The
    ``*_on_demand_s`` parts are gathered when their unit is reached (:func:`gated_time_s`).

    Returns:
        ``(forward s, backward s, the first op's extra s, the last backward's reduce tail s)``:
        the iteration's first forward cannot prefetch (its extra is what the steady state hid,
        less what the steady forward's first gather lost to the backward's reduce-scatters: it
        can be negative);
        the last backward's reduce-scatters outlast it by the tail.

    Raises:
        InputError: ``depth < 1``.
    """
    back = list(reversed(bwd_units_s))
    again = list(reversed(gather_s if bwd_gather_s is None else bwd_gather_s))
    od = [0.0] * len(back) if bwd_on_demand_s is None else list(reversed(bwd_on_demand_s))
    scatters = list(reversed(scatter_s))
    # the steady backward, its reduce-scatters sharing the links with the next forward's first
    # gather (issued as the backward's last unit starts), which ends ``ready`` after the backward
    bwd, tail, ready = _shared_backward_s(back, again, scatters, depth, fwd_units_s[-1], od, gather_s[:1])
    if depth != 1:  # the last backward's tail, without the next gather
        _, tail, _ = _shared_backward_s(back, again, scatters, depth, fwd_units_s[-1], od)
    lead = gather_s[0] - ready if depth == 1 else bwd_units_s[0]
    fwd = gated_time_s(fwd_units_s, gather_s, depth, lead, fwd_on_demand_s)
    first = gated_time_s(fwd_units_s, gather_s, depth, 0.0, fwd_on_demand_s) - fwd
    return fwd, bwd, first, tail
