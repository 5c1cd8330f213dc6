"""zb-auto against the hand-made zero-bubble schedules at the same memory limit (property test)."""

from __future__ import annotations

import itertools
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.schedules import evaluate, make_schedule


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(1, 8),
    extra_m=st.integers(0, 24),
    f=st.integers(1, 6),
    i=st.integers(1, 6),
    w=st.integers(1, 6),
    comm=st.sampled_from([0, 1]),
    slack=st.integers(0, 3),
)
def test_zb_auto_never_slower_than_zb_h1_nor_zb_h2_at_their_memory(
    p: int, extra_m: int, f: int, i: int, w: int, comm: int, slack: int
) -> None:
    m = max(1, p // 2) + extra_m
    costs = {"fwd_time_s": f, "bwd_time_s": i + w, "wgrad_time_s": w}
    timed = {**costs, "fwd_comm_time_s": comm, "bwd_comm_time_s": comm}
    h1 = evaluate(make_schedule("zb-h1", num_ranks=p, num_microbatches=m), **timed)
    h2 = evaluate(make_schedule("zb-h2", num_ranks=p, num_microbatches=m), **timed)
    for limit in (p + slack, 2 * p - 1 + slack):
        auto = make_schedule("zb-auto", num_ranks=p, num_microbatches=m, memory_limit=limit, comm_time_s=comm,
                             **costs)
        t = evaluate(auto, **timed)
        assert max(t.peak_stashed) <= limit
        assert t.makespan <= h1.makespan
        if limit >= 2 * p - 1:
            assert t.makespan <= h2.makespan


def test_zb_2p_equals_zb_h2_and_zero_bubble_with_equal_costs() -> None:
    costs = {"fwd_time_s": 1, "bwd_time_s": 2, "wgrad_time_s": 1}
    for p, m in ((2, 4), (4, 8), (4, 16), (8, 16), (8, 32)):
        order = make_schedule("zb-auto", num_ranks=p, num_microbatches=m, memory_limit=2 * p)
        auto = evaluate(order, **costs)
        h2 = evaluate(make_schedule("zb-h2", num_ranks=p, num_microbatches=m), **costs)
        assert auto.makespan == h2.makespan
        assert auto.makespan == 3 * m + p - 1  # no idle between a rank's first and last action


def test_zb_1p_is_zb_h1_fast_with_equal_costs_where_the_greedy_idled() -> None:
    costs = {"fwd_time_s": 1, "bwd_time_s": 2, "wgrad_time_s": 1}
    for p, m in ((4, 8), (4, 13), (8, 16), (8, 25)):
        auto = evaluate(make_schedule("zb-auto", num_ranks=p, num_microbatches=m), **costs)
        h1 = evaluate(make_schedule("zb-h1", num_ranks=p, num_microbatches=m), **costs)
        assert auto.makespan == h1.makespan == 3 * m + p - 1  # ZB-H1: (p - 1)(F + I - W) idle
        assert max(auto.peak_stashed) == p


# V-Min from the paper's building block (schedules/vshape.py)


def test_v_min_memory_is_the_papers_bound() -> None:
    """(p + 4) // 3 micro-batches of a rank's layers, counted as the paper does: a forward of
    either chunk adds half a micro-batch, its W frees it (2 ((p + 4) // 3) stage-micro-batches)."""
    for p in range(1, 13):
        for m in (p, 2 * p, 3 * p + 1):
            order = make_schedule("v-min", num_ranks=p, num_microbatches=m)
            walked = []
            for row in order.ranks:
                now = peak = 0
                for a in row:
                    now += {"F": 1, "W": -1}.get(a.op.value, 0)
                    peak = max(peak, now)
                walked.append(peak)
            assert max(walked) == min(2 * ((p + 4) // 3), 2 * m)


def test_v_min_bubble_is_constant_in_m_and_within_the_papers_rate() -> None:
    """F = I = W: the steady phase repeats every 6 slots without idling (the greedy order it
    replaces idled more with every micro-batch), and the bubble rate ``1 - 6m / T`` stays within
    the paper's ~2p/(3m) (HF space sail/pipeline-parallelism-with-controllable-memory, table)."""
    costs = {"fwd_time_s": 1, "bwd_time_s": 2, "wgrad_time_s": 1}
    for p in range(1, 13):
        spans = [evaluate(make_schedule("v-min", num_ranks=p, num_microbatches=m), **costs).makespan
                 for m in range(p, 3 * p + 2)]
        assert all(b - a == 6 for a, b in itertools.pairwise(spans))
        for m, span in zip(range(p, 3 * p + 2), spans, strict=False):
            assert 1 - Fraction(6 * m, span) <= Fraction(2 * p, 3 * m)
    idle = {
        p: evaluate(make_schedule("v-min", num_ranks=p, num_microbatches=4 * p), **costs).makespan - 24 * p
        for p in (2, 3, 4, 5, 6, 8)
    }
    assert idle == {2: 3, 3: 9, 4: 11, 5: 15, 6: 21, 8: 27}  # docs/schedules.md
