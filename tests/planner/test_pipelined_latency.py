"""The 1F1B family's closed forms with pipelined point-to-point latency (planner/latency.py):
exact for equal stages against the schedule evaluator and the simulator, and bounded both ways
for unequal stages (docs/communication.md: a stream pays a transfer's latency once, a round trip
through a cut pays it every time)."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel
from pipesim.planner.iteration_time import iteration_time_s
from pipesim.planner.latency import (
    NEG_INF,
    one_f_one_b_loops_s,
    one_f_one_b_upper_s,
    pipeline_time_s,
)
from pipesim.profiles.costmodels.memory import in_flight_microbatches
from pipesim.profiles.inputs import resolve_inputs
from pipesim.schedules import evaluate, make_schedule
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile

Q = Fraction


def _counts(p: int, m: int, warmup: str) -> tuple[list[int], list[int]]:
    clamped = [in_flight_microbatches("dapple", i, p, m, warmup=warmup) for i in range(p)]
    unclamped = [in_flight_microbatches("dapple", i, p, max(m, 2 * p), warmup=warmup) for i in range(p)]
    return clamped, unclamped


def _evaluate(fwd: list[Q], bwd: list[Q], c_f: list[Q], c_b: list[Q], lat: list[Q], m: int, warmup: str) -> Q:
    order = make_schedule("dapple", num_ranks=len(fwd), num_microbatches=m, warmup=warmup)
    timeline = evaluate(
        order,
        fwd_time_s=fwd,
        bwd_time_s=bwd,
        fwd_comm_time_s=c_f,
        bwd_comm_time_s=c_b,
        fwd_comm_latency_s=lat,
        bwd_comm_latency_s=lat,
    )
    return Q(timeline.makespan)


def _dapple_steady(fwd: list[Q], bwd: list[Q], c_f: list[Q], c_b: list[Q], lat: list[Q], m: int) -> Q:
    """DAPPLE's form with a transfer pseudo-stage busy its bytes' time per micro-batch."""
    f: list[Q] = []
    b: list[Q] = []
    steady: list[Q] = []
    for s in range(len(fwd)):
        if s:
            f.append(c_f[s - 1])
            b.append(c_b[s - 1])
            steady.append(max(c_f[s - 1], c_b[s - 1]) - lat[s - 1])
        f.append(fwd[s])
        b.append(bwd[s])
        steady.append(fwd[s] + bwd[s])
    zero = [Q(0)] * len(f)
    return Q(pipeline_time_s(f, b, zero, m, steady_s=steady))  # type: ignore[arg-type]


def _forms(
    fwd: list[Q], bwd: list[Q], c_f: list[Q], c_b: list[Q], lat: list[Q], m: int, warmup: str
) -> tuple[Q, Q]:
    """(the estimate's 1F1B time, the upper bound) over the given costs."""
    k, w = _counts(len(fwd), m, warmup)
    args = (fwd, bwd, c_f, c_b, k, w, m)
    kw = {"latency_fwd_s": lat, "latency_bwd_s": lat}
    est = max(Q(one_f_one_b_loops_s(*args, **kw)), _dapple_steady(fwd, bwd, c_f, c_b, lat, m))  # type: ignore[arg-type]
    return est, Q(one_f_one_b_upper_s(*args, **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 13, 32])
@pytest.mark.parametrize(
    ("lat", "x_f", "x_b"), [(0, 0, 0), (10, 0, 0), (1, 1, 1), (50, 1, 2), (3, 7, 2), (0, 5, 5)]
)
def test_equal_stages_exact_against_the_evaluator(p: int, m: int, lat: int, x_f: int, x_b: int) -> None:
    f, b = Q(1), Q(2)
    c_f, c_b = [Q(lat + x_f)] * (p - 1), [Q(lat + x_b)] * (p - 1)
    lats = [Q(lat)] * (p - 1)
    exact = _evaluate([f] * p, [b] * p, c_f, c_b, lats, m, "default")
    est, upper = _forms([f] * p, [b] * p, c_f, c_b, lats, m, "default")
    assert est == exact <= upper
    if x_f <= f + b and x_b <= f + b:  # streams never the bottleneck: the round trips alone
        trips = p - 1 + m - 1 - math.ceil((m - 1) / p)
        assert exact == (m + p - 1) * (f + b) + (2 * lat + x_f + x_b) * trips


def test_latency_once_per_round_trip_not_per_microbatch() -> None:
    # 2 stages, 8 micro-batches, 10 per hop of pure latency: micro-batches go round in pairs
    # (K_0 = 2), 4 round trips of 2 (F + B) + 2 x 10, plus one F + B: 107. DAPPLE's form
    # charges both latencies per micro-batch (163); the old loop term spread them evenly (117)
    f, b, c = Q(1), Q(2), Q(10)
    est, _ = _forms([f, f], [b, b], [c], [c], [c], 8, "default")
    assert est == _evaluate([f, f], [b, b], [c], [c], [c], 8, "default") == 107
    assert pipeline_time_s([f, c, f], [b, c, b], [0, 0, 0], 8) == 163  # type: ignore[list-item]


@pytest.mark.parametrize("seed", range(6))
def test_unequal_stages_bounded_both_ways(seed: int) -> None:
    # random stages, latencies and stream times: the upper bound holds, and the estimate (not a
    # bound: its round trips are taken in an order a path may not allow) is within -6.2% ..
    # +2.4% of the evaluator over these seeds (180 cases, measured), at it in the median
    rng = random.Random(seed)
    worst_low, worst_high = Q(1), Q(1)
    for _ in range(30):
        p = rng.randint(2, 7)
        m = rng.choice([1, 2, p, p + 1, 2 * p, 3 * p + 1, 16, 33])
        warmup = rng.choice(["default", "default", "slow-link"])
        fwd = [Q(rng.randint(1, 6)) for _ in range(p)]
        bwd = [Q(rng.randint(1, 12)) for _ in range(p)]
        lat = [Q(rng.choice([0, 0, 1, 5, 30])) for _ in range(p - 1)]
        c_f = [a + rng.randint(0, 12) for a in lat]
        c_b = [a + rng.randint(0, 12) for a in lat]
        exact = _evaluate(fwd, bwd, c_f, c_b, lat, m, warmup)
        est, upper = _forms(fwd, bwd, c_f, c_b, lat, m, warmup)
        assert exact <= upper
        worst_low, worst_high = min(worst_low, est / exact), max(worst_high, est / exact)
    assert worst_low >= Q(93, 100)
    assert worst_high <= Q(103, 100)


def _chain_plan(p: int, m: int, schedule: str = "1f1b") -> Plan:
    return Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i) for i in range(p)),
        global_batch_size=4 * m,
        num_microbatches=m,
        schedule=schedule,
    )


@pytest.mark.parametrize("p", [2, 4, 8])
@pytest.mark.parametrize("m", [4, 16, 33])
@pytest.mark.parametrize(
    ("latency_ms", "gbit_per_s"), [(0.1, 100.0), (1.0, 10.0), (10.0, 1.0), (50.0, 1.0), (50.0, 100.0)]
)
def test_equal_stages_estimate_equals_the_simulation(
    p: int, m: int, latency_ms: float, gbit_per_s: float
) -> None:
    # one stage per single-GPU server, 1 MiB activations: the closed form is the contention-free
    # simulation to rounding, for every latency and bandwidth; the estimate is too wherever no
    # two streams share a link (p = 2), and with p > 2 (a server's uplink carries its activations
    # and its gradients) it walks the two sharing the uplink (planner/link_walk.py): between
    # the contention-free and the shared simulation
    profile = equal_profile(p, fwd_s=4e-3, bwd_s=8e-3, activation_bytes=1 << 20, parameter_bytes=0)
    overrides = {
        "servers": p,
        "gpus_per_server": 1,
        "gpus_per_pcie_switch": 1,
        "nic_bandwidth_gbit_per_s": gbit_per_s,
        "nic_latency_us": latency_ms * 1e3,
    }
    profile, cluster = resolve_inputs(profile, "pcie-4x4-v100-10gbe", overrides=overrides)
    plan = _chain_plan(p, m)
    model = CostModel(profile, cluster, optimizer_step=False)
    estimate = model.estimate(plan).iteration_time_s
    closed = iteration_time_s(model, plan, model.stage_costs(plan), decomposable=False)
    free = SimOptions(record_trace=False, optimizer_step=False, contention=False)
    free_s = simulate(plan, profile, cluster, free).iteration_time_s
    assert closed == pytest.approx(free_s, rel=1e-9)
    shared = SimOptions(record_trace=False, optimizer_step=False)
    shared_s = simulate(plan, profile, cluster, shared).iteration_time_s
    if p == 2:
        assert estimate == pytest.approx(free_s, rel=1e-9)
    assert free_s * (1 - 1e-9) <= estimate <= shared_s * (1 + 1e-9)
    if gbit_per_s >= 10:  # little traffic: the shared uplinks hardly matter either
        assert estimate == pytest.approx(shared_s, rel=0.01)


def test_upper_bound_is_never_below_the_estimate() -> None:
    f, b = [Q(3), Q(1), Q(2)], [Q(5), Q(2), Q(9)]
    c, lat = [Q(12), Q(4)], [Q(10), Q(1)]
    est, upper = _forms(f, b, c, c, lat, 9, "default")
    assert NEG_INF < est <= upper


@pytest.mark.parametrize(
    ("schedule", "chunks"),
    [
        ("interleaved", 2),
        ("zb-h1", 1),
        ("zbv", 2),
        ("dualpipev", 2),
        ("interleaved-zb", 2),
        ("looped-bfs", 2),
    ],
)
@pytest.mark.parametrize("m", [8, 16])
@pytest.mark.parametrize(("latency_ms", "gbit_per_s"), [(10.0, 100.0), (50.0, 1.0)])
def test_other_schedules_take_the_latency_as_the_simulator(
    schedule: str, chunks: int, m: int, latency_ms: float, gbit_per_s: float
) -> None:
    # 4 single-GPU servers, equal stages: the order evaluated with the latency pipelined is the
    # contention-free simulation. Before, interleaved's and ZB-H1's pivot form charged a
    # transfer's latency per micro-batch and missed the round trips: interleaved +17% .. +81%,
    # ZB-H1 -15% .. +25% here (measured); the pivot form alone with the latency pipelined is
    # -10% .. -61%
    from pipesim.schedules.placement import stage_ranks
    from pipesim.schedules.registry import placement_of

    p = 4
    stages = p * chunks
    profile = equal_profile(
        stages, fwd_s=4e-3, bwd_s=8e-3, activation_bytes=1 << 20, parameter_bytes=0, wgrad_fraction=0.5
    )
    overrides = {
        "servers": p,
        "gpus_per_server": 1,
        "gpus_per_pcie_switch": 1,
        "nic_bandwidth_gbit_per_s": gbit_per_s,
        "nic_latency_us": latency_ms * 1e3,
    }
    profile, cluster = resolve_inputs(profile, "pcie-4x4-v100-10gbe", overrides=overrides)
    where = stage_ranks(placement_of(schedule) or "looped", stages, p)
    plan = Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i, devices=(where[i],)) for i in range(stages)),
        global_batch_size=4 * m,
        num_microbatches=m,
        schedule=schedule,
        chunks=chunks,
    )
    model = CostModel(profile, cluster, optimizer_step=False)
    estimate = model.estimate(plan).iteration_time_s
    closed = iteration_time_s(model, plan, model.stage_costs(plan), decomposable=False)
    free = SimOptions(record_trace=False, optimizer_step=False, contention=False)
    free_s = simulate(plan, profile, cluster, free).iteration_time_s
    assert closed == pytest.approx(free_s, rel=1e-9)
    # the walk of transfers sharing the uplinks (zb-h1): between the two simulations
    shared_s = simulate(plan, profile, cluster, SimOptions(record_trace=False, optimizer_step=False))
    assert free_s * (1 - 1e-9) <= estimate <= shared_s.iteration_time_s * (1 + 1e-9)


def test_bad_latencies_and_steady_times_are_named() -> None:
    from pipesim.errors import InputError

    k, w = _counts(2, 4, "default")
    with pytest.raises(InputError, match=r"latency_fwd_s\[0\]"):
        one_f_one_b_loops_s([1.0, 1.0], [2.0, 2.0], [1.0], [1.0], k, w, 4, latency_fwd_s=[2.0])
    with pytest.raises(InputError, match="latency_bwd_s"):
        one_f_one_b_upper_s([1.0, 1.0], [2.0, 2.0], [1.0], [1.0], k, w, 4, latency_bwd_s=[0.5, 0.5])
    with pytest.raises(InputError, match="steady_s"):
        pipeline_time_s([1.0, 1.0], [2.0, 2.0], [0.0, 0.0], 4, steady_s=[3.0])


def test_steady_time_of_a_transfer_pseudo_stage() -> None:
    # a transfer pseudo-stage busy max(x_f, x_b) per micro-batch instead of c_f + c_b: with a
    # slow link as the pivot, (M - 1) max(x_f, x_b) instead of (M - 1)(c_f + c_b)
    f, b, c_f, c_b, lat = Q(1), Q(2), Q(30), Q(20), Q(10)
    fwd, bwd, zero = [f, c_f, f], [b, c_b, b], [Q(0)] * 3
    m = 9
    dapple = pipeline_time_s(fwd, bwd, zero, m)  # type: ignore[arg-type]
    steady = pipeline_time_s(fwd, bwd, zero, m, steady_s=[f + b, c_f - lat, f + b])  # type: ignore[arg-type]
    # the pivot is the link: A_Q = F + c_f + (M - 1) D_Q, then B + c_b back
    assert dapple == f + c_f + (m - 1) * (c_f + c_b) + b + c_b
    assert steady == f + c_f + (m - 1) * (c_f - lat) + b + c_b
