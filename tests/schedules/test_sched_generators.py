"""Exact orders of every generator for small cases, written out by hand."""

from __future__ import annotations

import itertools

import pytest

from pipesim.errors import InputError
from pipesim.schedules import (
    ScheduleError,
    dapple,
    gpipe,
    interleaved,
    make_schedule,
    one_f_one_b,
    zb_h1,
    zb_h2,
)


def rows(schedule: object) -> list[str]:
    return [" ".join(map(str, row)) for row in schedule.ranks]  # type: ignore[attr-defined]


EXACT = [
    # (name, p, m, options, expected rows)
    ("gpipe", 1, 1, {}, ["0F0 0B0"]),
    ("gpipe", 2, 3, {}, ["0F0 0F1 0F2 0B0 0B1 0B2", "1F0 1F1 1F2 1B0 1B1 1B2"]),
    ("gpipe", 3, 2, {}, ["0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1", "2F0 2F1 2B0 2B1"]),
    ("1f1b", 1, 3, {}, ["0F0 0B0 0F1 0B1 0F2 0B2"]),
    ("1f1b", 2, 4, {}, ["0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"]),
    (
        "1f1b",
        3,
        4,
        {},
        [
            "0F0 0F1 0F2 0B0 0F3 0B1 0B2 0B3",
            "1F0 1F1 1B0 1F2 1B1 1F3 1B2 1B3",
            "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3",
        ],
    ),
    # fewer micro-batches than ranks: K_i = min(p - i, m)
    ("1f1b", 4, 2, {}, ["0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1", "2F0 2F1 2B0 2B1", "3F0 3B0 3F1 3B1"]),
    (
        "dapple",
        3,
        4,
        {"warmup": "slow-link"},
        [
            "0F0 0F1 0F2 0F3 0B0 0B1 0B2 0B3",
            "1F0 1F1 1F2 1B0 1F3 1B1 1B2 1B3",
            "2F0 2B0 2F1 2B1 2F2 2B2 2F3 2B3",
        ],
    ),
    (
        "dapple",
        3,
        3,
        {"warmup": [2, 2, 1]},
        [
            "0F0 0F1 0B0 0F2 0B1 0B2",
            "1F0 1F1 1B0 1F2 1B1 1B2",
            "2F0 2B0 2F1 2B1 2F2 2B2",
        ],
    ),
    (
        "interleaved",
        2,
        2,
        {"chunks": 2},
        [
            "0F0 0F1 2F0 2F1 2B0 2B1 0B0 0B1",
            "1F0 1F1 3F0 3B0 3F1 3B1 1B0 1B1",
        ],
    ),
    (
        "interleaved",
        2,
        4,
        {"chunks": 2},
        [
            "0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3",
            "1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3",
        ],
    ),
    ("zb-h1", 2, 3, {}, ["0F0 0F1 0I0 0W0 0F2 0I1 0W1 0I2 0W2", "1F0 1I0 1F1 1I1 1W0 1F2 1I2 1W1 1W2"]),
    ("zb-h1", 3, 1, {}, ["0F0 0I0 0W0", "1F0 1I0 1W0", "2F0 2I0 2W0"]),
    ("zb-h2", 2, 3, {}, ["0F0 0F1 0F2 0I0 0W0 0I1 0W1 0I2 0W2", "1F0 1I0 1F1 1I1 1F2 1I2 1W0 1W1 1W2"]),
    ("zb-h2", 1, 2, {}, ["0F0 0I0 0W0 0F1 0I1 0W1"]),
]


@pytest.mark.parametrize(("name", "p", "m", "options", "expected"), EXACT)
def test_exact_small_orders(
    name: str, p: int, m: int, options: dict[str, object], expected: list[str]
) -> None:
    schedule = make_schedule(name, num_ranks=p, num_microbatches=m, **options)
    assert rows(schedule) == expected
    assert schedule.name == name


def test_zb_h1_matches_paper_figure_3_top() -> None:
    # Qi et al. 2024, fig. 3 (top), p=4, m=8, 1-based in the figure: device 1 runs F1-F4, then
    # B1 W1 F5 B2 W2 F6 ...; device 4 runs F1 B1 ... F4 B4, then W1 F5 B5 W2 ...
    schedule = zb_h1(num_ranks=4, num_microbatches=8)
    assert rows(schedule)[0] == (
        "0F0 0F1 0F2 0F3 0I0 0W0 0F4 0I1 0W1 0F5 0I2 0W2 0F6 0I3 0W3 0F7 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7"
    )
    assert rows(schedule)[3] == (
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3W0 3F4 3I4 3W1 3F5 3I5 3W2 3F6 3I6 3W3 3F7 3I7 3W4 3W5 3W6 3W7"
    )


def test_zb_h2_matches_paper_figure_3_bottom() -> None:
    # fig. 3 (bottom): device 1 runs F1-F7, B1 W1 F8, then B2 W2 ... B8 W8; device 4 runs
    # F1 B1 ... F7 B7, then W1 F8 B8 and W2 ... W8.
    schedule = zb_h2(num_ranks=4, num_microbatches=8)
    assert rows(schedule)[0] == (
        "0F0 0F1 0F2 0F3 0F4 0F5 0F6 0I0 0W0 0F7 0I1 0W1 0I2 0W2 0I3 0W3 0I4 0W4 0I5 0W5 0I6 0W6 0I7 0W7"
    )
    assert rows(schedule)[3] == (
        "3F0 3I0 3F1 3I1 3F2 3I2 3F3 3I3 3F4 3I4 3F5 3I5 3F6 3I6 3W0 3F7 3I7 3W1 3W2 3W3 3W4 3W5 3W6 3W7"
    )


@pytest.mark.parametrize("p", range(1, 5))
@pytest.mark.parametrize("m", range(1, 5))
def test_small_grid_structure(p: int, m: int) -> None:
    # every schedule, p and m in 1..4: each rank runs its own stage's actions, forwards in
    # micro-batch order, and the leading forwards are as documented
    for name in ("gpipe", "dapple", "1f1b", "zb-h1", "zb-h2", "interleaved"):
        options = {"chunks": 1} if name == "interleaved" else {}
        schedule = make_schedule(name, num_ranks=p, num_microbatches=m, **options)
        for r, row in enumerate(schedule.ranks):
            assert {a.stage for a in row} == {r}
            forwards = [a.microbatch for a in row if a.op.value == "F"]
            assert forwards == list(range(m))
            lead = next(i for i, a in enumerate(row) if a.op.value != "F")
            expected_lead = {
                "gpipe": m,
                "dapple": min(p - r, m),
                "1f1b": min(p - r, m),
                "zb-h1": min(p - r, m),
                "zb-h2": min(2 * (p - r) - 1, m),
                "interleaved": min(2 * (p - r) - 1, m),
            }[name]
            assert lead == expected_lead, (name, r)


def test_one_f_one_b_and_dapple_agree() -> None:
    for p in range(1, 7):
        for m in range(1, 13):
            assert (
                one_f_one_b(num_ranks=p, num_microbatches=m).ranks
                == dapple(num_ranks=p, num_microbatches=m).ranks
            )


def test_interleaved_one_chunk_is_dapple_slow_link() -> None:
    for p in range(1, 6):
        for m in range(1, 11):
            ours = interleaved(num_ranks=p, num_microbatches=m, chunks=1)
            assert ours.ranks == dapple(num_ranks=p, num_microbatches=m, warmup="slow-link").ranks


def test_gpipe_is_dapple_with_full_warmup() -> None:
    assert (
        gpipe(num_ranks=3, num_microbatches=4).ranks
        == dapple(num_ranks=3, num_microbatches=4, warmup=[4, 4, 4]).ranks
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_ranks": 0, "num_microbatches": 4}, "num_ranks=0"),
        ({"num_ranks": 2, "num_microbatches": 0}, "num_microbatches=0"),
        ({"num_ranks": 2, "num_microbatches": 2.0}, "num_microbatches=2.0"),
        ({"num_ranks": 2, "num_microbatches": 4, "warmup": "fast"}, "warmup='fast'"),
        ({"num_ranks": 2, "num_microbatches": 4, "warmup": [1]}, "2 integers in 1..4"),
        ({"num_ranks": 2, "num_microbatches": 4, "warmup": [5, 1]}, "2 integers in 1..4"),
        ({"num_ranks": 2, "num_microbatches": 4, "warmup": [0, 1]}, "2 integers in 1..4"),
    ],
)
def test_dapple_bad_input(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        dapple(**kwargs)  # type: ignore[arg-type]


def test_dapple_warmup_that_deadlocks_is_rejected_with_grid() -> None:
    # stage 1 needs 0F1 before its first backward, but stage 0 waits for 1B0 before 0F1
    with pytest.raises(ScheduleError, match="deadlock") as info:
        dapple(num_ranks=2, num_microbatches=2, warmup=[1, 2])
    assert "[0B0]" in str(info.value) or "[1B0]" in str(info.value)


@pytest.mark.parametrize(("p", "m"), [(2, 5), (2, 7), (4, 9), (3, 7)])
def test_looped_schedules_reject_m_not_divisible_by_rounds(p: int, m: int) -> None:
    with pytest.raises(InputError, match="multiple of the number of rounds"):
        interleaved(num_ranks=p, num_microbatches=m, chunks=2)
    with pytest.raises(InputError, match="multiple of the number of rounds"):
        zb_h1(num_ranks=p, num_microbatches=m, chunks=2)


def test_one_chunk_has_no_round_rule() -> None:
    assert interleaved(num_ranks=2, num_microbatches=5, chunks=1).num_microbatches == 5
    assert zb_h1(num_ranks=2, num_microbatches=5).num_microbatches == 5


def test_generator_docstrings_carry_a_p4_m8_grid() -> None:
    for gen in (gpipe, dapple, one_f_one_b, interleaved, zb_h1, zb_h2):
        doc = gen.__doc__ or ""
        assert "p=4, m=8" in doc
        assert "rank 3" in doc


STREAM_CASES = [
    (name, p, m, chunks, options)
    for name, chunks, options in [
        ("gpipe", None, {}),
        ("1f1b", None, {}),
        ("dapple", None, {}),
        ("dapple", None, {"warmup": "slow-link"}),
        ("zb-h2", None, {}),
        ("interleaved", 2, {}),
        ("interleaved", 3, {}),
        ("zb-h1", 1, {}),
        ("zb-h1", 2, {}),
    ]
    for p in (1, 2, 3, 4)
    for m in (1, 2, 3, 4, 5, 8)
    if chunks is None or chunks == 1 or m % max(1, m // p) == 0
]


@pytest.mark.parametrize(("name", "p", "m", "chunks", "options"), STREAM_CASES)
def test_stream_schedule_is_make_schedule_row_by_row(
    name: str, p: int, m: int, chunks: int | None, options: dict[str, object]
) -> None:
    from pipesim.schedules.registry import stream_schedule

    built = make_schedule(name, num_ranks=p, num_microbatches=m, chunks=chunks, **options)
    stream = stream_schedule(name, num_ranks=p, num_microbatches=m, chunks=chunks, **options)
    assert (stream.name, stream.num_ranks, stream.num_stages, stream.num_microbatches) == (
        built.name, built.num_ranks, built.num_stages, built.num_microbatches,
    )  # fmt: skip
    for r in range(p):  # every call gives a fresh iterator of the same row
        expected = [(a.op, a.stage, a.microbatch) for a in built.ranks[r]]
        assert list(stream.row(r)) == expected
        assert list(stream.row(r)) == expected
    assert stream.materialize() == built


def test_stream_schedule_refuses_what_make_schedule_refuses() -> None:
    from pipesim.schedules.generators import stream_of
    from pipesim.schedules.registry import stream_schedule

    with pytest.raises(InputError, match="num_microbatches"):
        stream_schedule("1f1b", num_ranks=2, num_microbatches=0)
    with pytest.raises(InputError, match="chunks"):
        stream_schedule("gpipe", num_ranks=2, num_microbatches=4, chunks=2)
    with pytest.raises(InputError, match="options"):
        stream_schedule("gpipe", num_ranks=2, num_microbatches=4, warmup="default")
    with pytest.raises(ScheduleError):  # an explicit DAPPLE warm-up list that deadlocks
        stream_schedule("dapple", num_ranks=3, num_microbatches=4, warmup=[1, 2, 1])
    with pytest.raises(InputError, match="generator"):
        stream_of(make_schedule)


def test_stream_rows_are_lazy() -> None:
    from pipesim.schedules.registry import stream_schedule

    stream = stream_schedule("1f1b", num_ranks=4, num_microbatches=10**9)
    first = [f"{s}{op.value}{mb}" for op, s, mb in itertools.islice(stream.row(1), 5)]
    assert first == ["1F0", "1F1", "1F2", "1B0", "1F3"]
