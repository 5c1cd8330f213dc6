"""``compare`` plans each schedule for itself (or holds one plan), and ``simulate`` reports
PipeDream's steady-state iteration (issue 16)."""

from __future__ import annotations

import json

import pytest

from pipesim.api import make_plan
from pipesim.cli import main
from pipesim.compare import compare
from pipesim.planner import plan
from pipesim.planner.schedule_time import valid_microbatches
from pipesim.profiles import get_cluster

CLUSTER = get_cluster("dapple-2x8-v100")


def test_compare_plans_each_schedule_for_itself() -> None:
    rows = compare("bert48", CLUSTER, 128, schedules=["dapple", "interleaved", "zbv"], rerank=False)
    for row in rows:
        own = plan("bert48", CLUSTER, 128, top=1, schedule=row.label)[0]
        assert row.plan.schedule == row.label
        assert row.plan.chunks == own.chunks
        assert row.plan.num_microbatches == own.num_microbatches
        assert [st.last_layer for st in row.plan.stages] == [st.last_layer for st in own.stages]
        assert row.estimated_iteration_time_s == pytest.approx(
            own.estimate.iteration_time_s if own.estimate else 0
        )
        assert row.result.fits


def test_compare_holds_one_plan_on_request() -> None:
    rows = compare("bert48", CLUSTER, 128, schedules=["dapple", "interleaved"], rerank=False, hold_plan=True)
    held, interleaved = rows[0].plan, rows[1].plan
    assert held.schedule == "dapple"
    assert interleaved.chunks == 2
    assert interleaved.num_ranks == held.num_ranks
    ranks = [(st.replicas, st.devices) for st in held.stages[: held.num_ranks]]
    assert [(st.replicas, st.devices) for st in interleaved.stages[: interleaved.num_ranks]] == ranks


def test_held_plan_gets_a_count_the_schedule_accepts() -> None:
    # 9 micro-batches on 4 ranks: interleaved's rounds max(1, 9 // 4) = 2 do not divide 9; the
    # nearest counts of the batch of 36 that suit it are 6 and 12: the smaller wins the tie
    base = make_plan("bert48", CLUSTER, global_batch_size=36, num_microbatches=9, stages=4)
    assert not valid_microbatches("interleaved", 4, 9, 2)
    (row,) = compare("bert48", CLUSTER, 36, schedules=["interleaved"], base_plan=base, rerank=False)
    assert row.plan.num_microbatches == 6
    assert row.plan.chunks == 2
    assert row.estimated_iteration_time_s is not None


def test_compare_of_a_schedule_that_fits_nowhere_shows_the_misfit() -> None:
    # GPipe holds all 128 samples' activations: no plan fits 16 GiB, so its row runs on DAPPLE's
    # plan and the simulation flags it
    rows = compare("bert48", CLUSTER, 128, schedules=["gpipe", "dapple"], rerank=False)
    assert not rows[0].result.fits
    assert rows[1].result.fits
    assert [st.last_layer for st in rows[0].plan.stages] == [st.last_layer for st in rows[1].plan.stages]


@pytest.mark.parametrize("schedule", ["pipedream-async", "pipedream-2bw"])
def test_simulate_reports_the_steady_state(schedule: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "simulate",
        "--model",
        "bert48",
        "--cluster",
        "dapple-2x8-v100",
        "--gbs",
        "32",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--schedule",
        schedule,
    ]
    assert main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    steady = document["steady_iteration_time_s"]
    # no flush: the fill and drain of p - 1 = 3 slots are not paid per iteration in steady state
    assert 0 < steady < document["iteration_time_s"]
    assert main(argv) == 0
    assert "steady state (no flush)" in capsys.readouterr().out


def test_simulate_flushed_schedules_have_no_steady_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "simulate",
        "--model",
        "bert48",
        "--cluster",
        "dapple-2x8-v100",
        "--gbs",
        "32",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--json",
    ]
    assert main(argv) == 0
    assert "steady_iteration_time_s" not in json.loads(capsys.readouterr().out)
