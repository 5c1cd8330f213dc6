"""The lowering passes, each with its own table of input -> expected output."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.schedules import (
    Schedule,
    add_allreduce,
    add_communication,
    evaluate,
    make_schedule,
    merge_backward,
    schedule_from_order,
    split_backward,
)


def rows(schedule: Schedule) -> list[str]:
    return [" ".join(map(str, row)) for row in schedule.ranks]


def order(*lines: str) -> Schedule:
    return schedule_from_order("\n".join(lines))


COMM = [
    (["0F0 0B0"], ["0F0 0B0"]),  # one rank: nothing to send
    (["0F0 1F0 1B0 0B0"], ["0F0 1F0 1B0 0B0"]),  # two stages, one rank
    (
        ["0F0 0B0", "1F0 1B0"],
        ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"],
    ),
    (
        ["0F0 0B0", "1F0 1I0 1W0"],
        ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"],
    ),
    (
        ["0F0 0B0", "1F0 1B0", "2F0 2B0"],
        [
            "0F0 0SEND_F0 0RECV_B0 0B0",
            "1RECV_F0 1F0 1SEND_F0 1RECV_B0 1B0 1SEND_B0",
            "2RECV_F0 2F0 2B0 2SEND_B0",
        ],
    ),
    (
        # interleaved: stages 0, 2 on rank 0 and 1, 3 on rank 1; every hop crosses ranks
        ["0F0 2F0 2B0 0B0", "1F0 3F0 3B0 1B0"],
        [
            "0F0 0SEND_F0 2RECV_F0 2F0 2SEND_F0 2RECV_B0 2B0 2SEND_B0 0RECV_B0 0B0",
            "1RECV_F0 1F0 1SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 1RECV_B0 1B0 1SEND_B0",
        ],
    ),
]


@pytest.mark.parametrize(("before", "after"), COMM)
def test_add_communication(before: list[str], after: list[str]) -> None:
    assert rows(add_communication(order(*before))) == after


def test_add_communication_rejects_lowered_input() -> None:
    lowered = add_communication(order("0F0 0B0", "1F0 1B0"))
    with pytest.raises(InputError, match="compute-only"):
        add_communication(lowered)
    assert lowered.compute_only().ranks == order("0F0 0B0", "1F0 1B0").ranks


ALLREDUCE = [
    (["0F0 0F1 0B0 0B1"], [0], ["0F0 0F1 0B0 0B1 0ALL_REDUCE"]),
    (["0F0 0B0", "1F0 1B0"], [1], ["0F0 0B0", "1F0 1B0 1ALL_REDUCE"]),
    (["0F0 0B0", "1F0 1B0"], [], ["0F0 0B0", "1F0 1B0"]),
    (["0F0 0I0 0F1 0I1 0W0 0W1"], [0], ["0F0 0I0 0F1 0I1 0W0 0W1 0ALL_REDUCE"]),
    # the last W, not the last I, finishes the weight gradient
    (["0F0 0I0 0W0 0F1 0I1 0W1"], [0], ["0F0 0I0 0W0 0F1 0I1 0W1 0ALL_REDUCE"]),
    (["0F0 1F0 1B0 0B0"], [0, 1], ["0F0 1F0 1B0 1ALL_REDUCE 0B0 0ALL_REDUCE"]),
    # after the gradient send that follows the last backward
    (
        ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"],
        [0, 1],
        ["0F0 0SEND_F0 0RECV_B0 0B0 0ALL_REDUCE", "1RECV_F0 1F0 1B0 1SEND_B0 1ALL_REDUCE"],
    ),
]


@pytest.mark.parametrize(("before", "stages", "after"), ALLREDUCE)
def test_add_allreduce(before: list[str], stages: list[int], after: list[str]) -> None:
    assert rows(add_allreduce(order(*before), stages)) == after


@pytest.mark.parametrize(("stages", "match"), [([2], "stages=2"), ([-1], "stages=-1"), (["0"], "stages='0'")])
def test_add_allreduce_bad_stages(stages: list[object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        add_allreduce(order("0F0 0B0", "1F0 1B0"), stages)  # type: ignore[arg-type]


def test_add_allreduce_twice_is_rejected() -> None:
    once = add_allreduce(order("0F0 0B0"), [0])
    with pytest.raises(InputError, match="already has an ALL_REDUCE"):
        add_allreduce(once, [0])


MERGE = [
    (["0F0 0I0 0W0"], ["0F0 0B0"]),
    (["0F0 0I0 0F1 0I1 0W0 0W1"], ["0F0 0B0 0F1 0B1"]),
    (["0F0 0B0"], ["0F0 0B0"]),
    (
        ["0F0 0SEND_F0 0RECV_B0 0I0 0W0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"],
        ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"],
    ),
]


@pytest.mark.parametrize(("before", "after"), MERGE)
def test_merge_backward(before: list[str], after: list[str]) -> None:
    assert rows(merge_backward(order(*before))) == after


SPLIT = [
    (["0F0 0B0"], ["0F0 0I0 0W0"]),
    (["0F0 0F1 0B0 0B1"], ["0F0 0F1 0I0 0W0 0I1 0W1"]),
    (["0F0 0I0 0W0"], ["0F0 0I0 0W0"]),
    (
        ["0F0 0SEND_F0 0RECV_B0 0B0", "1RECV_F0 1F0 1B0 1SEND_B0"],
        ["0F0 0SEND_F0 0RECV_B0 0I0 0W0", "1RECV_F0 1F0 1I0 1SEND_B0 1W0"],
    ),
]


@pytest.mark.parametrize(("before", "after"), SPLIT)
def test_split_backward(before: list[str], after: list[str]) -> None:
    assert rows(split_backward(order(*before))) == after


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"])
def test_passes_keep_schedules_valid_and_compose(name: str) -> None:
    schedule = make_schedule(name, num_ranks=4, num_microbatches=8)
    lowered = add_allreduce(add_communication(schedule), range(schedule.num_stages))
    assert lowered.compute_only() == schedule
    assert sum(a.op.value == "ALL_REDUCE" for row in lowered.ranks for a in row) == schedule.num_stages
    merged = merge_backward(schedule)
    assert all(a.op.value in "FB" for row in merged.ranks for a in row)
    # splitting then merging restores a full-backward schedule
    if name in ("gpipe", "1f1b", "interleaved"):
        assert merge_backward(split_backward(schedule)) == schedule


def test_split_never_slows_a_schedule_down() -> None:
    # I + W cost what B did; the gradient leaves after I, so nothing starts later
    schedule = make_schedule("1f1b", num_ranks=3, num_microbatches=5)
    costs = {"fwd_time_s": 2, "bwd_time_s": 5, "fwd_comm_time_s": 1, "bwd_comm_time_s": 1}
    full = evaluate(schedule, **costs)
    same = evaluate(split_backward(schedule), wgrad_time_s=0, **costs)
    split = evaluate(split_backward(schedule), wgrad_time_s=2, **costs)
    assert same.makespan == full.makespan == 57
    assert split.makespan == 49
    assert split.busy == full.busy == (35, 35, 35)


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "dapple", "zb-h1", "zb-h2", "interleaved"])
def test_lower_is_add_communication_then_add_allreduce(name: str) -> None:
    from pipesim.schedules.lowering import lower

    chunks = 2 if name == "interleaved" else 1
    schedule = make_schedule(name, num_ranks=3, num_microbatches=6, chunks=chunks)
    stages = range(0, schedule.num_stages, 2)
    assert lower(schedule, stages) == add_allreduce(add_communication(schedule), stages)
    assert lower(schedule) == add_communication(schedule)


def test_lowered_steps_refuses_communication() -> None:
    from pipesim.schedules.lowering import lowered_steps

    lowered = add_communication(order("0F0 0B0", "1F0 1B0"))
    with pytest.raises(InputError, match="compute actions only"):
        list(lowered_steps(lowered.ranks[0], num_ranks=2, num_stages=2))
