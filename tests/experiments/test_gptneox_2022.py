"""GPT-NeoX-20B record (experiments/validation/gptneox_2022.py): the published figures agree with
each other and with the release configuration, gpt-neox's FLOP count is reproduced, and the
prediction behaves as a 1F1B pipeline must."""

from __future__ import annotations

import pytest

import experiments.validation.gptneox_2022 as neox
from experiments.validation.record import all_records
from pipesim.profiles.inputs import resolve_inputs


def test_configuration_is_consistent() -> None:
    # 20B.yml: micro-batch 4 x 32 accumulation steps x 12 replicas = 1536 samples = 3,145,728 tokens
    # (the paper's "approximately 3.15M tokens"); 2 x 4 x 12 = the 96 GPUs of 12 servers of 8;
    # DeepSpeed's type:transformer partition puts 44 / 4 = 11 blocks on each stage.
    assert neox._BATCH == 1536
    assert neox._BATCH * neox._SEQ == 3_145_728
    assert neox._T * neox._P * neox._D == 12 * 8
    assert neox._BLOCKS == (11,) * 4
    assert sum(neox._BLOCKS) == neox._LAYERS
    # the vocabulary: GPT-NeoX's 50,257 tokens padded to a multiple of 128 x t = 256
    assert neox._VOCAB % (128 * neox._T) == 0
    assert neox._VOCAB - 256 < 50257 <= neox._VOCAB


def test_parameter_counts() -> None:
    # get_total_params sums the TP ranks: 266 h = 1,634,304 layer-norm and row-parallel-bias
    # parameters counted twice. The de-duplicated figure is the model card's nparameters.
    assert neox.neox_parameter_count(1) == 20_554_567_680
    assert neox.neox_parameter_count(2) == 20_556_201_984
    assert neox.neox_parameter_count(2) - neox.neox_parameter_count(1) == 266 * 6144
    # the zoo model: the same, plus learned positions (2048 x 6144) where GPT-NeoX uses rotary
    profile, _ = resolve_inputs(neox._SPEC, "dgx-a100-1024", overrides=neox._CLUSTER, dtype="fp16")
    assert profile.parameter_count == pytest.approx(20_554_567_680 + 2048 * 6144, rel=1e-4)


def test_published_rate_stands_for_the_iteration_time() -> None:
    # gpt-neox's count: 1536 x 2048 x (6 x 20,556,201,984 + 60 x 2048 x 6144 x 44) FLOP an iteration;
    # at 117 teraFLOP/s on each of 96 GPUs that is a 43.85 s iteration, and 150,000 iterations
    # (train-iters) are 1,827 hours.
    per_token = 6 * 20_556_201_984 + 60 * 2048 * 6144 * 44
    assert neox.neox_flop_per_iteration() == 1536 * 2048 * per_token
    time_s = neox.neox_flop_per_iteration() / (96 * 117e12)
    assert time_s == pytest.approx(43.85, abs=0.01)
    assert 150_000 * time_s / 3600 == pytest.approx(1827, abs=1)


def test_record_is_discovered() -> None:
    (record,) = [r for r in all_records() if r.name.startswith("gpt-neox-20b")]
    assert record.kind == "absolute"
    assert record.published == 117.0
    assert record.tolerance == 0.10
    assert "arXiv:2204.06745" in record.source
    assert "c560814b" in record.source


def _iteration_time_s(monkeypatch: pytest.MonkeyPatch, microbatches: int) -> float:
    monkeypatch.setattr(neox, "_ACCUMULATION", microbatches)
    monkeypatch.setattr(neox, "_BATCH", neox._MICROBATCH * microbatches * neox._D)
    return neox.simulate_neox20b().iteration_time_s


def test_iteration_time_is_linear_in_the_microbatches(monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1F1B iteration of 4 equal stages is m + 3 pipeline slots and a fixed data-parallel step:
    # 32 -> 16 micro-batches removes 16 slots, 16 -> 8 removes 8 (the autograd accumulation pass,
    # (m - 1) / m of a memory pass per backward, bends it by well under 0.5%).
    t32, t16, t8 = (_iteration_time_s(monkeypatch, m) for m in (32, 16, 8))
    assert (t32 - t16) / (t16 - t8) == pytest.approx(2.0, rel=0.005)


def test_iteration_time_is_above_the_compute_bound() -> None:
    # Megatron-LM's count with recomputation, 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) = 5.35e17 FLOP,
    # at the A100's dense fp16 peak (312 TFLOP/s) on 96 GPUs is 17.9 s; the 1F1B bubble (3 of 35
    # slots) is on top of it.
    b, s, layers, h, v = 1536, 2048, 44, 6144, 50432
    flop = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    floor_s = flop / (96 * 312e12)
    assert floor_s == pytest.approx(17.87, abs=0.01)
    assert neox.iteration_time_s() > floor_s * 35 / 32
