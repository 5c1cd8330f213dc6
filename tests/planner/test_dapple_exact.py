"""The DAPPLE dynamic program is exact for its cost model: brute force over small cases agrees."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan
from pipesim.planner import dapple
from pipesim.planner.dapple import cut_positions, dapple_search, device_unit, replica_candidates
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import Placement, device_order, stage_start
from pipesim.profiles import Cluster, get_cluster, with_overrides
from pipesim.profiles.models.profile import Layer, ModelProfile

CLUSTER = with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 2})  # 8 GPUs, 2 servers
BIG = with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 32})  # 128 GPUs: whole-server units


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


def _place(
    policy: Placement, replicas: list[int], cluster: Cluster = CLUSTER
) -> list[tuple[int, ...]] | None:
    """The devices the DP's placement rule gives (stages placed from the last one)."""
    order = device_order(cluster, policy)
    n = cluster.num_devices
    used = 0
    out: list[tuple[int, ...]] = []
    for r in reversed(replicas):
        start = stage_start(used, policy, cluster.gpus_per_server)
        if start + r > n:
            return None
        out.append(tuple(order[n - start - r : n - start]))
        used = start + r
    return out[::-1]


def _brute_force(model: CostModel, gbs: int, limit: float) -> float:
    """The best DP cost over every split (at the DP's cut positions), replica counts (its
    candidates at its device unit), policy and micro-batch count."""
    cluster = model.cluster
    n = model.profile.num_layers
    inner = cut_positions(model.profile)[1:-1]
    unit = device_unit(cluster.num_devices, cluster.gpus_per_server)
    best = math.inf
    for m in [d for d in range(1, gbs + 1) if gbs % d == 0]:
        cands = replica_candidates(gbs // m, cluster.num_devices, cluster.gpus_per_server, unit)
        for stages in range(1, len(inner) + 2):
            for cuts in itertools.combinations(inner, stages - 1):
                bounds = [0, *cuts, n]
                for reps in itertools.product(cands, repeat=stages):
                    if sum(reps) > cluster.num_devices:
                        continue
                    for policy in Placement:
                        devs = _place(policy, list(reps), cluster)
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
                        est = model.estimate(plan, decomposable=True)
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
    est = model.estimate(plan, decomposable=True)
    assert est.iteration_time_s == pytest.approx(found.time_s, rel=1e-9)
    assert est.peak_memory_bytes <= limit


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(16, 30))
def test_dp_equals_brute_force_more(seed: int) -> None:
    test_dp_equals_brute_force(seed)


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_brute_force_on_a_big_cluster(seed: int) -> None:
    # 128 GPUs: replica counts are whole servers (4 GPUs) times powers of two
    assert device_unit(BIG.num_devices, BIG.gpus_per_server) == 4
    rng = random.Random(100 + seed)
    profile = _profile(rng, rng.randint(2, 4), branching=seed % 2 == 1)
    model = CostModel(profile, BIG, optimizer="sgd")
    gbs = rng.choice([64, 128])
    expected = _brute_force(model, gbs, 16 * 2**30)
    found = dapple_search(model, gbs, memory_limit_bytes=16 * 2**30, top=1)[0]
    assert found.time_s == pytest.approx(expected, rel=1e-9)
    assert all(len(d) % 4 == 0 for _, _, d in found.stages)


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_brute_force_with_coarse_cuts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # a "long" model: stages may start only at the block boundaries of cut_positions
    monkeypatch.setattr(dapple, "MAX_EXACT_LAYERS", 4)
    monkeypatch.setattr(dapple, "CUT_BLOCKS", 3)
    rng = random.Random(200 + seed)
    profile = _profile(rng, 8, branching=seed % 2 == 0)
    positions = cut_positions(profile)
    assert positions == (0, *positions[1:-1], 8)
    assert len(positions) == 4
    model = CostModel(profile, CLUSTER, optimizer="sgd")
    expected = _brute_force(model, 8, 16 * 2**30)
    found = dapple_search(model, 8, memory_limit_bytes=16 * 2**30, top=1)[0]
    assert found.time_s == pytest.approx(expected, rel=1e-9)
    assert {f for f, _, _ in found.stages} <= set(positions)
