"""DT-FM's GPT in the zoo (``gpt:...,eager=dtfm``): its block, embedding and head op by op, as
PyTorch 1.9 runs DS3Lab/Decentralized_FM_alpha's modules (hand counts of the bytes moved)."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.roofline import LayerCost, roofline_for
from pipesim.profiles.models.zoo.transformers import EAGER_DTFM, GptSpec, gpt, parse_gpt_spec

BATCH, SEQ, HIDDEN, HEADS, VOCAB = 2, 64, 128, 4, 1000
D = 2  # fp16 bytes per element


def _model(eager: int) -> ModelProfile:
    spec = GptSpec(layers=2, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=VOCAB, eager=eager)
    return gpt(roofline_for("float16", "V100-SXM2-16GB"), BATCH, spec)


def _gemm_bytes(batch: int = BATCH) -> float:
    """Forward bytes of the block's GEMMs: A, B and C of each (each backward GEMM moves the same)."""
    t, h, f, d_head = batch * SEQ, HIDDEN, 4 * HIDDEN, HIDDEN // HEADS
    shapes = [(t, h, h)] * 4 + [(t, f, h), (t, h, f)]  # q, k, v, out; the MLP's two
    total = sum(m * k + k * n + m * n for m, n, k in shapes)
    bh = batch * HEADS
    total += bh * (SEQ * d_head + d_head * SEQ + SEQ * SEQ)  # q @ k^T
    total += bh * (SEQ * SEQ + SEQ * d_head + SEQ * d_head)  # scores @ v
    return D * total


def test_dtfm_block_traffic_is_the_hand_count() -> None:
    block = _model(EAGER_DTFM).layers[1]
    t, h = BATCH * SEQ, HIDDEN
    bsh, tf, sc = t * h, t * 4 * h, BATCH * HEADS * SEQ * SEQ
    params = 12 * h * h + 13 * h
    assert block.parameter_bytes == D * params  # the zoo's GPT block count: same layers
    # forward: layer norms 2 x (1 + 2) passes; bias adds 2 x (4 bsh + tf + bsh); merge-heads copy
    # 2; residual adds 2 x 3; the score division and softmax 2 + 2; relu 2 tf; at 2 samples
    # torch.matmul's copies of q, k, v 3 x 2
    fwd = D * (6 * bsh + 2 * (5 * bsh + tf) + 2 * bsh + 6 * bsh + 4 * sc + 2 * tf + 6 * bsh)
    assert block.fwd_memory_bytes == pytest.approx(_gemm_bytes() + fwd, rel=1e-12)
    # backward: layer norms 2 x (2 + 3 + 2); bias gradients 5 bsh + tf; three head-split copies
    # 3 x 2; residual gradient sums 2 x 3 and two more at the attention input 2 x 3; division
    # 2 sc, softmax 3 sc; relu 3 tf; every parameter's .grad accumulation 3 passes; at 2 samples
    # the context gradient's copy 2
    bwd = D * (14 * bsh + 5 * bsh + tf + 6 * bsh + 6 * bsh + 6 * bsh + 5 * sc + 3 * tf + 3 * params
               + 2 * bsh)
    assert block.bwd_memory_bytes == pytest.approx(2 * _gemm_bytes() + bwd, rel=1e-12)
    # saved without recomputation: 8 bsh, the softmax output, the ReLU output
    assert block.saved_activation_bytes == D * (8 * bsh + sc + tf)
    assert 0.0 < block.wgrad_fraction < 1.0


def test_dtfm_embedding_and_head() -> None:
    model = _model(EAGER_DTFM)
    emb, head = model.layers[0], model.layers[-1]
    t, h = BATCH * SEQ, HIDDEN
    assert emb.parameter_bytes == D * (VOCAB + SEQ) * h
    # forward: two gathers (2 passes each) and their sum (3); backward: two row scatters (2 each),
    # a zero fill (1) and the .grad accumulation (3) of each full table
    assert emb.fwd_memory_bytes == D * 7 * t * h
    assert emb.bwd_memory_bytes == D * (4 * t * h + 4 * (VOCAB + SEQ) * h)
    assert head.parameter_bytes == D * (h * h + h + 2 * h + 2)  # pooler and the 2-way classifier
    assert head.activation_bytes == D * BATCH * 2
    assert head.tied_to is None
    assert model.num_layers == 4
    assert model.name.endswith(",eager=dtfm")


def test_dtfm_block_copies_nothing_for_matmul_at_one_sample() -> None:
    # one sample: the head-major views merge their size-1 sample dimension (views, no copy), so
    # the forward is the hand count of test_dtfm_block_traffic_is_the_hand_count without them
    spec = GptSpec(layers=1, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=VOCAB, eager=EAGER_DTFM)
    block = gpt(roofline_for("float16", "V100-SXM2-16GB"), 1, spec).layers[1]
    bsh, tf, sc = SEQ * HIDDEN, SEQ * 4 * HIDDEN, HEADS * SEQ * SEQ
    fwd = D * (6 * bsh + 2 * (5 * bsh + tf) + 2 * bsh + 6 * bsh + 4 * sc + 2 * tf)
    assert block.fwd_memory_bytes == pytest.approx(_gemm_bytes(1) + fwd, rel=1e-12)


def test_dtfm_block_is_slower_than_the_fused_block_in_fp16() -> None:
    # the same GEMMs, more element-wise kernels (but no dropout), and the .grad accumulation
    fused, dtfm = _model(0).layers[1], _model(EAGER_DTFM).layers[1]
    assert dtfm.fwd_flop == pytest.approx(fused.fwd_flop, rel=0.05)
    assert dtfm.bwd_time_s > fused.bwd_time_s


def test_dtfm_linear_adds_its_bias_after_the_gemm() -> None:
    # PyTorch 1.9's F.linear on a 3-D input: matmul, then output.add_(bias) (read + write), and
    # the bias gradient a one-pass reduction: differential against a bare GEMM
    from pipesim.profiles.models.zoo.dtfm import _linear3d

    rl = roofline_for("float16", "V100-SXM2-16GB")
    bare, with_bias = LayerCost("a", rl), LayerCost("b", rl)
    bare.gemm(256, 512, 128)
    _linear3d(with_bias, 256, 128, 512)
    assert with_bias.fwd.bytes_moved - bare.fwd.bytes_moved == D * 2 * 256 * 512
    assert with_bias.bwd.bytes_moved - bare.bwd.bytes_moved == D * 256 * 512
    assert with_bias.params == 128 * 512 + 512


def test_eager_dtfm_spec_parses_and_prints() -> None:
    spec = parse_gpt_spec("gpt:layers=2,eager=DTFM")
    assert spec.eager == EAGER_DTFM
    assert spec.text().endswith(",eager=dtfm")
    assert parse_gpt_spec(spec.text()) == spec
    profile = zoo_model("gpt:layers=2,hidden=256,heads=4,seq=128,vocab=500,eager=dtfm", dtype="fp16")
    assert profile.name == "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=500,eager=dtfm"


@pytest.mark.parametrize(("text", "message"), [
    ("gpt:eager=2", "or dtfm"),
    ("gpt:eager=dtfm,untie=1", "classifier head of its own"),
    ("gpt:eager=dtfm,flash=1", "needs flash=0"),
])
def test_eager_dtfm_spec_rules(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_gpt_spec(text)
