"""AmoebaNet-D as the TensorFlow 1.x reference builds and runs it (``amoebanet36:framework=tf1``).

The DAPPLE authors' AmoebaNet profiles (github.com/AlibabaPAI/DAPPLE, ``profiling_results/amoeba-*``)
were measured on the TensorFlow 1.x model in that repository's ``amoeba_net/`` (the TPU reference
``tensorflow/tpu/models/official/amoeba_net`` with DAPPLE's pipeline slicing): ``model_builder.py``
``_build_network_base``, ``network_utils.py`` ``BaseCell``, ``model_specs.py`` ``amoeba_net_d``,
run with ``run.sh``'s flags (224 x 224 images, ``reduction_size`` F = 512, fp32, drop path off:
``drop_connect_keep_prob`` defaults to 1.0 in ``amoeba-dapple.py``). Its network differs from the
PyTorch port that GPipe's and torchgpipe's benchmarks use (:mod:`.amoebanet`) in the stem and in
how a cell adapts its inputs:

* the stem is one 3 x 3 stride-2 ``VALID`` convolution to ``stem_reduction_size`` = 32 filters
  (224 -> 111 pixels), and the two stem reduction cells have F/4 and F/2 filters (``filter_scaling``
  starts at 1/2^2); the normal cells have F, 2F, 4F as in the port;
* the first stem cell has no cell before its input: its second state is the stem's output itself,
  32 channels, so its operations on that state add 1 x 1 convolutions to F/4 channels
  (``_apply_operation``: ``input_filters != filter_size``);
* an identity (``none``) with stride 2 is a strided 1 x 1 convolution, not a factorized reduction;
* a cell whose input two cells back has another size reduces it by ``factorized_reduction``
  (two 1 x 1 stride-2 average pools, one of the padded and shifted map, two 1 x 1 convolutions,
  a concat and a batch norm).

This reproduces the measured files' parameter sizes exactly (conv weights: e.g. 61,440 in
``cell_stem_0``, 2,097,152 in ``cell_0``). Every TensorFlow op is its own kernel: ``Relu`` (one
per distinct input: Grappler's arithmetic optimizer merges the duplicate ``tf.nn.relu`` calls of a
state), ``Conv2D`` and its two gradients through cuDNN, ``FusedBatchNorm`` (cuDNN training-mode
batch norm, no moving-average updates: the training op does not depend on them), pools through
cuDNN (``MaxPoolGrad`` reads the input, the output and the output gradient), ``Add``, ``ConcatV2``
(its gradient: one ``Slice`` per input), ``Pad`` and ``StridedSlice`` with their gradients, and an
``AddN`` wherever a tensor feeds several ops (TensorFlow sums the gradients of a tensor's
consumers in one ``AddN``). Grappler's layout optimizer runs the graph in NCHW, so no transposes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pipesim.errors import invalid
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.profiles.models.zoo.amoebanet import (
    _NORMAL_CONCAT,
    _NORMAL_OPS,
    _REDUCTION_CONCAT,
    _REDUCTION_OPS,
    cell_network_profile,
)
from pipesim.profiles.models.zoo.roofline import LayerCost, Roofline
from pipesim.profiles.models.zoo.tf1_ops import ADD
from pipesim.profiles.models.zoo.vision import IMAGE_SIZE

__all__ = ["STEM_FILTERS", "TF_NUM_CLASSES", "amoebanet_d_tf1"]

STEM_FILTERS = 32
"""``stem_reduction_size``: the stem convolution's filters (``amoeba-dapple.py`` flag default)."""
TF_NUM_CLASSES = 1001
"""``num_label_classes`` (``amoeba-dapple.py``): ImageNet's 1000 classes and a background class."""


@dataclass(slots=True)
class _Tensor:
    """A map in a cell: channels, side, and how many ops read it (for the backward ``AddN``)."""

    c: int
    h: int
    uses: int = 0
    relu: _Tensor | None = field(default=None, repr=False)


class _TfCell:
    """The ops of one TensorFlow cell (or the stem), costed into one :class:`LayerCost`."""

    def __init__(self, lc: LayerCost, batch: int) -> None:
        self.lc = lc
        self.b = batch
        self.tensors: list[_Tensor] = []

    def new(self, c: int, h: int) -> _Tensor:
        t = _Tensor(c, h)
        self.tensors.append(t)
        return t

    def size(self, t: _Tensor) -> int:
        return self.b * t.c * t.h * t.h

    def read(self, t: _Tensor) -> _Tensor:
        t.uses += 1
        return t

    def relu(self, t: _Tensor) -> _Tensor:
        """``tf.nn.relu(t)``, one op per distinct input (Grappler merges duplicates)."""
        if t.relu is None:
            self.read(t)
            out = self.new(t.c, t.h)
            self.lc.relu(self.size(t))
            self.lc.save(self.size(t))  # its output: the next op's input and ReluGrad's
            t.relu = out
        return self.read(t.relu)

    def conv_bn(self, x: _Tensor, cout: int, kh: int, kw: int, *, sh: int = 1, sw: int = 1) -> _Tensor:
        """``slim.conv2d`` (no bias, no activation) and the reference's ``batch_norm`` on ``x``
        (already read by the caller); SAME padding, so the side is ``ceil(h / stride)``."""
        lc, b = self.lc, self.b
        ho, wo = -(-x.h // sh), -(-x.h // sw)
        lc.conv(b, x.c, cout, kh, kw, ho, wo, x.h, x.h, stride=max(sh, sw))
        if ho != wo:  # the 1x7 half of a strided 1x7_7x1: a non-square map in between
            raise AssertionError("non-square maps are handled by conv_1x7_7x1")
        out = self.new(cout, ho)
        lc.batchnorm(self.size(out), cout)
        lc.save(self.size(out))  # the batch norm's input
        return out

    def conv_1x7_7x1(self, x: _Tensor, f: int, stride: int) -> _Tensor:
        """Bottleneck 1x7 then 7x1 (``_apply_conv_operation``): the 1x7 strides the width, the
        7x1 the height."""
        lc, b = self.lc, self.b
        q = f // 4
        pre = self.conv_bn(self.relu(x), q, 1, 1)
        self.relu(pre)
        wo = -(-pre.h // stride)
        lc.conv(b, q, q, 1, 7, pre.h, wo, pre.h, pre.h, stride=stride)
        mid = b * q * pre.h * wo
        lc.batchnorm(mid, q)
        lc.save(mid)
        lc.relu(mid)
        lc.save(mid)
        lc.conv(b, q, q, 7, 1, wo, wo, pre.h, wo, stride=stride)
        seven = self.new(q, wo)
        lc.batchnorm(self.size(seven), q)
        lc.save(self.size(seven))
        return self.conv_bn(self.relu(seven), f, 1, 1)

    def pool(self, x: _Tensor, stride: int, *, kind: str) -> _Tensor:
        """``slim.max_pool2d`` / ``avg_pool2d`` (SAME) through cuDNN: the forward reads the input
        and writes the output; ``MaxPoolGrad`` reads input, output and output gradient and writes
        the input gradient, ``AvgPoolGrad`` reads the output gradient and writes the input's."""
        self.read(x)
        out = self.new(x.c, -(-x.h // stride))
        e_in, e_out = self.size(x), self.size(out)
        d = self.lc.rl.elem_bytes
        self.lc.memory_kernel("fwd", 9.0 * e_out, d * (e_in + e_out))
        if kind == "max":
            self.lc.memory_kernel("bwd", 9.0 * e_out, d * (2 * e_in + 2 * e_out))
            self.lc.save(e_in)
            self.lc.save(e_out)  # cuDNN's gradient re-reads the output (no indices)
        else:
            self.lc.memory_kernel("bwd", 9.0 * e_out, d * (e_in + e_out))
        return out

    def add(self, x: _Tensor, y: _Tensor) -> _Tensor:
        """``h1 + h2``: one kernel forward; ``_AddGrad`` hands the gradient to both inputs."""
        self.read(x)
        self.read(y)
        out = self.new(x.c, x.h)
        self.lc.op_sequence(self.size(out), ADD)
        return out

    def concat(self, parts: list[_Tensor]) -> _Tensor:
        """``tf.concat`` on channels: one copy forward, one ``Slice`` per input backward."""
        for t in parts:
            self.read(t)
        out = self.new(sum(t.c for t in parts), parts[0].h)
        d = self.lc.rl.elem_bytes
        self.lc.memory_kernel("fwd", 0.0, 2 * d * self.size(out))
        for t in parts:
            self.lc.memory_kernel("bwd", 0.0, 2 * d * self.size(t))
        return out

    def factorized_reduction(self, x: _Tensor, f: int) -> _Tensor:
        """``network_utils.factorized_reduction`` with stride 2 on ``relu(x)`` (read by the caller):
        path 1 a 1x1 stride-2 average pool (a strided copy) and a 1x1 convolution to f/2; path 2
        ``tf.pad`` by one pixel, ``[:, 1:, 1:, :]``, the same pool and convolution; concat; batch
        norm."""
        lc, b, d = self.lc, self.b, self.lc.rl.elem_bytes
        ho = -(-x.h // 2)
        quarter = b * x.c * ho * ho
        padded = b * x.c * (x.h + 1) * (x.h + 1)
        full = self.size(x)
        lc.memory_kernel("fwd", 0.0, d * (padded + full))  # Pad
        lc.memory_kernel("bwd", 0.0, d * (padded + full))  # its gradient: a Slice
        lc.memory_kernel("fwd", 0.0, 2 * d * full)  # StridedSlice [:, 1:, 1:, :]
        lc.memory_kernel("bwd", 0.0, d * (padded + full))  # StridedSliceGrad: zero fill, copy
        for _ in range(2):
            lc.memory_kernel("fwd", 0.0, 2 * d * quarter)  # AvgPool 1x1 stride 2
            lc.memory_kernel("bwd", 0.0, d * (quarter + full))  # AvgPoolGrad
            lc.save(quarter)
            lc.conv(b, x.c, f // 2, 1, 1, ho, ho, ho, ho)
        lc.memory_kernel("fwd", 0.0, 2 * d * b * f * ho * ho)  # concat
        lc.memory_kernel("bwd", 0.0, 2 * d * b * f * ho * ho)  # its two slices
        out = self.new(f, ho)
        lc.batchnorm(self.size(out), f)
        lc.save(self.size(out))
        _addn(lc, full, 2)  # relu(x)'s gradient from the two paths
        return out

    def finish(self) -> None:
        """The backward ``AddN`` of every tensor read by more than one op."""
        for t in self.tensors:
            if t.uses > 1:
                _addn(self.lc, self.size(t), t.uses)


def _addn(lc: LayerCost, elements: float, inputs: int) -> None:
    lc.memory_kernel("bwd", elements * (inputs - 1), lc.rl.elem_bytes * elements * (inputs + 1))


def _apply(cell: _TfCell, x: _Tensor, op: str, f: int, stride: int) -> _Tensor:
    """``BaseCell._apply_operation`` (drop path off)."""
    if op in ("conv_3x3", "conv_1x7_7x1"):
        if op == "conv_1x7_7x1":
            return cell.conv_1x7_7x1(x, f, stride)
        pre = cell.conv_bn(cell.relu(x), f // 4, 1, 1)
        mid = cell.conv_bn(cell.relu(pre), f // 4, 3, 3, sh=stride, sw=stride)
        return cell.conv_bn(cell.relu(mid), f, 1, 1)
    if op in ("none", "conv_1x1"):
        if stride > 1 or op == "conv_1x1" or x.c != f:
            return cell.conv_bn(cell.relu(x), f, 1, 1, sh=stride, sw=stride)
        return cell.read(x)
    kind = "avg" if op.startswith("avg") else "max"
    out = cell.pool(x, stride, kind=kind)
    if x.c != f:
        out = cell.conv_bn(cell.read(out), f, 1, 1)
    return out


def _cell(rl: Roofline, name: str, batch: int, *, net: tuple[int, int], prev: tuple[int, int] | None,
          f: int, reduction: bool) -> tuple[Layer, int, int]:
    """``BaseCell.__call__``: returns the layer, its output channels and side."""
    lc = LayerCost(name, rl)
    cell = _TfCell(lc, batch)
    x = cell.new(*net)
    # _reduce_prev_layer: the first stem cell has no cell two back and takes its input as it is
    p = x if prev is None else cell.new(*prev)
    if prev is not None and p.h != x.h:
        p = cell.factorized_reduction(cell.relu(p), f)
    elif prev is not None and p.c != f:
        p = cell.conv_bn(cell.relu(p), f, 1, 1)
    states = [cell.conv_bn(cell.relu(x), f, 1, 1), p]
    ops, concat = (_REDUCTION_OPS, _REDUCTION_CONCAT) if reduction else (_NORMAL_OPS, _NORMAL_CONCAT)
    stride = 2 if reduction else 1
    for k in range(0, len(ops), 2):
        outs = [_apply(cell, states[i], op, f, stride if i < 2 else 1) for i, op in ops[k : k + 2]]
        states.append(cell.add(*outs))
    out = cell.concat([states[i] for i in concat])
    cell.finish()
    return lc.build(output_elements=cell.size(out)), out.c, out.h


def amoebanet_d_tf1(rl: Roofline, batch: int, *, normal_cells: int, filters: int, name: str) -> ModelProfile:
    """AmoebaNet-D (L = ``normal_cells``, F = ``filters``) as the TensorFlow 1.x reference builds
    it (module doc), costed op by op at ``batch`` images of 224 x 224: ``L + 6`` layers named as
    the reference's scopes (``stem``, ``cell_stem_0``, ``cell_stem_1``, ``cell_0`` ..., with
    ``reduction_cell_0`` and ``_1`` before the normal cells ``L/3`` and ``2L/3``,
    ``final_layer``: ReLU, global average pool, dropout, the 1001-way classifier and the
    label-smoothed softmax loss). The auxiliary head (``use_aux_head``: an average pool, two
    small convolutions and a classifier on the last cell of the second group, ~0.1% of the
    FLOP) is not modelled.

    Raises:
        InputError: ``normal_cells`` not a positive multiple of 3, or ``filters`` not a positive
            multiple of 8.
    """
    if not isinstance(normal_cells, int) or normal_cells < 3 or normal_cells % 3:
        raise invalid("normal_cells", normal_cells, "must be a positive multiple of 3")
    if not isinstance(filters, int) or filters < 8 or filters % 8:
        raise invalid("filters", filters, "must be a positive multiple of 8")
    layers: list[Layer] = []
    stem = LayerCost("stem", rl)
    h = (IMAGE_SIZE - 3) // 2 + 1  # VALID
    stem.save(batch * 3 * IMAGE_SIZE * IMAGE_SIZE)
    stem.conv(batch, 3, STEM_FILTERS, 3, 3, h, h, IMAGE_SIZE, IMAGE_SIZE, stride=2, input_grad=False)
    stem.batchnorm(batch * STEM_FILTERS * h * h, STEM_FILTERS)
    stem.save(batch * STEM_FILTERS * h * h)
    layers.append(stem.build(output_elements=batch * STEM_FILTERS * h * h))
    first = normal_cells // 3
    plan: list[tuple[str, bool, int]] = [
        ("cell_stem_0", True, filters // 4),
        ("cell_stem_1", True, filters // 2),
    ]
    scale = 1
    for i in range(normal_cells):
        if i in (first, 2 * first):
            scale *= 2
            plan.append((f"reduction_cell_{i // first - 1}", True, filters * scale))
        plan.append((f"cell_{i}", False, filters * scale))
    outputs: list[tuple[int, int] | None] = [None, (STEM_FILTERS, h)]
    for cell_name, reduction, f in plan:
        net = outputs[-1]
        assert net is not None
        layer, c, side = _cell(rl, cell_name, batch, net=net, prev=outputs[-2], f=f, reduction=reduction)
        layers.append(layer)
        outputs.append((c, side))
    c, side = outputs[-1] or (0, 0)
    head = LayerCost("final_layer", rl)
    head.relu(batch * c * side * side)
    head.save(batch * c * side * side)
    head.eltwise(batch * c * side * side, fwd_passes=1, bwd_passes=1)  # reduce_mean / its gradient
    head.dropout(batch * c)
    head.linear(batch, c, TF_NUM_CLASSES)
    head.save(batch * c)
    head.eltwise(batch * TF_NUM_CLASSES, fwd_passes=3, bwd_passes=2, flop_per_element=5)  # loss
    head.save(batch * TF_NUM_CLASSES)
    layers.append(head.build(output_elements=batch * TF_NUM_CLASSES))
    return cell_network_profile(
        name, layers, rl, batch,
        f"AmoebaNet-D (L={normal_cells}, F={filters}) as the TensorFlow 1.x reference builds it, "
        "ImageNet 224x224",
    )
