"""Per-layer roofline re-targeting of profiles to other devices."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError, UnknownNameError
from pipesim.profiles.costmodels.retarget import retarget
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.models.profile import BatchPoint, Layer, ModelProfile
from pipesim.profiles.models.zoo import zoo_model

V100 = get_device("V100-SXM2-16GB")
A100 = get_device("A100-80GB")


def profile(*layers: Layer, points: tuple[BatchPoint, ...] = ()) -> ModelProfile:
    return ModelProfile(name="p", layers=layers, profile_batch_size=8, batch_points=points)


def test_compute_bound_layer_scales_with_flops() -> None:
    flop = 1e12  # far more compute than memory traffic
    layer = Layer(
        name="gemm",
        fwd_time_s=0.1,
        bwd_time_s=0.2,
        activation_bytes=10,
        parameter_bytes=20,
        fwd_flop=flop,
        bwd_flop=2 * flop,
        fwd_memory_bytes=1e6,
        bwd_memory_bytes=2e6,
    )
    out = retarget(profile(layer), "A100-80GB")
    ratio = V100.achievable_flop_per_s("float32") / A100.achievable_flop_per_s("float32")
    assert out.layers[0].fwd_time_s == pytest.approx(0.1 * ratio, rel=1e-12)
    assert out.layers[0].bwd_time_s == pytest.approx(0.2 * ratio, rel=1e-12)
    assert out.layers[0].activation_bytes == 10
    assert out.layers[0].parameter_bytes == 20
    assert out.reference_device == A100.name


def test_memory_bound_layer_scales_with_bandwidth() -> None:
    layer = Layer(
        name="relu",
        fwd_time_s=0.01,
        bwd_time_s=0.01,
        activation_bytes=1,
        parameter_bytes=0,
        fwd_flop=1e3,
        bwd_flop=1e3,
        fwd_memory_bytes=1e9,
        bwd_memory_bytes=1e9,
    )
    out = retarget(profile(layer), A100)
    ratio = V100.achievable_memory_bandwidth_bytes_per_s / A100.achievable_memory_bandwidth_bytes_per_s
    assert out.layers[0].fwd_time_s == pytest.approx(0.01 * ratio, rel=1e-12)


def test_layer_without_flops_falls_back_to_the_flops_ratio() -> None:
    layer = Layer(name="x", fwd_time_s=1.0, bwd_time_s=2.0, activation_bytes=1, parameter_bytes=1)
    out = retarget(
        profile(
            layer,
            points=(BatchPoint(batch_size=16, fwd_time_s=(2.0,), bwd_time_s=(4.0,), activation_bytes=(2,)),),
        ),
        "A100-80GB",
    )
    ratio = V100.achievable_flop_per_s("float32") / A100.achievable_flop_per_s("float32")
    assert out.layers[0].fwd_time_s == pytest.approx(ratio)
    assert out.batch_points[0].fwd_time_s[0] == pytest.approx(2 * ratio)
    assert out.fwd_times_s(16)[0] == pytest.approx(2 * ratio)


def test_zoo_model_gets_faster_on_newer_gpus_and_same_device_is_identity() -> None:
    bert = zoo_model("bert48")
    assert retarget(bert, "V100") is bert
    a100 = retarget(bert, "A100-80GB")
    h100 = retarget(bert, "H100-SXM")
    total = [sum(layer.fwd_time_s for layer in p.layers) for p in (bert, a100, h100)]
    assert total[0] > total[1] > total[2]
    assert a100.parameter_bytes == bert.parameter_bytes


def test_errors() -> None:
    with pytest.raises(UnknownNameError, match="unknown device"):
        retarget(zoo_model("bert48"), "TPUv9")
    bf16 = ModelProfile(
        name="b",
        layers=(Layer(name="l", fwd_time_s=1, bwd_time_s=1, activation_bytes=1, parameter_bytes=1),),
        profile_batch_size=1,
        reference_device="A100-80GB",
        dtype="bfloat16",
    )
    with pytest.raises(InputError, match="does not support the profile's dtype bfloat16"):
        retarget(bf16, "V100-SXM2-16GB")
