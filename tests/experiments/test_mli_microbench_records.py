"""The mli/transformers-benchmarks layer records count FLOP exactly as micro_bench.ipynb does."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.validation.mli_microbench_2022 import (
    bandwidth_split_s,
    best_cell,
    implied_time_scales,
    notebook_forward_flop,
    predicted_fwd_bwd_tflops,
    records,
)
from pipesim.profiles.models.zoo.roofline import Roofline, roofline_for
from pipesim.profiles.models.zoo.transformers import GptSpec, block_gemm_shapes, gpt


def test_notebook_attention_over_ffn_ratio() -> None:
    # micro_bench.ipynb prints att / ffn = 0.53125 for BERT-large at batch 64, seq 128 (cell 14),
    # with ffn = 16 b s h^2 (cell 12) and att = 4 b h s^2 + 8 b s h^2 (cell 13).
    b, s, h = 64, 128, 1024
    ffn = 16 * b * s * h * h
    assert notebook_forward_flop(batch=b, seq=s, hidden=h) == pytest.approx(ffn * (1 + 0.53125), rel=1e-15)


@pytest.mark.parametrize(("batch", "seq"), [(128, 128), (2, 512), (64, 512), (64, 1024)])
def test_notebook_count_is_the_blocks_forward_gemms(batch: int, seq: int) -> None:
    # The notebook's count is exactly 2 m n k of the block's forward GEMMs: Q, K, V and output
    # projections, Q K^T and P V per head, and the 4h MLP (biases and elementwise work not counted).
    shapes = block_gemm_shapes(batch=batch, seq=seq, hidden=1024, heads=16)
    assert sum(shape.flop for shape in shapes) == notebook_forward_flop(batch=batch, seq=seq, hidden=1024)


def test_records_are_the_readme_figures() -> None:
    published = {r.name: r.published for r in records()}
    assert published["mli-2022-bert-layer-a100-fwdbwd-tflops"] == 136.0
    assert published["mli-2022-gpt2-layer-v100-fwdbwd-tflops"] == 37.0
    assert published["mli-2022-bert-layer-v100-over-a100"] == pytest.approx(67 / 136)
    assert published["mli-2022-gpt2-layer-v100-over-a100"] == pytest.approx(37 / 53)


# -- the A100 rows' decomposition (bandwidth_split_s, implied_time_scales) --------------------------

def _block_time_s(layer: str, device: str, *, bandwidth_factor: float) -> float:
    """The model's forward + backward time of ``layer``'s block at its best cell, costed at
    ``bandwidth_factor`` times the device's achievable bandwidth."""
    batch, seq = best_cell(layer, device)
    rl = roofline_for("float16", device)
    slow = Roofline(model=dataclasses.replace(rl.model, memory_bytes_per_s=rl.model.memory_bytes_per_s
                                              * bandwidth_factor))
    spec = GptSpec(layers=1, hidden=1024, heads=16, seq=seq, flash=0, eager=1 if layer == "gpt2" else 0)
    block = gpt(slow, batch, spec).layers[1]
    return block.fwd_time_s + block.bwd_time_s


@pytest.mark.parametrize("device", ["A100-80GB", "V100-SXM2-16GB"])
@pytest.mark.parametrize("layer", ["bert", "gpt2"])
def test_split_adds_up_to_the_prediction_and_is_linear_in_the_bandwidth(layer: str, device: str) -> None:
    other_s, bound_s = bandwidth_split_s(layer, device)
    batch, seq = best_cell(layer, device)
    predicted_s = 3 * notebook_forward_flop(batch=batch, seq=seq, hidden=1024) / (
        predicted_fwd_bwd_tflops(layer, device) * 1e12)
    assert other_s + bound_s == pytest.approx(predicted_s, rel=1e-12)
    assert other_s > 0
    assert bound_s > 0
    # at a third of the bandwidth the bound part takes three times as long (no kernel changes bound)
    third_s = _block_time_s(layer, device, bandwidth_factor=1 / 3)
    assert third_s == pytest.approx(other_s + 3 * bound_s, rel=1e-3)


def test_the_scores_and_gelu_new_make_gpt2_bandwidth_bound() -> None:
    # GPT-2 at batch 64, seq 512 moves score-sized tensors (b a s^2 = 268M elements) and runs
    # gelu_new op by op; BERT at batch 128, seq 128 has 8x fewer score elements and a fused GeLU.
    assert best_cell("gpt2", "A100-80GB") == (64, 512)
    assert best_cell("bert", "A100-80GB") == (128, 128)
    gpt2_other, gpt2_bound = bandwidth_split_s("gpt2", "A100-80GB")
    bert_other, bert_bound = bandwidth_split_s("bert", "A100-80GB")
    assert gpt2_bound / (gpt2_other + gpt2_bound) == pytest.approx(0.61, abs=0.01)
    assert bert_bound / (bert_other + bert_bound) == pytest.approx(0.24, abs=0.01)


@pytest.mark.parametrize("forward_only", [False, True])
@pytest.mark.parametrize("device", ["A100-80GB", "V100-SXM2-16GB"])
def test_implied_scales_give_back_both_measured_times(device: str, forward_only: bool) -> None:
    g, m = implied_time_scales(device, forward_only=forward_only)
    readme = {("bert", "A100-80GB"): (110, 136), ("gpt2", "A100-80GB"): (45, 53),
              ("bert", "V100-SXM2-16GB"): (56, 67), ("gpt2", "V100-SXM2-16GB"): (34, 37)}
    for layer in ("bert", "gpt2"):
        batch, seq = best_cell(layer, device)
        flop = notebook_forward_flop(batch=batch, seq=seq, hidden=1024)
        fwd, fwd_bwd = readme[(layer, device)]
        measured_s = flop / (fwd * 1e12) if forward_only else 3 * flop / (fwd_bwd * 1e12)
        other_s, bound_s = bandwidth_split_s(layer, device, forward_only=forward_only)
        assert g * other_s + m * bound_s == pytest.approx(measured_s, rel=1e-9)


def test_the_v100_fits_and_the_a100_bandwidth_bound_part_takes_twice_the_model() -> None:
    # the records' notes: V100 0.97 and 1.06, A100 0.83 and 2.17 (forward alone 1.04 and 2.08)
    v100 = implied_time_scales("V100-SXM2-16GB")
    assert v100 == pytest.approx((0.97, 1.06), abs=0.01)
    a100 = implied_time_scales("A100-80GB")
    assert a100 == pytest.approx((0.83, 2.17), abs=0.01)
    assert implied_time_scales("A100-80GB", forward_only=True) == pytest.approx((1.04, 2.08), abs=0.01)
    # as an effective bandwidth: the model's achievable 0.8 x 2039 GB/s over the factor, ~750 GB/s
    assert 0.8 * 2039 / a100[1] == pytest.approx(750, abs=5)


def test_the_pcie_variant_does_not_close_the_gap() -> None:
    # the A100 80GB PCIe's 1935 GB/s (catalog A100-PCIe-80GB): GPT-2 84.5 TFLOP/s, still +59.5%
    assert predicted_fwd_bwd_tflops("gpt2", "A100-PCIe-80GB") == pytest.approx(84.5, abs=0.05)
