"""Reading pasted per-rank orders (torch token form) into schedules."""

from __future__ import annotations

import json

import pytest

from pipesim.errors import FormatError, InputError
from pipesim.schedules import ScheduleError, make_schedule, parse_order, schedule_from_order

ONE_F_ONE_B = make_schedule("1f1b", num_ranks=3, num_microbatches=4)


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(ONE_F_ONE_B.to_order()),
        json.dumps([[str(a) for a in row] for row in ONE_F_ONE_B.ranks]),
        json.dumps({"schedule": "1f1b", "p": 3, "m": 4, "ranks": ONE_F_ONE_B.to_order()}),
        "\n".join(" ".join(map(str, row)) for row in ONE_F_ONE_B.ranks),
        "\n".join(f"rank {r}: " + ", ".join(map(str, row)) for r, row in enumerate(ONE_F_ONE_B.ranks)),
        # torch's CSV dump: idle steps are empty cells; rows may come in any order with a prefix
        "# torch order\n2: 2F0,2B0,2F1,2B1,2F2,2B2,2F3,2B3\n"
        "0: 0F0,0F1,0F2,0B0,0F3,0B1,0B2,0B3\n"
        "1: ,1F0,1F1,,1B0,1F2,1B1,1F3,1B2,1B3\n",
    ],
)
def test_forms_read_the_same(text: str) -> None:
    schedule = schedule_from_order(text, name="pasted")
    assert schedule.ranks == ONE_F_ONE_B.ranks
    assert (schedule.num_ranks, schedule.num_stages, schedule.num_microbatches) == (3, 3, 4)
    assert schedule.name == "pasted"


def test_parsed_mapping_and_json_with_idle_steps() -> None:
    order = {"0": ["0F0", None, "0B0"], "1": ["", "1F0", "1B0"]}
    assert schedule_from_order(order).to_order() == {"0": ["0F0", "0B0"], "1": ["1F0", "1B0"]}
    assert schedule_from_order(json.dumps(order)).num_stages == 2


@pytest.mark.parametrize("name", ["gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2"])
def test_round_trip_through_text(name: str) -> None:
    schedule = make_schedule(name, num_ranks=4, num_microbatches=8)
    again = schedule_from_order(json.dumps(schedule.to_order()), name=name)
    assert again == schedule


def test_interleaved_needs_explicit_stage_count_only_when_ambiguous() -> None:
    schedule = make_schedule("interleaved", num_ranks=2, num_microbatches=4, chunks=2)
    again = schedule_from_order(schedule.to_order(), num_stages=4, num_microbatches=4)
    assert again.chunks == 2


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("0F0 0Q0", FormatError, r"<text>:1: action='0Q0'"),
        ("0F0 0B0\n1F0 1X0", FormatError, r"<text>:2:"),
        ("0: 0F0 0B0\n0: 0F0 0B0", FormatError, "rank 0 appears twice"),
        ("0: 0F0 0B0\n2: 2F0 2B0", FormatError, r"ranks must be 0..1"),
        ('{"0": ["0F0"], "x": []}', FormatError, "rank keys must be integers"),
        ('{"0": [1]}', FormatError, "token 1"),
        ('{"0": "0F0"}', FormatError, "must map ranks to lists"),
        ("{not json", FormatError, "invalid JSON"),
        ("   \n# nothing\n", FormatError, "no ranks"),
        ("0F0 0F1 0B0", ScheduleError, "0B1"),
        ("1F0 1B0\n0F0 0B0", ScheduleError, "placed on this rank"),
    ],
)
def test_errors(text: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        schedule_from_order(text)


def test_format_error_is_an_input_error() -> None:
    with pytest.raises(InputError):
        parse_order("0F0 zzz")


def test_microbatch_sizes_from_order() -> None:
    schedule = schedule_from_order("0F0 0F1 0B0 0B1", microbatch_sizes=[2, 3])
    assert schedule.microbatch_sizes == (2, 3)
