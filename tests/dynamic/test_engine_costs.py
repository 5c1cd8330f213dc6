"""The simulator's explicit per-micro-batch costs and schedules (simulate(..., schedule=, costs=))."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.schedules import evaluate, make_schedule
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.microbatch_costs import MicrobatchCosts

CLUSTER = get_cluster("dapple-2x8-v100")


def _profile(p: int) -> ModelProfile:
    layers = tuple(
        Layer(name=f"l{i}", fwd_time_s=1.0, bwd_time_s=2.0, activation_bytes=1 << 20, parameter_bytes=1 << 20)
        for i in range(p)
    )
    return ModelProfile(name="toy", layers=layers, profile_batch_size=1)


def _plan(p: int, sizes: tuple[int, ...], replicas: int = 1, schedule: str = "1f1b") -> Plan:
    return Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i, replicas=replicas) for i in range(p)),
        global_batch_size=sum(sizes),
        num_microbatches=len(sizes),
        microbatch_sizes=sizes,
        schedule=schedule,
    )


def _costs(fwd: list[list[float]], stash: float = 100.0) -> MicrobatchCosts:
    table = tuple(tuple(row) for row in fwd)
    return MicrobatchCosts(
        fwd_time_s=table,
        bwd_time_s=tuple(tuple(2 * x for x in row) for row in fwd),
        stash_bytes=tuple(tuple(stash * x for x in row) for row in fwd),
        work_bytes=tuple(tuple(0.0 for _ in row) for row in fwd),
        out_bytes=tuple(tuple(0.0 for _ in row) for row in fwd),
    )


@pytest.mark.parametrize("name", ["gpipe", "1f1b"])
def test_variable_costs_match_the_analytic_evaluator_exactly(name: str) -> None:
    fwd = [[1.0, 3.0, 0.5, 2.0], [2.0, 1.0, 1.0, 4.0], [0.5, 0.5, 3.0, 1.0]]
    sizes = (2, 5, 1, 3)
    schedule = make_schedule(name, num_ranks=3, num_microbatches=4)
    result = simulate(
        _plan(3, sizes, schedule=name),
        _profile(3),
        CLUSTER,
        SimOptions(free_links=True, optimizer_step=False),  # the evaluator has no optimizer step
        schedule=schedule,
        costs=_costs(fwd),
    )
    expected = evaluate(schedule, fwd_time_s=fwd, bwd_time_s=[[2 * x for x in row] for row in fwd])
    assert result.iteration_time_s == pytest.approx(float(expected.makespan), rel=1e-12)
    # memory: each stage's static bytes plus its stashed micro-batches at the peak
    static = result.devices[0].static_memory_bytes
    stashed = (
        100.0 * sum(fwd[0])
        if name == "gpipe"
        else max(100.0 * (fwd[0][k] + fwd[0][k + 1] + fwd[0][k + 2]) for k in range(2))
    )
    assert result.devices[0].peak_memory_bytes == pytest.approx(static + stashed)


def test_replicas_share_a_micro_batch_by_samples() -> None:
    fwd = [[4.0, 8.0], [4.0, 8.0]]
    result = simulate(
        _plan(2, (2, 4), replicas=2), _profile(2), CLUSTER, SimOptions(free_links=True), costs=_costs(fwd)
    )
    halves = [[x / 2 for x in row] for row in fwd]
    expected = evaluate(
        make_schedule("1f1b", num_ranks=2, num_microbatches=2),
        fwd_time_s=halves,
        bwd_time_s=[[2 * x for x in row] for row in halves],
    )
    assert result.iteration_time_s >= float(expected.makespan)  # plus the gradient all-reduce
    busy = {d.device: d.busy_time_s for d in result.devices}
    assert busy[0] == pytest.approx(sum(halves[0]) * 3)


def test_activation_bytes_per_micro_batch_travel_over_links() -> None:
    fwd = [[1.0, 1.0], [1.0, 1.0]]
    base = _costs(fwd)
    big = MicrobatchCosts(
        fwd_time_s=base.fwd_time_s,
        bwd_time_s=base.bwd_time_s,
        stash_bytes=base.stash_bytes,
        work_bytes=base.work_bytes,
        out_bytes=((1e3, 5e9), (0.0, 0.0)),
    )
    small = simulate(_plan(2, (1, 1)), _profile(2), CLUSTER, costs=base)
    slow = simulate(_plan(2, (1, 1)), _profile(2), CLUSTER, costs=big)
    assert slow.iteration_time_s > small.iteration_time_s + 0.01


def test_shape_mismatches_are_errors() -> None:
    with pytest.raises(InputError, match="must match the plan's 2 stages x 3 micro-batches"):
        simulate(_plan(2, (1, 1, 1)), _profile(2), CLUSTER, costs=_costs([[1.0, 1.0], [1.0, 1.0]]))
    with pytest.raises(InputError, match="must match the plan's 2 ranks"):
        simulate(
            _plan(2, (1, 1)),
            _profile(2),
            CLUSTER,
            schedule=make_schedule("gpipe", num_ranks=3, num_microbatches=2),
        )
    with pytest.raises(InputError, match="finite number >= 0"):
        _costs([[1.0, -1.0]])
    with pytest.raises(InputError, match="must have 2 micro-batches"):
        MicrobatchCosts(
            fwd_time_s=((1.0, 1.0),),
            bwd_time_s=((1.0,),),
            stash_bytes=((1.0, 1.0),),
            work_bytes=((1.0, 1.0),),
            out_bytes=((1.0, 1.0),),
        )
