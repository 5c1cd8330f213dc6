"""Transformer layer shapes: what tensor parallelism needs to know of a layer.

A profile's layer may carry a :class:`LayerShape` (the zoo's transformer models and ``gpt:``
specs do; profile files may give one under a layer's ``shape`` key). Tensor parallelism
(:mod:`pipesim.profiles.costmodels.tensor_parallel`) splits a shaped layer's GEMMs over ``t``
devices the way Megatron-LM does (Shoeybi et al., arXiv:1909.08053, Sec. 3; Korthikanti et al.,
arXiv:2205.05198, Sec. 4.2.2) and derives its collectives from the shape; a layer without a
shape (a TorchGraph import, say) cannot be tensor-parallel.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pipesim.errors import check_count, check_nonneg, invalid, parse_name

__all__ = ["LAYER_KINDS", "LayerKind", "LayerShape"]


class LayerKind(str, Enum):
    """What a shaped layer is: a transformer ``block`` (attention + MLP), the token
    ``embedding`` (vocabulary-parallel under TP) or the LM ``head`` (vocabulary-parallel logits
    and cross-entropy)."""

    BLOCK = "block"
    EMBEDDING = "embedding"
    HEAD = "head"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> LayerKind:
        """The kind called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: no such kind; the message lists the valid names.
        """
        return parse_name("shape.kind", cls, name)


LAYER_KINDS: tuple[str, ...] = tuple(k.value for k in LayerKind)
"""Layer kind names."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    """The shape of one transformer layer, per sample.

    Attributes:
        kind: a :class:`LayerKind` (or its name).
        hidden: model width ``h``.
        heads: attention heads ``a`` (``hidden`` must be a multiple).
        seq: tokens per sample ``s``.
        ffn: MLP width (``4 h`` in GPT).
        vocab: vocabulary size.
        replicated_params: parameters (elements) that tensor parallelism keeps whole on every
            device of a group: layer norms, the biases of row-parallel GEMMs, learned position
            embeddings.
        replicated_fwd_fraction: share of the layer's forward time in operations that tensor
            parallelism without sequence parallelism does not split (layer norms, the residual
            dropouts and adds); 0 to 1.
        replicated_bwd_fraction: likewise for the backward.

    Raises:
        InputError: a size that is not a positive integer, ``hidden`` not a multiple of
            ``heads``, negative replicated parameters, or a fraction outside [0, 1].
        UnknownNameError: an unknown kind.
    """

    kind: LayerKind
    hidden: int
    heads: int
    seq: int
    ffn: int
    vocab: int
    replicated_params: int = 0
    replicated_fwd_fraction: float = 0.0
    replicated_bwd_fraction: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", LayerKind.parse(self.kind))
        for name in ("hidden", "heads", "seq", "ffn", "vocab"):
            check_count(f"shape.{name}", getattr(self, name))
        if self.hidden % self.heads:
            raise invalid("shape.hidden", self.hidden, f"must be a multiple of heads ({self.heads})")
        check_count("shape.replicated_params", self.replicated_params, minimum=0)
        for name in ("replicated_fwd_fraction", "replicated_bwd_fraction"):
            value = check_nonneg(f"shape.{name}", getattr(self, name))
            if value > 1:
                raise invalid(f"shape.{name}", value, "must be a number in [0, 1]")
