"""Issue 17 findings 5 and 6 in sweeps: bad config values are clear errors, and a results file
never holds inf or nan."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pipesim.errors import FormatError
from pipesim.sweep import load_sweep_config
from pipesim.sweep.runner import _finite_or_invalid

BASE = 'models = ["bert48"]\nclusters = ["dgx1-v100"]\n'
GBS = "global_batch_sizes = [8]\n"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ("global_batch_sizes = [[8]]", r"s\.toml:3: global_batch_sizes=\[8\]: must be integers in 1\.\.1099"),
        ("global_batch_sizes = [2199023255552]", "global_batch_sizes=2199023255552: must be integers in"),
        (f"{GBS}price_per_device_hour_usd = 1e308", r"price_per_device_hour_usd=1e\+308: must be"),
        (f"{GBS}price_per_device_hour_usd = nan", "price_per_device_hour_usd=nan: must be a number"),
        (f"{GBS}overrides = [{{servers = nan}}]", r"overrides\[0\]\.servers=nan: must be a finite"),
        (f"{GBS}overrides = [{{device_memory_gib = 1e300}}]", r"at most 1e\+18 in magnitude"),
        (f"{GBS}models = 1" + "0" * 5000, "not valid TOML"),
    ],
)
def test_bad_values_are_clear_errors(tmp_path: Path, lines: str, message: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(BASE + lines + "\n")
    with pytest.raises(FormatError, match=message):
        load_sweep_config(path)


def test_a_row_with_a_non_finite_number_becomes_invalid() -> None:
    row: dict[str, object] = {
        "model": "m",
        "iteration_time_s": 0.0,
        "throughput_samples_per_s": math.inf,
        "price_per_device_hour_usd": 2.0,
        "status": "ok",
        "error": "",
    }
    out = _finite_or_invalid(row)
    assert out["status"] == "invalid"
    assert out["throughput_samples_per_s"] is None
    assert out["price_per_device_hour_usd"] == 2.0
    assert "throughput_samples_per_s=inf: not a finite number" in str(out["error"])
    ok = {**row, "throughput_samples_per_s": 5.0}
    assert _finite_or_invalid(ok) is ok
