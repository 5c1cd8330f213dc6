"""The planners' estimates against the simulator: iteration time and peak memory within 5%."""

from __future__ import annotations

from dataclasses import replace

import pytest

import pipesim
from pipesim.planner import estimate_plan, plan
from pipesim.profiles import Cluster, get_cluster, zoo_model
from pipesim.simulator import SimOptions, simulate
from tests.planner._layouts import layout_plan

CLUSTER = get_cluster("dapple-2x8-v100")
BOUND = 0.05


def _check(model: str, planner: str, gbs: int, cluster: Cluster = CLUSTER) -> None:
    profile = zoo_model(model)
    best = plan(profile, cluster, gbs, planner=planner, top=1)[0]
    report = pipesim.verify(best, cluster, profile=profile)
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
    _check(model, planner, 128)


@pytest.mark.slow
@pytest.mark.parametrize("cluster", ["dgx1-v100", "pcie-4x4-v100-10gbe", "dgx-a100-x2"])
@pytest.mark.parametrize("model", ["bert48", "gnmt16", "vgg19", "amoebanet36"])
def test_other_presets(model: str, cluster: str) -> None:
    _check(model, "dapple", 128, get_cluster(cluster))
    _check(model, "pipedream", 128, get_cluster(cluster))


def test_vgg19_scatter_plan_shares_the_nic() -> None:
    # the plan the previous estimate missed by -11%: stages on both servers whose activation
    # transfers meet on each server's single NIC
    profile = zoo_model("vgg19")
    layout = [(0, 6, (0, 8, 1, 9)), (7, 10, (2, 10, 3, 11)), (11, 12, (4, 12)), (13, 13, (5, 13))]
    layout += [(14, 16, (6, 14)), (17, 17, (7,)), (18, 23, (15,))]
    p = layout_plan(layout, global_batch_size=128, num_microbatches=32, schedule="dapple")
    est = estimate_plan(p, profile, CLUSTER).iteration_time_s
    sim = simulate(p, profile, CLUSTER, SimOptions(record_trace=False)).iteration_time_s
    assert est == pytest.approx(sim, rel=BOUND)  # +0.7% (+6% with sharing per transfer)


@pytest.mark.parametrize(
    ("model", "layout"),
    [
        ("vgg19", [(0, 15, tuple(range(12))), (16, 19, (12, 13, 14)), (20, 23, (15,))]),
        ("amoebanet36", [(0, 17, tuple(range(12))), (18, 41, (12, 13, 14, 15))]),
    ],
)
def test_uneven_shares_on_one_nic(model: str, layout: list[tuple[int, int, tuple[int, ...]]]) -> None:
    # PipeDream's plans on pcie-4x4 (missed by +9.5% and +16.5% when every replica was timed at
    # the largest share): 12 replicas split 16 samples 2/1, and the 1-sample replicas' pieces
    # cross server 3's NIC while the 2-sample replicas still compute
    profile = zoo_model(model)
    cluster = get_cluster("pcie-4x4-v100-10gbe")
    p = layout_plan(layout, global_batch_size=128, num_microbatches=8, schedule="1f1b")
    est = estimate_plan(p, profile, cluster).iteration_time_s
    sim = simulate(p, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert est == pytest.approx(sim, rel=0.02)


STAGGER_CASES = {
    # plans the estimate missed by +10% to +16% when it ran a stage's replicas in lock step:
    # their pieces take routes of different latency (GPUs behind the NIC's PCIe switch or the
    # host bridge), so in the simulator they drift apart and time-share the NIC
    "gnmt16-pipedream-pcie4x4": (
        "gnmt16",
        "pcie-4x4-v100-10gbe",
        512,
        128,
        "1f1b",
        [(0, 2, (0, 1, 2, 3)), (3, 8, (4, 5, 6, 7)), (9, 17, (8, 9, 10, 11)), (18, 18, (12, 13, 14, 15))],
    ),
    "gnmt16-dapple-2x8": (
        "gnmt16",
        "dapple-2x8-v100",
        1024,
        64,
        "dapple",
        [(0, 5, (0, 1, 2, 3)), (6, 10, (4, 5, 6, 7)), (11, 18, (8, 9, 10, 11, 12, 13, 14, 15))],
    ),
    "vgg19-dapple-pcie4x4": (
        "vgg19",
        "pcie-4x4-v100-10gbe",
        1024,
        128,
        "dapple",
        [
            (0, 6, (4, 8, 12, 1)),
            (7, 11, (5, 9, 13, 2)),
            (12, 15, (6, 10, 14, 3)),
            (16, 20, (7, 11)),
            (21, 23, (15,)),
        ],
    ),
}


@pytest.mark.parametrize("case", sorted(STAGGER_CASES))
def test_replicas_on_unlike_routes_drift_apart(case: str) -> None:
    model, cluster_name, gbs, m, schedule, layout = STAGGER_CASES[case]
    profile = zoo_model(model)
    cluster = get_cluster(cluster_name)
    p = layout_plan(layout, global_batch_size=gbs, num_microbatches=m, schedule=schedule)
    report = pipesim.verify(p, cluster, profile=profile)
    assert abs(report.relative_error) < BOUND, (case, report.relative_error)
