"""The transformer cost model as a function of (samples, sequence length), calibrated to the zoo.

Every quantity of a layer (forward time, backward time, saved bytes, output bytes) is

    value = constant + per_sample * b + per_token * (b s) + per_square_token * (b s^2)

for ``b`` sequences of ``s`` tokens each: a fixed cost (kernel launches), a per-sequence cost
(the zoo launches the attention's batched matmuls once per sequence and head), the linear terms
(projections, MLP, layer norms, dropouts: proportional to tokens) and the attention term,
quadratic in the sequence length (scores, softmax, the two batched matmuls). For sequences of
different lengths in one micro-batch the terms add up per sequence (``b s`` becomes the sum of
lengths, ``b s^2`` the sum of squared lengths), which is how padded and packed micro-batches are
costed (see :mod:`pipesim.planner.dynamic`).

Calibration: a transformer block's four coefficients are fitted, by least squares on relative
errors and with an exact constraint at the zoo model's own (batch, sequence), to the zoo's
roofline cost of the same block (:mod:`pipesim.profiles.models.zoo.transformers`, reached through a
one-block ``gpt`` spec of the same width and heads, whose block is costed by the same function
as the BERT encoder layer) over a grid of (b, s) with 256 .. 8 x the calibration tokens.
So at the zoo's (batch, seq) the model reproduces the zoo layer's times and saved bytes to
floating-point rounding (:data:`CALIBRATION_TOLERANCE`), and over the grid it stays within
:data:`GRID_TOLERANCE` of the zoo. The embedding and head layers are costed as linear in tokens
(exact at the calibration point; they are a small share of a deep model).

Supported models: ``bert48`` and ``gpt`` specs (XLNet's relative-position attention has no
one-block proxy in the zoo and is not supported).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeVar

import numpy as np

from pipesim.errors import InputError, invalid
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.zoo import parse_gpt_spec, zoo_model

__all__ = [
    "CALIBRATION_TOLERANCE",
    "GRID_TOLERANCE",
    "SUPPORTED_MODELS",
    "LayerSeqCost",
    "SeqCostModel",
    "SeqPoly",
    "seq_cost_model",
]

CALIBRATION_TOLERANCE = 1e-6
"""Relative error of the model against the zoo layer at the zoo's own (batch, seq)."""
GRID_TOLERANCE = 0.08
"""Largest relative error of a block's times against the zoo over the calibration grid (the zoo's
tile and wave quantisation makes its times bumpy in (b, s), which the smooth polynomial
cannot follow: the measured worst case is about 7%, at the test's points 1.3%; tested in
``tests/dynamic/test_seqcost.py``)."""
SUPPORTED_MODELS = ("bert48", "gpt")
"""Zoo models with a sequence cost model."""

_BERT_HIDDEN, _BERT_HEADS = 1024, 16  # BERT-large shape (Devlin et al., NAACL 2019)
_BERT_MAX_POSITIONS = 512  # BERT's learned position embeddings (Devlin et al., NAACL 2019)
_BLOCK_NAME = re.compile(r"(?:encoder|block)\d+")
"""Names of the zoo's transformer blocks (bert48: ``encoder<i>``, gpt: ``block<i>``)."""
_PROXY_VOCAB = 8  # the proxy's vocabulary does not touch the block; keep its head cheap

_V = TypeVar("_V", float, "np.ndarray")


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqPoly:
    """``constant + per_sample b + per_token t + per_square_token q`` for ``b`` sequences holding
    ``t`` tokens in all and ``q`` = the sum of their squared lengths.

    Units are those of the quantity (seconds or bytes); coefficients may be any finite number
    (a fit may give a small negative constant).

    Raises:
        InputError: a coefficient that is not finite.
    """

    constant: float = 0.0
    per_sample: float = 0.0
    per_token: float = 0.0
    per_square_token: float = 0.0

    def __post_init__(self) -> None:
        for name in ("constant", "per_sample", "per_token", "per_square_token"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise invalid(name, value, "must be a finite number")

    def __call__(self, samples: _V, tokens: _V, square_tokens: _V) -> _V:
        """The value for ``samples`` sequences of ``tokens`` tokens in all (numbers or numpy arrays)."""
        return (
            self.constant
            + self.per_sample * samples
            + self.per_token * tokens
            + self.per_square_token * square_tokens
        )

    def padded(self, samples: _V, seq_len: _V) -> _V:
        """The value for ``samples`` sequences of ``seq_len`` tokens each."""
        return self(samples, samples * seq_len, samples * seq_len * seq_len)

    def __add__(self, other: SeqPoly) -> SeqPoly:
        return SeqPoly(
            constant=self.constant + other.constant,
            per_sample=self.per_sample + other.per_sample,
            per_token=self.per_token + other.per_token,
            per_square_token=self.per_square_token + other.per_square_token,
        )

    def coefficients(self) -> tuple[float, float, float, float]:
        """``(constant, per_sample, per_token, per_square_token)``."""
        return (self.constant, self.per_sample, self.per_token, self.per_square_token)


ZERO = SeqPoly()


def poly_sum(polys: Sequence[SeqPoly]) -> SeqPoly:
    """The sum of ``polys`` (the zero polynomial for none)."""
    total = ZERO
    for p in polys:
        total = total + p
    return total


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerSeqCost:
    """One layer's costs as functions of (samples, tokens, squared tokens).

    Attributes:
        name: the zoo layer's name.
        fwd_time_s: forward time, seconds.
        bwd_time_s: backward time, seconds.
        saved_bytes: bytes kept for the backward.
        output_bytes: bytes of the layer's output (what crosses a stage boundary after it).
        is_block: a transformer block (fitted) rather than an embedding or head (linear).
    """

    name: str
    fwd_time_s: SeqPoly
    bwd_time_s: SeqPoly
    saved_bytes: SeqPoly
    output_bytes: SeqPoly
    is_block: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class SeqCostModel:
    """A zoo transformer's per-layer costs as functions of the batch's shape.

    Attributes:
        model: the zoo spec (``bert48`` or a canonical ``gpt:...`` string).
        dtype: the training dtype.
        layers: one :class:`LayerSeqCost` per zoo layer, in order.
        max_seq_len: the longest sequence the model takes (its position table), tokens.
        calibration_batch: the zoo profile's batch, samples.
        calibration_seq_len: the zoo profile's sequence length, tokens.
    """

    model: str
    dtype: str
    layers: tuple[LayerSeqCost, ...]
    max_seq_len: int
    calibration_batch: int
    calibration_seq_len: int

    @property
    def num_layers(self) -> int:
        """Number of layers."""
        return len(self.layers)

    def profile(self) -> ModelProfile:
        """The zoo profile the model was calibrated to (parameters, layer names, stage splitting)."""
        return zoo_model(self.model, dtype=self.dtype)

    def layer_values(self, attr: str, samples: float, seq_len: float) -> list[float]:
        """``attr`` (``fwd_time_s``, ``bwd_time_s``, ``saved_bytes``, ``output_bytes``) of every
        layer for ``samples`` sequences of ``seq_len`` tokens.

        Raises:
            InputError: an unknown attribute.
        """
        if attr not in ("fwd_time_s", "bwd_time_s", "saved_bytes", "output_bytes"):
            raise invalid("attr", attr, "must be fwd_time_s, bwd_time_s, saved_bytes or output_bytes")
        return [float(getattr(layer, attr).padded(samples, seq_len)) for layer in self.layers]

    def calibration_error(self) -> float:
        """Largest relative error of the layers' times and saved bytes against the zoo profile at
        the zoo's own batch and sequence length (see :data:`CALIBRATION_TOLERANCE`)."""
        profile = self.profile()
        b, s = self.calibration_batch, self.calibration_seq_len
        worst = 0.0
        for layer, cost in zip(profile.layers, self.layers, strict=True):
            pairs = (
                (layer.fwd_time_s, cost.fwd_time_s),
                (layer.bwd_time_s, cost.bwd_time_s),
                (float(layer.stashed_bytes), cost.saved_bytes),
                (float(layer.activation_bytes), cost.output_bytes),
            )
            for zoo_value, poly in pairs:
                if zoo_value > 0:
                    worst = max(worst, abs(float(poly.padded(b, s)) - zoo_value) / zoo_value)
        return worst


def _shape(spec: str) -> tuple[str, int, int, int]:
    """``(canonical model name, hidden, heads, max_seq_len)`` of a supported zoo spec."""
    name = spec.strip().partition(":")[0].strip().lower()
    if name == "bert48" and ":" not in spec:
        return "bert48", _BERT_HIDDEN, _BERT_HEADS, _BERT_MAX_POSITIONS
    if name == "gpt":
        gpt = parse_gpt_spec(spec)
        return gpt.text(), gpt.hidden, gpt.heads, gpt.seq
    raise invalid(
        "model",
        spec,
        f"the sequence cost model supports {', '.join(SUPPORTED_MODELS)} (bert48, or gpt:key=value,...)",
    )


def _proxy(hidden: int, heads: int, batch: int, seq: int, dtype: str) -> tuple[float, float, float, float]:
    """The zoo's cost of one block of this shape at (batch, seq): fwd, bwd, saved, output."""
    spec = f"gpt:layers=1,hidden={hidden},heads={heads},seq={seq},vocab={_PROXY_VOCAB}"
    block = zoo_model(spec, dtype=dtype, batch_size=batch).layers[1]
    return block.fwd_time_s, block.bwd_time_s, float(block.stashed_bytes), float(block.activation_bytes)


def _grid(batch: int, seq: int, max_seq: int) -> list[tuple[int, int]]:
    """(b, s) points with 256 .. 8 x the calibration tokens, s up to the model's maximum."""
    tokens0 = batch * seq
    points = []
    for s in (16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096):
        if s > max_seq:
            continue
        for b in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256):
            if 256 <= b * s <= 8 * tokens0 and (b, s) != (batch, seq):
                points.append((b, s))
    return points


def fit_anchored(points: Sequence[tuple[int, int, float]], anchor: tuple[int, int, float]) -> SeqPoly:
    """Fit ``constant + per_sample b + per_token b s + per_square_token b s^2`` to ``(b, s, value)``.

    Least squares on relative errors, with the polynomial passing exactly through ``anchor``
    (the constant is eliminated by the constraint). Points with value 0 are skipped.

    Raises:
        InputError: fewer than three usable points.
    """
    b0, s0, v0 = anchor
    rows, rhs = [], []
    for b, s, v in points:
        if v <= 0:
            continue
        rows.append([(b - b0) / v, (b * s - b0 * s0) / v, (b * s * s - b0 * s0 * s0) / v])
        rhs.append(1.0 - v0 / v)
    if len(rows) < 3:
        raise InputError(f"cannot fit a sequence cost from {len(rows)} points (need 3 or more)")
    solution, *_ = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)
    per_sample, per_token, per_sq = (float(x) for x in solution)
    # Drop terms that contribute less than 1e-9 of the anchor value (least-squares noise on
    # quantities that have no such term, e.g. a constant in byte counts).
    scale = 1e-9 * abs(v0)
    per_sample = per_sample if abs(per_sample * b0) > scale else 0.0
    per_token = per_token if abs(per_token * b0 * s0) > scale else 0.0
    per_sq = per_sq if abs(per_sq * b0 * s0 * s0) > scale else 0.0
    constant = v0 - per_sample * b0 - per_token * b0 * s0 - per_sq * b0 * s0 * s0
    constant = constant if abs(constant) > scale else 0.0
    return SeqPoly(constant=constant, per_sample=per_sample, per_token=per_token, per_square_token=per_sq)


def _linear(value: float, tokens: float) -> SeqPoly:
    return SeqPoly(per_token=value / tokens)


@lru_cache(maxsize=16)
def _build(canonical: str, dtype: str, hidden: int, heads: int, max_seq: int) -> SeqCostModel:
    profile = zoo_model(canonical, dtype=dtype)
    batch = profile.profile_batch_size
    seq = profile.seq_len or max_seq
    grid = _grid(batch, seq, max_seq)
    values = [_proxy(hidden, heads, b, s, dtype) for b, s in grid]
    anchor = _proxy(hidden, heads, batch, seq, dtype)
    fitted = [
        fit_anchored([(b, s, v[k]) for (b, s), v in zip(grid, values, strict=True)], (batch, seq, anchor[k]))
        for k in range(4)
    ]
    tokens = float(batch * seq)
    layers = []
    for layer in profile.layers:
        if _BLOCK_NAME.fullmatch(layer.name):
            layers.append(
                LayerSeqCost(
                    name=layer.name,
                    fwd_time_s=fitted[0],
                    bwd_time_s=fitted[1],
                    saved_bytes=fitted[2],
                    output_bytes=fitted[3],
                    is_block=True,
                )
            )
        else:
            layers.append(
                LayerSeqCost(
                    name=layer.name,
                    fwd_time_s=_linear(layer.fwd_time_s, tokens),
                    bwd_time_s=_linear(layer.bwd_time_s, tokens),
                    saved_bytes=_linear(float(layer.stashed_bytes), tokens),
                    output_bytes=_linear(float(layer.activation_bytes), tokens),
                    is_block=False,
                )
            )
    return SeqCostModel(
        model=canonical,
        dtype=dtype,
        layers=tuple(layers),
        max_seq_len=max_seq,
        calibration_batch=batch,
        calibration_seq_len=seq,
    )


def seq_cost_model(spec: str, *, dtype: str = "float32") -> SeqCostModel:
    """The sequence cost model of a zoo transformer (cached per spec and dtype).

    Args:
        spec: ``bert48`` or a ``gpt`` spec (``gpt:layers=24,hidden=2048,...``).
        dtype: ``float32`` (default) or ``float16``.

    Raises:
        InputError: an unsupported model, a bad gpt spec or dtype.
    """
    if not isinstance(spec, str):
        raise invalid("model", spec, "must be a zoo model name")
    canonical, hidden, heads, max_seq = _shape(spec)
    return _build(canonical, dtype, hidden, heads, max_seq)
