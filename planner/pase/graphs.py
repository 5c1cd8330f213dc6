"""PaSE's built-in networks: alexnet, resnet101, inception3, rnnlm, transformer.

Layer shapes follow PaSE's ``graph.py`` (Elango, IPDPS 2021, public implementation), which the
paper evaluates: AlexNet on 227x227 images with a 1024-class FC8; ResNet-101 (torchvision layout,
227x227 input); Inception-v3 (torchvision layout, 299x299, no auxiliary head); a Transformer of 6
encoder and 6 decoder layers (sequence 512, vocabulary 50,000, embedding 1024, 16 heads of
``d_k = 128``, feed-forward ``16 x 512``); and an RNN language model (2 LSTM layers of 2048 units,
sequence 64, vocabulary 50,000). ``model_size`` overrides the Transformer's embedding width or
the RNN's units (PaSE's ``-m`` flag is parsed but none of these five graphs reads it).
"""

from __future__ import annotations

from collections.abc import Callable

from pipesim.errors import UnknownNameError, invalid
from pipesim.planner.pase.configs import DEFAULT_CUTOFF
from pipesim.planner.pase.graph import PaseGraph
from pipesim.planner.pase.ops import GraphBuilder, Tensor

__all__ = ["build_graph", "graph_names"]


def _alexnet(g: GraphBuilder, b: int, _m: int | None) -> None:
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


def _resnet101(g: GraphBuilder, b: int, _m: int | None) -> None:
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


def _inception3(g: GraphBuilder, b: int, _m: int | None) -> None:
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


def _transformer(g: GraphBuilder, b: int, m: int | None) -> None:
    seq, vocab, embed, heads, d_k, n_layers = 512, 50000, m or 1024, 16, 128, 6
    ff = heads * 512

    def attention(q: Tensor, k: Tensor, v: Tensor, tag: str) -> Tensor:
        qkv = g.stack([q, k, v], name=f"{tag}.stack")
        qkv = g.einsum("sble,shek->sbhlk", qkv, g.input((3, heads, embed, d_k)), name=f"{tag}.qkv")
        q2, k2, v2 = g.unstack(qkv, name=f"{tag}.unstack")
        logits = g.einsum("bhlk,bhmk->bhlm", q2, k2, name=f"{tag}.qk")
        weights = g.softmax(logits, 3, name=f"{tag}.softmax")
        scores = g.einsum("bhlm,bhmk->bhlk", weights, v2, name=f"{tag}.av")
        return g.einsum("bhlk,hek->ble", scores, g.input((heads, embed, d_k)), name=f"{tag}.out")

    def feed_forward(x: Tensor, tag: str) -> Tensor:
        h = g.einsum("ble,ef->blf", x, g.input((embed, ff)), pw_op_cnt=2, name=f"{tag}.ff1")
        return g.einsum("blf,fe->ble", h, g.input((ff, embed)), name=f"{tag}.ff2")

    def encoder(x: Tensor, tag: str) -> Tensor:
        n1 = g.norm(x, name=f"{tag}.norm1")
        att = g.elementwise(x, attention(n1, n1, n1, f"{tag}.att"), name=f"{tag}.res1")
        n2 = g.norm(att, name=f"{tag}.norm2")
        return g.elementwise(att, feed_forward(n2, f"{tag}.ffn"), name=f"{tag}.res2")

    def decoder(x: Tensor, enc: Tensor, tag: str) -> Tensor:
        n1 = g.norm(x, name=f"{tag}.norm1")
        a1 = g.elementwise(x, attention(n1, n1, n1, f"{tag}.att1"), name=f"{tag}.res1")
        n2 = g.norm(a1, name=f"{tag}.norm2")
        a2 = g.elementwise(a1, attention(n2, enc, enc, f"{tag}.att2"), name=f"{tag}.res2")
        n3 = g.norm(a2, name=f"{tag}.norm3")
        return g.elementwise(a2, feed_forward(n3, f"{tag}.ffn"), name=f"{tag}.res3")

    pos = g.input((b, seq, embed))
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, name="enc.embed"), pos, name="enc.pos")
    for i in range(n_layers):
        x = encoder(x, f"enc{i}")
    enc = g.norm(x, name="enc.norm")
    x = g.elementwise(g.embedding(g.input((b, seq)), vocab, embed, name="dec.embed"), pos, name="dec.pos")
    for i in range(n_layers):
        x = decoder(x, enc, f"dec{i}")
    x = g.norm(x, name="dec.norm")
    x = g.einsum("ble,ev->blv", x, g.input((embed, vocab)), name="proj")
    g.softmax_xent(x)


def _rnnlm(g: GraphBuilder, b: int, m: int | None) -> None:
    seq, vocab, units, layers = 64, 50000, m or 2048, 2
    x = g.embedding(g.input((b, seq)), vocab, units)
    x = g.lstm(x, units, layers, name="lstm")
    x = g.einsum("bln,nv->blv", x, g.input((units, vocab)), name="proj")
    g.softmax_xent(x)


_GRAPHS: dict[str, Callable[[GraphBuilder, int, int | None], None]] = {
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
    name: str, n_procs: int, batch: int, *, model_size: int | None = None, cutoff: int = DEFAULT_CUTOFF
) -> PaseGraph:
    """Build a built-in graph with every layer's configurations for ``n_procs`` devices.

    Args:
        name: one of :func:`graph_names` (case-insensitive).
        n_procs: devices, >= 1.
        batch: global batch size, >= 1.
        model_size: Transformer embedding width / RNN units; ``None``: PaSE's sizes.
        cutoff: fewest elements per device along a split dimension (PaSE: 4).

    Raises:
        UnknownNameError: no such graph.
        InputError: a non-positive ``n_procs``, ``batch``, ``model_size`` or ``cutoff``.
    """
    key = name.strip().lower() if isinstance(name, str) else ""
    if key not in _GRAPHS:
        raise UnknownNameError("graph", str(name), _GRAPHS)
    for field, value in (("procs", n_procs), ("batch", batch), ("cutoff", cutoff)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise invalid(field, value, "must be an integer >= 1")
    if model_size is not None and (not isinstance(model_size, int) or model_size < 1):
        raise invalid("model_size", model_size, "must be an integer >= 1")
    builder = GraphBuilder(key, n_procs, batch, cutoff)
    _GRAPHS[key](builder, batch, model_size)
    return builder.build()
