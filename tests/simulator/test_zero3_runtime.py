"""ZeRO-3 as DeepSpeed (2021) issues it: the simulator and the 3D estimate charge the same issue time
and re-gathers (profiles/costmodels/zero3_runtime.py, simulator/zero_lowering.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.plan_file import plan_from_dict, plan_to_dict
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.zero3_runtime import Zero3Runtime, call_issue_s, unit_calls
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile


def _plan(runtime: str, *, replicas: int, layers: int, recompute: str = "none", m: int = 1,
          allreduce: str = "auto") -> Plan:
    stage = StagePlan(first_layer=0, last_layer=layers - 1, replicas=replicas, sharding="zero3")
    return Plan(stages=(stage,), global_batch_size=4 * replicas * m, num_microbatches=m, schedule="1f1b",
                recompute=recompute, allreduce=allreduce, zero3_runtime=runtime)


def test_issue_time_closed_form_on_free_links() -> None:
    """Free links: the gathers take no time, so DeepSpeed's iteration exceeds FSDP's by the issue
    time alone. Eight one-layer units of one call each among 16 ranks (``c`` = 16 x 2 x 10 us a
    gather, ``r`` = 16 x 3 x 10 us a reduce-scatter): each forward unit ``c``; each backward unit
    ``c`` for its gather plus its reduce-scatter's ``r`` beyond the unit's 0.2 ms of compute."""
    profile = equal_profile(8, fwd_s=1e-4, bwd_s=2e-4)
    cluster = get_cluster("dapple-2x8-v100")
    opts = SimOptions(free_links=True, optimizer_step=False, record_trace=False)
    fsdp = simulate(_plan("fsdp", replicas=16, layers=8), profile, cluster, opts).iteration_time_s
    ds = simulate(_plan("deepspeed-2021", replicas=16, layers=8), profile, cluster, opts).iteration_time_s
    c, r = call_issue_s(16), call_issue_s(16, 3)
    assert r > 2e-4
    assert fsdp == pytest.approx(8 * 3e-4)
    assert ds - fsdp == pytest.approx(8 * c + 8 * (c + (r - 2e-4)), abs=1e-12)


def test_replayed_backward_regathers_released_tensors(wire_bytes: list[float]) -> None:
    """Ring traffic over n members: FSDP-style ZeRO-3 moves 3 (n - 1) P per micro-batch; with
    full recomputation DeepSpeed also gathers again, in the backward, the tensors it released
    after their replay: a GPT-3-wide block's QKV, projection and first MLP weights (8 h^2)."""
    h = 12288
    profile, cluster = resolve_inputs(f"gpt:layers=2,hidden={h},heads=96,seq=128,vocab=1024", "dgx-a100-x2",
                                      dtype="fp16")
    params = float(sum(layer.parameter_bytes for layer in profile.layers))
    n = 4
    wire = {}
    for runtime in ("fsdp", "deepspeed-2021"):
        wire_bytes.clear()
        plan = _plan(runtime, replicas=n, layers=profile.num_layers, recompute="full", allreduce="ring")
        simulate(plan, profile, cluster, SimOptions(optimizer_step=False), executor="simpy")
        wire[runtime] = sum(wire_bytes)
    # the re-gathered tensors are large (Simple protocol: their bytes once), so the difference is exact;
    # LL's flag bytes (nccl_protocol: 2 wire bytes per data byte; up to 2.7 on A100, where NCCL's llMaxBws
    # caps LL) on the few small units' calls add < 2e-5
    assert wire["deepspeed-2021"] - wire["fsdp"] == pytest.approx((n - 1) * 2 * (8 * h * h * 2))
    assert wire["fsdp"] >= 3 * (n - 1) * params
    assert wire["fsdp"] == pytest.approx(3 * (n - 1) * params, rel=2e-5)
    assert unit_calls([profile.layers[1]], 2).regather_elements == 8 * h * h


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize(("d", "m"), [(16, 1), (16, 4), (8, 2)])
def test_estimate_follows_the_simulation(recompute: str, d: int, m: int) -> None:
    profile, cluster = resolve_inputs("gpt:layers=8,hidden=2048,heads=16,seq=1024,vocab=32000", "dgx-a100-x2",
                                      dtype="fp16")
    plan = _plan("deepspeed-2021", replicas=d, layers=profile.num_layers, recompute=recompute, m=m)
    est = estimate_3d(plan, profile, cluster).iteration_time_s
    sim = simulate(plan, profile, cluster, SimOptions(record_trace=False)).iteration_time_s
    assert est == pytest.approx(sim, rel=0.03)
    fsdp = estimate_3d(_plan("fsdp", replicas=d, layers=profile.num_layers, recompute=recompute, m=m),
                       profile, cluster).iteration_time_s
    assert est > fsdp


def test_the_runtime_round_trips_the_plan_file() -> None:
    plan = _plan("deepspeed-2021", replicas=4, layers=8)
    data = plan_to_dict(plan)
    assert data["zero3_runtime"] == "deepspeed-2021"
    assert plan_from_dict(data).zero3_runtime is Zero3Runtime.DEEPSPEED_2021
    assert "zero3_runtime" not in plan_to_dict(_plan("fsdp", replicas=4, layers=8))


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1", "interleaved"])
@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize(("hidden", "heads"), [(1024, 16), (20480, 128)])
def test_the_fast_path_runs_deepspeeds_issue_time_as_the_engine(
    schedule: str, recompute: str, hidden: int, heads: int
) -> None:
    """The issue time is part of each op's duration and its unit boundaries: the fast path and
    the engine agree event for event, split backwards (``I`` issues gathers, ``W`` the
    reduce-scatters' excess), TP and (530B-wide blocks) on-demand gathers included."""
    from tests.simulator.test_fastpath import assert_same

    spec = f"gpt:layers=4,hidden={hidden},heads={heads},seq=256,vocab=32000"
    profile, cluster = resolve_inputs(spec, "dgx-a100-x2")
    chunks = 2 if schedule == "interleaved" else 1
    spans = ((0, 1), (2, 2), (3, 4), (5, 5)) if chunks == 2 else ((0, 2), (3, 5))
    t = 2 if hidden == 1024 else 1  # TP would halve the wide tensors below the live bound
    stages = tuple(StagePlan(first_layer=a, last_layer=b, replicas=4, tensor_parallel=t, sharding="zero3")
                   for a, b in spans)
    assert (unit_calls([profile.layers[1]], 2, t).on_demand_forward > 0) == (hidden > 1024)
    plan = Plan(stages=stages, global_batch_size=16, num_microbatches=4, schedule=schedule, chunks=chunks,
                recompute=recompute, zero3_runtime="deepspeed-2021")
    options = SimOptions(contention=False, record_trace=True)
    fast = simulate(plan, profile, cluster, options, executor="fast")
    assert_same(fast, simulate(plan, profile, cluster, options, executor="simpy"))
    flat = replace(plan, zero3_runtime=Zero3Runtime.FSDP)
    fsdp = simulate(flat, profile, cluster, options, executor="fast")
    assert fast.iteration_time_s > fsdp.iteration_time_s


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_on_demand_gathers_follow_the_estimate_and_move_the_same_bytes(
    recompute: str, wire_bytes: list[float]
) -> None:
    """530B-wide blocks: most gathers run on demand (a second collective per unit, waited for at
    the unit's start); the bytes on the wire are those of the prefetched model, and the 3D
    estimate charges what the simulator runs."""
    h = 20480
    profile, cluster = resolve_inputs(f"gpt:layers=2,hidden={h},heads=128,seq=256,vocab=1024", "dgx-a100-x2",
                                      dtype="fp16")
    params = float(sum(layer.parameter_bytes for layer in profile.layers))
    n = 4
    plan = _plan("deepspeed-2021", replicas=n, layers=profile.num_layers, recompute=recompute,
                 allreduce="ring")
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options, executor="simpy").iteration_time_s
    again = 2 * (8 * h * h * 2) if recompute == "full" else 0.0
    # LL's flag bytes (nccl_protocol: 2 wire bytes per data byte; up to 2.7 on A100, where NCCL's llMaxBws
    # caps LL) on the few small units' calls add < 2e-5
    assert sum(wire_bytes) >= 3 * (n - 1) * params + (n - 1) * again
    assert sum(wire_bytes) == pytest.approx(3 * (n - 1) * params + (n - 1) * again, rel=2e-5)
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est == pytest.approx(sim, rel=0.03)
    flat = estimate_3d(replace(plan, zero3_runtime=Zero3Runtime.FSDP), profile, cluster, optimizer_step=False)
    assert est > flat.iteration_time_s


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_per_tensor_prefetch_moves_the_simulation_and_the_estimate_alike(
    recompute: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DeepSpeed's per-tensor prefetch and per-call ring latency
    (:func:`~pipesim.profiles.costmodels.zero3_exposure.unit_exposure_s`) lengthen 16 ranks'
    ops: the simulator and the 3D estimate add the same time (within 3% of the iteration)."""
    import pipesim.planner.zero_ops as zero_ops
    import pipesim.simulator.zero_lowering as zero_lowering

    profile, cluster = resolve_inputs("gpt:layers=8,hidden=2048,heads=16,seq=1024,vocab=32000", "dgx-a100-x2",
                                      dtype="fp16")
    plan = replace(_plan("deepspeed-2021", replicas=16, layers=profile.num_layers, recompute=recompute),
                   global_batch_size=16)  # one sample a rank: short modules
    opts = SimOptions(optimizer_step=False, record_trace=False)

    def both() -> tuple[float, float]:
        est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
        return est, simulate(plan, profile, cluster, opts).iteration_time_s

    est, sim = both()
    monkeypatch.setattr(zero_ops, "unit_exposure_s", lambda *a, **k: 0.0)
    monkeypatch.setattr(zero_lowering, "unit_exposure_s", lambda *a, **k: 0.0)
    est0, sim0 = both()
    assert est - est0 > 0.1 * est0  # the 16 ranks' calls outlast a small model's modules
    assert est - est0 == pytest.approx(sim - sim0, abs=0.03 * sim)
    assert est == pytest.approx(sim, rel=0.03)
