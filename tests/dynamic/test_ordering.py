"""Schedules and orders for variable-sized micro-batches."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.planner.dynamic import best_order, forward_counts, memory_aware, variable_schedule
from pipesim.schedules import Schedule, evaluate, make_schedule, validate


def test_without_memory_pressure_and_1f1b_lookahead_it_is_1f1b() -> None:
    p, m = 4, 9
    stash = [[1.0] * m for _ in range(p)]
    schedule = memory_aware(stash, [1e9] * p, lookahead=[p - r for r in range(p)])
    assert schedule.ranks == make_schedule("1f1b", num_ranks=p, num_microbatches=m).ranks


def test_default_lookahead_is_the_slow_link_warmup() -> None:
    p, m = 3, 5
    schedule = memory_aware([[1.0] * m] * p, [1e9] * p)
    assert (
        schedule.ranks == make_schedule("dapple", num_ranks=p, num_microbatches=m, warmup="slow-link").ranks
    )


def test_large_micro_batches_hold_back_forwards() -> None:
    # stage 0 may hold 10 bytes: micro-batches of 6 go one at a time, those of 1 run ahead
    stash = [[6.0, 6.0, 1.0, 1.0, 1.0, 1.0], [1.0] * 6]
    counts = forward_counts(stash, [10.0, 100.0], lookahead=[4, 1])
    assert counts[0] == [1, 5, 6, 6, 6, 6]
    assert counts[1] == [1, 2, 3, 4, 5, 6]
    schedule = memory_aware(stash, [10.0, 100.0], lookahead=[4, 1])
    validate(schedule)
    # micro-batch 1 (6 bytes) waits until micro-batch 0 (6 bytes) is gone; then the small ones run ahead
    assert [str(a) for a in schedule.ranks[0]] == [
        "0F0",
        "0B0",
        "0F1",
        "0F2",
        "0F3",
        "0F4",
        "0B1",
        "0F5",
        "0B2",
        "0B3",
        "0B4",
        "0B5",
    ]


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 5),
    sizes=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=12),
    limit=st.floats(0.0, 40.0),
)
def test_never_deadlocks_and_respects_the_limit_where_it_can(
    p: int, sizes: list[float], limit: float
) -> None:
    stash = [list(sizes) for _ in range(p)]
    schedule = memory_aware(stash, [limit] * p)
    validate(schedule)
    timeline = evaluate(schedule, fwd_time_s=1, bwd_time_s=2)
    assert timeline.makespan > 0
    counts = forward_counts(stash, [limit] * p)
    for r in range(p):
        for k, f in enumerate(counts[r]):
            held = sum(sizes[k:f])
            if f > k + 1 and (r == p - 1 or counts[r + 1][k] < f):
                assert held <= limit  # an extra forward is only taken when it fits


def test_variable_schedule_names() -> None:
    stash = [[1.0] * 4] * 2
    assert variable_schedule("memory-aware", stash, [1e9, 1e9]).name == "memory-aware"
    assert variable_schedule("gpipe", stash, [1e9, 1e9]).name == "gpipe"
    with pytest.raises(InputError, match="unknown schedule"):
        variable_schedule("bogus", stash, [1.0, 1.0])
    with pytest.raises(InputError, match="one entry per stage"):
        forward_counts(stash, [1.0])


def test_best_order_is_never_worse_than_planned() -> None:
    fwd = [[1.0, 4.0, 2.0, 8.0, 1.0], [1.0, 4.0, 2.0, 8.0, 1.0], [1.0, 4.0, 2.0, 8.0, 1.0]]
    bwd = [[2 * x for x in row] for row in fwd]

    def schedule_for(order: Sequence[int]) -> Schedule:
        return make_schedule("1f1b", num_ranks=3, num_microbatches=5)

    order, span = best_order(fwd, bwd, schedule_for)
    assert sorted(order) == list(range(5))
    planned = evaluate(make_schedule("1f1b", num_ranks=3, num_microbatches=5), fwd_time_s=fwd, bwd_time_s=bwd)
    assert span <= planned.makespan
    again = evaluate(
        make_schedule("1f1b", num_ranks=3, num_microbatches=5),
        fwd_time_s=[[row[k] for k in order] for row in fwd],
        bwd_time_s=[[row[k] for k in order] for row in bwd],
    )
    assert again.makespan == span
