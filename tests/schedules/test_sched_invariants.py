"""Invariants every generated schedule keeps over a grid of (p, m, v)."""

from __future__ import annotations

from collections import Counter

import pytest

from pipesim.schedules import (
    Op,
    add_allreduce,
    add_communication,
    evaluate,
    make_schedule,
    merge_backward,
    validate,
)

NAMES = ("gpipe", "dapple", "1f1b", "interleaved", "zb-h1", "zb-h2")


def configs() -> list[tuple[str, int, int, int]]:
    out = []
    for name in NAMES:
        chunk_range = (1, 2, 3) if name in ("interleaved", "zb-h1") else (1,)
        for v in chunk_range:
            for p in range(1, 7):
                for m in range(1, 13):
                    if v > 1 and m % max(1, m // p):
                        continue  # rejected: see test_sched_generators
                    out.append((name, p, m, v))
    return out


@pytest.mark.parametrize("p", range(1, 7))
def test_every_schedule_validates_and_counts_add_up(p: int) -> None:
    for name, pp, m, v in configs():
        if pp != p:
            continue
        kwargs = {"chunks": v} if name in ("interleaved", "zb-h1") else {}
        schedule = make_schedule(name, num_ranks=p, num_microbatches=m, **kwargs)
        validate(schedule)
        assert schedule.num_stages == v * p
        split = name.startswith("zb")
        counts = Counter(a.op for row in schedule.ranks for a in row)
        n = v * p * m
        expected = {Op.F: n, Op.I: n, Op.W: n} if split else {Op.F: n, Op.B: n}
        assert counts == expected
        for r, row in enumerate(schedule.ranks):
            assert all(a.stage % p == r for a in row)
            # forwards of each stage in micro-batch order, and backwards too
            for s in range(r, v * p, p):
                for op in (Op.F, Op.B, Op.I, Op.W):
                    mbs = [a.microbatch for a in row if a.stage == s and a.op is op]
                    assert mbs == sorted(mbs)
        # a timeline exists for arbitrary positive costs, and every rank does all its work
        t = evaluate(
            schedule, fwd_time_s=3, bwd_time_s=7, wgrad_time_s=2, fwd_comm_time_s=1, bwd_comm_time_s=2
        )
        work = v * m * (3 + 7)
        assert t.busy == (work,) * p
        assert t.makespan >= work
        # the lowering passes keep it valid
        lowered = add_allreduce(add_communication(schedule), range(schedule.num_stages))
        assert lowered.compute_only() == schedule
        if split:
            validate(merge_backward(schedule))
