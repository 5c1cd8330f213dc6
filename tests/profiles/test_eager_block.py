"""The zoo gpt: block in eager PyTorch form (``eager=1``): op-by-op element-wise kernels."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.profiles.models.profile import Layer
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.roofline import roofline_for
from pipesim.profiles.models.zoo.transformers import GptSpec, gpt, parse_gpt_spec

BATCH, SEQ, HIDDEN, HEADS = 2, 64, 128, 4


def _block(eager: int) -> Layer:
    spec = GptSpec(layers=1, hidden=HIDDEN, heads=HEADS, seq=SEQ, vocab=1000, eager=eager)
    return gpt(roofline_for("float16", "A100-80GB"), BATCH, spec).layers[1]


def test_eager_block_extra_traffic_is_the_hand_count() -> None:
    fused, eager = _block(0), _block(1)
    d = 2  # fp16 bytes per element
    t = BATCH * SEQ
    bsh = t * HIDDEN
    scores = BATCH * HEADS * SEQ * SEQ
    mlp = t * 4 * HIDDEN
    # forward: score divide + where + softmax (2 + 2 + 2 passes) against one fused kernel (2);
    # the merge-heads copy (2); gelu_new's 8 kernels (18 passes) against one (2); at 2 samples
    # torch.matmul's copies of Q, K, V (3 x 2)
    assert eager.fwd_memory_bytes - fused.fwd_memory_bytes == d * (4 * scores + 8 * bsh + 16 * mlp)
    # backward: divide, where, softmax (2 + 2 + 3) against 3; bias gradients of QKV (3 bsh),
    # the output projection (bsh), the MLP's two GEMMs (4 bsh, bsh), one pass each; gelu_new's
    # 11 kernels (28 passes) against one (3); two residual gradient sums (3 passes) against 1 each;
    # the head split's three gradient copies (3 x 2), split's concatenation (2 x 3 bsh) and, at 2
    # samples, the context gradient's copy (2)
    assert eager.bwd_memory_bytes - fused.bwd_memory_bytes == d * (4 * scores + 23 * bsh + 26 * mlp)
    # gelu_new keeps tanh's output and the final product's two operands
    assert eager.saved_activation_bytes - fused.saved_activation_bytes == 3 * mlp * d
    assert eager.parameter_bytes == fused.parameter_bytes


def test_eager_block_is_slower_than_fused() -> None:
    fused, eager = _block(0), _block(1)
    assert eager.fwd_time_s > fused.fwd_time_s
    assert eager.bwd_time_s > fused.bwd_time_s


def test_eager_spec_text_round_trips() -> None:
    spec = parse_gpt_spec("gpt:layers=2,hidden=128,heads=4,seq=64,vocab=1000,EAGER=1")
    assert spec.eager == 1
    assert spec.text().endswith(",eager=1")
    assert parse_gpt_spec(spec.text()) == spec
    assert GptSpec().text().count("eager") == 0  # the default's name is unchanged
    assert zoo_model(spec.text(), dtype="float16").name == spec.text()


@pytest.mark.parametrize(("text", "rule"), [
    ("gpt:eager=2", "must be 0"),
    ("gpt:eager=1,flash=1", "needs flash=0"),
    ("gpt:eager=x", "must be an integer"),
])
def test_bad_eager_value_names_field_value_and_rule(text: str, rule: str) -> None:
    with pytest.raises(InputError, match=r"gpt\.eager") as caught:
        parse_gpt_spec(text)
    assert rule in str(caught.value)
