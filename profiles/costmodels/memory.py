"""The memory model shared by the planner's estimates and the simulator.

Byte multipliers per parameter byte in the training dtype:

======================  ========  =========  ================================================
dtype                   weights   gradients  optimizer state (sgd / momentum / adam)
======================  ========  =========  ================================================
float32                 1         1          0 / 1 / 2   (momentum buffer; Adam's m and v)
float16 / bfloat16      1         1          2 / 4 / 6   (fp32 master copy = 2, plus fp32
(mixed precision)                                         momentum = 2, Adam m and v = 4)
======================  ========  =========  ================================================

So mixed-precision Adam costs 2 + 2 + 12 = 16 bytes per parameter, the figure of Rajbhandari et
al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC'20), Sec. 3.1;
fp32 Adam costs 4 + 4 + 8 = 16 bytes per parameter as well.

Activations: each in-flight micro-batch keeps, on a stage, the bytes its layers save for backward
(``Layer.saved_activation_bytes``, the PipeDream/DAPPLE convention being the layer outputs) plus
the stage's received input; with recomputation only the received input is kept and the rest is
re-materialised during the backward as a transient working set.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipesim.errors import invalid
from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "OPTIMIZERS",
    "OPTIMIZER_STATE_MULTIPLIER",
    "stage_activation_bytes",
    "static_memory_bytes",
    "static_memory_multiplier",
]

OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam")
"""Optimizers whose state the memory model knows."""

OPTIMIZER_STATE_MULTIPLIER: dict[tuple[str, bool], float] = {
    # (optimizer, mixed precision) -> optimizer-state bytes per parameter byte in the training
    # dtype. fp32: momentum 1 buffer, Adam m and v. Mixed precision (fp16/bf16 weights): the fp32
    # master copy (2) plus fp32 momentum (2) or Adam m and v (4). Mixed-precision Adam is then
    # 2 + 2 + 12 = 16 bytes per parameter, the figure of Rajbhandari et al., "ZeRO: Memory
    # Optimizations Toward Training Trillion Parameter Models" (SC'20), Sec. 3.1.
    ("sgd", False): 0.0,
    ("momentum", False): 1.0,
    ("adam", False): 2.0,
    ("sgd", True): 2.0,
    ("momentum", True): 4.0,
    ("adam", True): 6.0,
}
"""Optimizer-state bytes per parameter byte, by (optimizer, mixed precision)."""


def static_memory_multiplier(dtype: str, optimizer: str) -> float:
    """Bytes of weights + gradients + optimizer state per parameter byte (see the table above).

    Raises:
        InputError: unknown optimizer.
    """
    key = (optimizer, dtype != "float32")
    if key not in OPTIMIZER_STATE_MULTIPLIER:
        raise invalid("optimizer", optimizer, f"must be one of {', '.join(OPTIMIZERS)}")
    return 2.0 + OPTIMIZER_STATE_MULTIPLIER[key]


def stage_activation_bytes(
    profile: ModelProfile, first_layer: int, last_layer: int, samples: float, recompute: bool
) -> tuple[float, float]:
    """Activation memory of one replica of a stage for one micro-batch share of ``samples``, bytes.

    Returns ``(stash, work)``: ``stash`` is kept from the forward until the backward ends (the
    stage's received input, the cut's crossing bytes, plus every layer's saved bytes; with
    ``recompute`` only the input), ``work`` is the transient working set of the backward (the
    largest layer output; with ``recompute`` the re-materialised saved bytes). A device holding
    ``K`` micro-batches in flight peaks at ``static + K * stash + work``.

    Args:
        profile: the :class:`~pipesim.profiles.models.profile.ModelProfile`.
        first_layer: the stage's first layer.
        last_layer: its last layer (inclusive).
        samples: samples of the replica's share of a micro-batch (> 0).
        recompute: activation recomputation.

    Raises:
        InputError: ``samples`` is not > 0.
    """
    layers = range(first_layer, last_layer + 1)
    stashed = profile.stashed_bytes(samples)
    inputs = 0.0
    if first_layer > 0:
        inputs = profile.cuts()[first_layer - 1].crossing_bytes / profile.profile_batch_size * samples
    saved = sum(stashed[i] for i in layers)
    if recompute:
        return inputs, saved
    acts = profile.activation_bytes(samples)
    return inputs + saved, max(acts[i] for i in layers)


def static_memory_bytes(profile: ModelProfile, layers: Iterable[int], optimizer: str) -> float:
    """Weights + gradients + optimizer state of the given layers on one device, bytes.

    Args:
        profile: the model.
        layers: layer indices held by one device (one replica of one or more stages).
        optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.

    Raises:
        InputError: unknown optimizer.
    """
    params = sum(profile.layers[i].parameter_bytes for i in layers)
    return params * static_memory_multiplier(profile.dtype, optimizer)
