"""Closed forms of the planner's cost model."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipesim.errors import InputError
from pipesim.planner.latency import (
    backward_end_times,
    ending_with_sharing,
    list_schedule,
    pipeline_time_s,
)
from pipesim.schedules import evaluate, make_schedule


def _orders(name: str, p: int, m: int) -> list[list[tuple[str, int, int]]]:
    sched = make_schedule(name, num_ranks=p, num_microbatches=m).compute_only()
    return [[(a.op.value, a.stage, a.microbatch) for a in rank] for rank in sched.ranks]


@pytest.mark.parametrize("schedule", ["dapple", "1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(1, 1), (1, 5), (4, 1), (4, 8), (3, 2), (6, 16)])
def test_equal_stages_closed_form(schedule: str, p: int, m: int) -> None:
    f, b = Fraction(3), Fraction(5)
    got = pipeline_time_s([f] * p, [b] * p, [0] * p, m, schedule)  # type: ignore[list-item]
    assert got == (m + p - 1) * (f + b)


@pytest.mark.parametrize("schedule", ["dapple", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (5, 3)])
def test_gpipe_link_closed_form(schedule: str, p: int, m: int) -> None:
    # stages interleaved with transfer pseudo-stages c_f, c_b (cheaper than compute)
    tf, tb, cf, cb = Fraction(4), Fraction(7), Fraction(1), Fraction(2)
    fwd, bwd = [], []
    for s in range(p):
        if s:
            fwd.append(cf)
            bwd.append(cb)
        fwd.append(tf)
        bwd.append(tb)
    got = pipeline_time_s(fwd, bwd, [0] * len(fwd), m, schedule)  # type: ignore[arg-type]
    assert got == (m + p - 1) * (tf + tb) + (p - 1) * (cf + cb)


def test_list_schedule_matches_closed_form_for_gpipe() -> None:
    p, m = 4, 6
    makespan, last_b = list_schedule(_orders("gpipe", p, m), [2.0] * p, [3.0] * p, [0.5] * 3, [0.25] * 3)
    assert makespan == pytest.approx((m + p - 1) * 5.0 + (p - 1) * 0.75)
    assert last_b[0] == pytest.approx(makespan)


@pytest.mark.parametrize("schedule", ["dapple", "gpipe", "1f1b"])
def test_list_schedule_matches_the_analytic_evaluator(schedule: str) -> None:
    # transfers shorter than compute never queue, so FIFO links equal independent transfers
    p, m = 4, 7
    fwd, bwd = [2.0, 3.0, 2.5, 1.0], [4.0, 5.0, 6.0, 2.0]
    cf, cb = [0.5, 0.25, 0.75], [0.25, 0.5, 0.125]
    sched = make_schedule(schedule, num_ranks=p, num_microbatches=m).compute_only()
    timeline = evaluate(sched, fwd_time_s=fwd, bwd_time_s=bwd, fwd_comm_time_s=cf, bwd_comm_time_s=cb)
    makespan, _ = list_schedule(_orders(schedule, p, m), fwd, bwd, cf, cb)
    assert makespan == pytest.approx(float(timeline.makespan))


def test_allreduce_ending_and_pivot() -> None:
    # one stage: F + (M-1)(F+B) + B + AR
    assert pipeline_time_s([1.0], [2.0], [10.0], 3) == pytest.approx(1 + 2 * 3 + 2 + 10)
    ends = backward_end_times([1.0, 1.0], [2.0, 2.0], 2, "dapple")
    assert ends == [pytest.approx(9.0), pytest.approx(7.0)]


def test_ending_with_sharing_processor_shares_a_nic() -> None:
    link = frozenset({7})
    assert ending_with_sharing([(0.0, 1.0, link), (0.0, 1.0, link)]) == pytest.approx(2.0)
    assert ending_with_sharing([(0.0, 1.0, link), (0.0, 1.0, frozenset({8}))]) == pytest.approx(1.0)
    # the second starts half-way: 0.5 alone, then both at half speed
    assert ending_with_sharing([(0.0, 1.0, link), (0.5, 1.0, link)]) == pytest.approx(2.0)
    assert ending_with_sharing([]) == 0.0


def test_errors() -> None:
    with pytest.raises(InputError, match="schedule"):
        pipeline_time_s([1.0], [1.0], [0.0], 1, "zb-h1")
    with pytest.raises(InputError, match="num_microbatches"):
        pipeline_time_s([1.0], [1.0], [0.0], 0)


def test_transfers_share_a_link_as_fluid_flows() -> None:
    # two stages, forwards of 10 and 20 on stage 0; each activation alone takes 22 on one link.
    # FIFO: the first arrives at 32, the second at 54. Shared (processor sharing, as the
    # simulator's max-min network): the first is alone for 10, then both run at half speed, so
    # it arrives at 44 and the second at 54.
    orders = [
        [("F", 0, 0), ("F", 0, 1), ("B", 0, 0), ("B", 0, 1)],
        [("F", 1, 0), ("F", 1, 1), ("B", 1, 0), ("B", 1, 1)],
    ]
    fwd, bwd = [10.0, 20.0], [1.0, 1.0]
    fifo, _ = list_schedule(orders, fwd, bwd, [22.0], [0.0])
    # F(1,0) 32-52, F(1,1) 54-74, B(1,*) 74-76, B(0,0) 75-76, B(0,1) 76-77
    assert fifo == pytest.approx(77.0)
    shared, _ = list_schedule(orders, fwd, bwd, [22.0], [0.0], fwd_links=[(("nic", 22.0),)], bwd_links=[()])
    # F(1,0) 44-64, F(1,1) 64-84, B(1,*) 84-86, B(0,0) 85-86, B(0,1) 86-87
    assert shared == pytest.approx(87.0)


def test_transfers_of_different_boundaries_meet_on_a_link() -> None:
    # three stages; the activation of boundary 0 and the gradient of boundary 1 both cross "nic"
    orders = _orders("gpipe", 3, 1)
    free, _ = list_schedule(orders, [1.0] * 3, [1.0] * 3, [4.0, 0.0], [0.0, 4.0])
    assert free == pytest.approx(3 + 3 + 8)
    links_f = [(("nic", 4.0),), ()]
    links_b = [(), (("nic", 4.0),)]
    shared, _ = list_schedule(
        orders, [1.0] * 3, [1.0] * 3, [4.0, 0.0], [0.0, 4.0], fwd_links=links_f, bwd_links=links_b
    )
    # with one micro-batch they never overlap in time: same as alone
    assert shared == pytest.approx(free)
    # a link busy for less than the transfer's own time never slows it down alone
    lighter, _ = list_schedule(
        orders,
        [1.0] * 3,
        [1.0] * 3,
        [4.0, 0.0],
        [0.0, 4.0],
        fwd_links=[(("nic", 1.0),), ()],
        bwd_links=links_b,
    )
    assert lighter == pytest.approx(free)
