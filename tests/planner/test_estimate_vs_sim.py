"""The planners' estimates against the simulator: iteration time and peak memory within 5%."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pipesim
from pipesim.planner import estimate_plan, plan
from pipesim.profiles import get_cluster, zoo_model
from pipesim.simulator import SimOptions, simulate

CLUSTER = get_cluster("dapple-2x8-v100")
BOUND = 0.05

# (model, planner): known misses, with the error measured when this was written
KNOWN = {
    ("vgg19", "dapple"): "-11%: activation transfers of many-replica stages contend across micro-batches",
    ("vgg19", "pipedream"): "-7.5%: same cause",
}


def _check(model: str, planner: str, gbs: int) -> None:
    profile = zoo_model(model)
    best = plan(profile, CLUSTER, gbs, planner=planner, top=1)[0]
    report = pipesim.verify(best, CLUSTER, profile=profile)
    assert abs(report.peak_memory_relative_error) < BOUND
    assert abs(report.relative_error) < BOUND, (model, planner, report.relative_error)


@pytest.mark.parametrize("planner", ["dapple", "pipedream", "dp"])
def test_bert48_default_compare_case(planner: str) -> None:
    _check("bert48", planner, 128)


def test_bert48_dapple_plan_under_gpipe_schedule() -> None:
    profile = zoo_model("bert48")
    best = plan(profile, CLUSTER, 128, top=1)[0]
    gp = replace(best, schedule="gpipe", estimate=None)
    est = estimate_plan(gp, profile, CLUSTER)
    sim = simulate(gp, profile, CLUSTER, SimOptions(record_trace=False))
    assert est.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=BOUND)
    assert est.peak_memory_bytes == pytest.approx(max(d.peak_memory_bytes for d in sim.devices), rel=1e-9)


@pytest.mark.parametrize("planner", ["gpipe"])
@pytest.mark.parametrize("model", ["gnmt16", "resnet50", "vgg19"])
def test_gpipe_plans(model: str, planner: str) -> None:
    _check(model, planner, 128)


@pytest.mark.slow
@pytest.mark.parametrize("planner", ["dapple", "pipedream", "dp"])
@pytest.mark.parametrize("model", ["gnmt16", "vgg19", "resnet50", "xlnet36", "amoebanet36"])
def test_zoo_models(model: str, planner: str) -> None:
    if (model, planner) in KNOWN:
        pytest.xfail(KNOWN[(model, planner)])
    _check(model, planner, 128)
