"""Planners that propose parallel plans with analytic estimates: DAPPLE and the dp, GPipe and
PipeDream baselines (see ``docs/planner.md``). The estimate is a closed form per schedule whose
cost does not grow with the micro-batch count; :func:`plan` ranks by it and may re-order its
shortlist by a ``rerank`` callable (e.g. :func:`pipesim.rerank.simulated_rerank`).

This layer imports only ``pipesim.errors``, ``pipesim.units``, ``pipesim.profiles``,
``pipesim.schedules`` and ``pipesim.plan``; it never imports the simulator.
"""

from pipesim.planner.dapple import dapple_search
from pipesim.planner.estimate import ESTIMATED_SCHEDULES, CostModel, pipeline_time_s
from pipesim.planner.placement import Placement, device_order, parse_placement
from pipesim.planner.search import (
    REPLICA_SPACES,
    SHORTLIST,
    estimate_plan,
    plan,
    plan_identity,
    planner_names,
)
from pipesim.planner.search_space import cut_positions, device_unit, replica_candidates

__all__ = [
    "ESTIMATED_SCHEDULES",
    "REPLICA_SPACES",
    "SHORTLIST",
    "CostModel",
    "Placement",
    "cut_positions",
    "dapple_search",
    "device_order",
    "device_unit",
    "estimate_plan",
    "parse_placement",
    "pipeline_time_s",
    "plan",
    "plan_identity",
    "planner_names",
    "replica_candidates",
]
