"""The fused attention's rates (causal mask, backward) and Megatron-LM's fp32 loss kernels, against
the published figures they come from (roofline.FLASH_*; LayerCost.cross_entropy)."""

from __future__ import annotations

import pytest

from pipesim.profiles.costmodels.compute import GEMM_EFFICIENCY, GemmShape
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.roofline import (
    FLASH_BACKWARD_RATE,
    FLASH_CAUSAL_SPEEDUP,
    LayerCost,
    roofline_for,
)
from pipesim.profiles.models.zoo.transformers import _flash_attention

# Shah et al. 2024 (FlashAttention-3, arXiv:2407.08608), Figures 5 and 6: cuDNN on an H100 SXM5 in
# bf16, head dim 128, sequence 4096, TFLOP/s (the causal one on the causal half of the FLOP)
_CUDNN_FWD, _CUDNN_FWD_CAUSAL, _CUDNN_BWD = 609e12, 518e12, 499e12
_B, _S, _A, _D = 1, 4096, 16, 128  # the 1.7B row of the Megatron-Core H100 table: 2048 = 16 x 128


def _attention(causal: bool) -> LayerCost:
    lc = LayerCost("attention", roofline_for("bf16", "H100-SXM"))
    _flash_attention(lc, batch=_B, seq=_S, heads=_A, d_head=_D, causal=causal)
    return lc


def test_published_figures_give_the_constants() -> None:
    assert abs(FLASH_BACKWARD_RATE - _CUDNN_BWD / _CUDNN_FWD) < 0.005  # 0.819
    assert abs(FLASH_CAUSAL_SPEEDUP - 2 * _CUDNN_FWD_CAUSAL / _CUDNN_FWD) < 0.005  # 1.701


def test_h100_fused_attention_runs_at_cudnns_published_rates_derated_with_the_gemm_share() -> None:
    # At a hopper share of 0.7 the tile model gives cuDNN's published rates, short benchmarks; the
    # share now follows the H100's sustained GEMM rate (compute.GEMM_EFFICIENCY), and the fused
    # attention, on the same tensor cores under the same power limit, is derated with it.
    scale = GEMM_EFFICIENCY["hopper", "bfloat16"] / 0.7
    full_fwd = 4.0 * _B * _A * _S * _S * _D  # Q K^T and P V without a mask
    full, causal = _attention(False), _attention(True)
    assert full.fwd.flop == pytest.approx(full_fwd)
    assert causal.fwd.flop == pytest.approx(full_fwd / 2)
    assert causal.bwd.flop == pytest.approx(2.5 * full_fwd / 2)
    assert full.fwd.flop / full.fwd.time_s == pytest.approx(_CUDNN_FWD * scale, rel=0.05)
    assert full.bwd.flop / full.bwd.time_s == pytest.approx(_CUDNN_BWD * scale, rel=0.05)
    assert causal.fwd.flop / causal.fwd.time_s == pytest.approx(_CUDNN_FWD_CAUSAL * scale, rel=0.05)


def test_causal_and_backward_divide_the_tile_models_time() -> None:
    model = roofline_for("bf16", "H100-SXM").model
    qk = GemmShape(m=_S, n=_S, k=_D, count=_B * _A)
    pv = GemmShape(m=_S, n=_D, k=_S, count=_B * _A)
    fwd_s = model.gemm_compute_s(qk) + model.gemm_compute_s(pv)
    bwd_s = 2 * model.gemm_compute_s(qk) + 3 * model.gemm_compute_s(pv)
    oh = model.kernel_overhead_s
    full, causal = _attention(False), _attention(True)
    assert full.fwd.time_s == pytest.approx(fwd_s + oh, rel=1e-12)
    assert full.bwd.time_s == pytest.approx(bwd_s / FLASH_BACKWARD_RATE + oh, rel=1e-12)
    assert causal.fwd.time_s == pytest.approx(fwd_s / FLASH_CAUSAL_SPEEDUP + oh, rel=1e-12)
    assert causal.bwd.time_s == pytest.approx(bwd_s / (FLASH_CAUSAL_SPEEDUP * FLASH_BACKWARD_RATE) + oh,
                                              rel=1e-12)


@pytest.mark.parametrize(("dtype", "fwd_kernels", "bwd_kernels"), [
    # bf16 logits: .float() reads 2 and writes 4 bytes; max 4, sub_ 8, exp 8, sum 4, div_ 8;
    # backward mul_ 8 and the cast back 4 + 2
    ("bf16", (6, 4, 8, 8, 4, 8), (8, 6)),
    # fp32 logits: .float() and its backward are no-ops
    ("fp32", (4, 8, 8, 4, 8), (8,)),
])
def test_fp32_loss_is_megatrons_eager_kernels(dtype: str, fwd_kernels: tuple[int, ...],
                                              bwd_kernels: tuple[int, ...]) -> None:
    rl = roofline_for(dtype, "A100-80GB")
    model = rl.model
    logits = 4096 * 131072.0
    lc = LayerCost("loss", rl)
    lc.cross_entropy(logits, fp32=True)
    bandwidth = 2039e9 * 0.8  # the catalog's A100 80GB HBM2e at the default memory efficiency
    assert model.memory_bytes_per_s == pytest.approx(bandwidth)

    def kernels_s(per_logit: tuple[int, ...]) -> float:
        return sum(max(b * logits / bandwidth + model.kernel_overhead_s, model.op_dispatch_s)
                   for b in per_logit)

    assert lc.fwd.bytes_moved == pytest.approx(sum(fwd_kernels) * logits)
    assert lc.bwd.bytes_moved == pytest.approx(sum(bwd_kernels) * logits)
    assert lc.fwd.time_s == pytest.approx(kernels_s(fwd_kernels), rel=1e-12)
    assert lc.bwd.time_s == pytest.approx(kernels_s(bwd_kernels), rel=1e-12)
    fused = LayerCost("fused", rl)
    fused.cross_entropy(logits, fp32=False)  # one kernel per direction: 3 and 2 passes
    assert fused.fwd.bytes_moved == pytest.approx(3 * rl.elem_bytes * logits)
    assert fused.bwd.bytes_moved == pytest.approx(2 * rl.elem_bytes * logits)


def test_gpt_head_splits_its_loss_by_vocabulary() -> None:
    # the loss kernels are vocabulary-parallel: only the final layer norm stays whole under TP
    profile = zoo_model("gpt:layers=2,hidden=2048,heads=16,seq=4096,vocab=131072", dtype="bf16",
                        device="H100-SXM")
    head = profile.layers[-1]
    rl = roofline_for("bf16", "H100-SXM")
    norm = LayerCost("norm", rl)
    norm.layernorm(4096 * 2048, 2048)
    assert head.shape is not None
    assert head.shape.replicated_fwd_fraction == pytest.approx(norm.fwd.time_s / head.fwd_time_s, rel=1e-9)
    assert head.shape.replicated_bwd_fraction == pytest.approx(norm.bwd.time_s / head.bwd_time_s, rel=1e-9)
