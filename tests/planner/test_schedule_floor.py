"""The schedule planner's floor on a micro-batch count's iteration time, and its pick.

``planner/schedule_plans.py`` estimates the counts of every (schedule, rank shape) best first by
``iteration_floor_s`` and skips those whose floor exceeds the best found (per shape, and without
``--schedule`` the shortlist's last): the floor must never exceed the estimate, and the plans
``plan`` returns must be those of the exhaustive weighing (every suitable count estimated).
"""

from __future__ import annotations

import pytest

import pipesim.planner.schedule_plans as schedule_plans_module
from pipesim.plan import Plan
from pipesim.planner import plan
from pipesim.planner.estimate import CostModel
from pipesim.planner.schedule_plans import (
    WHOLE_BACKWARD,
    default_chunks,
    iteration_floor_s,
    schedule_plans,
    schedule_variant,
    suitable_counts,
)
from pipesim.planner.schedule_time import _order
from pipesim.planner.search import PLANNED_SCHEDULES, plan_identity
from pipesim.profiles import get_cluster, with_overrides, zoo_model
from pipesim.schedules.action import Op
from pipesim.schedules.registry import options_for, placement_of

CLUSTER = get_cluster("dapple-2x8-v100")
SLOW = with_overrides(CLUSTER, {"nic": "10GbE"})  # transfers and all-reduces that matter


def _shapes(profile_name: str, cluster: object, gbs: int) -> list[Plan]:
    return plan(profile_name, cluster, gbs, top=6, schedule="dapple")  # type: ignore[arg-type]


def _no_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every floor 0: the weighing estimates every count (the exhaustive pick)."""
    monkeypatch.setattr(schedule_plans_module, "iteration_floor_s", lambda cost, p: 0.0)
    monkeypatch.setattr(schedule_plans_module, "_coarse_floor_s", lambda *args: 0.0)


def _same(a: list[Plan], b: list[Plan]) -> bool:
    return [(plan_identity(p), p.estimate) for p in a] == [(plan_identity(p), p.estimate) for p in b]


@pytest.mark.parametrize(
    ("model", "slow", "gbs", "every"),
    [
        ("bert48", True, 256, 3),
        pytest.param("bert48", False, 64, 1, marks=pytest.mark.slow),
        pytest.param("gnmt16", True, 128, 1, marks=pytest.mark.slow),
    ],
)
def test_floor_never_exceeds_the_estimate(model: str, slow: bool, gbs: int, every: int) -> None:
    cluster = SLOW if slow else CLUSTER
    profile = zoo_model(model)
    cost = CostModel(profile, cluster)
    shapes = _shapes(model, cluster, gbs)
    checked = 0
    for name in (*PLANNED_SCHEDULES[1:], "1f1b", "pipedream-async", "pipedream-2bw"):
        v = default_chunks(name)
        overlaps = (0.0, 0.6, 1.0) if options_for(name, {"fb_overlap": 1}) else (0.0,)
        for base in shapes[::every]:
            p = base.num_ranks
            if (p if placement_of(name) == "dual" else p * v) > profile.num_layers:
                continue
            widest = max(st.replicas for st in base.stages)
            for m in suitable_counts(name, p, v, gbs, widest)[::every]:
                for overlap in overlaps:
                    options = {"fb_overlap": overlap} if overlap else None
                    variant = schedule_variant(
                        cost, base, name, chunks=v, num_microbatches=m, options=options
                    )
                    floor = iteration_floor_s(cost, variant)
                    dual = placement_of(name) == "dual"
                    coarse = schedule_plans_module._coarse_floor_s(cost, base, m, dual, overlap)
                    estimate = cost.estimate(variant).iteration_time_s
                    assert floor <= estimate * (1 + 1e-12), (name, m, overlap, floor, estimate)
                    assert coarse <= estimate * (1 + 1e-12), (name, m, overlap, coarse, estimate)
                    checked += 1
    assert checked > 50


def test_whole_backward_orders_have_no_split_backward() -> None:
    # the floor charges these schedules' whole backward on a micro-batch's path: their orders
    # must run B, never I and W; every other planned schedule splits its backward
    for name in (*PLANNED_SCHEDULES, "1f1b"):
        order = _order(name, 4, 8, default_chunks(name), ())
        ops = {action.op for row in order.ranks for action in row}
        assert (Op.I not in ops and Op.W not in ops) == (name in WHOLE_BACKWARD), name


@pytest.mark.parametrize(
    ("model", "slow", "gbs"),
    [
        ("bert48", False, 32),
        pytest.param("bert48", False, 192, marks=pytest.mark.slow),
        pytest.param("bert48", True, 128, marks=pytest.mark.slow),
        pytest.param("gnmt16", True, 256, marks=pytest.mark.slow),
    ],
)
def test_plan_picks_what_the_exhaustive_weighing_picks(
    monkeypatch: pytest.MonkeyPatch, model: str, slow: bool, gbs: int
) -> None:
    cluster = SLOW if slow else CLUSTER
    calls = [0, 0]
    estimate = CostModel.estimate

    def counted(self: CostModel, p: Plan, **kwargs: bool) -> object:
        calls[exhaustive_run] += 1
        return estimate(self, p, **kwargs)

    monkeypatch.setattr(CostModel, "estimate", counted)
    exhaustive_run = 0
    pruned = plan(model, cluster, gbs, top=8)
    with monkeypatch.context() as patch:
        _no_floor(patch)
        exhaustive_run = 1
        exhaustive = plan(model, cluster, gbs, top=8)
    assert _same(pruned, exhaustive)
    assert calls[0] < calls[1] / 2  # the floor skips most counts


def test_schedule_plans_equal_the_exhaustive_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    profile = zoo_model("bert48")
    cost = CostModel(profile, SLOW)
    shapes = _shapes("bert48", SLOW, 256)
    limit = SLOW.device.memory_bytes
    found = 0
    for name in ("zbv", "interleaved", "gpipe", "dualpipev", "zb-auto"):
        options = {"fb_overlap": 0.5} if name == "dualpipev" else None
        pruned = schedule_plans(cost, shapes, name, limit, options=options)
        with monkeypatch.context() as patch:
            _no_floor(patch)
            exhaustive = schedule_plans(cost, shapes, name, limit, options=options)
        assert _same(pruned, exhaustive), name
        found += len(pruned)
    assert found >= 10
