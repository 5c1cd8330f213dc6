"""Analytic model zoo: built-in profiles of classic pipeline-parallel benchmarks on a V100.

Each model is built from its real layer shapes: FLOP and bytes moved per kernel, turned into
time by a roofline with a calibrated achievable fraction of the V100's peak (see
:mod:`pipesim.profiles.models.zoo.roofline` and ``docs/zoo.md``). Names are case-insensitive:

==============  ============================================  ========  =======  ==============
name            model                                         seq len   batch    parameters
==============  ============================================  ========  =======  ==============
``vgg19``       VGG-19, ImageNet 224x224                      -         32       143.7M
``resnet50``    ResNet-50 v1.5, ImageNet 224x224              -         64       25.6M
``gnmt16``      GNMT, 8+8 LSTM layers, hidden 1024 (DAG)      50        64       277.7M
``bert48``      BERT-large shape, 48 encoder layers           384       6        638.5M
``xlnet36``     XLNet-large shape, 36 layers                  512       4        524.1M
``amoebanet36`` AmoebaNet-D (36, 512), ImageNet (DAG)         -         16       935.8M
``gpt``         GPT decoder from a spec string                spec      1        1.3B default
==============  ============================================  ========  =======  ==============

``gpt`` takes ``gpt:layers=24,hidden=2048,heads=16,seq=2048,vocab=50257`` (any subset of the
keys; the rest default to those values).

Training dtype: ``float32`` by default (the setting of the DAPPLE and PipeDream V100
measurements); ``float16`` means mixed precision: tensor-core peak, 2-byte activations, and
``parameter_bytes`` holding the 2-byte fp16 working weights only. The fp32 master weights,
gradients and optimizer state of mixed precision are not part of a profile: an optimizer/memory
model adds them from ``parameter_count``.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from pipesim.errors import UnknownNameError, invalid
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.zoo.amoebanet import AMOEBANET36_BATCH, amoebanet36
from pipesim.profiles.models.zoo.gnmt import GNMT16_BATCH, gnmt16
from pipesim.profiles.models.zoo.roofline import Roofline, roofline_for
from pipesim.profiles.models.zoo.transformers import (
    BERT48_BATCH,
    GPT_BATCH,
    XLNET36_BATCH,
    GptSpec,
    bert48,
    gpt,
    parse_gpt_spec,
    xlnet36,
)
from pipesim.profiles.models.zoo.vision import RESNET50_BATCH, VGG19_BATCH, resnet50, vgg19

__all__ = ["GptSpec", "parse_gpt_spec", "zoo_descriptions", "zoo_model", "zoo_names"]

_Builder = Callable[[Roofline, int], ModelProfile]

_MODELS: dict[str, tuple[_Builder, int, str]] = {
    "vgg19": (vgg19, VGG19_BATCH, "VGG-19, ImageNet 224x224"),
    "resnet50": (resnet50, RESNET50_BATCH, "ResNet-50 v1.5, ImageNet 224x224"),
    "gnmt16": (gnmt16, GNMT16_BATCH, "GNMT, 8+8 LSTM layers, hidden 1024, DAG"),
    "bert48": (bert48, BERT48_BATCH, "BERT-large shape (hidden 1024, 16 heads), 48 layers"),
    "xlnet36": (xlnet36, XLNET36_BATCH, "XLNet-large shape (hidden 1024, 16 heads), 36 layers"),
    "amoebanet36": (amoebanet36, AMOEBANET36_BATCH, "AmoebaNet-D (L=36, F=512), ImageNet 224x224, DAG"),
}
"""name -> (builder, default profile batch, short description)."""


def zoo_names() -> tuple[str, ...]:
    """The zoo's model names, including ``"gpt"`` (which takes a spec), sorted."""
    return tuple(sorted([*_MODELS, "gpt"]))


def _check_batch(batch_size: int | None, default: int) -> int:
    if batch_size is None:
        return default
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise invalid("batch_size", batch_size, "must be an integer >= 1 (or omitted for the default)")
    return batch_size


@lru_cache(maxsize=64)
def _build(name: str, dtype: str, batch: int, spec: GptSpec | None) -> ModelProfile:
    rl = roofline_for(dtype)
    if spec is not None:
        return gpt(rl, batch, spec)
    builder = _MODELS[name][0]
    return builder(rl, batch)


def zoo_model(spec: str, *, dtype: str = "float32", batch_size: int | None = None) -> ModelProfile:
    """Build a zoo model's profile on the V100-SXM2-16GB.

    Args:
        spec: a zoo name (case-insensitive), or a GPT spec ``gpt:key=value,...`` with keys
            ``layers``, ``hidden``, ``heads``, ``seq``, ``vocab`` (omitted keys take their
            defaults: 24, 2048, 16, 2048, 50257).
        dtype: ``"float32"`` (default) or ``"float16"`` (mixed precision; see the module doc).
        batch_size: the profile batch in samples; ``None`` for the model's stated default.

    Returns:
        The profile. A GPT profile is named by its canonical spec string.

    Raises:
        UnknownNameError: ``spec`` names no zoo model.
        InputError: a bad GPT spec (the message names the key and the rule), parameters given
            to a model that takes none, a dtype other than float32/float16, or a batch size
            that is not an integer >= 1.
    """
    if not isinstance(spec, str):
        raise invalid("model", spec, "must be a string naming a zoo model")
    name, sep, _rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name == "gpt":
        gpt_spec = parse_gpt_spec(spec)
        return _build("gpt", dtype, _check_batch(batch_size, GPT_BATCH), gpt_spec)
    if name not in _MODELS:
        raise UnknownNameError("model", spec.strip(), zoo_names())
    if sep:
        raise invalid("model", spec.strip(), f"{name} takes no parameters (only gpt does)")
    return _build(name, dtype, _check_batch(batch_size, _MODELS[name][1]), None)


def _millions(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def zoo_descriptions() -> list[tuple[str, str]]:
    """One line per zoo model for ``pipesim models``: ``(name, description)``, sorted by name.

    The description gives the shape, the parameter count, the sequence length (for sequence
    models) and the default profile batch (pbs).
    """
    rows: list[tuple[str, str]] = []
    for name in zoo_names():
        profile = zoo_model(name)
        seq = f", seq {profile.seq_len}" if profile.seq_len is not None else ""
        text = f"GPT decoder from a spec, default {GptSpec().text()}" if name == "gpt" else _MODELS[name][2]
        rows.append((name, f"{text}; {_millions(profile.parameter_count)} params{seq}, "
                           f"pbs {profile.profile_batch_size}"))
    return rows
