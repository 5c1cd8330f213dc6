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

(ZeRO paper, Sec. 5.1 and 7.2: ZeRO-1/2 keep the all-reduce's volume, ZeRO-3 moves 1.5x.)
``distributed`` is Megatron-LM's distributed optimizer, which keeps fp32 main gradients (4
bytes per bf16 parameter: 2 per parameter byte) and shards the 12 bytes of fp32 state:
``6 + 12 / d`` bytes per parameter, the figure of ``num_bytes_per_parameter`` in Megatron-LM's
``megatron/training/theoretical_memory_usage.py`` (commit d98e8a64ddf3, Aug 2026). With an fp32
training dtype the main gradients are the gradients (1 per parameter byte).
"""

from __future__ import annotations

from enum import Enum

from pipesim.errors import check_count, parse_name
from pipesim.profiles.costmodels.memory import OPTIMIZER_STATE_MULTIPLIER, Optimizer

__all__ = ["SHARDINGS", "Sharding", "dp_traffic_factor", "sharded_memory_multiplier"]


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


def sharded_memory_multiplier(
    dtype: str, optimizer: str | Optimizer, sharding: str | Sharding, replicas: int
) -> float:
    """Bytes of weights + gradients + optimizer state per parameter byte on one device, with the
    state sharded over ``replicas`` data-parallel replicas as ``sharding`` says (module table).

    ``sharding = none`` gives :func:`~pipesim.profiles.costmodels.memory.static_memory_multiplier`.

    Raises:
        UnknownNameError: unknown optimizer or sharding.
        InputError: ``replicas < 1``.
    """
    d = check_count("replicas", replicas)
    mixed = dtype != "float32"
    k = OPTIMIZER_STATE_MULTIPLIER[(Optimizer.parse(optimizer).value, mixed)]
    mode = Sharding.parse(sharding)
    if mode is Sharding.NONE:
        return 2.0 + k
    if mode is Sharding.ZERO1:
        return 2.0 + k / d
    if mode is Sharding.ZERO2:
        return 1.0 + (1.0 + k) / d
    if mode is Sharding.ZERO3:
        return (2.0 + k) / d
    main_grads = 2.0 if mixed else 1.0  # fp32 main gradients per parameter byte
    return 1.0 + main_grads + k / d


def dp_traffic_factor(sharding: str | Sharding) -> float:
    """Data-parallel bytes moved per iteration relative to a gradient all-reduce (module table):
    1 for none, ZeRO-1/2 and the distributed optimizer (a reduce-scatter and an all-gather are
    an all-reduce's two halves), 1.5 for ZeRO-3 (parameters gathered in forward and backward).

    Raises:
        UnknownNameError: unknown sharding.
    """
    return 1.5 if Sharding.parse(sharding) is Sharding.ZERO3 else 1.0
