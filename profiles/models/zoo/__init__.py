"""Analytic model zoo: built-in profiles of classic pipeline-parallel benchmarks, costed per device.

Each model is built from its real layer shapes: GEMM shapes, FLOP and bytes moved per kernel,
turned into time by the kernel-level compute model of a catalog device
(:mod:`pipesim.profiles.costmodels.compute`, through :mod:`pipesim.profiles.models.zoo.roofline`;
``docs/zoo.md``). Names are case-insensitive:

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
keys; the rest default to those values), plus the switches ``flash``, ``untie`` and ``eager``
(``eager=1``: the blocks' element-wise work op by op as eager PyTorch runs HuggingFace's
GPT2Block, :mod:`~pipesim.profiles.models.zoo.eager_ops`; ``eager=dtfm``: DT-FM's own model, its
block, embedding and classifier head, as PyTorch 1.9 runs them op by op,
:mod:`~pipesim.profiles.models.zoo.dtfm`).

Framework: ``bert48``, ``xlnet36`` and ``amoebanet36`` take ``:framework=pytorch`` (the default:
fused kernels, one per layer norm, GeLU, softmax and dropout, biases in the GEMM epilogue, as
PyTorch and Megatron-LM run them; AmoebaNet as the PyTorch port of GPipe's and torchgpipe's
benchmarks builds it) or ``:framework=tf1`` (the TensorFlow 1.x graph of the reference
implementations, op by op: every bias a ``BiasAdd``, a layer norm of 10 kernels, TensorFlow's
gradients op by op, :mod:`~pipesim.profiles.models.zoo.tf1_blocks`; AmoebaNet with the
TensorFlow reference's stem and cell wiring, :mod:`~pipesim.profiles.models.zoo.amoebanet_tf1`),
e.g. ``bert48:framework=tf1``: the framework the DAPPLE authors' measured V100 profiles ran. The
profile is named by the canonical spec (``bert48:framework=tf1``; ``bert48`` for the default).

Training precision: ``float32`` by default (the setting of the DAPPLE and PipeDream V100
measurements); ``tfloat32`` runs the GEMMs on tensor cores with fp32 tensors; ``float16`` and
``bfloat16`` mean mixed precision: tensor-core peak, 2-byte activations, and ``parameter_bytes``
holding the 2-byte working weights only; ``float8`` runs the GEMMs at the FP8 peak with bf16
activations and weights. The fp32 master weights, gradients and optimizer state of mixed
precision are not part of a profile: the memory model adds them from ``parameter_count``
(:mod:`pipesim.profiles.costmodels.memory`). Models are costed on any catalog device (default
the V100-SXM2-16GB), at their profile batch and at powers of two around it (``batch_points``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import lru_cache, partial

from pipesim.errors import UnknownNameError, invalid
from pipesim.profiles.costmodels.compute import compute_model
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.hardware.specs import DeviceSpec, parse_precision
from pipesim.profiles.models.profile import BatchPoint, ModelProfile
from pipesim.profiles.models.zoo.amoebanet import (
    AMOEBANET36_BATCH,
    AMOEBANET36_FILTERS,
    AMOEBANET36_NORMAL_CELLS,
    amoebanet36,
)
from pipesim.profiles.models.zoo.amoebanet_tf1 import amoebanet_d_tf1
from pipesim.profiles.models.zoo.gnmt import GNMT16_BATCH, gnmt16
from pipesim.profiles.models.zoo.roofline import REFERENCE_DEVICE, Roofline
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

__all__ = [
    "FRAMEWORKS",
    "GptSpec",
    "is_zoo_spec",
    "parse_gpt_spec",
    "zoo_descriptions",
    "zoo_model",
    "zoo_names",
]

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

FRAMEWORKS: tuple[str, ...] = ("pytorch", "tf1")
"""Values of the ``framework`` option: ``pytorch`` (fused kernels, the default) and ``tf1``
(TensorFlow 1.x, op by op)."""
_DEFAULT_FRAMEWORK = "pytorch"

_TF1_MODELS: dict[str, tuple[_Builder, str]] = {
    "amoebanet36": (
        partial(amoebanet_d_tf1, normal_cells=AMOEBANET36_NORMAL_CELLS, filters=AMOEBANET36_FILTERS,
                name="amoebanet36"),
        "AmoebaNet-D (36, 512) as the TensorFlow 1.x reference builds and runs it, op by op",
    ),
    "bert48": (partial(bert48, tf1=True), "BERT-48 as TensorFlow 1.x runs google-research/bert, op by op"),
    "xlnet36": (partial(xlnet36, tf1=True), "XLNet-36 as TensorFlow 1.x runs the XLNet reference, op by op"),
}
"""Models with a ``framework=tf1`` form: name -> (builder, short description)."""


def zoo_names() -> tuple[str, ...]:
    """The zoo's model names, including ``"gpt"`` (which takes a spec), sorted."""
    return tuple(sorted([*_MODELS, "gpt"]))


def _check_batch(batch_size: int | None, default: int) -> int:
    if batch_size is None:
        return default
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise invalid("batch_size", batch_size, "must be an integer >= 1 (or omitted for the default)")
    return batch_size


_POINT_SPAN = 4
"""Batch points reach ``_POINT_SPAN`` times the profile batch (at least 8 samples)."""


def _point_sizes(batch: int) -> list[int]:
    """Batch sizes the zoo costs besides ``batch``: powers of two from 1 up to
    ``max(8, _POINT_SPAN x batch)``, so that a plan's micro-batch is costed from the nearest sizes
    (beyond the largest, the last segment's per-sample slope is extended)."""
    top = max(8, _POINT_SPAN * batch)
    sizes: list[int] = []
    size = 1
    while size <= top:
        if size != batch:
            sizes.append(size)
        size *= 2
    return sizes


def _one(name: str, rl: Roofline, batch: int, spec: GptSpec | None, framework: str) -> ModelProfile:
    if spec is not None:
        return gpt(rl, batch, spec)
    if framework != _DEFAULT_FRAMEWORK:
        return _TF1_MODELS[name][0](rl, batch)
    return _MODELS[name][0](rl, batch)


def _canonical(name: str, framework: str) -> str:
    """The spec text that names ``name`` in ``framework`` (``bert48``, ``bert48:framework=tf1``)."""
    return name if framework == _DEFAULT_FRAMEWORK else f"{name}:framework={framework}"


def _parse_options(name: str, text: str) -> str:
    """The ``framework`` of the options ``text`` after ``name:`` (``framework=tf1``).

    Raises:
        InputError: ``name`` takes no options, an item is not ``key=value``, a key is unknown or
            repeated, or the framework is not one of :data:`FRAMEWORKS`.
    """
    if name not in _TF1_MODELS:
        takes = ", ".join(("gpt", *sorted(_TF1_MODELS)))
        raise invalid("model", f"{name}:{text}", f"{name} takes no parameters (only {takes} do)")
    found: dict[str, str] = {}
    for item in text.split(","):
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not key:
            raise invalid(name, item.strip(), "each item must be key=value (e.g. framework=tf1)")
        if key != "framework":
            raise invalid(f"{name}.{key}", value, "unknown key; valid keys: framework")
        if key in found:
            raise invalid(f"{name}.{key}", value, "given twice")
        found[key] = value
    framework = found.get("framework", _DEFAULT_FRAMEWORK).lower()
    if framework not in FRAMEWORKS:
        rule = ("must be pytorch (fused kernels, the default) or tf1 (TensorFlow 1.x, one kernel "
                "per graph op)")
        raise invalid(f"{name}.framework", found["framework"], rule)
    return framework


@lru_cache(maxsize=64)
def _build(name: str, precision: str, batch: int, spec: GptSpec | None, device: DeviceSpec,
           framework: str = _DEFAULT_FRAMEWORK) -> ModelProfile:
    rl = Roofline(model=compute_model(device, precision))
    profile = _one(name, rl, batch, spec, framework)
    if framework != _DEFAULT_FRAMEWORK:
        profile = dataclasses.replace(
            profile, name=_canonical(name, framework),
            description=profile.description + ", as TensorFlow 1.x runs it (one kernel per graph op)",
        )
    points = []
    for size in _point_sizes(batch):
        other = _one(name, rl, size, spec, framework)
        points.append(BatchPoint(
            batch_size=size,
            fwd_time_s=tuple(layer.fwd_time_s for layer in other.layers),
            bwd_time_s=tuple(layer.bwd_time_s for layer in other.layers),
            activation_bytes=tuple(layer.activation_bytes for layer in other.layers),
            saved_activation_bytes=tuple(layer.stashed_bytes for layer in other.layers),
        ))
    return dataclasses.replace(profile, batch_points=tuple(points))


def zoo_model(spec: str, *, dtype: str = "float32", batch_size: int | None = None,
              device: str | DeviceSpec = REFERENCE_DEVICE) -> ModelProfile:
    """Build a zoo model's profile on a catalog device.

    The layers are costed at ``batch_size`` and, as ``batch_points``, at powers of two around it,
    so that a plan's micro-batch size is costed with the GEMM efficiency of its own shapes
    (:mod:`pipesim.profiles.costmodels.compute`) rather than scaled linearly.

    Args:
        spec: a zoo name (case-insensitive), a GPT spec ``gpt:key=value,...`` with keys
            ``layers``, ``hidden``, ``heads``, ``seq``, ``vocab`` (omitted keys take their
            defaults: 24, 2048, 16, 2048, 50257), or ``bert48``/``xlnet36`` with the option
            ``:framework=pytorch`` (the default) or ``:framework=tf1`` (see the module doc).
        dtype: the training precision: ``float32``/``fp32`` (default), ``tfloat32``/``tf32``,
            ``float16``/``fp16``, ``bfloat16``/``bf16`` or ``float8``/``fp8`` (mixed precision;
            see the module doc). The profile's ``dtype`` is the storage dtype of the precision.
        batch_size: the profile batch in samples; ``None`` for the model's stated default.
        device: the device to cost on: a catalog name (default :data:`REFERENCE_DEVICE`) or a
            :class:`~pipesim.profiles.hardware.specs.DeviceSpec` (a cluster's, custom ones included).

    Returns:
        The profile. A GPT profile is named by its canonical spec string, a TensorFlow 1.x one
        by ``name:framework=tf1``.

    Raises:
        UnknownNameError: ``spec`` names no zoo model, or ``device`` no catalog device.
        InputError: a bad GPT spec or model option (the message names the key, the value and
            the rule: ``bert48.framework='tf2': must be pytorch ... or tf1``), parameters given
            to a model that takes none, an unknown precision or one the device cannot run
            (``dtype='bfloat16': V100-SXM2-16GB cannot train in it; it supports float32,
            float16``), or a batch size that is not an integer >= 1.
    """
    if not isinstance(spec, str):
        raise invalid("model", spec, "must be a string naming a zoo model")
    precision = parse_precision(dtype)
    canonical_device = device if isinstance(device, DeviceSpec) else get_device(device)
    name, sep, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if name == "gpt":
        gpt_spec = parse_gpt_spec(spec)
        return _build("gpt", precision, _check_batch(batch_size, GPT_BATCH), gpt_spec, canonical_device)
    if name not in _MODELS:
        raise UnknownNameError("model", spec.strip(), zoo_names())
    framework = _parse_options(name, rest) if sep else _DEFAULT_FRAMEWORK
    return _build(name, precision, _check_batch(batch_size, _MODELS[name][1]), None, canonical_device,
                  framework)


def is_zoo_spec(spec: str) -> bool:
    """Whether ``spec`` names a zoo model (``bert48``, ``gpt:layers=4``), by its name only."""
    name = spec.strip().partition(":")[0].strip().lower()
    return name == "gpt" or name in _MODELS


def _millions(count: int) -> str:
    return f"{count / 1e9:.2f}B" if count >= 1e9 else f"{count / 1e6:.1f}M"


def zoo_descriptions() -> list[tuple[str, str]]:
    """One line per zoo model for ``pipesim models``: ``(name, description)``, sorted by name.

    The description gives the shape, the parameter count, the sequence length (for sequence
    models) and the default profile batch (pbs). Each model with a TensorFlow 1.x form has a
    second row, ``name:framework=tf1``, after its own.
    """
    def tail(spec: str) -> str:
        profile = zoo_model(spec)
        seq = f", seq {profile.seq_len}" if profile.seq_len is not None else ""
        return f"; {_millions(profile.parameter_count)} params{seq}, pbs {profile.profile_batch_size}"

    rows: list[tuple[str, str]] = []
    for name in zoo_names():
        text = f"GPT decoder from a spec, default {GptSpec().text()}" if name == "gpt" else _MODELS[name][2]
        rows.append((name, text + tail(name)))
        if name in _TF1_MODELS:
            variant = _canonical(name, "tf1")
            rows.append((variant, _TF1_MODELS[name][1] + tail(variant)))
    return rows
