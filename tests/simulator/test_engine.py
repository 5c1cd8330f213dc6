"""The simulator against closed forms, invariants and its error paths."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.errors import Infeasible, InputError
from pipesim.plan import Plan, StagePlan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.simulator import SimOptions, SimulationResult, simulate
from pipesim.simulator.trace import EventKind

from .builders import equal_profile, one_layer_per_stage

FREE = SimOptions(free_links=True, optimizer_step=False)  # closed forms: no optimizer step
DGX1 = get_cluster("dgx1-v100")
BIG = get_cluster("dapple-2x8-v100")


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


@pytest.mark.parametrize("schedule", ["gpipe", "dapple", "1f1b"])
@pytest.mark.parametrize(("p", "m"), list(itertools.product([1, 2, 3, 4, 8], [1, 2, 3, 5, 8, 16])))
def test_closed_form_makespan_with_free_links(schedule: str, p: int, m: int) -> None:
    t_f, t_b = 1.0, 2.0
    result = simulate(one_layer_per_stage(p, m, schedule=schedule), equal_profile(p), DGX1, FREE)
    assert rel(result.iteration_time_s, (m + p - 1) * (t_f + t_b)) < 1e-9
    assert (
        rel(result.bubble_fraction, (p - 1) / (m + p - 1)) < 1e-9 if p > 1 else result.bubble_fraction < 1e-12
    )


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 4)])
def test_zero_bubble_h1_idle_per_stage(p: int, m: int) -> None:
    # T_F = 1, T_B (input grad) = 1, T_W = 1 <= T_F: idle per stage (p - 1)(T_F + T_B - T_W).
    profile = equal_profile(p, fwd_s=1.0, bwd_s=2.0, wgrad_fraction=0.5)
    result = simulate(one_layer_per_stage(p, m, schedule="zb-h1"), profile, DGX1, FREE)
    for device in result.devices:
        idle = result.iteration_time_s - device.busy_time_s
        assert rel(idle, (p - 1) * (1.0 + 1.0 - 1.0)) < 1e-9


def test_peak_stashed_activations_gpipe_vs_1f1b() -> None:
    p, m = 4, 8
    act = 1 << 20
    profile = equal_profile(p, activation_bytes=act, parameter_bytes=0)
    gpipe = simulate(one_layer_per_stage(p, m, schedule="gpipe"), profile, DGX1, FREE)
    early = simulate(one_layer_per_stage(p, m, schedule="1f1b"), profile, DGX1, FREE)
    for stage in range(p):
        base = act * (1 if stage > 0 else 0)  # received input kept with the layer's output
        per_mb = act + base
        g = gpipe.devices[stage].peak_memory_bytes
        e = early.devices[stage].peak_memory_bytes
        # GPipe keeps all m micro-batches; 1F1B keeps min(p - i, m); both plus one transient
        # gradient buffer during a backward (the largest activation of the stage).
        assert g == m * per_mb + act
        assert e == min(p - stage, m) * per_mb + act
        assert e < g


def check_invariants(result: SimulationResult, plan: Plan) -> None:
    compute = [e for e in result.events if e.kind.is_compute]
    by_device: dict[int, list] = defaultdict(list)
    for e in compute:
        by_device[e.device].append(e)
    for events in by_device.values():
        events.sort(key=lambda e: e.start_s)
        for a, b in itertools.pairwise(events):
            assert a.end_s <= b.start_s + 1e-12, "two ops at once on one compute stream"
    # every micro-batch finishes F and a full backward on every stage, on every replica
    ops_per_stage: dict[tuple[int, int], set[str]] = defaultdict(set)
    for e in compute:
        ops_per_stage[(e.stage, e.microbatch)].add(e.kind.value)
    for s in range(plan.num_stages):
        for mb in range(plan.num_microbatches):
            ops = ops_per_stage[(s, mb)]
            assert "F" in ops
            assert "B" in ops or {"I", "W"} <= ops
    # dependencies: F(s, mb) after F(s-1, mb) ended (on at least the first replica that feeds it);
    # a backward after the forward of the same micro-batch on the same device
    f_first_end: dict[tuple[int, int], float] = {}
    f_end_on: dict[tuple[int, int, int | None], float] = {}
    for e in compute:
        if e.kind is EventKind.FORWARD:
            key2 = (e.stage, e.microbatch)
            f_first_end[key2] = min(f_first_end.get(key2, float("inf")), e.end_s)
            f_end_on[(e.stage, e.microbatch, e.device)] = e.end_s
    for e in compute:
        if e.kind is EventKind.FORWARD and e.stage > 0:
            assert e.start_s >= f_first_end[(e.stage - 1, e.microbatch)] - 1e-12
        if e.kind in (EventKind.BACKWARD, EventKind.INPUT_GRAD):
            assert e.start_s >= f_end_on[(e.stage, e.microbatch, e.device)] - 1e-12
    # memory returns to the static baseline
    for device in result.devices:
        curve = result.memory[device.device]
        assert curve.bytes[-1] == pytest.approx(device.static_memory_bytes, rel=1e-9, abs=1e-3)
        assert curve.times_s == tuple(sorted(curve.times_s))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    p=st.integers(1, 4),
    m=st.integers(1, 6),
    schedule=st.sampled_from(["gpipe", "dapple", "1f1b", "zb-h1", "zb-h2"]),
    replicas=st.integers(1, 2),
    fwd=st.floats(0.1, 3.0),
    bwd=st.floats(0.1, 3.0),
    free=st.booleans(),
)
def test_invariants_on_random_plans(
    p: int, m: int, schedule: str, replicas: int, fwd: float, bwd: float, free: bool
) -> None:
    profile = equal_profile(p, fwd_s=fwd, bwd_s=bwd)
    plan = one_layer_per_stage(p, m, schedule=schedule, replicas=replicas)
    result = simulate(plan, profile, BIG, SimOptions(free_links=free))
    check_invariants(result, plan)


def test_same_seed_same_trace_and_jitter_changes_it() -> None:
    profile = equal_profile(4)
    plan = one_layer_per_stage(4, 6, schedule="dapple", replicas=2)
    a = simulate(plan, profile, BIG, SimOptions(jitter=0.1, seed=7))
    b = simulate(plan, profile, BIG, SimOptions(jitter=0.1, seed=7))
    c = simulate(plan, profile, BIG, SimOptions(jitter=0.1, seed=8))
    assert a.events == b.events
    assert a.iteration_time_s == b.iteration_time_s
    assert c.iteration_time_s != a.iteration_time_s


def test_jitter_without_seed_is_rejected() -> None:
    with pytest.raises(InputError, match="seed"):
        SimOptions(jitter=0.1)


def test_slow_device_slows_the_pipeline() -> None:
    profile = equal_profile(4)
    plan = one_layer_per_stage(4, 8, schedule="dapple")
    base = simulate(plan, profile, DGX1, FREE)
    slow = simulate(plan, profile, DGX1, replace(FREE, speed_factors={2: 0.5}))
    assert slow.iteration_time_s > base.iteration_time_s
    assert slow.devices[2].busy_time_s == pytest.approx(2 * base.devices[2].busy_time_s)


def test_replicated_stages_all_reduce_and_links_cost_time() -> None:
    profile = equal_profile(2, parameter_bytes=64 << 20)
    plan = one_layer_per_stage(2, 4, schedule="dapple", replicas=4)
    free = simulate(plan, profile, BIG, FREE)
    real = simulate(plan, profile, BIG)
    assert real.iteration_time_s > free.iteration_time_s
    assert real.exposed_allreduce_time_s > 0
    assert any(e.kind is EventKind.ALL_REDUCE for e in real.events)
    assert all(d.allreduce_time_s > 0 for d in real.devices)


def test_uneven_replica_counts_resplit_activations() -> None:
    profile = equal_profile(2)
    plan = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=0, replicas=2),
            StagePlan(first_layer=1, last_layer=1, replicas=3),
        ),
        global_batch_size=12,
        num_microbatches=2,
        schedule="dapple",
    )
    result = simulate(plan, profile, BIG)
    check_invariants(result, plan)
    sends = [e for e in result.events if e.kind is EventKind.SEND_ACTIVATION and e.microbatch == 0]
    # replica shares 0-3 | 3-6 against 0-2 | 2-4 | 4-6: four overlapping pieces
    assert len(sends) == 4
    assert sum(e.nbytes for e in sends) == pytest.approx(6 * (1 << 20) / 4)


@pytest.mark.parametrize(
    ("plan_kw", "cluster", "error", "message"),
    [
        ({"p": 4, "layers": 3}, DGX1, Infeasible, "more stages than the model has layers"),
        ({"p": 3, "layers": 3, "replicas": 4}, DGX1, Infeasible, "devices"),
    ],
)
def test_impossible_plans(plan_kw: dict, cluster, error: type, message: str) -> None:
    profile = equal_profile(plan_kw["layers"])
    plan = one_layer_per_stage(plan_kw["p"], 2, replicas=plan_kw.get("replicas", 1))
    with pytest.raises(error, match=message):
        simulate(plan, profile, cluster, FREE)


def test_device_id_not_in_cluster() -> None:
    plan = Plan(
        stages=(StagePlan(first_layer=0, last_layer=1, replicas=1, devices=(42,)),),
        global_batch_size=4,
        num_microbatches=1,
    )
    with pytest.raises(InputError, match=r"device 42 is not in the cluster \(ids 0..7\)"):
        simulate(plan, equal_profile(2), DGX1)


def test_gbs_must_divide_into_microbatches() -> None:
    with pytest.raises(InputError, match=r"num_microbatches=3.*divide the global batch size"):
        Plan(stages=(StagePlan(first_layer=0, last_layer=0),), global_batch_size=8, num_microbatches=3)


PCIE = get_cluster("pcie-4x4-v100-10gbe")


def pipeline_on_servers(p: int, m: int, schedule: str) -> Plan:
    """One stage per server of the PCIe cluster, so every boundary crosses the network."""
    return Plan(
        stages=tuple(
            StagePlan(first_layer=i, last_layer=i, replicas=1, devices=(i * PCIE.gpus_per_server,))
            for i in range(p)
        ),
        global_batch_size=4 * m,
        num_microbatches=m,
        schedule=schedule,
    )


@pytest.mark.parametrize(("p", "m"), [(2, 3), (4, 4), (4, 8)])
def test_gpipe_with_transfer_times_matches_the_closed_form(p: int, m: int) -> None:
    activation = 1 << 20  # 1 MiB per micro-batch: ~1 ms over 10 GbE, much less than t_f = 1 s
    profile = equal_profile(p, activation_bytes=activation, parameter_bytes=0)
    result = simulate(pipeline_on_servers(p, m, "gpipe"), profile, PCIE)
    a, b = 0, PCIE.gpus_per_server
    c = PCIE.route_latency_s(a, b) + activation / PCIE.route_bandwidth_bytes_per_s(a, b)
    expected = (m + p - 1) * (1.0 + 2.0) + (p - 1) * (c + c)
    assert rel(result.iteration_time_s, expected) < 1e-9
    sends = [e for e in result.events if e.kind is EventKind.SEND_ACTIVATION]
    assert len(sends) == (p - 1) * m
    assert all(rel(e.duration_s, c) < 1e-9 for e in sends)


def test_two_transfers_sharing_a_nic_take_twice_as_long() -> None:
    # Stage 0 on GPUs 0 and 1 of server 0, stage 1 on GPUs 0 and 1 of server 1: both replicas
    # send their half of the micro-batch through the one 25 GbE NIC of server 0 at the same time.
    activation = 64 << 20
    profile = equal_profile(2, activation_bytes=activation, parameter_bytes=0)
    shared = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=0, replicas=2, devices=(0, 1)),
            StagePlan(first_layer=1, last_layer=1, replicas=2, devices=(8, 9)),
        ),
        global_batch_size=8,
        num_microbatches=1,
    )
    alone = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=0, replicas=1, devices=(0,)),
            StagePlan(first_layer=1, last_layer=1, replicas=1, devices=(8,)),
        ),
        global_batch_size=4,
        num_microbatches=1,
    )
    two = [e for e in simulate(shared, profile, BIG).events if e.kind is EventKind.SEND_ACTIVATION]
    one = [e for e in simulate(alone, profile, BIG).events if e.kind is EventKind.SEND_ACTIVATION]
    assert len(two) == 2
    assert len(one) == 1
    latency = BIG.route_latency_s(0, 8)
    nbytes = activation  # each replica sends its 4 samples: the bytes of one profile batch
    bandwidth = BIG.route_bandwidth_bytes_per_s(0, 8)
    assert rel(one[0].duration_s, latency + nbytes / bandwidth) < 1e-9
    for e in two:
        assert rel(e.duration_s - latency, 2 * (one[0].duration_s - latency)) < 1e-9


def test_bucketed_allreduce_overlaps_the_last_backward() -> None:
    profile = equal_profile(8, parameter_bytes=32 << 20)
    plan = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=3, replicas=4),
            StagePlan(first_layer=4, last_layer=7, replicas=4),
        ),
        global_batch_size=64,
        num_microbatches=4,
        schedule="dapple",
    )
    whole = simulate(plan, profile, BIG)
    bucketed = simulate(plan, profile, BIG, SimOptions(allreduce_overlap="bucketed", bucket_bytes=32 << 20))
    at_end = simulate(plan, profile, BIG, SimOptions(allreduce_overlap="end"))
    assert bucketed.exposed_allreduce_time_s < whole.exposed_allreduce_time_s
    assert whole.exposed_allreduce_time_s <= at_end.exposed_allreduce_time_s
    reduced = [e for e in bucketed.events if e.kind is EventKind.ALL_REDUCE and e.device == 0]
    assert len(reduced) == 4  # one bucket per layer of stage 0
    assert sum(e.nbytes for e in reduced) == 4 * (32 << 20)
    for a, b in itertools.pairwise(reduced):
        assert a.end_s <= b.start_s  # buckets go one after another


def test_link_tracks_are_recorded() -> None:
    profile = equal_profile(2, parameter_bytes=1 << 20)
    plan = one_layer_per_stage(2, 2, schedule="dapple", replicas=2)
    result = simulate(plan, profile, BIG)
    links = [e for e in result.events if e.kind is EventKind.LINK]
    assert links
    assert all(e.resource in result.link_names for e in links)
    assert all(e.end_s > e.start_s and e.nbytes > 0 for e in links)


def test_new_event_is_the_trace_event_with_those_fields() -> None:
    from pipesim.simulator.trace import EventKind, TraceEvent, new_event

    made = new_event("gpu3.comm", EventKind.SEND_GRADIENT, 1.0, 2.5, 3, 4, 5, 6.0, 7)
    assert made == TraceEvent(
        resource="gpu3.comm", kind=EventKind.SEND_GRADIENT, start_s=1.0, end_s=2.5,
        device=3, stage=4, microbatch=5, nbytes=6.0, peer=7,
    )  # fmt: skip
    assert hash(made) == hash(TraceEvent(resource="gpu3.comm", kind=EventKind.SEND_GRADIENT, start_s=1.0,
                                         end_s=2.5, device=3, stage=4, microbatch=5, nbytes=6.0, peer=7))
    with pytest.raises(AttributeError):
        made.start_s = 0.0  # type: ignore[misc]
