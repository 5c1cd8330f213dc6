"""Sweep configs: the grid, defaults and the errors for every broken rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.errors import FormatError, InputError
from pipesim.sweep import SweepPoint, load_sweep_config, parse_sweep_config, run_sweep
from tests.sweep.conftest import LARGER, SMALL


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.toml"
    path.write_text(text)
    return path


def test_small_config_grid_and_defaults(small_config: Path) -> None:
    config = load_sweep_config(small_config)
    assert config.models == (SMALL, LARGER)
    assert config.clusters == ("dgx1-v100",)
    assert config.overrides == ((),)
    assert config.planners == ("dapple",)
    assert config.price_per_device_hour_usd is None
    points = config.points()
    assert len(points) == 8
    assert points[0] == SweepPoint(
        model=SMALL,
        cluster="dgx1-v100",
        overrides=(),
        global_batch_size=16,
        planner="dapple",
        schedule="gpipe",
    )
    assert points[-1].model == LARGER
    assert (points[-1].global_batch_size, points[-1].schedule) == (32, "dapple")


def test_scalars_overrides_tables_and_canonical_schedules(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'models = "bert48"\nclusters = "dgx1-v100"\nglobal_batch_sizes = 64\nschedules = ["GPipe", "ZB-H1"]\n'
        "price_per_device_hour_usd = 2\n"
        '[[overrides]]\n[[overrides]]\nnic = "100GbE"\ndevice = "A100-80GB"\n',
    )
    config = load_sweep_config(path)
    assert config.models == ("bert48",)
    assert config.global_batch_sizes == (64,)
    assert config.schedules == ("gpipe", "zb-h1")
    assert config.overrides == ((), (("device", "A100-80GB"), ("nic", "100GbE")))
    assert config.price_per_device_hour_usd == 2.0
    assert len(config.points()) == 4


HEAD = 'models = ["bert48"]\nclusters = ["x"]\nglobal_batch_sizes = [8]\n'


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        (
            'models = ["bert48"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [8]\nmodel = 1\n',
            4,
            "unknown key 'model'",
        ),
        ('models = ["bert48"]\nclusters = ["dgx1-v100"]\n', None, "missing key 'global_batch_sizes'"),
        (
            'models = ["bert48"]\nclusters = ["dgx1-v100"]\n\nglobal_batch_sizes = [8, 0]\n',
            4,
            r"global_batch_sizes=0: must be integers in 1\.\.1099511627776",
        ),
        (
            'models = ["bert48"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [8.5]\n',
            3,
            "global_batch_sizes=8.5",
        ),
        (
            'models = [1]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [8]\n',
            1,
            "models=1: must be a string",
        ),
        ('models = ["a", "a"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [8]\n', 1, "must not repeat"),
        (
            'models = ["bert48"]\nclusters = []\nglobal_batch_sizes = [8]\n',
            2,
            "clusters=\\[\\]: must list at least one",
        ),
        (
            HEAD + 'schedules = ["gpipe", "fast"]\n',
            4,
            "schedules='fast': must be one of 1f1b, chimera, custom, dapple, dualpipe, dualpipev",
        ),
        (
            HEAD + 'planners = ["magic"]\n',
            4,
            "planners='magic': must be one of dapple",
        ),
        (
            HEAD + "[[overrides]]\n[[overrides]]\nnic = {a = 1}\n",
            5,
            r"overrides\[1\]\.nic",
        ),
        (
            HEAD + "overrides = [1]\n",
            4,
            r"overrides\[0\]=1: must be a table",
        ),
        (
            HEAD + "price_per_device_hour_usd = -1\n",
            4,
            "price_per_device_hour_usd=-1: must be a number >= 0",
        ),
        ('models = ["bert48"\nclusters = ["x"]\n', 2, "not valid TOML"),
    ],
)
def test_config_errors_name_file_line_key_and_rule(
    tmp_path: Path, text: str, line: int | None, match: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(FormatError, match=match) as info:
        load_sweep_config(path)
    assert info.value.path == str(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: " if line else f"{path}: ")


def test_missing_file() -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_sweep_config("/nonexistent/sweep.toml")


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"models": ["no-such-model"], "clusters": ["dgx1-v100"]}, "models: 'no-such-model': unknown model"),
        (
            {"models": ["bert48"], "clusters": ["no-such-cluster"]},
            "clusters: 'no-such-cluster': unknown cluster",
        ),
        (
            {"models": ["bert48"], "clusters": ["dgx1-v100"], "overrides": [{"warp": 9}]},
            "overrides: {'warp': 9}: .*warp",
        ),
    ],
)
def test_inputs_that_cannot_load_fail_before_anything_runs(
    tmp_path: Path, data: dict[str, object], match: str
) -> None:
    config = parse_sweep_config({**data, "global_batch_sizes": [8]}, path=tmp_path / "s.toml")
    out = tmp_path / "out.csv"
    with pytest.raises(FormatError, match=match):
        run_sweep(config, out, workers=1)
    assert not out.exists()  # no header-only file left behind
    kept = tmp_path / "kept.csv"
    kept.write_text("earlier results\n")
    with pytest.raises(FormatError, match=match):
        run_sweep(config, kept, workers=1, overwrite=True)
    assert kept.read_text() == "earlier results\n"  # --overwrite does not truncate before the inputs load


def test_relative_model_files_resolve_against_the_config(tmp_path: Path) -> None:
    from pipesim.profiles.models.fileformat import save_profile
    from pipesim.profiles.models.loader import load_model

    (tmp_path / "sub").mkdir()
    save_profile(load_model(SMALL), tmp_path / "sub" / "tiny.json")
    config = parse_sweep_config(
        {
            "models": ["sub/tiny.json"],
            "clusters": ["dgx1-v100"],
            "global_batch_sizes": [8],
            "schedules": ["gpipe"],
        },
        path=tmp_path / "s.toml",
    )
    assert config.resolve_path("sub/tiny.json") == str(tmp_path / "sub" / "tiny.json")
    summary = run_sweep(config, tmp_path / "out.csv", workers=1)
    assert summary.statuses == {"ok": 1}
