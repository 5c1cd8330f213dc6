"""The Megatron-LM 3D-parallel planner: valid plans within memory, estimates that the simulator
reproduces where the pipeline is a single stage, and the user's pins."""

from __future__ import annotations

import pytest

from pipesim.errors import Infeasible, InputError
from pipesim.planner.megatron import MegatronPins
from pipesim.planner.search import plan, planner_names
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import simulate

MODEL = "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=32000"
CLUSTER = "dgx-a100-x2"


def test_megatron_is_a_planner() -> None:
    assert "megatron" in planner_names()


def test_plans_use_every_device_and_fit_memory() -> None:
    profile, cluster = resolve_inputs(MODEL, CLUSTER)
    plans = plan(MODEL, CLUSTER, 32, planner="megatron", top=8)
    assert plans
    times = [p.estimate.iteration_time_s for p in plans if p.estimate]
    assert times == sorted(times)
    for p in plans:
        assert p.planner == "megatron"
        assert p.num_devices == cluster.num_devices
        assert p.estimate is not None
        assert p.estimate.peak_memory_bytes <= cluster.device.memory_bytes
        result = simulate(p, profile, cluster)
        peak = max(d.peak_memory_bytes for d in result.devices)
        assert peak == pytest.approx(p.estimate.peak_memory_bytes, rel=0.02)
        if p.num_ranks == 1:  # no pipeline: the estimate is the simulated time
            # (ZeRO-2/3's per-unit collectives within 3%: tests/tp/test_zero_estimate.py)
            per_unit = p.stages[0].sharding.value in ("zero2", "zero3")
            rel = 0.03 if per_unit else 1e-9
            assert result.iteration_time_s == pytest.approx(p.estimate.iteration_time_s, rel=rel)


def test_pins_are_kept() -> None:
    pins = MegatronPins(tensor_parallel=4, sequence_parallel=True, sharding="zero3")
    plans = plan(MODEL, CLUSTER, 32, planner="megatron", top=3, pins=pins)
    for p in plans:
        for s in p.stages:
            assert (s.tensor_parallel, s.sequence_parallel, s.sharding.value) == (4, True, "zero3")


def test_memory_pressure_makes_pipelines() -> None:
    big = "gpt:layers=16,hidden=4096,heads=32,seq=2048,vocab=32000"
    # with ZeRO-3 it fits without model parallelism: the distributed optimizer pinned
    pins = MegatronPins(sharding="distributed")
    plans = plan(big, CLUSTER, 32, planner="megatron", top=1, memory_limit_bytes=24 * 2**30, pins=pins)
    best = plans[0]
    assert best.stages[0].tensor_parallel * best.num_ranks > 1
    assert best.estimate is not None
    assert best.estimate.peak_memory_bytes <= 24 * 2**30


def test_no_fit_is_infeasible_and_non_transformers_are_refused() -> None:
    with pytest.raises(Infeasible, match="megatron"):
        plan(MODEL, CLUSTER, 32, planner="megatron", memory_limit_bytes=2**20)
    with pytest.raises(InputError, match="shape"):
        plan("resnet50", CLUSTER, 32, planner="megatron")


def test_other_planners_refuse_tensor_parallel_pins() -> None:
    with pytest.raises(InputError, match="megatron"):
        plan(MODEL, CLUSTER, 32, planner="dapple", pins=MegatronPins(tensor_parallel=2))
