"""The mli/transformers-benchmarks layer records count FLOP exactly as micro_bench.ipynb does."""

from __future__ import annotations

import pytest

from experiments.validation.mli_microbench_2022 import notebook_forward_flop, records
from pipesim.profiles.models.zoo.transformers import block_gemm_shapes


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
