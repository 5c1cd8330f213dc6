"""Issue 16 from the command line: ``--fb-overlap`` (DualPipe's overlapped pairs) in ``simulate``,
``compare`` and ``plan``; ``compare`` planning each schedule for itself unless ``--hold-plan``;
``plan`` without ``--schedule`` picking the fastest schedule that fits memory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipesim.api import make_plan, simulate
from pipesim.cli import main
from pipesim.compare import compare
from pipesim.plan_file import save_plan
from pipesim.planner import plan
from pipesim.planner.search import PLANNED_SCHEDULES
from pipesim.profiles import get_cluster

CLUSTER = get_cluster("dapple-2x8-v100")
SIM = ["simulate", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "64", "--microbatches", "8"]
TORCH_CSV = Path(__file__).parents[1] / "schedules" / "golden" / "torch"


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _iteration_s(capsys: pytest.CaptureFixture[str], argv: list[str]) -> float:
    return float(_json(capsys, [*argv, "--json"])["iteration_time_s"])


@pytest.mark.parametrize(("schedule", "stages"), [("dualpipev", 4), ("dualpipe", 4)])
def test_simulate_fb_overlap_is_the_plans_schedule_option(
    schedule: str, stages: int, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [*SIM, "--stages", str(stages), "--schedule", schedule]
    plain = _iteration_s(capsys, argv)
    half = _iteration_s(capsys, [*argv, "--fb-overlap", "0.5"])
    whole = _iteration_s(capsys, [*argv, "--fb-overlap", "1"])
    assert whole < half < plain  # the pairs hide more of the shorter computation
    assert _iteration_s(capsys, [*argv, "--fb-overlap", "0"]) == plain
    api = make_plan("bert48", CLUSTER, global_batch_size=64, num_microbatches=8, stages=stages,
                    schedule=schedule, chunks=2, schedule_options={"fb_overlap": 0.5})
    assert simulate(api, "bert48", CLUSTER).iteration_time_s == pytest.approx(half, rel=1e-12)


def test_simulate_fb_overlap_joins_a_plan_files_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    base = make_plan("bert48", CLUSTER, global_batch_size=64, num_microbatches=8, stages=4,
                     schedule="dualpipev", chunks=2)
    save_plan(base, path)
    argv = ["simulate", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--plan", str(path)]
    plain = _iteration_s(capsys, argv)
    overlapped = _iteration_s(capsys, [*argv, "--fb-overlap", "1"])
    assert overlapped < plain
    fresh = [*SIM, "--stages", "4", "--schedule", "dualpipev", "--fb-overlap", "1"]
    assert _iteration_s(capsys, fresh) == overlapped


def test_simulate_fb_overlap_of_an_order_file_with_pairs(capsys: pytest.CaptureFixture[str]) -> None:
    """torch's DualPipeV dump holds OVERLAP_F_B pairs: the option reaches them; a file without
    pairs refuses it."""
    paired = str(TORCH_CSV / "dualpipev_p2_m4_v2_compute.csv")
    argv = ["simulate", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "32",
            "--schedule", paired]
    assert _iteration_s(capsys, [*argv, "--fb-overlap", "1"]) < _iteration_s(capsys, argv)
    plain = str(TORCH_CSV / "zbv_p2_m4_v2_compute.csv")
    code = main(["simulate", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "32",
                 "--schedule", plain, "--fb-overlap", "0.5"])
    assert code == 2
    assert "--fb-overlap=0.5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--schedule", "dualpipev", "--fb-overlap", "1.5"],
         "argument --fb-overlap: '1.5' must be a number in [0, 1]"),
        (["--schedule", "dualpipev", "--fb-overlap", "-0.1"], "must be a number in [0, 1]"),
        (["--schedule", "dualpipev", "--fb-overlap", "nan"], "must be a number in [0, 1]"),
        (["--schedule", "dualpipev", "--fb-overlap", "half"], "must be a number in [0, 1]"),
        (["--schedule", "1f1b", "--fb-overlap", "0.5"], "is an option of dualpipev and dualpipe"),
        (["--fb-overlap", "0.5"], "not of dapple"),  # the default schedule takes no pairs
    ],
)
def test_simulate_bad_fb_overlap_exits_2(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SIM, "--stages", "4", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_compare_fb_overlap_reaches_the_schedules_that_take_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    rows = compare("bert48", CLUSTER, 64, schedules=["1f1b", "dualpipev"], rerank=False, hold_plan=True,
                   schedule_options={"fb_overlap": 1})
    assert dict(rows[0].plan.schedule_options) == {}
    assert dict(rows[1].plan.schedule_options) == {"fb_overlap": 1}
    argv = ["compare", "--gbs", "64", "--schedules", "1f1b,dualpipev", "--hold-plan", "--rerank", "none",
            "--out", str(tmp_path), "--json"]
    plain = _json(capsys, argv)
    overlapped = _json(capsys, [*argv, "--fb-overlap", "1"])
    assert overlapped[0]["iteration_time_s"] == plain[0]["iteration_time_s"]  # 1f1b has no pairs
    assert overlapped[1]["iteration_time_s"] < plain[1]["iteration_time_s"]
    assert overlapped[1]["iteration_time_s"] == rows[1].result.iteration_time_s
    assert main([*argv, "--schedules", "1f1b,gpipe", "--fb-overlap", "1"]) == 2
    assert "not of 1f1b, gpipe" in capsys.readouterr().err


def test_compare_plans_each_schedule_for_itself_unless_held(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["compare", "--gbs", "128", "--schedules", "dapple,zbv", "--rerank", "none",
            "--out", str(tmp_path), "--json"]
    own = _json(capsys, argv)
    for row in own:
        planned = plan("bert48", CLUSTER, 128, top=1, schedule=row["schedule"])[0]
        assert row["microbatches"] == planned.num_microbatches
        assert row["split"] == "|".join(f"{s.first_layer}-{s.last_layer}" for s in planned.stages)
        assert planned.estimate is not None
        assert row["estimated_iteration_time_s"] == pytest.approx(planned.estimate.iteration_time_s)
    held = _json(capsys, [*argv, "--hold-plan"])
    dapple, zbv = held
    assert dapple["split"] == own[0]["split"]  # DAPPLE's best is the held plan
    assert zbv["replicas"] == dapple["replicas"]  # its ranks, re-cut into the V's 2p stages
    assert zbv["stages"] == 2 * len(dapple["replicas"])


def test_plan_without_schedule_picks_the_fastest_that_fits(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "128", "--rerank", "none",
            "--json"]
    shortlists: list[Any] = []
    for limit, limit_bytes in (([], 16 * 2**30 * 1.0), (["--memory-limit", "8GiB"], 8 * 2**30)):
        plans = _json(capsys, [*base, "--top", "8", *limit])
        shortlists.append(plans)
        times = [p["estimate"]["iteration_time_s"] for p in plans]
        assert times == sorted(times)
        assert all(p["schedule"] in PLANNED_SCHEDULES for p in plans)
        assert all(p["estimate"]["peak_memory_bytes"] <= limit_bytes for p in plans)
        for name in ("dapple", "zbv"):  # no schedule planned alone beats the pick (zbv did at 8 GiB)
            alone = _json(capsys, [*base, "--top", "1", "--schedule", name, *limit])
            assert times[0] <= alone[0]["estimate"]["iteration_time_s"] * (1 + 1e-12)
    assert len({p["schedule"] for p in shortlists[0]}) > 1  # the unlimited shortlist mixes schedules


def test_plan_fb_overlap(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "128", "--rerank", "none",
            "--json", "--top", "1", "--schedule", "dualpipev"]
    plain = _json(capsys, base)
    overlapped = _json(capsys, [*base, "--fb-overlap", "1"])
    assert plain[0]["schedule_options"] == {}
    assert overlapped[0]["schedule_options"] == {"fb_overlap": 1.0}
    assert overlapped[0]["estimate"]["iteration_time_s"] < plain[0]["estimate"]["iteration_time_s"]
    weighed = _json(capsys, ["plan", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "128",
                             "--rerank", "none", "--json", "--top", "8", "--fb-overlap", "0.5"])
    for entry in weighed:
        takes = entry["schedule"] in ("dualpipe", "dualpipev")
        assert entry["schedule_options"] == ({"fb_overlap": 0.5} if takes else {}), entry["schedule"]
    for extra, message in (
        (["--schedule", "zbv", "--fb-overlap", "0.5"], "not of zbv"),
        (["--planner", "gpipe", "--fb-overlap", "0.5"], "dapple planner only"),
        (["--fb-overlap", "2"], "must be a number in [0, 1]"),
    ):
        code = main(["plan", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "128", *extra])
        assert code == 2
        assert message in capsys.readouterr().err
