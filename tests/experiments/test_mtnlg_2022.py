"""MT-NLG 530B records (experiments/validation/mtnlg_2022.py): the published figures agree with
each other, and the prediction behaves as a 1F1B pipeline of equal stages must."""

from __future__ import annotations

import pytest

from experiments.validation.mtnlg_2022 import _ROWS, iteration_time_s


def _eq3_tflops_per_gpu(time_s: float, gpus: int) -> float:
    # Narayanan et al. 2021, Eq. 3, with the paper's shape: B 1920, s 2048, l 105, h 20480, V 51200
    b, s, layers, h, v = 1920, 2048, 105, 20480, 51200
    return 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h)) / time_s / gpus / 1e12


def test_published_rates_follow_from_the_published_times() -> None:
    # Sec. 2.4's teraFLOP/s are Megatron-LM's count with recomputation over the iteration time:
    # 125.7, 120.4, 113.5 against the rounded 126, 121, 113.
    for servers, time_s, tflops in _ROWS:
        assert _eq3_tflops_per_gpu(time_s, servers * 8) == pytest.approx(tflops, abs=0.7)


def test_iteration_time_scales_with_the_pipeline_slots() -> None:
    # Micro-batch 1 on every row: the per-slot time is the same, so a 1F1B iteration of m + p - 1
    # slots (m = 1920 / d: 240 at d = 8, 160 at d = 12; p = 35) scales as 274 / 194, up to the
    # data-parallel all-reduce and the optimizer step (a few hundred ms of ~50 s).
    ratio = iteration_time_s(280) / iteration_time_s(420)
    assert ratio == pytest.approx(274 / 194, rel=0.02)


def test_iteration_time_is_above_the_compute_bound() -> None:
    # The recomputed FLOP at the A100's dense 16-bit peak (312 TFLOP/s) is a floor: 24.2 s on 280
    # servers; the pipeline's bubble alone (34 of 274 slots) adds 14% on top of the compute time.
    flop = _eq3_tflops_per_gpu(1.0, 1) * 1e12
    floor_s = flop / (2240 * 312e12)
    assert floor_s == pytest.approx(24.2, rel=0.01)
    assert iteration_time_s(280) > floor_s * 274 / 240
