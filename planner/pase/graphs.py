"""PaSE's built-in networks: alexnet, resnet101, inception3, rnnlm, transformer.

Layer shapes follow PaSE's ``graph.py`` at commit 32aa761 (github.com/baidu-research/PaSE, main
branch; Elango, IPDPS 2021): AlexNet on 227x227 images with a 1024-class FC8; ResNet-101
(torchvision layout, 227x227 input); Inception-v3 (torchvision layout, 299x299, no auxiliary
head); a Transformer of 6 encoder and 6 decoder layers, post-norm (sequence 256, vocabulary
50,000, embedding 512, 8 heads of ``d_k = 64``, feed-forward 2048; PaSE's "Small" model); and an
RNN language model (2 LSTM layers of 2048 units, sequence 256, vocabulary 100,000). The last two
use PaSE's cutoff of 1 element per device, the others 4.
"""

from __future__ import annotations

from collections.abc import Callable

from pipesim.errors import UnknownNameError, invalid
from pipesim.planner.pase.configs import DEFAULT_CUTOFF
from pipesim.planner.pase.graph import PaseGraph
from pipesim.planner.pase.ops import GraphBuilder, Tensor

__all__ = ["build_graph", "graph_names"]


def _alexnet(g: GraphBuilder, b: int) -> None:
    x = g.input((b, 3, 227, 227))
    x = g.conv(x, (96, 3, 11, 11), stride=4, pw_op_cnt=1, name="conv1")
    x = g.pool(x, (3, 3), stride=2, name="pool1")
    x = g.conv(x, (256, 96, 5, 5), pad=2, pw_op_cnt=1, name="conv2")
    x = g.pool(x, (3, 3), stride=2, name="pool2")
    x = g.conv(x, (384, 256, 3, 3), pad=1, pw_op_cnt=1, name="conv3")
    x = g.conv(x, (384, 384, 3, 3), pad=1, pw_op_cnt=1, name="conv4")
    x = g.conv(x, (256, 384, 3, 3), pad=1, pw_op_cnt=1, name="conv5")
    x = g.pool(x, (3, 3), stride=2, name="pool5")
    x = g.reshape(x, (b, 256 * 6 * 6), name="flatten")
    x = g.fc(x, 4096, pw_op_cnt=1, name="fc6")
    x = g.fc(x, 4096, pw_op_cnt=1, name="fc7")
    x = g.fc(x, 1024, name="fc8")
    g.softmax_xent(x)


def _resnet101(g: GraphBuilder, b: int) -> None:
    expansion = 4
    inplanes = 64

    def bottleneck(x: Tensor, planes: int, stride: int, downsample: bool, tag: str) -> Tensor:
        y = g.batch_norm(g.conv(x, (planes, inplanes, 1, 1), name=f"{tag}.conv1"))
        y = g.batch_norm(g.conv(y, (planes, planes, 3, 3), stride=stride, pad=1, name=f"{tag}.conv2"))
        y = g.batch_norm(g.conv(y, (planes * expansion, planes, 1, 1), name=f"{tag}.conv3"))
        identity = x
        if downsample:
            conv = g.conv(x, (planes * expansion, inplanes, 1, 1), stride=stride, name=f"{tag}.down")
            identity = g.batch_norm(conv)
        return g.elementwise(y, identity, pw_op_cnt=1, name=f"{tag}.add")

    x = g.input((b, 3, 227, 227))
    x = g.batch_norm(g.conv(x, (64, 3, 7, 7), stride=2, pad=3, name="conv1"))
    x = g.pool(x, (3, 3), stride=2, pad=1, name="pool1")
    for stage, (planes, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 23, 2), (512, 3, 2)), 1):
        down = stride != 1 or inplanes != planes * expansion
        x = bottleneck(x, planes, stride, down, f"layer{stage}.0")
        inplanes = planes * expansion
        for i in range(1, blocks):
            x = bottleneck(x, planes, 1, False, f"layer{stage}.{i}")
    x = g.reduce_mean(x, (2, 3), name="avgpool")
    x = g.fc(x, 1000, name="fc")
    g.softmax_xent(x)


def _inception3(g: GraphBuilder, b: int) -> None:
    def conv(
        x: Tensor, fltr: tuple[int, int, int, int], stride: int = 1, pad: int | tuple[int, int] = 0
    ) -> Tensor:
        return g.batch_norm(g.conv(x, fltr, stride=stride, pad=pad))

    def block_a(x: Tensor, cin: int, pool_features: int) -> Tensor:
        b1 = conv(x, (64, cin, 1, 1))
        b5 = conv(conv(x, (48, cin, 1, 1)), (64, 48, 5, 5), pad=2)
        b3 = conv(conv(conv(x, (64, cin, 1, 1)), (96, 64, 3, 3), pad=1), (96, 96, 3, 3), pad=1)
        bp = conv(g.pool(x, (3, 3), stride=1, pad=1), (pool_features, cin, 1, 1))
        return g.concat([b1, b5, b3, bp], 1)

    def block_b(x: Tensor, cin: int) -> Tensor:
        b3 = conv(x, (384, cin, 3, 3), stride=2)
        bd = conv(conv(conv(x, (64, cin, 1, 1)), (96, 64, 3, 3), pad=1), (96, 96, 3, 3), stride=2)
        return g.concat([b3, bd, g.pool(x, (3, 3), stride=2)], 1)

    def block_c(x: Tensor, cin: int, c7: int) -> Tensor:
        b1 = conv(x, (192, cin, 1, 1))
        b7 = conv(conv(conv(x, (c7, cin, 1, 1)), (c7, c7, 1, 7), pad=(0, 3)), (192, c7, 7, 1), pad=(3, 0))
        bd = conv(x, (c7, cin, 1, 1))
        bd = conv(conv(bd, (c7, c7, 7, 1), pad=(3, 0)), (c7, c7, 1, 7), pad=(0, 3))
        bd = conv(conv(bd, (c7, c7, 7, 1), pad=(3, 0)), (192, c7, 1, 7), pad=(0, 3))
        bp = conv(g.pool(x, (3, 3), stride=1, pad=1), (192, cin, 1, 1))
        return g.concat([b1, b7, bd, bp], 1)

    def block_d(x: Tensor, cin: int) -> Tensor:
        b3 = conv(conv(x, (192, cin, 1, 1)), (320, 192, 3, 3), stride=2)
        b7 = conv(conv(x, (192, cin, 1, 1)), (192, 192, 1, 7), pad=(0, 3))
        b7 = conv(conv(b7, (192, 192, 7, 1), pad=(3, 0)), (192, 192, 3, 3), stride=2)
        return g.concat([b3, b7, g.pool(x, (3, 3), stride=2)], 1)

    def block_e(x: Tensor, cin: int) -> Tensor:
        b1 = conv(x, (320, cin, 1, 1))
        b3 = conv(x, (384, cin, 1, 1))
        b3 = g.concat([conv(b3, (384, 384, 1, 3), pad=(0, 1)), conv(b3, (384, 384, 3, 1), pad=(1, 0))], 1)
        bd = conv(conv(x, (448, cin, 1, 1)), (384, 448, 3, 3), pad=1)
        bd = g.concat([conv(bd, (384, 384, 1, 3), pad=(0, 1)), conv(bd, (384, 384, 3, 1), pad=(1, 0))], 1)
        bp = conv(g.pool(x, (3, 3), stride=1, pad=1), (192, cin, 1, 1))
        return g.concat([b1, b3, bd, bp], 1)

    x = g.input((b, 3, 299, 299))
    x = conv(conv(conv(x, (32, 3, 3, 3), stride=2), (32, 32, 3, 3)), (64, 32, 3, 3), pad=1)
    x = g.pool(x, (3, 3), stride=2)
    x = g.pool(conv(conv(x, (80, 64, 1, 1)), (192, 80, 3, 3)), (3, 3), stride=2)
    x = block_a(block_a(block_a(x, 192, 32), 256, 64), 288, 64)
    x = block_b(x, 288)
    for c7 in (128, 160, 160, 192):
        x = block_c(x, 768, c7)
    x = block_e(block_e(block_d(x, 768), 1280), 2048)
    x = g.fc(g.reduce_mean(x, (2, 3), name="avgpool"), 1000, name="fc")
    g.softmax_xent(x)


def _transformer(g: GraphBuilder, b: int) -> None:
    # PaSE's "Small" configuration, the one its graph.py builds (model_size = 0 there).
    seq, vocab, embed, heads, ff, n_layers, d_k = 256, 50000, 512, 8, 2048, 6, 64
    pos = g.input((b, seq, embed))  # one positional encoding, shared by encoder and decoder

    def attention(xs: list[Tensor], tag: str) -> Tensor:
        if len(xs) == 3:  # cross-attention: query from xs[0], keys and values from xs[1:]
            qkv = g.stack(xs, name=f"{tag}.stack")
            eq = "sble,shek->sbhlk"
        else:  # self-attention: one input serves as query, key and value
            qkv, eq = xs[0], "ble,shek->sbhlk"
        qkv = g.einsum(eq, qkv, g.input((3, heads, embed, d_k)), name=f"{tag}.qkv")
        q, k, v = g.unstack(qkv, name=f"{tag}.unstack")
        logits = g.einsum("bhlk,bhmk->bhlm", q, k, name=f"{tag}.qk")
        weights = g.softmax(logits, 3, name=f"{tag}.softmax")
        scores = g.einsum("bhlm,bhmk->bhlk", weights, v, name=f"{tag}.av")
        scores = g.einsum("bhlk,hek->ble", scores, g.input((heads, embed, d_k)), name=f"{tag}.out")
        return g.norm(g.elementwise(xs[0], scores, name=f"{tag}.res"), name=f"{tag}.norm")

    def feed_forward(x: Tensor, tag: str) -> Tensor:
        h = g.einsum("ble,ef->blf", x, g.input((embed, ff)), pw_op_cnt=2, name=f"{tag}.ff1")
        h = g.einsum("blf,fe->ble", h, g.input((ff, embed)), name=f"{tag}.ff2")
        return g.norm(g.elementwise(x, h, name=f"{tag}.res"), name=f"{tag}.norm")

    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, name="enc.embed"), pos, name="enc.pos")
    for i in range(n_layers):
        x = feed_forward(attention([x], f"enc{i}.att"), f"enc{i}.ffn")
    enc = x
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, name="dec.embed"), pos, name="dec.pos")
    for i in range(n_layers):
        a1 = attention([x], f"dec{i}.att1")
        x = feed_forward(attention([a1, enc, enc], f"dec{i}.att2"), f"dec{i}.ffn")
    x = g.einsum("ble,ev->blv", x, g.input((embed, vocab)), name="proj")
    g.softmax_xent(x)


def _rnnlm(g: GraphBuilder, b: int) -> None:
    seq, vocab, units, layers = 256, 100000, 2048, 2
    x = g.embedding(g.input((b, seq)), vocab, units)
    x = g.lstm(x, units, layers, name="lstm")
    x = g.fc(x, vocab, name="proj")
    g.softmax_xent(x)


_CUTOFFS = {"transformer": 1, "rnnlm": 1}
"""PaSE's ``Ops.SetCutoff(1)`` in these two graphs (lets heads and layers be split)."""

_GRAPHS: dict[str, Callable[[GraphBuilder, int], None]] = {
    "alexnet": _alexnet,
    "resnet101": _resnet101,
    "inception3": _inception3,
    "rnnlm": _rnnlm,
    "transformer": _transformer,
}


def graph_names() -> tuple[str, ...]:
    """The built-in graph names, in PaSE's order."""
    return tuple(_GRAPHS)


def build_graph(
    name: str, n_procs: int, batch: int, *, model_size: int | None = None, cutoff: int | None = None
) -> PaseGraph:
    """Build a built-in graph with every layer's configurations for ``n_procs`` devices.

    Args:
        name: one of :func:`graph_names` (case-insensitive).
        n_procs: devices, >= 1.
        batch: global batch size, >= 1.
        model_size: PaSE's ``-m``: checked, but, as in PaSE, none of the graphs reads it.
        cutoff: fewest elements per device along a split dimension; ``None``: PaSE's (1 for
            ``transformer`` and ``rnnlm``, 4 for the others).

    Raises:
        UnknownNameError: no such graph.
        InputError: a non-positive ``n_procs``, ``batch``, ``model_size`` or ``cutoff``.
    """
    key = name.strip().lower() if isinstance(name, str) else ""
    if key not in _GRAPHS:
        raise UnknownNameError("graph", str(name), _GRAPHS)
    if cutoff is None:
        cutoff = _CUTOFFS.get(key, DEFAULT_CUTOFF)
    for field, value in (("procs", n_procs), ("batch", batch), ("cutoff", cutoff)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise invalid(field, value, "must be an integer >= 1")
    if model_size is not None and (not isinstance(model_size, int) or model_size < 1):
        raise invalid("model_size", model_size, "must be an integer >= 1")
    builder = GraphBuilder(key, n_procs, batch, cutoff)
    _GRAPHS[key](builder, batch)
    return builder.build()
