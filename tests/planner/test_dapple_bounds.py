"""The floors the DAPPLE search prunes and skips estimates with hold against brute force and the
estimate (`planner/dapple_bounds.py`, `planner/dapple.py`'s compute and memory floors)."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner import dapple
from pipesim.planner.dapple_bounds import FLOOR_MARGIN, bottleneck_floors
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import Placement
from pipesim.planner.search_space import cut_positions, replica_candidates
from tests.planner.test_dapple_exact import CLUSTER, _non_linear, _place, _profile


def _fits(model: CostModel, lo: int, hi: int, r: int, b: int, limit: float) -> bool:
    """One replica of layers ``lo..hi-1`` at share ``ceil(b / r)`` fits with one micro-batch in
    flight, as the DP charges it at the least (weights and optimizer state, kept bytes, working set)."""
    table = model.share_table(-(-b // r))
    need = (
        model.static_bytes(lo, hi - 1)
        + table.stashed[hi]
        - table.stashed[lo]
        + table.held[hi]
        - table.held[lo]
        + max(table.acts[lo:hi])
    )
    return need <= limit


@pytest.mark.parametrize("seed", range(8))
def test_bottleneck_floors_are_the_least_slowest_stage_of_every_prefix(seed: int) -> None:
    # brute force: every cut of a prefix into stages, every replica count per stage with a sum of
    # at most `d` and every stage fitting in memory; the floor is the least slowest stage (times
    # the margin), inf where nothing fits, on a non-linear profile with uneven shares
    rng = random.Random(900 + seed)
    profile = _non_linear(rng, _profile(rng, rng.randint(2, 5), branching=False))
    model = CostModel(profile, CLUSTER, optimizer="adam")
    positions = cut_positions(profile)
    b = rng.choice([3, 5, 6, 8, 12])
    cands = replica_candidates(b, 8, 4, 1, full=True)
    tables = {r: model.share_table(-(-b // r)) for r in cands}
    limit = rng.choice([16 * 2**30, 6 * 2**30, 3 * 2**30])
    floors = bottleneck_floors(tables, positions, 8, model._params, model._multiplier, limit)
    assert len(floors) == 9
    finite = 0
    for k in range(1, len(positions)):
        least = [math.inf] * 9
        for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, k), c) for c in range(k)):
            bounds = [0, *cuts, k]
            spans = [(positions[bounds[j]], positions[bounds[j + 1]]) for j in range(len(bounds) - 1)]
            for reps in itertools.product(cands, repeat=len(spans)):
                if sum(reps) > 8 or not all(
                    _fits(model, lo, hi, r, b, limit) for r, (lo, hi) in zip(reps, spans, strict=True)
                ):
                    continue
                slowest = max(
                    tables[r].fwd[hi] - tables[r].fwd[lo] + tables[r].bwd[hi] - tables[r].bwd[lo]
                    for r, (lo, hi) in zip(reps, spans, strict=True)
                )
                for d in range(sum(reps), 9):
                    least[d] = min(least[d], slowest)
        for d in range(9):
            if least[d] == math.inf:
                assert floors[d][k] == math.inf
            else:
                assert floors[d][k] <= least[d]
                assert floors[d][k] == pytest.approx(least[d] * FLOOR_MARGIN, rel=1e-12)
                finite += 1
        assert floors[0][k] == math.inf  # no device, no stage
    assert all(floors[d][0] == 0.0 for d in range(9))
    assert finite > 0


@pytest.mark.parametrize("seed", range(6))
def test_compute_and_memory_floors_never_exceed_the_estimate(seed: int) -> None:
    # what lets the planner skip estimating a uniform or found shape: its pipeline-fill floor is
    # no more than its (decomposable) estimate, and its memory floor no more than its peak
    rng = random.Random(950 + seed)
    profile = _non_linear(rng, _profile(rng, rng.randint(2, 6), branching=rng.random() < 0.5))
    model = CostModel(profile, CLUSTER, optimizer=rng.choice(["sgd", "adam"]))
    n = profile.num_layers
    checked = 0
    for _ in range(40):
        s = rng.randint(1, min(n, 4))
        cuts = sorted(rng.sample(range(1, n), s - 1))
        bounds = [0, *cuts, n]
        b = rng.choice([1, 3, 4, 6, 8])  # samples per micro-batch
        replicas = [rng.randint(1, min(b, 8 // s)) for _ in range(s)]
        devices = _place(rng.choice(list(Placement)), replicas)
        if devices is None:
            continue
        m = rng.choice([1, 2, 3, 4, 8])
        gbs = m * b
        plan = Plan(
            stages=tuple(
                StagePlan(first_layer=bounds[j], last_layer=bounds[j + 1] - 1, replicas=len(d), devices=d)
                for j, d in enumerate(devices)
            ),
            global_batch_size=gbs,
            num_microbatches=m,
        )
        spans = [(bounds[j], bounds[j + 1], replicas[j]) for j in range(s)]
        est = model.estimate(plan, decomposable=True)
        assert dapple._pipeline_floor(model, b, m, spans) <= est.iteration_time_s
        assert dapple._memory_floor(model, b, spans) <= est.peak_memory_bytes
        checked += 1
    assert checked > 10
