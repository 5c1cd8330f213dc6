"""The results file: lines round-trip, keys are stable and distinct."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.sweep import COLUMNS, SweepPoint, point_key, read_results
from pipesim.sweep.store import ResultsWriter, format_line

text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\x00"), max_size=30)


@settings(max_examples=60, deadline=None)
@given(
    model=text.filter(lambda s: s.strip() != "" and "\n" not in s),
    error=text,
    gbs=st.integers(1, 10**6),
    time_s=st.floats(1e-9, 1e6, allow_nan=False),
    fits=st.booleans(),
)
def test_rows_round_trip_through_the_file(
    tmp_path_factory: pytest.TempPathFactory, model: str, error: str, gbs: int, time_s: float, fits: bool
) -> None:
    path = tmp_path_factory.mktemp("store") / "r.csv"
    row = {
        "model": model,
        "cluster": "c",
        "overrides": "nic=100GbE,servers=4",
        "global_batch_size": gbs,
        "planner": "dapple",
        "schedule": "1f1b",
        "iteration_time_s": time_s,
        "fits": fits,
        "status": "invalid",
        "error": error,
        "key": "0123456789abcdef",
    }
    line = format_line(row)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    with ResultsWriter(path) as writer:
        writer.append(row)
    (back,) = read_results(path)
    assert back["model"] == model
    assert back["global_batch_size"] == gbs
    assert back["iteration_time_s"] == time_s  # exact: floats are written with repr
    assert back["fits"] is fits
    assert back["error"] == error.replace("\n", " | ")
    assert back["num_stages"] is None
    assert back["overrides"] == "nic=100GbE,servers=4"
    assert list(back) == list(COLUMNS)


def test_point_keys_are_stable_and_distinct() -> None:
    base = SweepPoint(
        model="bert48",
        cluster="dgx1-v100",
        overrides=(),
        global_batch_size=64,
        planner="dapple",
        schedule="gpipe",
    )
    assert point_key(base, None) == point_key(base, None)
    assert len(point_key(base, None)) == 16
    variants = [
        base,
        SweepPoint(
            model="bert48",
            cluster="dgx1-v100",
            overrides=(("nic", "100GbE"),),
            global_batch_size=64,
            planner="dapple",
            schedule="gpipe",
        ),
        SweepPoint(
            model="bert48",
            cluster="dgx1-v100",
            overrides=(),
            global_batch_size=128,
            planner="dapple",
            schedule="gpipe",
        ),
        SweepPoint(
            model="bert48",
            cluster="dgx1-v100",
            overrides=(),
            global_batch_size=64,
            planner="dp",
            schedule="gpipe",
        ),
        SweepPoint(
            model="bert48",
            cluster="dgx1-v100",
            overrides=(),
            global_batch_size=64,
            planner="dapple",
            schedule="dapple",
        ),
    ]
    keys = {point_key(p, price) for p in variants for price in (None, 2.0)}
    assert len(keys) == 2 * len(variants)


def test_unknown_column_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown columns \\['speed'\\]"):
        format_line({"speed": 1})
    with pytest.raises(InputError, match="does not exist"):
        read_results(tmp_path / "none.csv")
