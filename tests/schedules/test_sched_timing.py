"""The analytic evaluator: closed forms (exact), a slow reference, costs, errors and speed."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.schedules import (
    Action,
    Schedule,
    ScheduleError,
    Timeline,
    evaluate,
    format_timeline,
    make_schedule,
    schedule_from_order,
)

GRID = [(p, m) for p in range(1, 6) for m in range(1, 9)]


# --- closed forms ---------------------------------------------------------------------------


@pytest.mark.parametrize(("p", "m"), GRID)
@pytest.mark.parametrize("name", ["gpipe", "1f1b", "dapple"])
def test_makespan_and_bubble_equal_stages(name: str, p: int, m: int) -> None:
    # GPipe and 1F1B: (m + p - 1)(t_f + t_b); bubble (p - 1) / (m + p - 1)
    t_f, t_b = Fraction(3, 7), Fraction(5, 3)
    t = evaluate(make_schedule(name, num_ranks=p, num_microbatches=m), fwd_time_s=t_f, bwd_time_s=t_b)
    assert t.makespan == (m + p - 1) * (t_f + t_b)
    assert t.bubble_fraction == Fraction(p - 1, m + p - 1)
    assert t.busy == (m * (t_f + t_b),) * p


@pytest.mark.parametrize(("p", "m"), GRID)
@pytest.mark.parametrize(("c_f", "c_b"), [(0, 0), (1, 2), (Fraction(1, 3), 5)])
def test_gpipe_with_transfers(p: int, m: int, c_f: Fraction, c_b: Fraction) -> None:
    # (m + p - 1)(t_f + t_b) + (p - 1)(c_f + c_b) when transfers are no slower than compute; in
    # general two flow shops (compute and FIFO link stages alternate), forward then backward:
    # p (t_f + t_b) + (p - 1)(c_f + c_b) + (m - 1)(max(t_f, c_f) + max(t_b, c_b))
    t = evaluate(
        make_schedule("gpipe", num_ranks=p, num_microbatches=m),
        fwd_time_s=2,
        bwd_time_s=3,
        fwd_comm_time_s=c_f,
        bwd_comm_time_s=c_b,
    )
    slow_f, slow_b = (max(2, c_f), max(3, c_b)) if p > 1 else (2, 3)
    assert t.makespan == p * 5 + (p - 1) * (c_f + c_b) + (m - 1) * (slow_f + slow_b)
    if c_f <= 2 and c_b <= 3:
        assert t.makespan == (m + p - 1) * 5 + (p - 1) * (c_f + c_b)


@pytest.mark.parametrize("p", range(1, 6))
@pytest.mark.parametrize("v", range(1, 5))
@pytest.mark.parametrize("rounds", [1, 2, 3])
@pytest.mark.parametrize(("t_f", "t_b"), [(1, 1), (1, 2), (2, 3), (3, 1)])
def test_interleaved_bubble(p: int, v: int, rounds: int, t_f: int, t_b: int) -> None:
    # Megatron (Narayanan et al., SC 2021, sec. 2.2.2): with v chunks of t_f/v, t_b/v each and
    # p | m the iteration takes exactly (m + (p - 1)/v)(t_f + t_b), so the bubble is
    # ((p - 1)/v)(t_f + t_b) and its share of the iteration (p - 1)/(v m + p - 1).
    m = rounds * p
    schedule = make_schedule("interleaved", num_ranks=p, num_microbatches=m, chunks=v)
    t = evaluate(schedule, fwd_time_s=Fraction(t_f, v), bwd_time_s=Fraction(t_b, v))
    assert t.makespan == (m + Fraction(p - 1, v)) * (t_f + t_b)
    assert t.bubble_fraction == Fraction(p - 1, v * m + p - 1)


@pytest.mark.parametrize("p", range(1, 6))
@pytest.mark.parametrize("extra", [0, 1, 2, 5])
@pytest.mark.parametrize(
    ("t_f", "t_i", "t_w"), [(2, 2, 1), (2, 2, 2), (3, 2, 1), (3, 3, 2), (2, 3, 1), (5, 1, 0)]
)
def test_zb_h1_idle_per_stage(p: int, extra: int, t_f: int, t_i: int, t_w: int) -> None:
    # Qi et al. 2024, sec. 3.1: with T_W <= T_F every stage idles (p - 1)(T_F + T_B - T_W), where
    # T_B is the input-gradient time (here t_i; the full backward is t_i + t_w). Needs m >= p.
    m = p + extra
    t = evaluate(
        make_schedule("zb-h1", num_ranks=p, num_microbatches=m),
        fwd_time_s=t_f,
        bwd_time_s=t_i + t_w,
        wgrad_time_s=t_w,
    )
    assert t.idle == ((p - 1) * (t_f + t_i - t_w),) * p
    assert t.makespan == m * (t_f + t_i + t_w) + (p - 1) * (t_f + t_i - t_w)


@pytest.mark.parametrize("p", range(1, 6))
@pytest.mark.parametrize("m", range(1, 10))
def test_zb_h2_is_a_parallelogram(p: int, m: int) -> None:
    # With T_F = T_I = T_W no rank idles between its first and last action once m >= 2p - 1.
    t = evaluate(
        make_schedule("zb-h2", num_ranks=p, num_microbatches=m), fwd_time_s=2, bwd_time_s=4, wgrad_time_s=2
    )
    for r in range(p):
        span = t.ends[r][-1] - t.starts[r][0]
        if m >= 2 * p - 1:
            assert span == 6 * m
            assert t.starts[r][0] == 2 * r


@pytest.mark.parametrize(("p", "m"), GRID)
def test_peak_stashed(p: int, m: int) -> None:
    def peak(name: str) -> tuple[int, ...]:
        schedule = make_schedule(name, num_ranks=p, num_microbatches=m)
        return evaluate(schedule, fwd_time_s=1, bwd_time_s=1).peak_stashed

    assert peak("gpipe") == (m,) * p
    assert peak("1f1b") == tuple(min(p - i, m) for i in range(p))
    # held until W: stage i keeps K_i = min(p - i, m) in warm-up plus up to i whose W it put off
    assert peak("zb-h1") == (min(p, m),) * p
    assert peak("zb-h2") == tuple(min(2 * p - 1, m) for i in range(p))


# --- a slow reference -----------------------------------------------------------------------


def reference(
    schedule: Schedule, t_f: list[int], t_b: list[int], t_w: list[int], c_f: int, c_b: int
) -> dict[str, int]:
    """Start times by relaxation to a fixed point, from the dependency rules alone. A transfer
    arrives ``c_f`` / ``c_b`` after its producer ends or after the previous transfer of the same
    ordered rank pair arrives, whichever is later (FIFO streams, in the sender's order)."""
    p = schedule.num_ranks
    dur = {"F": t_f, "B": t_b, "I": [b - w for b, w in zip(t_b, t_w, strict=False)], "W": t_w}
    end: dict[str, int] = {}
    start: dict[str, int] = {}
    arrive: dict[str, int] = {}  # producer token -> when its output reaches the next rank
    changed = True
    while changed:
        changed = False
        wire: dict[tuple[int, int], int] = {}
        for r, row in enumerate(schedule.ranks):
            prev_end = 0
            for a in row:
                s, mb, op = a.stage, a.microbatch, a.op.value
                ready = prev_end
                deps: list[str] = []
                if op == "F" and s > 0:
                    deps.append(f"{s - 1}F{mb}")
                if op in "BI":
                    ready = max(ready, end.get(f"{s}F{mb}", 0))
                    if s + 1 < schedule.num_stages:
                        deps.append(f"{s + 1}B{mb}" if f"{s + 1}B{mb}" in end else f"{s + 1}I{mb}")
                if op == "W":
                    ready = max(ready, end.get(f"{s}I{mb}", 0))
                for key in deps:
                    ready = max(ready, arrive.get(key, 0))
                token = str(a)
                if start.get(token) != ready:
                    start[token] = ready
                    changed = True
                end[token] = ready + dur[op][s]
                prev_end = end[token]
                dst = s + 1 if op == "F" else s - 1
                if op in "FBI" and 0 <= dst < schedule.num_stages:
                    if p == 1:
                        arrival = end[token]
                    else:
                        pair = (r, dst % p)
                        arrival = max(end[token], wire.get(pair, 0)) + (c_f if op == "F" else c_b)
                        wire[pair] = arrival
                    if arrive.get(token) != arrival:
                        arrive[token] = arrival
                        changed = True
    return start


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"]),
    p=st.integers(1, 4),
    m=st.integers(1, 8),
    data=st.data(),
)
def test_matches_slow_reference(name: str, p: int, m: int, data: st.DataObject) -> None:
    chunks = {"chunks": 2} if name == "interleaved" and m % max(1, m // p) == 0 else {"chunks": 1}
    if name not in ("interleaved", "zb-h1"):
        chunks = {}
    schedule = make_schedule(name, num_ranks=p, num_microbatches=m, **chunks)
    n = schedule.num_stages
    t_f = data.draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    t_w = data.draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    t_b = [w + data.draw(st.integers(0, 9)) for w in t_w]
    c_f, c_b = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
    timeline = evaluate(
        schedule, fwd_time_s=t_f, bwd_time_s=t_b, wgrad_time_s=t_w, fwd_comm_time_s=c_f, bwd_comm_time_s=c_b
    )
    expected = reference(schedule, t_f, t_b, t_w, c_f, c_b)
    for r, row in enumerate(schedule.ranks):
        assert [expected[str(a)] for a in row] == list(timeline.starts[r])


# --- costs and results ----------------------------------------------------------------------


def test_per_stage_and_per_microbatch_costs() -> None:
    schedule = schedule_from_order("0F0 0F1 0B0 0B1\n1F0 1B0 1F1 1B1")
    t = evaluate(
        schedule, fwd_time_s=[[1, 2], 3], bwd_time_s=[4, [5, 6]], fwd_comm_time_s=[1], bwd_comm_time_s=2
    )
    # 0F0 0-1, 0F1 1-3; 1F0 2-5, 1B0 5-10, 1F1 10-13 (0F1 ended 3, +1), 1B1 13-19
    # 0B0 needs 1B0 (10) + 2 -> 12-16; 0B1 needs 1B1 (19) + 2 -> 21-25
    assert t.starts == ((0, 1, 12, 21), (2, 5, 10, 13))
    assert t.ends == ((1, 3, 16, 25), (5, 10, 13, 19))
    assert t.makespan == 25
    assert t.busy == (11, 17)
    assert t.idle == (14, 8)
    assert t.span("1B1") == (13, 19)
    assert t.bubble_fraction == 1 - Fraction(28, 50)


def test_float_costs_give_floats() -> None:
    t = evaluate(make_schedule("1f1b", num_ranks=2, num_microbatches=2), fwd_time_s=0.5, bwd_time_s=1.0)
    assert t.makespan == pytest.approx(4.5)
    assert isinstance(t.bubble_fraction, float)


def test_zero_costs() -> None:
    t = evaluate(make_schedule("gpipe", num_ranks=2, num_microbatches=2), fwd_time_s=0, bwd_time_s=0)
    assert t.makespan == 0
    assert t.bubble_fraction == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fwd_time_s": -1}, "fwd_time_s=-1"),
        ({"fwd_time_s": float("nan")}, "fwd_time_s=nan"),
        ({"fwd_time_s": "1"}, "fwd_time_s='1'"),
        ({"fwd_time_s": [1, 2, 3]}, "2 per-stage entries"),
        ({"fwd_time_s": [[1], 1]}, "2 per-micro-batch"),
        ({"bwd_time_s": 1, "wgrad_time_s": 2}, r"wgrad_time_s\[0\]\[0\]=2: must be <= bwd_time_s"),
        ({"fwd_comm_time_s": [1, 2]}, "1 per-boundary"),
        ({"bwd_comm_time_s": -2}, "bwd_comm_time_s=-2"),
    ],
)
def test_bad_costs(kwargs: dict[str, object], match: str) -> None:
    args: dict[str, object] = {"fwd_time_s": 1, "bwd_time_s": 2}
    args.update(kwargs)
    with pytest.raises(InputError, match=match):
        evaluate(make_schedule("1f1b", num_ranks=2, num_microbatches=2), **args)  # type: ignore[arg-type]


def test_lowered_schedule_is_rejected() -> None:
    from pipesim.schedules import add_communication

    lowered = add_communication(make_schedule("1f1b", num_ranks=2, num_microbatches=2))
    with pytest.raises(InputError, match="compute_only"):
        evaluate(lowered, fwd_time_s=1, bwd_time_s=1)


def test_deadlock_reported_even_without_the_check() -> None:
    rows = ("0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1")  # rank 0 wants 1B0 before 0F1: stuck
    bad = Schedule(
        name="t",
        num_ranks=2,
        num_stages=2,
        num_microbatches=2,
        ranks=tuple(tuple(Action.parse(t) for t in row.split()) for row in rows),
    )
    with pytest.raises(ScheduleError, match="deadlock"):
        evaluate(bad, fwd_time_s=1, bwd_time_s=1, check=False)
    with pytest.raises(ScheduleError, match="deadlock"):
        evaluate(bad, fwd_time_s=1, bwd_time_s=1)


def test_span_of_missing_action() -> None:
    t = evaluate(make_schedule("1f1b", num_ranks=2, num_microbatches=2), fwd_time_s=1, bwd_time_s=1)
    with pytest.raises(InputError, match="not in the schedule"):
        t.span("0F7")


def test_format_timeline() -> None:
    t = evaluate(make_schedule("1f1b", num_ranks=2, num_microbatches=2), fwd_time_s=1, bwd_time_s=2)
    assert format_timeline(t).splitlines() == [
        "rank 0 0F0 0F1 .   .   0B0---- .   0B1----",
        "rank 1 .   1F0 1B0---- 1F1 1B1---- .   .  ",
    ]
    assert format_timeline(t, compact=True).splitlines()[0] == "rank 0 F0 F1 .  .  B0--- .  B1---"
    schedule = make_schedule("1f1b", num_ranks=2, num_microbatches=2)
    half = evaluate(schedule, fwd_time_s=Fraction(1, 2), bwd_time_s=1)
    with pytest.raises(InputError, match="whole-number"):
        format_timeline(half)


def test_timeline_is_frozen() -> None:
    t = evaluate(make_schedule("gpipe", num_ranks=1, num_microbatches=1), fwd_time_s=1, bwd_time_s=1)
    assert isinstance(t, Timeline)
    with pytest.raises(AttributeError):
        t.makespan = 3  # type: ignore[misc]


def test_16_ranks_1024_microbatches() -> None:
    # its speed is benchmarks/bench_simulator.py case (c)'s business, not a unit test's
    schedule = make_schedule("1f1b", num_ranks=16, num_microbatches=1024)
    t = evaluate(schedule, fwd_time_s=1.0, bwd_time_s=2.0, check=False)
    assert t.makespan == pytest.approx((1024 + 15) * 3.0)
