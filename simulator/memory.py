"""The memory model: static bytes per stage (weights, gradients, optimizer state) and activations.

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

from collections.abc import Sequence

from pipesim.errors import invalid
from pipesim.profiles.model import ModelProfile

__all__ = ["OPTIMIZER_STATE_MULTIPLIER", "static_memory_bytes"]

OPTIMIZER_STATE_MULTIPLIER: dict[tuple[str, bool], float] = {
    # (optimizer, mixed precision) -> optimizer-state bytes per parameter byte; see module docstring
    ("sgd", False): 0.0,
    ("momentum", False): 1.0,
    ("adam", False): 2.0,
    ("sgd", True): 2.0,
    ("momentum", True): 4.0,
    ("adam", True): 6.0,
}


def static_memory_bytes(profile: ModelProfile, layers: Sequence[int], optimizer: str) -> float:
    """Weights + gradients + optimizer state of the given layers, bytes.

    Args:
        profile: the model.
        layers: layer indices held by one device (one replica of one or more stages).
        optimizer: ``"sgd"``, ``"momentum"`` or ``"adam"``.

    Raises:
        InputError: unknown optimizer.
    """
    mixed = profile.dtype != "float32"
    key = (optimizer, mixed)
    if key not in OPTIMIZER_STATE_MULTIPLIER:
        raise invalid("optimizer", optimizer, "must be one of sgd, momentum, adam")
    params = sum(profile.layers[i].parameter_bytes for i in layers)
    return params * (2.0 + OPTIMIZER_STATE_MULTIPLIER[key])
