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
from pipesim.profiles.costmodels.memory import OPTIMIZER_STATE_MULTIPLIER, Optimizer
from pipesim.profiles.models.profile import DTYPE_BYTES

__all__ = [
    "GRAD_REDUCE_DTYPES",
    "MAX_ZERO_UNITS",
    "SHARDINGS",
    "CollectiveKind",
    "GradCollective",
    "Sharding",
    "grad_bytes_factor",
    "grad_reduce_dtype",
    "half_algorithm",
    "half_time_s",
    "parse_grad_reduce_dtype",
    "sharded_memory_multiplier",
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


def half_algorithm(algorithm: str | AllReduceAlgorithm) -> AllReduceAlgorithm:
    """The algorithm a reduce-scatter or all-gather runs when ``algorithm`` is asked for: always
    ``ring``. NCCL runs these collectives only on rings: its tuner skips every other algorithm
    for any collective but the all-reduce (NVIDIA/nccl ``src/graph/tuning.cc`` at v2.8.4-1,
    ``if (coll != ncclFuncAllReduce && a != NCCL_ALGO_RING) continue;``), and a ring's chunks move
    on through every step as they arrive, so a call loads its NVLink and NIC hops together for its
    whole length. ``tree``, ``nvls`` and ``hierarchical`` name all-reduce forms: a phase-serial
    hierarchical gather (inter-server phase to its end, then the intra-server one) is no form
    NCCL runs, and two of them that met would keep whatever offset the compute gave them, each
    kind of link idle half the time, which no NCCL call shows.

    Raises:
        UnknownNameError: unknown algorithm.
    """
    AllReduceAlgorithm.parse(algorithm)
    return AllReduceAlgorithm.RING


def half_time_s(curves: AllReduceCurves, nbytes: float, algorithm: str | AllReduceAlgorithm) -> float:
    """Time of a reduce-scatter or an all-gather of a buffer of ``nbytes`` per member, seconds:
    half the ring all-reduce's (``n - 1`` of its ``2 (n - 1)`` steps; :func:`half_algorithm`).

    Raises:
        UnknownNameError: unknown algorithm.
    """
    return curves.time_s(nbytes, half_algorithm(algorithm)) / 2.0


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
