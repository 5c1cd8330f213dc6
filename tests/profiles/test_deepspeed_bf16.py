"""DeepSpeed BF16_Optimizer's per-micro-batch fp32 gradient accumulation
(profiles/costmodels/deepspeed_bf16.py)."""

from __future__ import annotations

import pytest

from pipesim.api import make_plan, simulate
from pipesim.errors import InputError
from pipesim.profiles.costmodels.compute import compute_model
from pipesim.profiles.costmodels.deepspeed_bf16 import (
    HP_GRAD_BYTES_PER_PARAMETER,
    hp_grad_accumulation_s,
    with_hp_grad_accumulation,
)
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.inputs import resolve_inputs

_SPEC = "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000"


def _inputs():
    profile, cluster = resolve_inputs(_SPEC, "dgx-a100-x2", overrides={"servers": 1}, dtype="bf16")
    return profile, cluster, compute_model(cluster.device_spec(0), "bfloat16")


def test_accumulation_pass_moves_18_bytes_per_parameter_in_two_kernels() -> None:
    model = compute_model(get_device("A100-80GB"), "bfloat16")
    n = 1e9
    expected = n * HP_GRAD_BYTES_PER_PARAMETER / model.memory_bytes_per_s + 2 * model.kernel_overhead_s
    assert HP_GRAD_BYTES_PER_PARAMETER == 18
    assert hp_grad_accumulation_s(n, model) == pytest.approx(expected, rel=1e-12)
    assert hp_grad_accumulation_s(0, model) == 0.0


def test_every_batch_size_gets_the_same_pass_and_the_forward_is_unchanged() -> None:
    profile, _, model = _inputs()
    out = with_hp_grad_accumulation(profile, model, tied_copies={"head": 1000 * 256})
    elem = 2
    head = [layer.name for layer in profile.layers].index("head")
    for i, (old, new) in enumerate(zip(profile.layers, out.layers, strict=True)):
        params = old.parameter_bytes / elem + (1000 * 256 if i == head else 0)
        extra = hp_grad_accumulation_s(params, model)
        assert new.fwd_time_s == old.fwd_time_s
        assert new.bwd_time_s == pytest.approx(old.bwd_time_s + extra, rel=1e-12)
    assert profile.batch_points  # the zoo's powers of two: each carries the same fixed pass
    for batch in (1, 2, 3, 4, 8):
        before, after = profile.bwd_times_s(batch), out.bwd_times_s(batch)
        extras = [
            hp_grad_accumulation_s(layer.parameter_bytes / elem + (1000 * 256 if i == head else 0), model)
            for i, layer in enumerate(profile.layers)
        ]
        for b0, b1, x in zip(before, after, extras, strict=True):
            assert b1 == pytest.approx(b0 + x, rel=1e-9)
        assert out.fwd_times_s(batch) == profile.fwd_times_s(batch)


def test_one_stage_pays_the_pass_once_per_microbatch() -> None:
    profile, cluster, model = _inputs()
    out = with_hp_grad_accumulation(profile, model)
    extra = sum(hp_grad_accumulation_s(layer.parameter_bytes / 2, model) for layer in profile.layers)
    times = []
    for p in (profile, out):
        plan = make_plan(p, cluster, global_batch_size=8, num_microbatches=4, schedule="gpipe")
        times.append(simulate(plan, p, cluster).iteration_time_s)
    assert times[1] - times[0] == pytest.approx(4 * extra, rel=1e-9)


def test_bad_tied_copies_are_named() -> None:
    profile, _, model = _inputs()
    with pytest.raises(InputError, match="tied_copies"):
        with_hp_grad_accumulation(profile, model, tied_copies={"lm_head": 10})
    with pytest.raises(InputError, match=r"tied_copies\[head\]"):
        with_hp_grad_accumulation(profile, model, tied_copies={"head": -1})
