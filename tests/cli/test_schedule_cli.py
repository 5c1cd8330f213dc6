"""`pipesim schedule show`: the grid, the JSON order and bad input."""

from __future__ import annotations

import json

import pytest

from pipesim.cli import main
from pipesim.schedules import make_schedule, schedule_from_order


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_grid(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "schedule", "show", "1f1b", "-p", "2", "-m", "2")
    assert code == 0
    assert err == ""
    lines = out.splitlines()
    assert lines[0].startswith("1f1b: p=2 m=2 v=1 (looped placement); unit costs F=1 B=2")
    assert lines[1:3] == [
        "rank 0 0F0 0F1 .   .   0B0---- .   0B1----",
        "rank 1 .   1F0 1B0---- 1F1 1B1---- .   .  ",
    ]
    assert "makespan 9 slots" in lines[3]
    assert "bubble 33.3% (1/3)" in lines[3]
    assert "per stage: 2, 1" in lines[3]


def test_show_split_and_interleaved(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "show", "ZB-H1", "-p", "2", "-m", "2")
    assert code == 0
    assert "rank 1 .   1F0 1I0 1F1 1I1 1W0 1W1" in out
    code, out, _ = run(capsys, "schedule", "show", "interleaved", "-p", "2", "-m", "4", "-v", "2")
    assert code == 0
    assert "2F0" in out
    assert "3B3" in out
    assert "v=2" in out


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "show", "1F1B", "-p", "3", "-m", "4", "--json")
    assert code == 0
    data = json.loads(out)
    expected = make_schedule("1f1b", num_ranks=3, num_microbatches=4)
    assert data == {
        "schedule": "1f1b", "p": 3, "m": 4, "v": 1, "placement": "looped", "ranks": expected.to_order()
    }
    assert data["ranks"]["0"][:4] == ["0F0", "0F1", "0F2", "0B0"]
    # the JSON reads back into the same schedule
    assert schedule_from_order(out).ranks == expected.ranks


def test_show_dapple_warmup(capsys: pytest.CaptureFixture[str]) -> None:
    show = ("schedule", "show", "dapple", "--json")
    code, out, _ = run(capsys, *show, "-p", "3", "-m", "4", "--warmup", "slow-link")
    assert code == 0
    assert json.loads(out)["ranks"]["0"][:5] == ["0F0", "0F1", "0F2", "0F3", "0B0"]
    code, out, _ = run(capsys, *show, "-p", "2", "-m", "4", "--warmup", "3,1")
    assert code == 0
    assert json.loads(out)["ranks"]["0"][:4] == ["0F0", "0F1", "0F2", "0B0"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["nope", "-p", "2", "-m", "2"], "valid schedule names: 1f1b, chimera, custom, dapple"),
        (["gpipe", "-p", "2", "-m", "0"], "argument -m/--microbatches: '0' must be >= 1"),
        (["gpipe", "-p", "0", "-m", "2"], "argument -p/--ranks: '0' must be >= 1"),
        (["interleaved", "-p", "2", "-m", "5", "-v", "2"], "multiple of the number of rounds"),
        (["gpipe", "-p", "2", "-m", "2", "-v", "2"], "chunks=2: must be 1 for schedule 'gpipe'"),
        (["dapple", "-p", "2", "-m", "2", "--warmup", "x,y"], "--warmup='x,y'"),
        (["dapple", "-p", "2", "-m", "2", "--warmup", "1,2"], "deadlock"),
        (["zbv", "-p", "2", "-m", "4", "-v", "3"], "chunks=3: must be 2 for schedule 'zbv'"),
        (["dualpipev", "-p", "4", "-m", "6"], "must be at least 2p = 8"),
        (["zbv", "-m", "4"], "-p/--ranks=None: is required"),
        (["missing-order.csv"], "schedule file 'missing-order.csv' does not exist"),
    ],
)
def test_bad_input_exits_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, "schedule", "show", *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("pipesim: error: ")
    assert message in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(capsys, "schedule")
    assert code == 2


def test_help_states_the_unit_costs(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "show", "--help")
    assert code == 0
    assert "forward F takes 1 slot" in " ".join(out.split())


def test_list_has_every_name_with_formulas(capsys: pytest.CaptureFixture[str]) -> None:
    from pipesim.schedules import schedule_names

    code, out, _ = run(capsys, "schedule", "list")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 2 + len(schedule_names())
    for name in schedule_names():
        assert any(line.split()[0] == name for line in lines[2:])
    zbv = next(line for line in lines if line.split()[0] == "zbv")
    assert "min(2p, 2m, m + i + 1)" in zbv
    assert " v " in zbv
    code, out, _ = run(capsys, "schedule", "list", "--json")
    listed = {row["name"]: row for row in json.loads(out)["schedules"]}
    assert listed["v-half"]["memory"] == "min(2((p + 2) // 2), 2m)"
    assert listed["looped-bfs"]["stages_per_rank"] == "v (default 2)"


@pytest.mark.parametrize("name", ["looped-bfs", "interleaved-zb", "zbv", "dualpipev", "v-half", "v-min",
                                  "zb-auto", "pipedream-async", "pipedream-2bw"])
def test_show_every_new_schedule(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, _ = run(capsys, "schedule", "show", name, "-p", "4", "-m", "8")
    assert code == 0
    assert out.startswith(f"{name}: p=4 m=8")
    assert "makespan" in out


def test_show_reads_torch_csv_dumps(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    golden = Path(__file__).parents[1] / "schedules" / "golden" / "torch"
    code, out, _ = run(capsys, "schedule", "show", str(golden / "zbv_p2_m4_v2_comms.csv"), "--json")
    assert code == 0
    data = json.loads(out)
    assert data["placement"] == "v"
    assert data["ranks"] == make_schedule("zbv", num_ranks=2, num_microbatches=4).to_order()


def test_show_pipedream_states_the_steady_state(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "show", "pipedream-2bw", "-p", "4", "-m", "8")
    assert code == 0
    assert "makespan 33 slots" in out  # the first iteration, from an empty pipeline: (m + p - 1) * 3
    assert "no flush: 24 slots per iteration in steady state" in out  # m * 3
