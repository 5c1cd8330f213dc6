"""Sweep axes for 3D parallelism and precision: ``tensor_parallel``, ``sequence_parallel``,
``sharding`` and ``dtype`` lists in a sweep config, their results columns, keys unchanged at auto,
and ``pipesim sweep --tp/--sp/--zero/--dtype``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.compare import compare
from pipesim.errors import FormatError
from pipesim.planner import plan
from pipesim.planner.megatron import MegatronPins
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions
from pipesim.sweep import parse_sweep_config, point_key, read_results, run_sweep
from pipesim.sweep.config import SweepPoint

MODEL = "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000"
CLUSTER = "dgx-a100-x2"


def _config(**extra: object) -> dict[str, object]:
    return {"models": [MODEL], "clusters": [CLUSTER], "global_batch_sizes": [16], "planners": ["megatron"],
            "schedules": ["1f1b"], **extra}


def test_axes_parse_to_canonical_values_and_multiply_the_grid() -> None:
    config = parse_sweep_config(_config(
        tensor_parallel=[2, "auto", 4], sequence_parallel=[True, "AUTO"], sharding=["1", "distributed"],
        dtype=["bf16", "auto"],
    ))
    assert config.tensor_parallel == (2, None, 4)
    assert config.sequence_parallel == (True, None)
    assert config.sharding == ("zero1", "distributed")
    assert config.dtype == ("bfloat16", None)
    points = config.points()
    assert len(points) == 3 * 2 * 2 * 2
    assert len(set(points)) == len(points)
    defaults = parse_sweep_config(_config())
    (point,) = defaults.points()
    assert (point.tensor_parallel, point.sequence_parallel, point.sharding, point.dtype) == (None,) * 4
    assert not point.pinned


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("tensor_parallel", [0], "tensor_parallel=0: must be integers >= 1 or 'auto'"),
        ("tensor_parallel", [2, 2], "must not repeat"),
        ("sequence_parallel", ["yes"], "sequence_parallel='yes': must be true, false or 'auto'"),
        ("sharding", ["zero9"], "sharding='zero9': must be one of"),
        ("dtype", ["fp64"], "fp64"),
        ("tensor_parallel", [], "must list at least one value"),
    ],
)
def test_bad_axis_values_name_the_key(key: str, value: object, message: str) -> None:
    text = f"{key} = {value!r}\n".replace("'", '"')
    with pytest.raises(FormatError, match=key) as info:
        parse_sweep_config(_config(**{key: value}), path="x.toml", text=text)
    assert message in str(info.value)
    assert "x.toml:1:" in str(info.value)


def test_keys_of_points_at_auto_are_unchanged() -> None:
    point = SweepPoint(model=MODEL, cluster=CLUSTER, overrides=(), global_batch_size=16, planner="megatron",
                       schedule="1f1b")
    parts = ("pipesim-sweep-v1", MODEL, CLUSTER, "", "16", "megatron", "1f1b", "")
    assert point_key(point, None) == hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]
    keys = {point_key(point, None)}
    for change in ({"tensor_parallel": 2}, {"sequence_parallel": False}, {"sharding": "none"},
                   {"dtype": "float32"}):
        other = SweepPoint(**{**{f: getattr(point, f) for f in SweepPoint.__dataclass_fields__}, **change})
        keys.add(point_key(other, None))
    assert len(keys) == 5  # a pinned value, even the default one, is another point


def test_sweep_pins_the_megatron_planner_and_costs_in_the_dtype(tmp_path: Path) -> None:
    config = parse_sweep_config(_config(tensor_parallel=[2, 4], sequence_parallel=[True], dtype=["bf16"]))
    out = tmp_path / "tp.csv"
    summary = run_sweep(config, out, workers=1)
    assert summary.statuses == {"ok": 2}
    rows = read_results(out)
    assert [(r["tensor_parallel"], r["sequence_parallel"], r["sharding"], r["dtype"]) for r in rows] == [
        (2, True, None, "bfloat16"), (4, True, None, "bfloat16")
    ]
    profile, cluster = resolve_inputs(MODEL, CLUSTER, dtype="bf16")
    for row in rows:  # each row is what planning with the pins and `compare` give
        pins = MegatronPins(tensor_parallel=row["tensor_parallel"], sequence_parallel=True)
        base = plan(profile, cluster, 16, planner="megatron", top=1, pins=pins)[0]
        assert {s.tensor_parallel for s in base.stages} == {row["tensor_parallel"]}
        (expected,) = compare(profile, cluster, 16, schedules=["1f1b"], base_plan=base,
                              options=SimOptions(record_trace=False),
                              price_per_device_hour_usd=cluster.device.price_per_hour_usd)
        assert row["iteration_time_s"] == expected.result.iteration_time_s
        assert row["num_devices"] == cluster.num_devices


def test_pins_for_another_planner_make_an_invalid_row(tmp_path: Path) -> None:
    config = parse_sweep_config(_config(planners=["dapple"], tensor_parallel=[2], schedules=["dapple"]))
    out = tmp_path / "bad.csv"
    summary = run_sweep(config, out, workers=1)
    assert summary.statuses == {"invalid": 1}
    (row,) = read_results(out)
    assert "megatron" in row["error"]


def test_cli_options_replace_the_config_lists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'models = ["{MODEL}"]\nclusters = ["{CLUSTER}"]\nglobal_batch_sizes = [16]\n'
                    'planners = ["megatron"]\nschedules = ["1f1b"]\ntensor_parallel = [1, 2]\n')
    out = tmp_path / "c.csv"
    assert main(["sweep", str(path), "--out", str(out), "--workers", "1", "-q", "--tp", "4", "--sp",
                 "--zero", "2", "--dtype", "bf16"]) == 0
    assert capsys.readouterr().out.startswith("1 points: 0 already done, 1 run (1 ok)")
    (row,) = read_results(out)
    assert (row["tensor_parallel"], row["sequence_parallel"], row["sharding"], row["dtype"]) == (
        4, True, "zero2", "bfloat16")
