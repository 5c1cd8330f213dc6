"""The DAPPLE dynamic program is exact for its cost model: brute force over small cases agrees."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import pytest

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan
from pipesim.planner import dapple, search_space
from pipesim.planner.cost_tables import block_floors
from pipesim.planner.dapple import dapple_search
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import Placement, device_order, stage_start
from pipesim.planner.search import cost_model
from pipesim.planner.search_space import cut_positions, device_unit, replica_candidates
from pipesim.profiles import Cluster, get_cluster, with_overrides
from pipesim.profiles.models.profile import BatchPoint, Layer, ModelProfile

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


def _non_linear(rng: random.Random, profile: ModelProfile) -> ModelProfile:
    """``profile`` with batch points at 1, 2 and 8 samples (profile batch 4) whose per-sample times
    differ from the profile's by random factors: times that are not linear in the samples (and
    not always monotone per sample), as the zoo's compute model gives them."""
    points = []
    for size in (1, 2, 8):
        scale = [size / profile.profile_batch_size * rng.uniform(0.6, 1.8) for _ in profile.layers]
        points.append(
            BatchPoint(
                batch_size=size,
                fwd_time_s=tuple(lay.fwd_time_s * f for lay, f in zip(profile.layers, scale, strict=True)),
                bwd_time_s=tuple(lay.bwd_time_s * f for lay, f in zip(profile.layers, scale, strict=True)),
                activation_bytes=tuple(
                    lay.activation_bytes * size // profile.profile_batch_size for lay in profile.layers
                ),
            )
        )
    return replace(profile, batch_points=tuple(points))


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


def _replica_tuples(stages: int, devices: int, largest: int, unit: int) -> list[tuple[int, ...]]:
    """Every assignment of replica counts to ``stages`` stages, each at most ``largest``, using at
    most ``devices`` devices (written out here, not the planner's candidates): any count with
    ``unit == 1``, else ``unit`` times a power of two dividing ``largest`` (the micro-batch)."""
    counts = [
        r
        for r in range(1, min(largest, devices) + 1)
        if unit == 1 or (r % unit == 0 and (r // unit) & (r // unit - 1) == 0 and largest % r == 0)
    ]
    return [reps for reps in itertools.product(counts, repeat=stages) if sum(reps) <= devices]


def _brute_force(
    model: CostModel,
    gbs: int,
    limit: float,
    *,
    unit: int = 1,
    split: tuple[int, ...] | None = None,
    policies: tuple[Placement, ...] = tuple(Placement),
) -> tuple[float, int]:
    """The best DAPPLE cost (``decomposable`` estimate) over every stage split (at ``split``, default
    every layer), every replica count per stage (``unit``-multiples up to the micro-batch size,
    uneven shares included), every placement policy and every micro-batch count dividing ``gbs``;
    with the number of plans that fit in memory."""
    cluster = model.cluster
    n = model.profile.num_layers
    inner = list(split[1:-1]) if split is not None else list(range(1, n))
    best = math.inf
    fitting = 0
    for m in [d for d in range(1, gbs + 1) if gbs % d == 0]:
        for stages in range(1, len(inner) + 2):
            tuples = _replica_tuples(stages, cluster.num_devices, gbs // m, unit)
            for cuts in itertools.combinations(inner, stages - 1):
                bounds = [0, *cuts, n]
                for reps in tuples:
                    for policy in policies:
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
                            fitting += 1
                            best = min(best, est.iteration_time_s)
    return best, fitting


def _check_against_brute_force(model: CostModel, gbs: int, limit: float, **kw: object) -> None:
    expected, _ = _brute_force(model, gbs, limit, **kw)  # type: ignore[arg-type]
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


SMALL = {
    "1x4": with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 1}),
    "2x2": with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 2, "gpus_per_server": 2}),
    "2x4": CLUSTER,
}


@pytest.mark.parametrize("seed", range(18))
def test_dp_equals_brute_force(seed: int) -> None:
    # uneven replicas included: batches such as 6 and 12 leave micro-batches that 4 or 5 replicas
    # split unevenly (and 3 or 7 replicas split almost any micro-batch unevenly)
    rng = random.Random(seed)
    cluster = SMALL[("1x4", "2x2", "2x4")[seed % 3]]
    n = rng.randint(1, 6)
    profile = _profile(rng, n, branching=seed % 4 == 0)
    gbs = rng.choice([4, 6, 8, 12, 16])
    model = CostModel(profile, cluster, optimizer=rng.choice(["sgd", "adam"]))
    limit = rng.choice([16 * 2**30, 6 * 2**30, 3 * 2**30])
    _check_against_brute_force(model, gbs, limit)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(18, 40))
def test_dp_equals_brute_force_more(seed: int) -> None:
    test_dp_equals_brute_force(seed)


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force_non_linear(seed: int) -> None:
    # batch points make the share tables non-linear: the prefix floors (`cost_tables.floor_table`), the
    # stage starts skipped by the work floor, the per-pair start bound (uniform plans) and the
    # W bound must still keep the optimum, uneven shares included
    rng = random.Random(500 + seed)
    cluster = SMALL[("1x4", "2x2", "2x4")[seed % 3]]
    profile = _non_linear(rng, _profile(rng, rng.randint(1, 6), branching=seed % 4 == 0))
    gbs = rng.choice([6, 8, 12, 16])
    model = CostModel(profile, cluster, optimizer=rng.choice(["sgd", "adam"]))
    assert not model.linear
    _check_against_brute_force(model, gbs, rng.choice([16 * 2**30, 6 * 2**30, 3 * 2**30]))


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12, 40))
def test_dp_equals_brute_force_non_linear_more(seed: int) -> None:
    test_dp_equals_brute_force_non_linear(seed)


def test_a_shared_cost_model_gives_the_same_plans() -> None:
    # plan() reuses one CostModel across calls (cost_model): its caches (all-reduce times per
    # stage, transfer lines, prefix floors) hold only what the inputs determine, so searching
    # after other batch sizes gives what a fresh model gives
    rng = random.Random(9)
    profile = _non_linear(rng, _profile(rng, 5, branching=False))
    shared = cost_model(profile, CLUSTER, optimizer="sgd")
    assert cost_model(profile, CLUSTER, optimizer="sgd") is shared
    for gbs in (16, 8, 12, 16):
        fresh = CostModel(profile, CLUSTER, optimizer="sgd")
        assert dapple_search(shared, gbs, top=4) == dapple_search(fresh, gbs, top=4)
    # a profile built with a list of layers cannot be a key: it gets a model of its own
    listed = replace(profile, layers=list(profile.layers))
    own = cost_model(listed, CLUSTER, optimizer="sgd")
    assert own is not cost_model(listed, CLUSTER, optimizer="sgd")
    assert dapple_search(own, 16, top=4) == dapple_search(shared, 16, top=4)


def test_brute_force_reaches_uneven_plans() -> None:
    # the space the tests compare over really holds plans whose replicas split a micro-batch unevenly
    rng = random.Random(7)
    model = CostModel(_profile(rng, 3, branching=False), CLUSTER, optimizer="sgd")
    plan = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=1, replicas=5, devices=(0, 1, 2, 3, 4)),
            StagePlan(first_layer=2, last_layer=2, replicas=3, devices=(5, 6, 7)),
        ),
        global_batch_size=12,
        num_microbatches=2,
    )
    assert math.isfinite(model.estimate(plan, decomposable=True).iteration_time_s)
    assert (5, 3) in _replica_tuples(2, 8, 6, 1)


@pytest.mark.parametrize("seed", range(3))
def test_dp_equals_brute_force_on_a_big_cluster(seed: int) -> None:
    # 128 GPUs: replica counts are whole servers (4 GPUs) times powers of two
    assert device_unit(BIG.num_devices, BIG.gpus_per_server) == 4
    rng = random.Random(100 + seed)
    profile = _profile(rng, rng.randint(2, 3), branching=seed % 2 == 1)
    model = CostModel(profile, BIG, optimizer="sgd")
    gbs = rng.choice([64, 128])
    _check_against_brute_force(model, gbs, 16 * 2**30, unit=4)
    found = dapple_search(model, gbs, memory_limit_bytes=16 * 2**30, top=1)[0]
    assert all(len(d) % 4 == 0 for _, _, d in found.stages)


@pytest.mark.parametrize("seed", range(4))
def test_dp_equals_brute_force_with_coarse_cuts(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # a "long" model: stages may start only at the block boundaries of cut_positions
    monkeypatch.setattr(search_space, "MAX_EXACT_LAYERS", 4)
    monkeypatch.setattr(search_space, "CUT_BLOCKS", 3)
    rng = random.Random(200 + seed)
    profile = _profile(rng, 8, branching=seed % 2 == 0)
    positions = cut_positions(profile)
    assert positions == (0, *positions[1:-1], 8)
    assert len(positions) == 4
    model = CostModel(profile, CLUSTER, optimizer="sgd")
    _check_against_brute_force(model, 8, 16 * 2**30, split=positions)
    found = dapple_search(model, 8, memory_limit_bytes=16 * 2**30, top=1)[0]
    assert {f for f, _, _ in found.stages} <= set(positions)


def test_replica_candidates_are_the_full_space() -> None:
    # every count the devices and the micro-batch allow, uneven shares included
    assert replica_candidates(16, 16, 8) == list(range(1, 17))
    assert replica_candidates(6, 8, 4) == [1, 2, 3, 4, 5, 6]
    # above 64 devices: whole-server units times powers of two that divide the micro-batch
    assert replica_candidates(128, 128, 4) == [4, 8, 16, 32, 64, 128]
    assert replica_candidates(96, 128, 4) == [4, 8, 16, 32]
    assert replica_candidates(3, 128, 4) == []


@pytest.mark.parametrize("seed", range(3))
def test_placement_restriction_keeps_the_best_of_the_searched_policies(seed: int) -> None:
    # the uniform plan that seeds the threshold comes from a searched policy: searching one policy
    # alone still returns that policy's optimum (brute force over that policy only)
    rng = random.Random(300 + seed)
    model = CostModel(_profile(rng, 4, branching=False), CLUSTER, optimizer="sgd")
    for policy in Placement:
        expected, _ = _brute_force(model, 8, 16 * 2**30, policies=(policy,))
        found = dapple_search(model, 8, placements=[policy], memory_limit_bytes=16 * 2**30, top=1)[0]
        assert found.placement is policy
        assert found.time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_every_policy_keeps_its_best(seed: int) -> None:
    # the full estimate ranks the DP's results later and may order the policies differently, so
    # even with top=1 the results hold each policy's own optimum (or the same plan found by another)
    rng = random.Random(400 + seed)
    model = CostModel(_profile(rng, 5, branching=False), CLUSTER, optimizer="sgd")
    results = dapple_search(model, 16, memory_limit_bytes=16 * 2**30, top=1)
    for policy in Placement:
        alone = dapple_search(model, 16, placements=[policy], memory_limit_bytes=16 * 2**30, top=1)[0]
        assert any(
            r.time_s == pytest.approx(alone.time_s, rel=1e-12)
            and (
                r.placement is policy
                or (r.stages, r.num_microbatches) == (alone.stages, alone.num_microbatches)
            )
            for r in results
        )


@pytest.mark.parametrize("seed", range(6))
def test_block_floors_bound_every_prefix_of_stages(seed: int) -> None:
    # the prefix bounds the DP prunes with (`cost_tables.block_floors`): every way to cut a prefix
    # into stages of at most `d` replicas each spends at least the floor in the sum of its stages'
    # forward (forward-plus-backward) times, on a non-linear profile, uneven shares included
    rng = random.Random(700 + seed)
    profile = _non_linear(rng, _profile(rng, rng.randint(2, 6), branching=False))
    model = CostModel(profile, CLUSTER, optimizer="sgd")
    positions = cut_positions(profile)
    b = rng.choice([3, 5, 6, 8, 12])
    cands = replica_candidates(b, 8, 4, 1, full=True)
    tables = {r: model.share_table(-(-b // r)) for r in cands}
    floors = block_floors(tables, positions, 8)
    tight = 0
    for k in range(1, len(positions)):
        for cuts in itertools.chain.from_iterable(itertools.combinations(range(1, k), c) for c in range(k)):
            bounds = [0, *cuts, k]
            spans = [(positions[bounds[j]], positions[bounds[j + 1]]) for j in range(len(bounds) - 1)]
            for reps in itertools.product(cands, repeat=len(spans)):
                d = max(reps)
                fwd = sum(
                    tables[r].fwd[hi] - tables[r].fwd[lo] for r, (lo, hi) in zip(reps, spans, strict=True)
                )
                fb = fwd + sum(
                    tables[r].bwd[hi] - tables[r].bwd[lo] for r, (lo, hi) in zip(reps, spans, strict=True)
                )
                for dd in range(d, 9):
                    assert floors[dd][0][k] <= fwd
                    assert floors[dd][1][k] <= fb
                tight += fb <= floors[d][1][k] * (1 + 1e-9)
    assert tight  # the floor is reached (a stage per block at its fastest count), not just valid


def test_dapple_search_searches_each_pair_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # the first pass searches each (micro-batch count, policy) pair below the highest threshold the
    # second pass can ask of it, which is answered from that search: no pair is searched twice, and
    # every result is its pair's exact optimum (the same pair searched with no threshold)
    rng = random.Random(11)
    model = CostModel(_non_linear(rng, _profile(rng, 6, branching=False)), CLUSTER, optimizer="adam")
    calls: list[tuple[int, Placement]] = []
    real = dapple.search_pair

    def counted(model: CostModel, gbs: int, m: int, policy: Placement, *args: object, **kw: object):  # type: ignore[no-untyped-def]
        calls.append((m, policy))
        return real(model, gbs, m, policy, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(dapple, "search_pair", counted)
    results = dapple_search(model, 16, memory_limit_bytes=16 * 2**30, top=2)
    monkeypatch.setattr(dapple, "search_pair", real)
    assert len(calls) == len(set(calls)) > 3
    unit = device_unit(8, 4)
    for r in results:
        alone = real(
            model,
            16,
            r.num_microbatches,
            r.placement,
            16 * 2**30,
            math.inf,
            cut_positions(model.profile),
            unit,
        )
        assert alone is not None
        assert alone.time_s == r.time_s


@pytest.mark.parametrize("seed", range(3))
def test_a_found_shape_placed_for_another_pair_bounds_its_optimum(seed: int) -> None:
    # a pair's search starts below the cost of the best shape found so far placed for it
    # (`dapple._shape_bound`): that cost is never below the pair's optimum, on a non-linear profile
    rng = random.Random(800 + seed)
    model = CostModel(_non_linear(rng, _profile(rng, 5, branching=False)), CLUSTER, optimizer="adam")
    limit, unit, positions = 16 * 2**30, device_unit(8, 4), cut_positions(model.profile)
    shapes = dapple_search(model, 16, memory_limit_bytes=limit, top=6)
    checked = 0
    for shape in shapes:
        for m in (1, 2, 4, 8, 16):
            for policy in Placement:
                bound = dapple._shape_bound(model, 16, m, policy, shape, limit, unit, True)
                if bound == math.inf:
                    continue
                best = dapple.search_pair(model, 16, m, policy, limit, math.inf, positions, unit)
                assert best is not None
                assert best.time_s <= bound
                checked += 1
    assert checked > 5
