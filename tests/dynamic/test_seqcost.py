"""The sequence cost model: calibration to the zoo and its shape in the sequence length."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.sequence import (
    CALIBRATION_TOLERANCE,
    GRID_TOLERANCE,
    SeqPoly,
    seq_cost_model,
)
from pipesim.profiles.models.zoo import zoo_model

GPT_SMALL = "gpt:layers=4,hidden=512,heads=8,seq=1024,vocab=1000"


@pytest.mark.parametrize(
    ("spec", "dtype"),
    [("bert48", "float32"), ("bert48", "float16"), ("gpt", "float32"), (GPT_SMALL, "float16")],
)
def test_reproduces_the_zoo_at_its_own_batch_and_seq(spec: str, dtype: str) -> None:
    model = seq_cost_model(spec, dtype=dtype)
    profile = zoo_model(spec, dtype=dtype)
    assert model.calibration_error() <= CALIBRATION_TOLERANCE
    b, s = profile.profile_batch_size, profile.seq_len
    assert s is not None
    for layer, cost in zip(profile.layers, model.layers, strict=True):
        assert cost.fwd_time_s.padded(b, s) == pytest.approx(layer.fwd_time_s, rel=CALIBRATION_TOLERANCE)
        assert cost.bwd_time_s.padded(b, s) == pytest.approx(layer.bwd_time_s, rel=CALIBRATION_TOLERANCE)
        assert cost.saved_bytes.padded(b, s) == pytest.approx(layer.stashed_bytes, rel=CALIBRATION_TOLERANCE)


def test_blocks_follow_the_zoo_away_from_the_calibration_point() -> None:
    model = seq_cost_model("bert48")
    block = model.layers[1]
    assert block.is_block
    assert not model.layers[0].is_block
    for b, s in [(1, 512), (32, 64), (4, 256), (96, 16), (2, 128)]:
        zoo = zoo_model(f"gpt:layers=1,hidden=1024,heads=16,seq={s}", batch_size=b).layers[1]
        assert block.fwd_time_s.padded(b, s) == pytest.approx(zoo.fwd_time_s, rel=GRID_TOLERANCE)
        assert block.bwd_time_s.padded(b, s) == pytest.approx(zoo.bwd_time_s, rel=GRID_TOLERANCE)
        # Korthikanti et al. Eq. 1 in fp32 is exactly linear + quadratic: saved bytes are exact
        assert block.saved_bytes.padded(b, s) == pytest.approx(zoo.stashed_bytes, rel=1e-9)


def test_attention_is_quadratic_in_length() -> None:
    block = seq_cost_model("bert48").layers[1]
    for poly in (block.fwd_time_s, block.bwd_time_s, block.saved_bytes):
        assert poly.per_square_token > 0
        attention = SeqPoly(per_square_token=poly.per_square_token)
        assert attention.padded(4, 512) == pytest.approx(4 * attention.padded(4, 256))
        # doubling the length more than doubles the whole layer at long lengths
        assert poly.padded(4, 512) > 2 * poly.padded(4, 256)
    # and the linear part is linear in tokens: twice the samples, twice the token terms
    poly = block.fwd_time_s
    assert poly.padded(8, 128) - poly.constant == pytest.approx(2 * (poly.padded(4, 128) - poly.constant))


def test_seq_poly_sums_and_evaluates_exactly() -> None:
    a = SeqPoly(constant=1.0, per_sample=2.0, per_token=3.0, per_square_token=4.0)
    b = SeqPoly(constant=0.5)
    assert (a + b)(2, 10, 50) == 1.5 + 4 + 30 + 200
    assert a.padded(2, 5) == 1 + 4 + 30 + 200


def test_unsupported_models_are_rejected() -> None:
    with pytest.raises(InputError, match="supports bert48, gpt"):
        seq_cost_model("xlnet36")
    with pytest.raises(InputError, match="supports"):
        seq_cost_model("bert48:layers=2")
    with pytest.raises(InputError, match="finite"):
        SeqPoly(constant=float("nan"))


def test_max_sequence_lengths() -> None:
    assert seq_cost_model("bert48").max_seq_len == 512
    assert seq_cost_model(GPT_SMALL).max_seq_len == 1024
