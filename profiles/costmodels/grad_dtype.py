"""The dtype data-parallel gradients are accumulated and reduced in (one rule for every cost).

Megatron-LM, ``megatron/training/arguments.py`` (``megatron/arguments.py`` in older versions):
"bfloat16 requires gradient accumulation and all-reduce to be done in fp32": bf16 training forces
``accumulate_allreduce_grads_in_fp32`` (newer versions let ``--grad-reduce-in-bf16`` opt out),
fp16 training keeps it off by default, fp32 training reduces fp32. So a data-parallel gradient
collective moves 4 bytes per parameter in bf16 training, 2 in fp16, 4 in fp32, and the gradient
buffer it reduces holds as many; a parameter all-gather moves the parameter (training) dtype.
:attr:`Plan.grad_reduce_dtype <pipesim.plan.Plan>` overrides the rule.
"""

from __future__ import annotations

from pipesim.errors import invalid
from pipesim.profiles.models.profile import DTYPE_BYTES

__all__ = ["GRAD_REDUCE_DTYPES", "grad_bytes_factor", "grad_reduce_dtype", "parse_grad_reduce_dtype"]

GRAD_REDUCE_DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16")
"""The dtypes data-parallel gradients may be accumulated and reduced in."""

_GRAD_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def parse_grad_reduce_dtype(value: object) -> str | None:
    """The canonical gradient reduction dtype of ``value`` (``"fp32"`` -> ``"float32"``;
    case-insensitive), or ``None`` for ``None`` (the default rule of :func:`grad_reduce_dtype`).

    Raises:
        InputError: not one of ``fp32``, ``bf16``, ``fp16`` or their long names.
    """
    if value is None:
        return None
    if isinstance(value, str):
        key = value.strip().lower()
        key = _GRAD_ALIASES.get(key, key)
        if key in GRAD_REDUCE_DTYPES:
            return key
    names = ", ".join([*_GRAD_ALIASES, *GRAD_REDUCE_DTYPES])
    raise invalid("grad_reduce_dtype", value, f"must be one of {names} (or unset: fp32 for bf16 training, "
                  "else the training dtype)")


def grad_reduce_dtype(dtype: str, override: str | None = None) -> str:
    """The dtype data-parallel gradients are accumulated and reduced in when training in
    ``dtype``: ``override`` when given, else Megatron-LM's rule (module docstring): ``float32``
    for ``bfloat16`` training, the training dtype otherwise.

    Raises:
        InputError: a bad ``override`` (:func:`parse_grad_reduce_dtype`).
    """
    chosen = parse_grad_reduce_dtype(override)
    if chosen is not None:
        return chosen
    return "float32" if dtype == "bfloat16" else dtype


def grad_bytes_factor(dtype: str, override: str | None = None) -> float:
    """Gradient bytes per parameter byte (parameters in the training ``dtype``): the bytes of
    :func:`grad_reduce_dtype` over the training dtype's (2.0 for bf16 training by default, else
    1.0). A gradient collective's bytes are the parameter bytes times this factor.

    Raises:
        InputError: a bad ``override``.
    """
    return DTYPE_BYTES[grad_reduce_dtype(dtype, override)] / DTYPE_BYTES[dtype]
