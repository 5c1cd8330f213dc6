"""The per-pass and per-slope records of the GPT validations: what they predict is what they say."""

from __future__ import annotations

import pytest

from experiments.validation.bubble_rates import PASS_ROWS, pass_time_records
from experiments.validation.slow_network import TABLES, xl_fp16_slope_s
from experiments.validation.zero_bubble_2024 import MODELS, middle_stage_pass_times_s
from pipesim.profiles.inputs import resolve_inputs


def test_middle_stage_passes_split_the_stage_backward_by_its_weight_gradient_share() -> None:
    # 14.6B: a middle stage holds (46 + 2) / 16 = 3 identical blocks at micro-batch 1.
    layers, heads, hidden, p, mbs = MODELS["14.6b"]
    assert (layers + 2) // p == 3
    t_f, t_b, t_w, t_comm = middle_stage_pass_times_s("14.6b")
    profile, cluster = resolve_inputs(f"gpt:layers={layers},hidden={hidden},heads={heads},seq=1024",
                                      "dgx-a100-x2", overrides={"servers": 2}, dtype="fp16")
    block = profile.layers[1]
    fwd, bwd = profile.fwd_times_s(mbs)[1], profile.bwd_times_s(mbs)[1]
    assert t_f == pytest.approx(3 * fwd, rel=1e-12)
    assert t_b + t_w == pytest.approx(3 * bwd, rel=1e-12)
    assert t_w / (t_b + t_w) == pytest.approx(block.weight_grad_fraction, rel=1e-12)
    hop_bytes = mbs * 1024 * hidden * 2
    expected_comm = cluster.route_latency_s(0, 1) + hop_bytes / cluster.route_bandwidth_bytes_per_s(0, 1)
    assert t_comm == pytest.approx(expected_comm, rel=1e-12)


def test_table6_records_cover_three_passes_per_row() -> None:
    names = [r.name for r in pass_time_records()]
    assert len(names) == 3 * len(PASS_ROWS) == len(set(names))
    assert all(r.kind == "absolute" and r.tolerance == 0.10 for r in pass_time_records())


def test_xl_fp16_slopes_follow_the_gpipe_closed_forms() -> None:
    # Compute-bound GPipe with full recomputation at 10 Gb/s: one more micro-batch adds the slowest
    # stage's F + B of the embedding or the head (not checkpointed: DT-FM checkpoints the blocks'
    # attention and MLP, memory.full_replays) plus 2F + B of its 3 blocks (the first, the
    # embedding and 3 blocks, or the last, 3 blocks and the head whose loss kernels take the
    # host's dispatch time each); one more block per stage adds its 2F + B to each of the
    # m + p - 1 slots (64 + 7 at batch 64).
    table = {t.key: t for t in TABLES}["gpt3xl-fp16-gpipe"]
    overrides = {"servers": table.stages, "gpus_per_server": 1, "device": "V100-SXM2-16GB"}
    profile, _ = resolve_inputs(table.model, "pcie-4x4-v100-10gbe", overrides=overrides, dtype="fp16")
    fwd, bwd = profile.fwd_times_s(1), profile.bwd_times_s(1)
    block = 2 * fwd[1] + bwd[1]
    first_stage = fwd[0] + bwd[0] + 3 * block
    last_stage = fwd[-1] + bwd[-1] + 3 * block
    assert xl_fp16_slope_s("microbatch") == pytest.approx(max(first_stage, last_stage), rel=1e-9)
    assert xl_fp16_slope_s("block") == pytest.approx((64 + table.stages - 1) * block, rel=0.005)


def test_xl_fp16_slope_rejects_an_unknown_slope() -> None:
    with pytest.raises(ValueError, match="unknown slope"):
        xl_fp16_slope_s("layer")
