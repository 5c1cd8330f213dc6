"""Recomputation in the planner: the estimate pays the replayed forward and counts each mode's bytes."""

from __future__ import annotations

import pytest

from pipesim.plan import Recompute
from pipesim.planner import plan as make_plans
from pipesim.planner.estimate import CostModel
from pipesim.planner.latency import gpipe_time_s, pipeline_time_s
from pipesim.profiles.costmodels.memory import held_until_w, in_flight_microbatches
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile, one_layer_per_stage
from tests.simulator.test_recompute import attention_profile

DGX1 = get_cluster("dgx1-v100")
FREE = SimOptions(free_links=True)


@pytest.mark.parametrize(("mode", "replay_s"), [("none", 0.0), ("full", 1.0), ("selective", 0.25)])
def test_stage_backward_includes_the_replay_and_closed_forms_match_the_simulator(
    mode: str, replay_s: float
) -> None:
    p, m = 4, 8
    profile = attention_profile(p, share=0.25)
    model = CostModel(profile, DGX1, recompute=mode)
    for schedule, form in (("gpipe", gpipe_time_s), ("1f1b", pipeline_time_s)):
        plan = one_layer_per_stage(p, m, schedule=schedule, recompute=mode)
        costs = model.stage_costs(plan)
        assert [(c.fwd_s, c.bwd_s) for c in costs] == [(1.0, 2.0 + replay_s)] * p
        # the schedule's closed form over the planner's stage costs, links free
        closed = form([c.fwd_s for c in costs], [c.bwd_s for c in costs], [0.0] * p, m)
        assert closed == pytest.approx((m + p - 1) * (1.0 + 2.0 + replay_s), rel=1e-12)
        simulated = simulate(plan, profile, DGX1, FREE).iteration_time_s
        assert simulated == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "dapple", "zb-h1", "zb-h2"])
@pytest.mark.parametrize("mode", ["none", "full", "selective"])
@pytest.mark.parametrize(("p", "m"), [(3, 6), (4, 3), (4, 16)])
def test_estimated_peak_memory_is_the_simulated_one(schedule: str, mode: str, p: int, m: int) -> None:
    profile = attention_profile(p, wgrad_fraction=0.5)
    plan = one_layer_per_stage(p, m, schedule=schedule, recompute=mode)
    estimate = CostModel(profile, DGX1, recompute=mode).estimate(plan)
    result = simulate(plan, profile, DGX1, FREE)
    assert [d.peak_memory_bytes for d in result.devices] == pytest.approx(
        list(estimate.device_peak_memory_bytes.values()), rel=1e-12
    )


@pytest.mark.parametrize("mode", ["none", "full", "selective"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 16)])
def test_looped_zero_bubble_peak_memory_is_the_simulated_one(mode: str, p: int, m: int) -> None:
    profile = attention_profile(2 * p, wgrad_fraction=0.5)
    plan = one_layer_per_stage(p, m, schedule="zb-h1", chunks=2, recompute=mode)
    estimate = CostModel(profile, DGX1, recompute=mode).estimate(plan)
    result = simulate(plan, profile, DGX1, FREE)
    assert [d.peak_memory_bytes for d in result.devices] == pytest.approx(
        list(estimate.device_peak_memory_bytes.values()), rel=1e-12
    )
    assert result.iteration_time_s == pytest.approx(estimate.iteration_time_s, rel=1e-4)


def test_held_until_w_counts() -> None:
    assert [held_until_w("zb-h1", i, in_flight_microbatches("zb-h1", i, 4, 8)) for i in range(4)] == [
        0,
        1,
        2,
        3,
    ]
    assert [held_until_w("zb-h2", i, in_flight_microbatches("zb-h2", i, 4, 8)) for i in range(4)] == [
        0,
        2,
        4,
        6,
    ]
    assert held_until_w("zb-h2", 3, 3) == 2  # never more than K - 1
    assert held_until_w("zb-h1", 0, 1) == 0
    assert held_until_w("1f1b", 3, 4) == 0


def test_recompute_is_no_longer_free_in_the_ranking() -> None:
    profile = zoo_model("bert48")
    cluster = get_cluster("dapple-2x8-v100")
    best = {mode: make_plans(profile, cluster, 128, top=1, recompute=mode)[0] for mode in Recompute}
    for mode, plan in best.items():
        assert plan.recompute is mode  # the DAPPLE planner's plans carry the mode
    time = {mode: plan.estimate.iteration_time_s for mode, plan in best.items() if plan.estimate}
    assert time[Recompute.NONE] < time[Recompute.SELECTIVE] < time[Recompute.FULL]
    # each mode's best plan may trade memory differently; one plan held fixed saves memory by mode
    fixed = {
        mode: CostModel(profile, cluster, recompute=mode).estimate(best[Recompute.NONE])
        for mode in Recompute
    }
    memory = {mode: est.peak_memory_bytes for mode, est in fixed.items()}
    assert memory[Recompute.FULL] < memory[Recompute.SELECTIVE] < memory[Recompute.NONE]
    fixed_time = {mode: est.iteration_time_s for mode, est in fixed.items()}
    assert fixed_time[Recompute.NONE] < fixed_time[Recompute.SELECTIVE] < fixed_time[Recompute.FULL]
    # a memory limit only recomputation meets: full is chosen for memory, and pays for it in time
    limit = 4.0 * 2**30
    tight = make_plans(profile, cluster, 128, top=1, recompute="full", memory_limit_bytes=limit)[0]
    assert tight.estimate is not None
    assert tight.estimate.peak_memory_bytes <= limit
    assert tight.estimate.iteration_time_s > time[Recompute.NONE]


def test_full_recompute_time_matches_equal_profile_estimate() -> None:
    # the estimate of a plan on real links still adds one forward per backward
    profile = equal_profile(4, fwd_s=1.0, bwd_s=2.0)
    plan = one_layer_per_stage(4, 8, schedule="gpipe")
    none = CostModel(profile, DGX1).estimate(plan).iteration_time_s
    full = CostModel(profile, DGX1, recompute="full").estimate(plan).iteration_time_s
    assert full - none == pytest.approx((8 + 4 - 1) * 1.0, rel=1e-6)
