"""``Plan.overlap_param_gather`` (Megatron-LM's ``--overlap-param-gather``): the distributed
optimizer's parameter all-gathers per bucket from the iteration's start, awaited by the first
forwards; the option's checks, the plan file, and the 3D estimate against the simulation."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.plan_file import plan_from_dict, plan_to_dict
from pipesim.planner.megatron import estimate_3d
from pipesim.planner.param_gather import bucket_elements
from pipesim.profiles.costmodels.buckets import bucket_layers
from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.lowering import lower
from pipesim.simulator.trace import EventKind, TraceEvent
from tests.simulator.builders import equal_profile

TWO_SERVERS = with_overrides(get_cluster("dgx1-v100"), {"servers": 2})
LAYER_BYTES = 256 << 20  # fp32 parameter bytes per layer
FWD_S, BWD_S = 0.01, 0.02


def _plan(overlap: bool, *, sharding: str = "distributed", m: int = 2) -> Plan:
    """One stage of two layers, d 2 on two servers (devices 0 and 8), 1F1B over ``m`` micro-batches."""
    return Plan(
        stages=(StagePlan(first_layer=0, last_layer=1, replicas=2, devices=(0, 8), sharding=sharding),),
        global_batch_size=8 * m, num_microbatches=m, schedule="1f1b", overlap_param_gather=overlap,
    )


def _gathers(events: list[TraceEvent], nbytes: float, before_s: float) -> list[TraceEvent]:
    """Device 0's collectives of ``nbytes`` that start before ``before_s``, by start."""
    found = [e for e in events if e.kind is EventKind.ALL_REDUCE and e.device == 0 and e.nbytes == nbytes
             and e.start_s < before_s]
    return sorted(found, key=lambda e: e.start_s)


@pytest.mark.parametrize("executor", ["simpy", "fast"])
def test_first_forward_waits_for_each_bucket_hand_computed(executor: str) -> None:
    """Two buckets of one layer each, gathers longer than a layer's 0.01 s forward: gather
    0 from t = 0, gather 1 right after it (one stream), the forward's first layer starts when
    gather 0 ends and its second when gather 1 ends, so the first forward ends at
    ``G0 + G1 + f``; the rest of the iteration as without the option, but for the all-gather
    after the step (``G``), which is gone: ``on - off = G0 + G1 + f - 2 f - G``."""
    profile = equal_profile(2, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=LAYER_BYTES)
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=LAYER_BYTES, contention=executor == "simpy")
    on = simulate(_plan(True), profile, TWO_SERVERS, opts, executor=executor)
    off = simulate(_plan(False), profile, TWO_SERVERS, opts, executor=executor)
    first = next(e for e in on.events if e.kind is EventKind.FORWARD and e.device == 0 and e.microbatch == 0)
    g0, g1 = _gathers(on.events, LAYER_BYTES, first.end_s)
    assert (g0.start_s, g1.start_s) == (0.0, g0.end_s)  # one after another from the start
    g = g0.duration_s
    assert g > FWD_S
    assert g1.duration_s == pytest.approx(g, rel=1e-12)
    assert first.end_s == pytest.approx(2 * g + FWD_S, rel=1e-12)
    second = next(e for e in on.events if e.kind is EventKind.FORWARD and e.device == 0 and e.microbatch == 1)
    assert second.duration_s == pytest.approx(2 * FWD_S, rel=1e-12)  # only the first forward waits
    # off: one all-gather of both layers after the optimizer step ends the iteration
    step = next(e for e in off.events if e.kind is EventKind.OPTIMIZER and e.device == 0)
    (post,) = [e for e in off.events if e.kind is EventKind.ALL_REDUCE and e.device == 0
               and e.start_s >= step.end_s]
    assert post.nbytes == 2 * LAYER_BYTES
    assert off.iteration_time_s == post.end_s
    expected = off.iteration_time_s + (2 * g + FWD_S - 2 * FWD_S) - post.duration_s
    assert on.iteration_time_s == pytest.approx(expected, rel=1e-9)


def test_one_bucket_without_bucketed_reductions() -> None:
    """Without ``allreduce_overlap = bucketed`` the stage is one bucket (Megatron's
    ``bucket_size`` is unbounded without ``--overlap-grad-reduce``): its gather ends before the
    first forward starts computing, and the program has no gather after the step."""
    profile = equal_profile(2, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=LAYER_BYTES)
    opts = SimOptions()
    program = lower(_plan(True), profile, TWO_SERVERS, opts)
    gathers = [c for c in program.collectives if c.kind == "all-gather"]
    assert len(gathers) == 1
    assert not gathers[0].after_step
    assert not gathers[0].posted
    assert gathers[0].after is None
    assert gathers[0].nbytes == 2 * LAYER_BYTES
    on = simulate(_plan(True), profile, TWO_SERVERS, opts)
    (g,) = _gathers(on.events, 2 * LAYER_BYTES, FWD_S)
    first = next(e for e in on.events if e.kind is EventKind.FORWARD and e.device == 0 and e.microbatch == 0)
    assert first.end_s == pytest.approx(g.end_s + 2 * FWD_S, rel=1e-12)


def test_off_keeps_the_gather_after_the_step() -> None:
    """Off (Megatron's default): the all-gather of the updated shards after the step, as before;
    the waits are gone and the program is not gated."""
    profile = equal_profile(2, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=LAYER_BYTES)
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=LAYER_BYTES)
    program = lower(_plan(False), profile, TWO_SERVERS, opts)
    gathers = [c for c in program.collectives if c.kind == "all-gather"]
    assert [c.after_step for c in gathers] == [True]
    assert not program.gated
    assert all(not ins.waits for ins in program.stream(0, 0) if hasattr(ins, "waits"))
    assert lower(_plan(True), profile, TWO_SERVERS, opts).gated


def test_buckets_follow_the_backward_order() -> None:
    profile = equal_profile(5, parameter_bytes=100)
    buckets = bucket_layers(profile, range(5), 150)
    assert [b[0] for b in buckets] == [(4, 3), (2, 1), (0,)]
    assert [b[1] for b in buckets] == [200, 200, 100]
    assert [b[2] for b in buckets] == pytest.approx([0.4, 0.8, 1.0])


@pytest.mark.parametrize("sharding", ["none", "zero1", "zero2", "zero3"])
def test_needs_the_distributed_optimizer(sharding: str) -> None:
    with pytest.raises(InputError) as info:
        _plan(True, sharding=sharding)
    text = str(info.value)
    assert "overlap_param_gather" in text
    assert "distributed" in text
    assert sharding in text


def test_rejects_a_non_boolean() -> None:
    with pytest.raises(InputError, match=r"overlap_param_gather.*true or false"):
        replace(_plan(False), overlap_param_gather=1)  # type: ignore[arg-type]


def test_plan_file_round_trip_and_default() -> None:
    data = plan_to_dict(_plan(True))
    assert data["overlap_param_gather"] is True
    assert plan_from_dict(data).overlap_param_gather is True
    off = plan_to_dict(_plan(False))
    assert "overlap_param_gather" not in off
    assert plan_from_dict(off).overlap_param_gather is False
    with pytest.raises(InputError, match="overlap_param_gather"):
        plan_from_dict({**data, "overlap_param_gather": "yes"})


GPT = "gpt:layers=8,hidden=2048,heads=16,seq=2048,vocab=32000,flash=1,untie=1"


@pytest.mark.parametrize(
    ("t", "p", "d", "schedule", "v"),
    [(1, 1, 4, "1f1b", 1), (2, 1, 16, "1f1b", 1), (8, 2, 2, "1f1b", 1), (4, 2, 4, "interleaved", 2)],
)
def test_estimate_follows_the_simulation(t: int, p: int, d: int, schedule: str, v: int) -> None:
    """The 3D estimate with the option against the simulation with Megatron's buckets (its
    default ``max(4e7, 1e6 d)`` elements, as the estimate takes them), within the 3D estimate's
    usual tolerance (5%), and it moves as the simulation does (within 2% of the iteration: where
    rank 0's first chunk is one bucket, as at t 8 here, the gather before the first forward costs
    what the gather after the step did, in both)."""
    profile, cluster = resolve_inputs(GPT, "dgx-h100-1024", overrides={"servers": 4}, dtype="bf16")
    n, k = profile.num_layers, p * v
    per = n // k
    stages = tuple(
        StagePlan(first_layer=j * per, last_layer=(j + 1) * per - 1 if j < k - 1 else n - 1, replicas=d,
                  tensor_parallel=t, sharding="distributed")
        for j in range(k)
    )
    plan = Plan(stages=stages, global_batch_size=8 * d, num_microbatches=8, schedule=schedule, chunks=v)
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=4 * bucket_elements(d))  # fp32 gradients
    times = {}
    for on in (False, True):
        one = replace(plan, overlap_param_gather=on)
        sim = simulate(one, profile, cluster, opts).iteration_time_s
        est = estimate_3d(one, profile, cluster).iteration_time_s
        assert est == pytest.approx(sim, rel=0.05)
        times[on] = (sim, est)
    moved_sim, moved_est = times[True][0] - times[False][0], times[True][1] - times[False][1]
    assert moved_sim <= 1e-12
    assert moved_est == pytest.approx(moved_sim, abs=0.02 * times[True][0])


CLI_PLAN = ["--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "64", "--microbatches", "4",
            "--stages", "2", "--replicas", "2,2", "--schedule", "1f1b", "--allreduce-overlap", "bucketed",
            "--json"]


def test_cli_flag_and_its_error(capsys: pytest.CaptureFixture[str]) -> None:
    from pipesim.cli import main

    times = []
    for extra in ([], ["--overlap-param-gather"]):
        assert main(["simulate", *CLI_PLAN, "--zero", "distributed", *extra]) == 0
        times.append(float(json.loads(capsys.readouterr().out)["iteration_time_s"]))
    assert times[1] != times[0]
    assert main(["simulate", *CLI_PLAN, "--zero", "zero1", "--overlap-param-gather"]) == 2
    err = capsys.readouterr().err
    assert "overlap_param_gather" in err
    assert "distributed" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(("schedule", "copies"), [("interleaved", False), ("zbv", False), ("dualpipe", True)])
def test_engine_and_fast_path_agree_on_every_placement(schedule: str, copies: bool) -> None:
    """Looped, V and dual placements (a rank's chain through its stages in chunk order; a
    ``dualpipe`` copy waits for its original's gathers): the event engine and the fast path give
    the same iteration on links that are not shared."""
    profile = equal_profile(4, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=64 << 20, wgrad_fraction=0.5)
    layers = [(0, 1), (2, 3), (0, 1), (2, 3)] if copies else [(k, k) for k in range(4)]
    plan = Plan(
        stages=tuple(StagePlan(first_layer=a, last_layer=b, replicas=2, sharding="distributed")
                     for a, b in layers),
        global_batch_size=64, num_microbatches=8, schedule=schedule, chunks=2, overlap_param_gather=True,
    )
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=64 << 20, contention=False)
    a = simulate(plan, profile, TWO_SERVERS, opts, executor="simpy")
    b = simulate(plan, profile, TWO_SERVERS, opts, executor="fast")
    assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
    program = lower(plan, profile, TWO_SERVERS, opts)
    assert not any(c.after_step for c in program.collectives)
