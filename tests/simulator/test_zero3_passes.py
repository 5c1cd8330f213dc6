"""DeepSpeed's (2021) memory passes around its ZeRO-3 calls move the simulator and the 3D
estimate alike, and leave the ``fsdp`` runtime bit-identical (profiles/costmodels/zero3_exposure.py
call_pass_s; simulator/zero_lowering.py; planner/zero_ops.py)."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels import zero3_exposure
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate

_PASSES = ("GATHER_FILL_BYTES_PER_BYTE", "GATHER_PASS_BYTES_PER_BYTE", "SCATTER_PASS_BYTES_PER_BYTE")


def _plan(runtime: str, recompute: str) -> Plan:
    stage = StagePlan(first_layer=0, last_layer=9, replicas=16, sharding="zero3")
    return Plan(stages=(stage,), global_batch_size=16, num_microbatches=1, schedule="1f1b",
                recompute=recompute, zero3_runtime=runtime)


def _both(runtime: str, recompute: str) -> tuple[float, float]:
    profile, cluster = resolve_inputs("gpt:layers=8,hidden=4096,heads=32,seq=1024,vocab=32000", "dgx-a100-x2",
                                      dtype="fp16")
    plan = _plan(runtime, recompute)
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    opts = SimOptions(optimizer_step=False, record_trace=False)
    return est, simulate(plan, profile, cluster, opts).iteration_time_s


def _scaled(monkeypatch: pytest.MonkeyPatch, factor: float) -> None:
    for name in _PASSES:
        monkeypatch.setattr(zero3_exposure, name, getattr(zero3_exposure, name) * factor)


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_passes_move_the_simulation_and_the_estimate_alike(
    recompute: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten-fold passes (memory-bound enough to show on 16 ranks' small modules) against none: the
    estimate and the simulator add the same time, within 3% of the iteration."""
    with monkeypatch.context() as m:
        _scaled(m, 0.0)
        est0, sim0 = _both("deepspeed-2021", recompute)
    with monkeypatch.context() as m:
        _scaled(m, 10.0)
        est, sim = _both("deepspeed-2021", recompute)
    assert est - est0 > 0.02 * est0
    assert est - est0 == pytest.approx(sim - sim0, abs=0.03 * sim)


def test_fsdp_is_bit_identical(monkeypatch: pytest.MonkeyPatch) -> None:
    """The passes are DeepSpeed's: FSDP's flat calls on its own streams spend none, whatever the
    constants (differential: the same floats with the passes scaled a thousand-fold)."""
    base = _both("fsdp", "full")
    _scaled(monkeypatch, 1000.0)
    assert _both("fsdp", "full") == base
