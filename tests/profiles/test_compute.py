"""The kernel-level compute model: tile and wave quantisation, split-K, efficiency per generation."""

from __future__ import annotations

import math

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.compute import (
    CONV_TILES_FP32,
    GEMM_EFFICIENCY,
    K_OVERHEAD,
    TILES,
    ComputeModel,
    GemmShape,
    compute_model,
    gemm_efficiency,
)
from pipesim.profiles.hardware.catalog import device_names, get_device
from pipesim.profiles.hardware.specs import ARCHITECTURES, PRECISIONS, parse_precision


def _model(sm_count: int | None, *, peak: float = 1e12, efficiency: float = 1.0) -> ComputeModel:
    return ComputeModel(
        device="test",
        precision="float16",
        storage_dtype="float16",
        peak_flop_per_s=peak,
        efficiency=efficiency,
        sm_count=sm_count,
        memory_bytes_per_s=1e18,
        kernel_overhead_s=0.0,
        op_dispatch_s=0.0,
    )


def test_one_full_wave_of_the_largest_tile_by_hand() -> None:
    # 80 SMs, a 2560 x 1024 GEMM: 10 x 8 = 80 tiles of 256 x 128 = exactly one wave.
    model = _model(80)
    k = 4096
    shape = GemmShape(m=2560, n=1024, k=k)
    per_sm = 1e12 / 80
    one_wave = 2 * 256 * 128 * (k + K_OVERHEAD) / per_sm
    assert model.gemm_compute_s(shape) == pytest.approx(one_wave)
    assert model.gemm_flop_per_s(shape) == pytest.approx(1e12 * k / (k + K_OVERHEAD))


def test_a_tile_set_runs_its_largest_tile_at_the_full_efficiency_by_hand() -> None:
    # cuDNN's fp32 convolution tiles: 80 SMs, 1280 x 1024 = 10 x 8 tiles of 128 x 128, one wave
    model = _model(80)
    k = 4096
    one_wave = 2 * 128 * 128 * (k + K_OVERHEAD) / (1e12 / 80)
    shape = GemmShape(m=1280, n=1024, k=k)
    assert model.gemm_compute_s(shape, tiles=CONV_TILES_FP32) == pytest.approx(one_wave)


def test_conv_tiles_pad_pixels_to_128_and_channels_to_32() -> None:
    model = _model(80)
    # a batch-1 7 x 7 map: 49 pixels pad to a 128-row tile (a cuBLAS GEMM may use 64 rows)
    small_map = GemmShape(m=49, n=512, k=512)
    assert model.gemm_compute_s(small_map, tiles=CONV_TILES_FP32) > model.gemm_compute_s(small_map)
    # one SM, 16 output channels: a 128 x 32 tile wastes half, a 64 x 64 one three quarters
    one_sm = _model(1)
    narrow = GemmShape(m=128 * 64, n=16, k=1024)
    assert one_sm.gemm_compute_s(narrow, tiles=CONV_TILES_FP32) < one_sm.gemm_compute_s(narrow)
    assert all(tm == 128 for tm, _ in CONV_TILES_FP32)
    assert CONV_TILES_FP32[0] == max(CONV_TILES_FP32, key=lambda t: t[0] * t[1])


def test_wave_quantisation_one_tile_more_costs_a_wave() -> None:
    # 81 tiles of 256 x 128 on 80 SMs: two waves of the big tile, unless a smaller tile wins.
    model = _model(80)
    full = model.gemm_compute_s(GemmShape(m=2560, n=1024, k=4096))
    over = model.gemm_compute_s(GemmShape(m=2561, n=1024, k=4096))
    assert over > 1.05 * full  # a partial wave is never free
    assert over < 2 * full  # ... but a better tile choice avoids paying a whole second wave


def test_tile_quantisation_pads_dimensions() -> None:
    model = _model(None)  # without SMs only the k-efficiency counts
    a = model.gemm_compute_s(GemmShape(m=512, n=512, k=512))
    assert a == pytest.approx(2 * 512**3 / (1e12 * 512 / (512 + K_OVERHEAD)))
    quantised = _model(1)
    # one SM: the GEMM runs tile after tile; 257 rows cost as much as 320 or more
    assert quantised.gemm_compute_s(GemmShape(m=257, n=256, k=256)) > quantised.gemm_compute_s(
        GemmShape(m=256, n=256, k=256)
    ) * 1.2


def test_small_gemms_run_at_a_lower_share_of_peak() -> None:
    a100 = compute_model(get_device("A100-80GB"), "bf16")
    rates = [a100.gemm_flop_per_s(GemmShape(m=m, n=4096, k=4096)) for m in (64, 256, 1024, 8192)]
    assert rates[0] < 0.8 * rates[-1]  # 64 rows: few tiles, split-K and small tiles only partly help
    assert rates[0] < min(rates[1:])  # (not monotonic in between: waves quantise)
    # a large GEMM approaches the generation's efficiency (Megatron-LM SC'21: GEMMs ~0.7 of peak)
    assert rates[-1] / 312e12 == pytest.approx(GEMM_EFFICIENCY["ampere", "bfloat16"], rel=0.1)


_CUBE = GemmShape(m=8192, n=8192, k=8192)


def _fraction_of(device: str, precision: str, benchmark_flop_per_s: float) -> float:
    return compute_model(get_device(device), precision).gemm_flop_per_s(_CUBE) / benchmark_flop_per_s


def test_volta_fp16_sits_at_the_a100s_fraction_of_the_same_matmul_benchmark() -> None:
    # mli/transformers-benchmarks README (one notebook, PyTorch fp16 matmul of 8192^3): 95 TFLOP/s
    # on a V100 16GB, 230 on an A100 80GB. The shares absorb the same per-pass costs on both, so the
    # model sits at the same fraction of the benchmark on both (V100 1.5% lower: 80 SMs quantise
    # 2048 tiles into 26 waves).
    v100 = _fraction_of("V100-SXM2-16GB", "fp16", 95e12)
    a100 = _fraction_of("A100-80GB", "fp16", 230e12)
    assert v100 == pytest.approx(a100, rel=0.02)
    assert 0.9 < v100 < 1.0  # below the kernel's own rate, not far below it
    assert GEMM_EFFICIENCY["volta", "float16"] == pytest.approx(0.70 * (95 / 125) / (230 / 312), abs=0.005)


def test_hopper_bf16_sits_at_the_a100s_fraction_of_the_same_sustained_matmul() -> None:
    # huggingface/gpu-fryer README (cuBLASLt bf16 8192^3 held for 60 s on every GPU of a server):
    # ~730 TFLOP/s on an H100 SXM5, ~270 on an A100 SXM4 80GB. The shares absorb the same per-pass
    # costs on both, so the model sits at the same fraction of the sustained benchmark on both (the
    # H100 2% lower: 132 SMs quantise 2048 tiles of 256 x 128 into 16 waves, the last 52% full).
    # Short runs of the same GEMM (797.8 TFLOP/s, pranjalssh/fast.cu README, kernel 0) run before
    # the clock settles under the 700 W limit and are not the rate training holds.
    h100 = _fraction_of("H100-SXM", "bf16", 730e12)
    a100 = _fraction_of("A100-80GB", "bf16", 270e12)
    assert h100 == pytest.approx(a100, rel=0.03)
    assert h100 < a100
    assert GEMM_EFFICIENCY["hopper", "bfloat16"] == pytest.approx(0.70 * (730 / 989) / (270 / 312), abs=0.005)
    assert GEMM_EFFICIENCY["hopper", "float16"] == GEMM_EFFICIENCY["hopper", "bfloat16"]


def test_split_k_fills_idle_sms_for_short_wide_reductions() -> None:
    model = _model(80)
    shape = GemmShape(m=256, n=256, k=65536)  # 2 tiles of 256 x 128: 78 SMs idle without split-K
    no_split = 2 * 256 * 128 * (65536 + K_OVERHEAD) / (1e12 / 80)
    assert model.gemm_compute_s(shape) < no_split / 4


def test_batched_gemms_share_waves() -> None:
    model = _model(80)
    many = model.gemm_compute_s(GemmShape(m=256, n=128, k=64, count=80))
    one_wave = 2 * 256 * 128 * (64 + K_OVERHEAD) / (1e12 / 80)  # 80 tiles of 256 x 128: one wave
    assert many == pytest.approx(one_wave)


def test_time_adds_memory_bound_and_launch() -> None:
    model = ComputeModel(device="t", precision="float32", storage_dtype="float32", peak_flop_per_s=1e12,
                         efficiency=1.0, sm_count=None, memory_bytes_per_s=1e9, kernel_overhead_s=1e-6,
                         op_dispatch_s=5e-6)
    shape = GemmShape(m=8, n=8, k=8)
    assert model.gemm_time_s(shape, 1e6) == pytest.approx(1e-3 + 1e-6)  # memory-bound
    assert model.memory_time_s(1e3) == pytest.approx(1e-6 + 1e-6)
    assert model.op_time_s(1e-6) == 5e-6
    assert model.op_time_s(1e-3) == 1e-3


@pytest.mark.parametrize(("field", "value"), [("m", 0), ("n", -1), ("k", 1.5), ("count", 0)])
def test_gemm_shape_validation(field: str, value: object) -> None:
    kwargs: dict[str, object] = {"m": 1, "n": 1, "k": 1, field: value}
    with pytest.raises(InputError, match=f"gemm.{field}="):
        GemmShape(**kwargs)  # type: ignore[arg-type]


def test_tiles_are_largest_first() -> None:
    areas = [tm * tn for tm, tn in TILES]
    assert areas == sorted(areas, reverse=True)


def test_every_catalog_device_has_sms_an_architecture_and_a_curve() -> None:
    for name in device_names():
        device = get_device(name)
        assert device.sm_count is not None, name
        assert device.sm_count > 0, name
        assert device.architecture in ARCHITECTURES, name
        for precision in device.peak_flop_per_s:
            assert (device.architecture, precision) in GEMM_EFFICIENCY, (name, precision)
            assert 0 < gemm_efficiency(device, precision) <= 1


@pytest.mark.parametrize(
    ("device", "precision"),
    [("V100", "bf16"), ("V100", "tf32"), ("A100-80GB", "fp8"), ("P40", "fp16"), ("MI250X", "fp8"),
     ("T4", "bf16")],
)
def test_precisions_a_device_cannot_run_are_refused_by_name(device: str, precision: str) -> None:
    spec = get_device(device)
    rule = rf"dtype='{parse_precision(precision)}': {spec.name} cannot train in it"
    with pytest.raises(InputError, match=rule):
        compute_model(spec, precision)


def test_precision_names() -> None:
    assert [parse_precision(x) for x in ("fp32", "TF32", "bf16", "fp16", "fp8")] == [
        "float32", "tfloat32", "bfloat16", "float16", "float8"
    ]
    assert set(PRECISIONS) == {"float32", "tfloat32", "float16", "bfloat16", "float8"}
    with pytest.raises(InputError, match=r"dtype='int8': must be one of fp32, tf32, fp16, bf16, fp8"):
        parse_precision("int8")


def test_newer_generations_and_narrower_precisions_are_faster() -> None:
    shape = GemmShape(m=8192, n=8192, k=8192)
    t = {
        (d, p): compute_model(get_device(d), p).gemm_compute_s(shape)
        for d, p in [("V100", "fp32"), ("V100", "fp16"), ("A100-80GB", "bf16"), ("H100", "bf16"),
                     ("H100", "fp8"), ("B200", "bf16")]
    }
    order = [("V100", "fp32"), ("V100", "fp16"), ("A100-80GB", "bf16"), ("H100", "bf16"), ("H100", "fp8")]
    assert [t[k] for k in order] == sorted((t[k] for k in order), reverse=True)
    assert t["B200", "bf16"] < t["H100", "bf16"]
    assert math.isfinite(t["V100", "fp32"])


def test_concurrent_chains_take_the_longest_chain_when_the_device_has_room() -> None:
    # Three chains of 3, 1 and 2 s with 1 TFLOP at 1 TFLOP/s: the 3 s chain bounds them.
    model = _model(80)
    assert model.concurrent_time_s([3.0, 1.0, 2.0], flop=1e12, memory_bytes=0.0) == 3.0


def test_concurrent_chains_are_bound_by_the_devices_throughput() -> None:
    # 4 TFLOP at 1 TFLOP/s (efficiency 0.5 of a 2 TFLOP/s peak) plus 1e18 bytes at 1e18 B/s.
    model = _model(80, peak=2e12, efficiency=0.5)
    assert model.concurrent_time_s([3.0, 2.5], flop=4e12, memory_bytes=1e18) == 5.0


@pytest.mark.parametrize(
    ("chains", "flop", "memory_bytes", "field"),
    [([], 0.0, 0.0, "chains_s"), ([1.0, -1.0], 0.0, 0.0, r"chains_s\[1\]"),
     ([1.0], -1.0, 0.0, "flop"), ([1.0], 0.0, -1.0, "memory_bytes")],
)
def test_concurrent_time_rejects_bad_input(chains: list[float], flop: float, memory_bytes: float,
                                           field: str) -> None:
    with pytest.raises(InputError, match=field):
        _model(80).concurrent_time_s(chains, flop=flop, memory_bytes=memory_bytes)
