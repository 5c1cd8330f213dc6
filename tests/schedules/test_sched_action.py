"""The action type: validation, the torch token form and its round trip."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.schedules import Action, Op


@pytest.mark.parametrize(
    ("text", "stage", "op", "mb"),
    [
        ("0F1", 0, Op.F, 1),
        ("3I0", 3, Op.I, 0),
        ("12W34", 12, Op.W, 34),
        ("2B7", 2, Op.B, 7),
        ("1SEND_F2", 1, Op.SEND_F, 2),
        ("1RECV_B0", 1, Op.RECV_B, 0),
        ("2ALL_REDUCE", 2, Op.ALL_REDUCE, None),
        (" 0F0 ", 0, Op.F, 0),
    ],
)
def test_parse(text: str, stage: int, op: Op, mb: int | None) -> None:
    action = Action.parse(text)
    assert (action.stage, action.op, action.microbatch) == (stage, op, mb)
    assert Action.parse(str(action)) == action


def test_torch_reduce_grad_reads_as_all_reduce() -> None:
    assert Action.parse("4REDUCE_GRAD") == Action(stage=4, op=Op.ALL_REDUCE)
    assert str(Action.parse("4REDUCE_GRAD")) == "4ALL_REDUCE"


@pytest.mark.parametrize(
    "text", ["", "F0", "0X1", "0F", "0I", "-1F0", "0F-1", "0F1x", "0ALL_REDUCE1", "0UNSHARD"]
)
def test_parse_rejects(text: str) -> None:
    with pytest.raises(InputError):
        Action.parse(text)


def test_parse_error_names_the_token_and_the_form() -> None:
    with pytest.raises(InputError, match=r"action='0X1'.*\{stage\}\{op\}\{microbatch\}"):
        Action.parse("0X1")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"stage": -1, "op": Op.F, "microbatch": 0}, "stage=-1"),
        ({"stage": 1.0, "op": Op.F, "microbatch": 0}, "stage=1.0"),
        ({"stage": 0, "op": "F", "microbatch": 0}, "op='F'"),
        ({"stage": 0, "op": Op.F}, "microbatch=None"),
        ({"stage": 0, "op": Op.F, "microbatch": -2}, "microbatch=-2"),
        ({"stage": 0, "op": Op.ALL_REDUCE, "microbatch": 0}, "None for ALL_REDUCE"),
    ],
)
def test_bad_fields(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        Action(**kwargs)  # type: ignore[arg-type]


def test_frozen_and_hashable() -> None:
    a = Action(stage=0, op=Op.F, microbatch=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.stage = 2  # type: ignore[misc]
    assert {a, Action.parse("0F1")} == {a}


@pytest.mark.parametrize(
    ("text", "peer"),
    [
        ("1SEND_F0", 2),
        ("1RECV_F0", 0),
        ("1SEND_B0", 0),
        ("1RECV_B0", 2),
        ("1F0", None),
        ("1ALL_REDUCE", None),
    ],
)
def test_peer(text: str, peer: int | None) -> None:
    assert Action.parse(text).peer == peer


def test_is_compute() -> None:
    assert [Action.parse(t).is_compute for t in ("0F0", "0B0", "0I0", "0W0", "0SEND_F0", "0ALL_REDUCE")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


@given(
    stage=st.integers(min_value=0, max_value=10_000),
    op=st.sampled_from(list(Op)),
    mb=st.integers(min_value=0, max_value=10_000),
)
def test_round_trip(stage: int, op: Op, mb: int) -> None:
    action = Action(stage=stage, op=op, microbatch=None if op is Op.ALL_REDUCE else mb)
    assert Action.parse(str(action)) == action
