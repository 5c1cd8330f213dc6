"""The plan file reader is strict: every malformed plan is one clear error, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import FormatError, InputError, PipesimError
from pipesim.plan import Plan, StagePlan
from pipesim.plan_file import load_plan, plan_from_dict, plan_to_dict, save_plan

GOOD: dict[str, Any] = {
    "format": "pipesim-plan",
    "version": 1,
    "stages": [{"layers": [0, 9], "replicas": 2}, {"layers": [10, 23], "replicas": 1}],
    "global_batch_size": 32,
    "microbatches": 4,
    "schedule": "dapple",
}


def test_the_good_plan_round_trips(tmp_path: Path) -> None:
    plan = plan_from_dict(GOOD)
    path = tmp_path / "p.json"
    save_plan(plan, path)
    assert load_plan(path) == plan
    assert plan_from_dict(plan_to_dict(plan)) == plan


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"stages": [{"layers": [0, 23], "replicas": "2"}]},
            r'stages\[0\]\.replicas="2": expected an integer',
        ),
        (
            {"stages": [{"layers": [0, 23], "replicas": 2.0}]},
            r"stages\[0\]\.replicas=2\.0: expected an integer",
        ),
        ({"stages": [{"layers": [0, 23], "replica": 2}]}, r"stages\[0\]\.replica: unknown key"),
        ({"stages": [{"layers": [0, "x"]}]}, r"stages\[0\]\.layers=.*expected a list of integers"),
        ({"chunks": "x"}, r'chunks="x": expected an integer'),
        ({"schedule_options": {"name": None}}, r"schedule_options\.name=.*expected a number"),
        ({"schedule_options": {"warmup": True}}, r"schedule_options\.warmup=true: expected a number"),
        ({"microbatch_sizes": 5}, r"microbatch_sizes=5: expected a list of integers"),
        ({"recompute": "false"}, r"unknown recompute mode 'false'"),
        ({"format": "other"}, r"format=\"other\": expected 'pipesim-plan'"),
        ({"version": 2}, r"version=2: this pipesim reads version 1"),
        ({"speed": 1}, r"speed: unknown key; valid keys: "),
        ({"microbatches": 1e30}, r"microbatches=1e\+30: expected an integer"),
        ({"microbatches": 2**40}, r"num_microbatches=1099511627776: must be an integer >= 1 and <= 1048576"),
        ({"global_batch_size": True}, r"global_batch_size=true: expected an integer"),
        (
            {"estimate": {"iteration_time_s": "fast"}},
            r"estimate\.iteration_time_s=\"fast\": expected a finite",
        ),
        ({"estimate": {"throughput_samples_per_s": 1}}, r"missing key estimate\.iteration_time_s"),
        ({"planner": 3}, r"planner=3: expected a planner name"),
        ({"stages": {}}, r"stages=\{\}: expected a list of stage objects"),
    ],
)
def test_malformed_plans_are_one_clear_error(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        plan_from_dict({**GOOD, **change}, source="plan.json")


def test_missing_required_keys_are_named() -> None:
    data = {k: v for k, v in GOOD.items() if k != "microbatches"}
    with pytest.raises(FormatError, match="missing key microbatches"):
        plan_from_dict(data)


def test_the_plan_type_checks_its_own_fields() -> None:
    with pytest.raises(InputError, match=r"replicas='2': must be an integer"):
        StagePlan(first_layer=0, last_layer=3, replicas="2")  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"num_microbatches=4\.0: must be an integer"):
        Plan(stages=(StagePlan(first_layer=0, last_layer=3),), global_batch_size=8, num_microbatches=4.0)  # type: ignore[arg-type]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**41) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    key=st.sampled_from([*GOOD, "chunks", "recompute", "schedule_options", "microbatch_sizes", "estimate"]),
    value=_JSON,
)
def test_any_json_value_gives_a_plan_or_a_pipesim_error(key: str, value: object) -> None:
    message = "valid"
    try:
        plan_from_dict({**GOOD, key: value})
    except PipesimError as exc:
        message = str(exc)
    assert message


@settings(max_examples=100, deadline=None)
@given(stage=st.dictionaries(st.sampled_from(["layers", "replicas", "devices", "x"]), _JSON, max_size=3))
def test_any_stage_object_gives_a_plan_or_a_pipesim_error(stage: dict[str, object]) -> None:
    message = "valid"
    try:
        plan_from_dict({**GOOD, "stages": [stage]})
    except PipesimError as exc:
        message = str(exc)
    assert message


def test_plan_json_output_loads_back(tmp_path: Path) -> None:
    plan = plan_from_dict(GOOD)
    listing = [{**plan_to_dict(plan), "simulated_iteration_time_s": 0.5}]
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(listing))
    assert load_plan(path) == plan
