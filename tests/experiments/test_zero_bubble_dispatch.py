"""The zero-bubble records' blocks are GPU-bound: the host's dispatch cannot explain their misses
(``_ILV_GAP`` in experiments/validation/zero_bubble_2024.py, ``_F_GAP`` in bubble_rates.py)."""

from __future__ import annotations

import dataclasses

import pytest

from experiments.validation.zero_bubble_2024 import MODELS
from pipesim.profiles.costmodels.compute import OP_DISPATCH_S
from pipesim.profiles.models.zoo.roofline import Roofline, roofline_for
from pipesim.profiles.models.zoo.transformers import gpt, parse_gpt_spec

# ParallelTransformerLayer.forward at zero-bubble-v0.1.0 (TP 1, fused kernels, no flash attention):
# about 50 framework calls; 60 leaves room for the 8 autograd Functions' Python.
_HOST_CALLS_PER_LAYER_FORWARD = 60


def _block_times_s(model: str, dispatch_s: float) -> tuple[float, float]:
    layers, heads, hidden, _, mbs = MODELS[model]
    base = roofline_for("fp16", "A100-SXM4-80GB")
    rl = Roofline(model=dataclasses.replace(base.model, op_dispatch_s=dispatch_s))
    spec = parse_gpt_spec(f"gpt:layers={layers},hidden={hidden},heads={heads},seq=1024,vocab=32000")
    block = gpt(rl, mbs, spec).layers[1]
    return block.fwd_time_s, block.bwd_time_s


@pytest.mark.parametrize("model", sorted(MODELS))
def test_dispatch_floor_does_not_bind_on_the_table6_blocks(model: str) -> None:
    fwd, bwd = _block_times_s(model, OP_DISPATCH_S)
    fwd_gpu, bwd_gpu = _block_times_s(model, 0.0)
    assert fwd == pytest.approx(fwd_gpu, rel=1e-12)
    assert bwd_gpu <= bwd <= bwd_gpu * 1.001
    # the host issues a layer's forward in well under its GPU time: it runs ahead of the GPU
    assert 0.2 * fwd_gpu > _HOST_CALLS_PER_LAYER_FORWARD * OP_DISPATCH_S
