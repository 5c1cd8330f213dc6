"""The DAPPLE dynamic program is exact for its cost model: brute force over small cases agrees."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan
from pipesim.planner.costs import CostModel
from pipesim.planner.dapple import dapple_search, replica_candidates
from pipesim.planner.placement import Placement, device_order, stage_start
from pipesim.profiles import get_cluster, with_overrides
from pipesim.profiles.model import Layer, ModelProfile

CLUSTER = with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 2})  # 8 GPUs, 2 servers


def _profile(rng: random.Random, n: int, branching: bool) -> ModelProfile:
    layers = tuple(
        Layer(
            name=f"l{i}",
            fwd_time_s=rng.uniform(1e-3, 2e-2),
            bwd_time_s=rng.uniform(2e-3, 4e-2),
            activation_bytes=rng.randrange(1, 64) * 2**20,
            parameter_bytes=rng.randrange(0, 400) * 2**20,
        )
        for i in range(n)
    )
    edges = None
    if branching:
        edges = tuple({(i, i + 1) for i in range(n - 1)} | {(i, i + 2) for i in range(0, n - 2, 2)})
    return ModelProfile(name="rand", layers=layers, profile_batch_size=4, edges=edges)


def _place(policy: Placement, replicas: list[int]) -> list[tuple[int, ...]] | None:
    """The devices the DP's placement rule gives (stages placed from the last one)."""
    order = device_order(CLUSTER, policy)
    n = CLUSTER.num_devices
    used = 0
    out: list[tuple[int, ...]] = []
    for r in reversed(replicas):
        start = stage_start(used, policy, CLUSTER.gpus_per_server)
        if start + r > n:
            return None
        out.append(tuple(order[n - start - r : n - start]))
        used = start + r
    return out[::-1]


def _brute_force(model: CostModel, gbs: int, limit: float) -> float:
    n = model.profile.num_layers
    best = math.inf
    for m in [d for d in range(1, gbs + 1) if gbs % d == 0]:
        cands = replica_candidates(gbs // m, CLUSTER.num_devices, CLUSTER.gpus_per_server)
        for stages in range(1, n + 1):
            for cuts in itertools.combinations(range(1, n), stages - 1):
                bounds = [0, *cuts, n]
                for reps in itertools.product(cands, repeat=stages):
                    if sum(reps) > CLUSTER.num_devices:
                        continue
                    for policy in Placement:
                        devs = _place(policy, list(reps))
                        if devs is None:
                            continue
                        plan = Plan(
                            stages=tuple(
                                StagePlan(
                                    first_layer=bounds[k],
                                    last_layer=bounds[k + 1] - 1,
                                    replicas=reps[k],
                                    devices=devs[k],
                                )
                                for k in range(stages)
                            ),
                            global_batch_size=gbs,
                            num_microbatches=m,
                        )
                        est = model.estimate(plan, contention=False, exact_schedule=False)
                        if est.peak_memory_bytes <= limit:
                            best = min(best, est.iteration_time_s)
    return best


@pytest.mark.parametrize("seed", range(16))
def test_dp_equals_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 7 if seed < 16 else 9)
    profile = _profile(rng, n, branching=seed % 3 == 0)
    gbs = rng.choice([4, 8, 16])
    model = CostModel(profile, CLUSTER, optimizer=rng.choice(["sgd", "adam"]))
    limit = rng.choice([16 * 2**30, 6 * 2**30, 3 * 2**30])
    expected = _brute_force(model, gbs, limit)
    if math.isinf(expected):
        with pytest.raises(Infeasible):
            dapple_search(model, gbs, memory_limit_bytes=limit, top=1)
        return
    found = dapple_search(model, gbs, memory_limit_bytes=limit, top=1)[0]
    assert found.time_s == pytest.approx(expected, rel=1e-9)
    # the plan it reports has exactly that estimate
    plan = Plan(
        stages=tuple(
            StagePlan(first_layer=f, last_layer=last, replicas=len(d), devices=d)
            for f, last, d in found.stages
        ),
        global_batch_size=gbs,
        num_microbatches=found.num_microbatches,
    )
    est = model.estimate(plan, contention=False, exact_schedule=False)
    assert est.iteration_time_s == pytest.approx(found.time_s, rel=1e-9)
    assert est.peak_memory_bytes <= limit


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(16, 30))
def test_dp_equals_brute_force_more(seed: int) -> None:
    test_dp_equals_brute_force(seed)
