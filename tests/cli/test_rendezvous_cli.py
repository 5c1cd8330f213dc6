"""`--rendezvous` / `--eager-bytes` on `pipesim simulate` and `pipesim compare`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main

PLAN = ["--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "64", "--microbatches", "16"]
PLAN += ["--stages", "4", "--replicas", "1,1,1,1", "--schedule", "1f1b", "--json"]


def iteration_s(capsys: pytest.CaptureFixture[str], *extra: str) -> float:
    assert main(["simulate", *PLAN, *extra]) == 0
    return float(json.loads(capsys.readouterr().out)["iteration_time_s"])


def test_the_rendezvous_holds_sends_for_busy_receivers(capsys: pytest.CaptureFixture[str]) -> None:
    off = iteration_s(capsys)
    on = iteration_s(capsys, "--rendezvous")
    none_eager = iteration_s(capsys, "--eager-bytes", "0")
    assert off < on <= none_eager
    assert iteration_s(capsys, "--eager-bytes", "1e12") == off  # every send fits: as without


@pytest.mark.parametrize("value", ["-1", "nan", "1MiB"])
def test_bad_eager_bytes_exit_2_naming_the_option(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert main(["simulate", *PLAN, "--eager-bytes", value]) == 2
    err = capsys.readouterr().err
    assert "--eager-bytes" in err
    assert "Traceback" not in err


def test_compare_takes_the_rendezvous(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    argv = ["compare", "--schedules", "1f1b", "--gbs", "64", "--out", str(tmp_path), "--json"]
    assert main([*argv, "--rerank", "none"]) == 0
    off = json.loads(capsys.readouterr().out)[0]["iteration_time_s"]
    assert main([*argv, "--rerank", "none", "--eager-bytes", "0"]) == 0
    on = json.loads(capsys.readouterr().out)[0]["iteration_time_s"]
    assert on > off
