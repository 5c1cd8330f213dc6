"""The optimizer-step cost model: bytes per parameter, who updates what, the time on a device."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError, UnknownNameError
from pipesim.profiles.costmodels.grad_dtype import grad_reduce_dtype
from pipesim.profiles.costmodels.optimizer import (
    optimizer_bytes_per_parameter,
    optimizer_step_s,
    stage_optimizer_step_s,
    updated_parameter_fraction,
)
from pipesim.profiles.hardware.catalog import get_device


@pytest.mark.parametrize(
    ("optimizer", "dtype", "sharding", "expected"),
    [
        # mixed precision Adam: grad 2 + fp32 master r/w 8 + m r/w 8 + v r/w 8 + bf16 copy 2
        ("adam", "bfloat16", "none", 28),
        ("adam", "float16", "zero1", 28),
        # Megatron-LM's distributed optimizer reads fp32 main gradients: 4 + 8 + 16 + 2
        ("adam", "bfloat16", "distributed", 30),
        # fp32 Adam: grad 4 + weight r/w 8 + m, v r/w 16; the gradient is already fp32
        ("adam", "float32", "none", 28),
        ("adam", "float32", "distributed", 28),
        ("momentum", "float16", "none", 2 + 8 + 8 + 2),
        ("momentum", "float32", "none", 4 + 8 + 8),
        ("sgd", "bfloat16", "none", 2 + 8 + 2),
        ("sgd", "float32", "none", 4 + 8),
    ],
)
def test_bytes_per_parameter(optimizer: str, dtype: str, sharding: str, expected: int) -> None:
    assert optimizer_bytes_per_parameter(optimizer, dtype, sharding) == expected


def test_each_sharded_replica_updates_its_partition() -> None:
    assert updated_parameter_fraction("none", 8) == 1.0
    for mode in ("zero1", "zero2", "zero3", "distributed"):
        assert updated_parameter_fraction(mode, 8) == 1.0 / 8
        assert updated_parameter_fraction(mode, 1) == 1.0


def test_time_is_bytes_over_achievable_hbm_bandwidth() -> None:
    a100 = get_device("A100-80GB")
    params = 1e9
    expected = params * 28 / (a100.memory_bandwidth_bytes_per_s * a100.memory_efficiency)
    assert optimizer_step_s(params, a100, "adam", "bfloat16") == pytest.approx(expected, rel=1e-12)
    assert optimizer_step_s(0.0, a100, "adam", "bfloat16") == 0.0
    # a stage's parameter bytes in the training dtype, sharded over 4 replicas
    whole = stage_optimizer_step_s(2e9, a100, "adam", "bfloat16")
    assert whole == pytest.approx(expected, rel=1e-12)
    assert stage_optimizer_step_s(2e9, a100, "adam", "bfloat16", "zero1", 4) == pytest.approx(whole / 4)
    distributed = stage_optimizer_step_s(2e9, a100, "adam", "bfloat16", "distributed", 4)
    assert distributed == pytest.approx(whole / 4 * 30 / 28, rel=1e-12)


def test_bad_inputs_name_the_field() -> None:
    a100 = get_device("A100-80GB")
    with pytest.raises(InputError, match="parameters"):
        optimizer_step_s(-1.0, a100, "adam", "float32")
    with pytest.raises(InputError, match="parameter_bytes"):
        stage_optimizer_step_s(float("nan"), a100, "adam", "float32")
    with pytest.raises(InputError, match="dtype"):
        optimizer_bytes_per_parameter("adam", "float64")
    with pytest.raises(UnknownNameError):
        optimizer_bytes_per_parameter("lamb", "float32")
    with pytest.raises(InputError, match="replicas"):
        updated_parameter_fraction("zero1", 0)


def test_the_gradient_is_read_in_the_dtype_it_is_held_in() -> None:
    # bf16 training holds fp32 main gradients by Megatron-LM's rule (grad_dtype.grad_reduce_dtype):
    # Adam reads 4 gradient bytes, 30 in all; fp16 keeps 2-byte gradients, 28; fp32 is 28 either way
    assert optimizer_bytes_per_parameter("adam", "bfloat16", grad_dtype=grad_reduce_dtype("bfloat16")) == 30
    assert optimizer_bytes_per_parameter("adam", "float16", grad_dtype=grad_reduce_dtype("float16")) == 28
    assert optimizer_bytes_per_parameter("adam", "float32", grad_dtype="float32") == 28
    assert optimizer_bytes_per_parameter("adam", "bfloat16", "distributed", grad_dtype="bfloat16") == 30
    with pytest.raises(InputError, match="grad_dtype"):
        optimizer_bytes_per_parameter("adam", "bfloat16", grad_dtype="float64")
