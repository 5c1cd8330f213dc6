"""V-Half from the paper's building block (schedules/controllable.py): memory exactly (p + 2) // 2
micro-batches of a rank's layers, and its bubble, in the evaluator and both simulator executors."""

from __future__ import annotations

import itertools

import pytest

from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.schedules import evaluate, make_schedule
from pipesim.simulator import SimOptions, simulate
from tests.simulator.builders import equal_profile, one_layer_per_stage

UNIT = {"fwd_time_s": 1, "bwd_time_s": 2, "wgrad_time_s": 1}  # F = I = W = one slot per stage


def _v_half_idle(p: int) -> int:
    """Idle slots per rank of V-Half with F = I = W = 1 per stage, m >= p + 2 (docs/schedules.md)."""
    if p <= 2:
        return p - 1
    if p % 2 == 0:
        return 3 * p - 7
    return 3 * p - 4 if p <= 7 else 3 * (p - 1)


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


def test_v_half_bubble_is_constant_in_m_and_half_of_1f1b() -> None:
    """From m = p + 2 on, each micro-batch adds exactly its 6 slots: the idle per rank is a
    constant, at most half of 1F1B's (the paper's B/2: 1F1B on the same ranks idles
    (p - 1)(T_F + T_B + T_W) = 6(p - 1) slots), and equal to it for odd p >= 9."""
    for p in range(1, 13):
        ms = range(p + 2, 3 * p + 3)
        spans = [evaluate(make_schedule("v-half", num_ranks=p, num_microbatches=m), **UNIT).makespan
                 for m in ms]
        assert all(b - a == 6 for a, b in itertools.pairwise(spans)), p
        assert spans[0] - 6 * (p + 2) == _v_half_idle(p), p
        one_f_one_b = evaluate(make_schedule("1f1b", num_ranks=p, num_microbatches=p + 2),
                               fwd_time_s=2, bwd_time_s=4)  # a rank's two stages as one
        assert one_f_one_b.makespan - 6 * (p + 2) == 6 * (p - 1)
        assert 2 * _v_half_idle(p) <= 6 * (p - 1)
    assert _v_half_idle(9) == 3 * 8
    assert _v_half_idle(11) == 3 * 10


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
            assert result.iteration_time_s == pytest.approx(6 * m + _v_half_idle(p), rel=1e-12)
