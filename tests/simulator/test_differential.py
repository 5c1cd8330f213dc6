"""Both executors of the simulator against the analytic evaluator of pipesim.schedules on
contention-free links (the evaluator times the stage-level schedule; the simulator its lowering)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.schedules import evaluate, make_schedule
from pipesim.simulator import SimOptions, simulate

PCIE = get_cluster("pcie-4x4-v100-10gbe")  # 16 GPUs on 4 servers: PCIe inside, 10 GbE between
NO_CONTENTION = SimOptions(contention=False)


@st.composite
def cases(draw: st.DrawFn) -> tuple[Plan, ModelProfile]:
    schedule = draw(st.sampled_from(["gpipe", "dapple", "1f1b", "zb-h1", "zb-h2", "interleaved"]))
    chunks = 2 if schedule == "interleaved" else 1
    p = draw(st.integers(1, 4))
    m = draw(st.integers(1, 6))
    if chunks > 1:
        m = p * draw(st.integers(1, 2))  # the looped order wants m a multiple of its round size
    stages = p * chunks
    sizes = [draw(st.integers(1, 3)) for _ in range(stages)]
    batch = draw(st.sampled_from([1, 2, 4]))
    layers = []
    for i in range(sum(sizes)):
        layers.append(
            Layer(
                name=f"l{i}",
                fwd_time_s=draw(st.floats(1e-3, 5e-2)),
                bwd_time_s=draw(st.floats(1e-3, 1e-1)),
                activation_bytes=draw(st.integers(1, 8 << 20)),
                parameter_bytes=0,
                wgrad_fraction=draw(st.sampled_from([0.0, 0.3, 0.5])),
            )
        )
    profile = ModelProfile(name="random", layers=tuple(layers), profile_batch_size=batch)
    devices = draw(st.permutations(range(PCIE.num_devices)))[:p]
    first = 0
    stage_plans = []
    for s, n in enumerate(sizes):
        stage_plans.append(StagePlan(first_layer=first, last_layer=first + n - 1, devices=(devices[s % p],)))
        first += n
    plan = Plan(
        stages=tuple(stage_plans),
        global_batch_size=m * batch,
        num_microbatches=m,
        schedule=schedule,
        chunks=chunks,
    )
    return plan, profile


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), executor=st.sampled_from(["simpy", "fast"]))
def test_simulator_equals_the_analytic_evaluator(case: tuple[Plan, ModelProfile], executor: str) -> None:
    plan, profile = case
    result = simulate(plan, profile, PCIE, NO_CONTENTION, executor=executor)

    stages = plan.stages
    fwd = [sum(profile.layers[i].fwd_time_s for i in range(s.first_layer, s.last_layer + 1)) for s in stages]
    bwd = [sum(profile.layers[i].bwd_time_s for i in range(s.first_layer, s.last_layer + 1)) for s in stages]
    wgrad = []
    for s, b in zip(stages, bwd, strict=True):
        w = sum(
            profile.layers[i].bwd_time_s * profile.layers[i].weight_grad_fraction
            for i in range(s.first_layer, s.last_layer + 1)
        )
        wgrad.append(w if b > 0 else 0.0)
    c_f, c_b = [], []
    for s in range(len(stages) - 1):
        a, b = stages[s].devices[0], stages[s + 1].devices[0]  # type: ignore[index]
        nbytes = profile.layers[stages[s].last_layer].activation_bytes
        c_f.append(
            PCIE.route_latency_s(a, b) + nbytes / PCIE.route_bandwidth_bytes_per_s(a, b) if a != b else 0.0
        )
        c_b.append(
            PCIE.route_latency_s(b, a) + nbytes / PCIE.route_bandwidth_bytes_per_s(b, a) if a != b else 0.0
        )
    schedule = make_schedule(
        plan.schedule, num_ranks=plan.num_ranks, num_microbatches=plan.num_microbatches, chunks=plan.chunks
    )
    timeline = evaluate(
        schedule, fwd_time_s=fwd, bwd_time_s=bwd, wgrad_time_s=wgrad, fwd_comm_time_s=c_f, bwd_comm_time_s=c_b
    )
    assert abs(result.iteration_time_s - timeline.makespan) <= 1e-9 * timeline.makespan
    for device in result.devices:
        rank = device.stages[0] % plan.num_ranks
        assert abs(device.busy_time_s - timeline.busy[rank]) <= 1e-9 * timeline.makespan


def test_queued_transfers_agree_with_the_evaluator() -> None:
    # activations far slower to send than to compute (c_f ~ 9 ms over 10 GbE, t_f = 1 ms): the
    # transfers queue on their stream in both the simulator and the evaluator
    layers = tuple(
        Layer(
            name=f"l{i}",
            fwd_time_s=1e-3,
            bwd_time_s=2e-3,
            activation_bytes=8 << 20,
            parameter_bytes=0,
            wgrad_fraction=0.0,
        )
        for i in range(3)
    )
    profile = ModelProfile(name="queued", layers=layers, profile_batch_size=1)
    for schedule in ("gpipe", "1f1b"):
        plan = Plan(
            stages=tuple(StagePlan(first_layer=i, last_layer=i, devices=(4 * i,)) for i in range(3)),
            global_batch_size=6,
            num_microbatches=6,
            schedule=schedule,
        )
        c = [
            PCIE.route_latency_s(a, a + 4) + (8 << 20) / PCIE.route_bandwidth_bytes_per_s(a, a + 4)
            for a in (0, 4)
        ]
        lat = [PCIE.route_latency_s(a, a + 4) for a in (0, 4)]
        timeline = evaluate(
            make_schedule(schedule, num_ranks=3, num_microbatches=6),
            fwd_time_s=1e-3,
            bwd_time_s=2e-3,
            fwd_comm_time_s=c,
            bwd_comm_time_s=c,
            fwd_comm_latency_s=lat,
            bwd_comm_latency_s=lat,
        )
        for executor in ("simpy", "fast"):
            result = simulate(plan, profile, PCIE, NO_CONTENTION, executor=executor)
            assert abs(result.iteration_time_s - timeline.makespan) <= 1e-9 * timeline.makespan
        if schedule == "gpipe":  # 6 activations queue on each hop: far above the independent sum
            assert timeline.makespan > 2 * 6 * c[0]
