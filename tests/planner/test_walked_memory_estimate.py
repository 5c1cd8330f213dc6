"""The memory estimate of schedules without a closed form (chunks, V shapes, bidirectional,
ZB-auto) walks their orders as the simulator's lowering allocates: it equals the simulated peak
on every device."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner import memory_estimate
from pipesim.planner.estimate import CostModel
from pipesim.planner.schedule_time import valid_microbatches
from pipesim.profiles.costmodels.memory import in_flight_microbatches
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.zoo import zoo_model
from pipesim.schedules.action import Op
from pipesim.schedules.registry import make_schedule, schedule_info
from pipesim.simulator import SimOptions, simulate

DGX1 = get_cluster("dgx1-v100")
FREE = SimOptions(free_links=True, optimizer_step=False)


def _gpt(stages: int) -> ModelProfile:
    # embedding + blocks + head: ``stages`` stages of two layers each (the last one the head's)
    return zoo_model(f"gpt:layers={2 * stages - 2},hidden=256,heads=4,seq=128,vocab=500", dtype="float16",
                     batch_size=1)


def _plan(schedule: str, p: int, m: int, mode: str) -> tuple[Plan, ModelProfile]:
    info = schedule_info(schedule)
    v = 1 if schedule == "zb-auto" else 2
    model_stages = p if info.placement == "dual" else p * v
    profile = _gpt(model_stages)
    cuts = [(2 * k, 2 * k + 1) for k in range(model_stages)]
    if info.placement == "dual":  # each model stage twice, once per direction
        cuts += cuts
    plan = Plan(stages=tuple(StagePlan(first_layer=a, last_layer=b) for a, b in cuts), global_batch_size=m,
                num_microbatches=m, schedule=schedule, recompute=mode, chunks=v)
    return plan, profile


WALKED = ["zbv", "v-half", "v-min", "dualpipev", "interleaved-zb", "interleaved", "zb-h1", "looped-bfs",
          "dualpipe", "chimera", "zb-auto"]


CASES = [
    (schedule, p, m)
    for schedule in WALKED
    for p, m in [(2, 4), (4, 8), (3, 12), (4, 20)]
    if valid_microbatches(schedule, p, m, 1 if schedule == "zb-auto" else 2)  # dual: even p
]


@pytest.mark.parametrize(("schedule", "p", "m"), CASES)
@pytest.mark.parametrize("mode", ["none", "full"])
def test_walked_estimate_is_the_simulated_peak(schedule: str, mode: str, p: int, m: int) -> None:
    plan, profile = _plan(schedule, p, m, mode)
    estimate = CostModel(profile, DGX1, recompute=mode).estimate(plan)
    result = simulate(plan, profile, DGX1, FREE)
    assert [d.peak_memory_bytes for d in result.devices] == pytest.approx(
        list(estimate.device_peak_memory_bytes.values()), rel=1e-12
    )


def _terms(schedule: str, p: int, m: int) -> list[tuple[int, list[list[float]]]]:
    chunks = 1 if schedule == "zb-auto" else 2
    return [(v, rows.tolist()) for v, rows in memory_estimate._walked_terms(schedule, p, m, chunks, ())]


@pytest.mark.parametrize("schedule", ["zbv", "v-half", "dualpipev", "interleaved-zb", "chimera"])
def test_a_long_order_is_walked_at_the_time_estimates_count(schedule: str) -> None:
    # the in-flight state repeats with the period: 36 micro-batches on 4 ranks walk as 12 do
    p, m = 4, 36
    walked = memory_estimate._walked_microbatches(schedule, p, m, 2)
    assert walked < m
    assert _terms(schedule, p, m) == _terms(schedule, p, walked)


@pytest.mark.slow
@pytest.mark.parametrize("schedule", ["zbv", "v-half", "v-min", "dualpipev", "interleaved-zb", "interleaved",
                                      "dualpipe", "chimera"])
def test_every_long_order_walks_as_its_period(schedule: str) -> None:
    for p in range(2, 9):
        for m in range(1, 13 * p):
            if not valid_microbatches(schedule, p, m, 2):
                continue
            walked = memory_estimate._walked_microbatches(schedule, p, m, 2)
            if walked != m:
                assert _terms(schedule, p, m) == _terms(schedule, p, walked), (p, m, walked)


def test_looped_bfs_holds_every_forward() -> None:
    # not periodic: its peak grows with m, so it is walked at its own count
    assert memory_estimate._walked_microbatches("looped-bfs", 4, 400, 2) == 400
    plan, profile = _plan("looped-bfs", 2, 16, "none")
    acts = [CostModel(profile, DGX1).activations(s.first_layer, s.last_layer, 1) for s in plan.stages]
    rank0 = memory_estimate.activation_peak_bytes("looped-bfs", 0, 2, 16, [acts[0], acts[2]], chunks=2)
    with pytest.raises(InputError, match="acts"):
        memory_estimate.activation_peak_bytes("looped-bfs", 0, 2, 16, [acts[0]], chunks=2)
    with pytest.raises(InputError, match="rank"):
        memory_estimate.activation_peak_bytes("looped-bfs", 2, 2, 16, [acts[0], acts[2]], chunks=2)
    # every forward of both chunks, then the last chunk's first backward (its working set)
    assert rank0 == pytest.approx(16 * (acts[0].stash_bytes + acts[2].stash_bytes) + acts[2].work_bytes)


@pytest.mark.parametrize(
    ("p", "m", "limit", "fraction"),
    [(2, 8, 4, 0.3), (2, 8, 4, 0.6), (3, 10, 6, 0.6), (3, 10, 6, 0.75), (4, 16, 8, 0.5), (4, 9, 4, 1.0)],
)
def test_zb_auto_in_flight_counts_follow_the_wgrad_memory_fraction(
    p: int, m: int, limit: int, fraction: float
) -> None:
    order = make_schedule("zb-auto", num_ranks=p, num_microbatches=m, memory_limit=limit,
                          wgrad_memory_fraction=fraction)
    counts = []
    for actions in order.ranks:  # forwards not yet released by their W
        held = top = 0
        for action in actions:
            held += 1 if action.op is Op.F else -1 if action.op is Op.W else 0
            top = max(top, held)
        counts.append(top)
    bound = [in_flight_microbatches("zb-auto", r, p, m, memory_limit=limit, wgrad_memory_fraction=fraction)
             for r in range(p)]
    assert all(c <= b for c, b in zip(counts, bound, strict=True))
    if fraction == 1.0:  # whole micro-batches until W: the limit, reached
        assert counts == bound == [min(limit, m)] * p
    else:  # more than the limit: up to limit / h of them held in part
        assert max(counts) > min(limit, m)
    if (p, m, limit, fraction) == (2, 8, 4, 0.3):  # the last rank reaches the bound min(m, 4 / 0.3)
        assert counts[-1] == bound[-1] == 8
    with pytest.raises(InputError, match="wgrad_memory_fraction"):
        in_flight_microbatches("zb-auto", 0, p, m, wgrad_memory_fraction=1.5)
