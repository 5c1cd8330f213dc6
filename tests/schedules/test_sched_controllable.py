"""V-Half from the paper's building block (schedules/controllable.py): memory exactly (p + 2) // 2
micro-batches of a rank's layers, and its bubble, in the evaluator and both simulator executors."""

from __future__ import annotations

import itertools

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.memory import in_flight_microbatches
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.schedules import evaluate, make_schedule
from pipesim.schedules.controllable import v_half_idle_slots, v_half_limit
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile, one_layer_per_stage

UNIT = {"fwd_time_s": 1, "bwd_time_s": 2, "wgrad_time_s": 1}  # F = I = W = one slot per stage


def _walked_peaks(name: str, p: int, m: int) -> list[int]:
    """Stage-micro-batches each rank holds at most: a forward of either chunk adds one (half a
    micro-batch of the rank's layers), its W frees it (the paper's counting)."""
    out = []
    for row in make_schedule(name, num_ranks=p, num_microbatches=m).ranks:
        held = peak = 0
        for a in row:
            held += {"F": 1, "W": -1}.get(a.op.value, 0)
            peak = max(peak, held)
        out.append(peak)
    return out


def test_v_half_memory_is_the_papers_bound() -> None:
    for p in range(1, 13):
        for m in sorted({1, 2, p, p + 2, 2 * p, 3 * p + 1}):
            assert max(_walked_peaks("v-half", p, m)) == min(2 * ((p + 2) // 2), 2 * m), (p, m)


def _slow_from(first: int, ps: range) -> list[object]:
    """``ps`` as parameters, those from ``first`` on run under ``pytest -m slow`` (the exhaustive
    tail of a sweep over pipeline sizes whose smaller sizes stay in the default run)."""
    return [pytest.param(p, marks=pytest.mark.slow) if p >= first else p for p in ps]


@pytest.mark.parametrize("p", _slow_from(10, range(1, 13)))
def test_v_half_bubble_is_constant_in_m_and_half_of_1f1b(p: int) -> None:
    """From m = p + 2 on, each micro-batch adds exactly its 6 slots: the idle per rank is a
    constant, at most half of 1F1B's (the paper's B/2: 1F1B on the same ranks idles
    (p - 1)(T_F + T_B + T_W) = 6(p - 1) slots), and equal to it for odd p >= 9."""
    ms = range(p + 2, 3 * p + 3)
    spans = [evaluate(make_schedule("v-half", num_ranks=p, num_microbatches=m), **UNIT).makespan
             for m in ms]
    assert all(b - a == 6 for a, b in itertools.pairwise(spans)), p
    assert spans[0] - 6 * (p + 2) == v_half_idle_slots(p), p
    one_f_one_b = evaluate(make_schedule("1f1b", num_ranks=p, num_microbatches=p + 2),
                           fwd_time_s=2, bwd_time_s=4)  # a rank's two stages as one
    assert one_f_one_b.makespan - 6 * (p + 2) == 6 * (p - 1)
    assert 2 * v_half_idle_slots(p) <= 6 * (p - 1)
    if p in (9, 11):
        assert 2 * v_half_idle_slots(p) == 6 * (p - 1)


@pytest.mark.parametrize("p", _slow_from(13, range(1, 27)))
def test_v_half_constant_against_the_papers_rate(p: int) -> None:
    """c_p pinned for p <= 26 (evaluator, m = p + 2 and 2p + 3); against the paper's V-Half bubble
    rate ~p/(2m): c_p = 3p - d with d in {3, 4, 7} (the paper's leading term), the rate
    c_p / (6m + c_p) below p/(2m) for every m, and tending to it (c_p / 3p -> 1)."""
    for m in (p + 2, 2 * p + 3):
        span = evaluate(make_schedule("v-half", num_ranks=p, num_microbatches=m), **UNIT).makespan
        assert span - 6 * m == v_half_idle_slots(p), (p, m)
        c = v_half_idle_slots(p)
        assert c * 2 * m < p * (6 * m + c)  # c / (6m + c) < p / (2m)
    if p >= 3:
        assert 3 * p - v_half_idle_slots(p) in (3, 4, 7), p


def test_v_half_constant_tends_to_the_papers_leading_term() -> None:
    # the closed form alone (the evaluator pins it above): half of 1F1B's idle for odd p >= 9,
    # c_p / 3p -> 1
    assert v_half_idle_slots(9) == 3 * 8
    assert v_half_idle_slots(11) == 3 * 10
    assert v_half_idle_slots(26) / (3 * 26) > 0.9
    with pytest.raises(InputError, match="num_ranks"):
        v_half_idle_slots(0)


@pytest.mark.parametrize("executor", ["simpy", "fast"])
def test_simulated_v_half_holds_its_peak_and_its_constant(executor: str) -> None:
    """Equal one-layer stages, free links, no optimizer step: on every device the simulator
    holds at most the paper's (p + 2) // 2 micro-batches of its layers (2 ((p + 2) // 2)
    stage-micro-batches, the busiest exactly), its peak memory is what those stashes (and the
    input gradients' working memory) allocate, and its iteration is 6m + c_p slots."""
    from pipesim.simulator.instructions import Compute
    from pipesim.simulator.lowering import lower as lower_program

    cluster = get_cluster("dapple-2x8-v100")
    options = SimOptions(free_links=True, optimizer_step=False)
    for p, m in ((2, 4), (3, 5), (4, 6), (4, 11), (5, 7), (6, 8), (7, 9)):
        plan = one_layer_per_stage(p, m, schedule="v-half", chunks=2)
        profile = equal_profile(plan.num_stages, fwd_s=1.0, bwd_s=2.0, parameter_bytes=0, wgrad_fraction=0.5)
        result = simulate(plan, profile, cluster, options, executor=executor)
        assert result.iteration_time_s == pytest.approx(6 * m + v_half_idle_slots(p), rel=1e-12)
        program = lower_program(plan, profile, cluster, options)
        schedule = make_schedule("v-half", num_ranks=p, num_microbatches=m)
        peaks = []
        for device in result.devices:
            held = peak = 0
            held_bytes = peak_bytes = 0.0
            for ins in program.instructions(device.device):
                if isinstance(ins, Compute):
                    held_bytes += sum(ins.alloc_bytes)
                    peak_bytes = max(peak_bytes, held_bytes)
                    held_bytes -= sum(ins.free_bytes)
                    held += 1 if ins.op == "F" else -1 if ins.op == "W" else 0
                    peak = max(peak, held)
            rank = schedule.stage_ranks[device.stages[0]]
            assert peak == in_flight_microbatches("v-half", rank, p, m, chunks=2)
            activations = device.peak_memory_bytes - device.static_memory_bytes
            assert activations == pytest.approx(peak_bytes, rel=1e-12)
            peaks.append(peak)
        assert max(peaks) == min(2 * v_half_limit(p), 2 * m), (p, m)


def test_v_half_beats_the_greedy_order_it_replaced() -> None:
    """The greedy order's bubble grew with m for odd p (p = 5, m = 20: 27 idle slots)."""
    t = evaluate(make_schedule("v-half", num_ranks=5, num_microbatches=20), **UNIT)
    assert t.makespan - 6 * 20 == 11


@pytest.mark.parametrize("executor", ["simpy", "fast"])
def test_v_half_closed_form_holds_in_both_executors(executor: str) -> None:
    """Equal one-layer stages (F = I = W = 1 s), free links, no optimizer step: the simulated
    iteration is the evaluator's 6m + c_p."""
    cluster = get_cluster("dapple-2x8-v100")
    for p, m in ((2, 4), (3, 5), (4, 6), (4, 9), (5, 8)):
        plan = one_layer_per_stage(p, m, schedule="v-half", chunks=2)
        profile = equal_profile(plan.num_stages, fwd_s=1.0, bwd_s=2.0, parameter_bytes=0, wgrad_fraction=0.5)
        result = simulate(plan, profile, cluster, SimOptions(free_links=True, optimizer_step=False),
                          executor=executor)
        evaluated = evaluate(make_schedule("v-half", num_ranks=p, num_microbatches=m), **UNIT).makespan
        assert result.iteration_time_s == pytest.approx(float(evaluated), rel=1e-12)
        if m >= p + 2:
            assert result.iteration_time_s == pytest.approx(6 * m + v_half_idle_slots(p), rel=1e-12)
