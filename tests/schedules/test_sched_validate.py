"""The validator: each rule, with the grid and the marked step in the message."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.schedules import Schedule, ScheduleError, add_communication, make_schedule, validate
from pipesim.schedules.action import Action


def build(rows: list[str], *, stages: int | None = None, m: int | None = None) -> Schedule:
    actions = [[Action.parse(t) for t in row.split()] for row in rows]
    flat = [a for row in actions for a in row]
    return Schedule(
        name="t",
        num_ranks=len(rows),
        num_stages=stages or max(a.stage for a in flat) + 1,
        num_microbatches=m or max(a.microbatch or 0 for a in flat) + 1,
        ranks=tuple(tuple(row) for row in actions),
    )


def test_valid_schedules_pass() -> None:
    validate(build(["0F0 0F1 0B0 0B1", "1F0 1B0 1F1 1B1"]))
    validate(build(["0F0 0I0 0F1 0W0 0I1 0W1"]))
    validate(build(["0F0 1F0 1B0 0B0"]))  # two stages on one rank


CASES = [
    # (rows, message, marked step or None)
    (["0F0 0F0 0B0"], "0F0 appears twice", "[0F0]"),
    (["0B0 0F0"], "0B0 runs before its forward 0F0", "[0B0]"),
    (["0F0 0W0 0I0"], "0W0 runs before its input gradient 0I0", "[0W0]"),
    (["0F0 0F1 0B0"], "backward 0B1 (or 0I1 and 0W1) is missing", None),
    (["0F0 0I0"], "backward 0W0 is missing", None),
    (["0F0 0B0 0I0 0W0"], "has both a full backward 0B0 and a split one", "[0I0]"),
    (["0B0", "1F0 1B0"], "forward 0F0 is missing", None),
    # stage 1 needs 0F1 before 1B0 ... but rank 0 runs 0B0 (which needs 1B0) first
    (["0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"], "deadlock", "[0B0]"),
    (["0F0 0B0 0ALL_REDUCE 0F1 0B1"], "0ALL_REDUCE runs before the stage's last backward", "[0ALL_REDUCE]"),
]


@pytest.mark.parametrize(("rows", "message", "mark"), CASES)
def test_rule_violations(rows: list[str], message: str, mark: str | None) -> None:
    with pytest.raises(ScheduleError) as info:
        validate(build(rows))
    text = str(info.value)
    assert message in text
    assert "rank 0" in text
    assert "step" in text
    for row in rows:
        for token in row.split():
            assert token in text
    if mark is not None:
        assert mark in text
        assert info.value.rank is not None
        assert info.value.step is not None
    else:
        assert "[" not in info.value.grid


def test_schedule_error_is_an_input_error() -> None:
    assert issubclass(ScheduleError, InputError)


def test_deadlock_message_names_what_each_rank_waits_for() -> None:
    with pytest.raises(ScheduleError) as info:
        validate(build(["0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"]))
    assert "rank 0 waits at step 1 (0B0) for 1B0" in str(info.value)
    assert "rank 1 waits at step 1 (1F1) for 0F1" in str(info.value)
    assert (info.value.rank, info.value.step) == (0, 1)


def test_structural_errors_from_the_schedule_itself() -> None:
    with pytest.raises(ScheduleError, match="placed on this rank"):
        build(["1F0 1B0", "0F0 0B0"])
    with pytest.raises(InputError, match="num_stages=3: must be a multiple of num_ranks=2"):
        Schedule(name="t", num_ranks=2, num_stages=3, num_microbatches=1, ranks=((), ()))
    with pytest.raises(InputError, match="num_ranks=2 rows"):
        Schedule(name="t", num_ranks=2, num_stages=2, num_microbatches=1, ranks=((),))
    with pytest.raises(ScheduleError, match="micro-batch >= num_microbatches=1"):
        build(["0F0 0F1"], m=1)


def test_communication_rules() -> None:
    good = add_communication(make_schedule("1f1b", num_ranks=2, num_microbatches=2))
    validate(good)
    rows = [" ".join(map(str, row)) for row in good.ranks]
    # drop the receive that matches 0SEND_F0
    broken = [rows[0], rows[1].replace("1RECV_F0 ", "", 1)]
    with pytest.raises(ScheduleError, match="0SEND_F0 has no matching 1RECV_F0"):
        validate(build(broken))
    # a receive after the forward that needs it
    moved = [rows[0], rows[1].replace("1RECV_F0 1F0", "1F0 1RECV_F0", 1)]
    with pytest.raises(ScheduleError, match="1RECV_F0 must precede 1F0"):
        validate(build(moved))
    # a send to a stage on the same rank
    with pytest.raises(ScheduleError, match="no peer stage 1 on another rank"):
        validate(build(["0F0 0SEND_F0 1RECV_F0 1F0 1B0 0B0"]))


def test_big_grid_is_windowed_around_the_mark() -> None:
    schedule = make_schedule("1f1b", num_ranks=2, num_microbatches=200)
    rows = [list(row) for row in schedule.ranks]
    rows[1][300], rows[1][301] = rows[1][301], rows[1][300]  # a backward before its forward
    bad = Schedule(name="t", num_ranks=2, num_stages=2, num_microbatches=200, ranks=tuple(map(tuple, rows)))
    with pytest.raises(ScheduleError) as info:
        validate(bad)
    assert "of 400 shown" in info.value.grid
    assert "[" in info.value.grid
