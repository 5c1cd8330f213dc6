"""What the DAPPLE search keeps between searches gives the answers computed afresh (differential
tests of the speed-ups in planner/dapple_dp.py, planner/dapple.py, planner/baselines.py and
profiles/costmodels/lines.py)."""

from __future__ import annotations

import random

import pytest

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan
from pipesim.planner.dapple import dapple_search
from pipesim.planner.dapple_dp import _suffix_max
from pipesim.planner.estimate import CostModel
from pipesim.profiles import get_cluster, zoo_model
from pipesim.profiles.costmodels.lines import prune_lines


def _prune_by_definition(lines: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The lines no other kept line beats everywhere on x >= 0, compared with every kept one."""
    kept: list[tuple[float, float]] = []
    for a, b in sorted(set(lines), key=lambda ab: (-ab[1], -ab[0])):
        if not any(a2 >= a and b2 >= b for a2, b2 in kept):
            kept.append((a, b))
    return tuple(kept)


def test_prune_lines_matches_its_definition() -> None:
    rng = random.Random(7)
    for _ in range(500):
        # few distinct values: ties in either coordinate and repeated lines are common
        lines = [(float(rng.randint(0, 5)), float(rng.randint(0, 5)) / 4) for _ in range(rng.randint(0, 9))]
        assert prune_lines(lines) == _prune_by_definition(lines)


def test_suffix_max_is_the_maximum_of_each_suffix() -> None:
    rng = random.Random(3)
    for _ in range(100):
        acts = [rng.choice((0.0, 1.5, 2.0, rng.random())) for _ in range(rng.randint(1, 12))]
        i = rng.randint(1, len(acts))
        assert _suffix_max(acts, i) == [max(acts[first:i]) for first in range(i)]


def test_peak_memory_without_timing_is_the_estimates() -> None:
    model = CostModel(zoo_model("bert48"), get_cluster("dapple-2x8-v100"))
    n = model.profile.num_layers
    shapes = (([(0, n - 1, 16)], 16), ([(0, 20, 8), (21, n - 1, 8)], 16), ([(0, 9, 3), (10, n - 1, 13)], 8))
    for stages, m in shapes:
        plan = Plan(
            stages=tuple(StagePlan(first_layer=a, last_layer=b, replicas=r) for a, b, r in stages),
            global_batch_size=256,
            num_microbatches=m,
        )
        assert model.peak_memory_bytes(plan) == model.estimate(plan).peak_memory_bytes
    # a plan the estimate refuses, refused alike (4 samples over 16 replicas)
    bad = Plan(stages=(StagePlan(first_layer=0, last_layer=n - 1, replicas=16),), global_batch_size=256,
               num_microbatches=64)  # fmt: skip
    for ask in (model.peak_memory_bytes, model.estimate):
        with pytest.raises(Infeasible, match="cannot be split"):
            ask(bad)


def test_searches_on_a_used_model_match_fresh_ones() -> None:
    # the rows, transfer times and working-set maxima one search keeps (per micro-batch size and
    # policy) serve a later one: the same results, bit for bit, as on a model that never searched
    profile, cluster = zoo_model("bert48"), get_cluster("dapple-2x8-v100")
    used = CostModel(profile, cluster)
    for gbs in (64, 128, 192):
        again = dapple_search(used, gbs, top=3)
        fresh = dapple_search(CostModel(profile, cluster), gbs, top=3)
        assert again == fresh
        assert again  # (a search that found nothing would compare equal too)
    assert dapple_search(used, 128, top=3, full_replica_space=False) == dapple_search(
        CostModel(profile, cluster), 128, top=3, full_replica_space=False
    )
