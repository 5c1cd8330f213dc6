"""Running sweeps: the rows, parallel workers, resume after lost rows, SIGKILL, infeasible points, Dask."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.compare import compare
from pipesim.errors import InputError
from pipesim.planner import plan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.loader import load_model
from pipesim.simulator import SimOptions
from pipesim.sweep import COLUMNS, load_sweep_config, parse_sweep_config, point_key, read_results, run_sweep
from tests.sweep.conftest import LARGER, SMALL


def lines(path: Path) -> list[str]:
    """The data lines of a results file, sorted (row order depends on completion order)."""
    text = path.read_text()
    assert text.endswith("\n")
    header, *rows = text.splitlines()
    assert header == ",".join(COLUMNS)
    return sorted(rows)


def test_small_sweep_writes_one_exact_row_per_point(small_config: Path, tmp_path: Path) -> None:
    config = load_sweep_config(small_config)
    out = tmp_path / "results.csv"
    seen: list[tuple[int, int]] = []
    summary = run_sweep(config, out, workers=1, progress=lambda done, total: seen.append((done, total)))
    assert (summary.points, summary.skipped, summary.ran) == (8, 0, 8)
    assert summary.statuses == {"ok": 8}
    assert seen == [(0, 8), (2, 8), (4, 8), (6, 8), (8, 8)]  # one task per (model, batch): 2 schedules
    rows = read_results(out)
    assert [(r["model"], r["global_batch_size"], r["schedule"]) for r in rows] == [
        (m, g, s) for m in (SMALL, LARGER) for g in (16, 32) for s in ("dapple", "gpipe")
    ]
    assert {r["key"] for r in rows} == {point_key(p, None) for p in config.points()}
    # Differential: each row is what planning once and `compare` give for that point.
    cluster = get_cluster("dgx1-v100")
    price = cluster.device.price_per_hour_usd
    assert price is not None
    for row in rows:
        profile = load_model(row["model"])
        base = plan(profile, cluster, row["global_batch_size"], top=1, schedule="dapple")[0]
        (expected,) = compare(
            profile,
            cluster,
            row["global_batch_size"],
            schedules=[row["schedule"]],
            base_plan=base,
            options=SimOptions(record_trace=False),
        )
        d = expected.to_dict()
        assert row["status"] == "ok"
        assert row["error"] == ""
        assert row["overrides"] == ""
        assert row["planner"] == "dapple"
        assert row["cluster"] == "dgx1-v100"
        for column in (
            "iteration_time_s",
            "throughput_samples_per_s",
            "bubble_fraction",
            "peak_memory_bytes",
            "fits",
            "estimated_iteration_time_s",
            "global_batch_size",
        ):
            assert row[column] == d[column], column
        assert (row["num_stages"], row["num_microbatches"]) == (d["stages"], d["microbatches"])
        assert row["num_devices"] == expected.plan.num_devices
        assert row["price_per_device_hour_usd"] == price
        assert row["cost_per_million_samples_usd"] == pytest.approx(
            price * row["num_devices"] * row["iteration_time_s"] / 3600 / row["global_batch_size"] * 1e6,
            rel=1e-12,
        )


def test_two_workers_give_the_same_rows_as_one(small_config: Path, tmp_path: Path) -> None:
    config = load_sweep_config(small_config)
    run_sweep(config, tmp_path / "one.csv", workers=1)
    summary = run_sweep(config, tmp_path / "two.csv", workers=2)
    assert summary.ran == 8
    assert lines(tmp_path / "two.csv") == lines(tmp_path / "one.csv")


def test_resume_after_deleted_rows_runs_only_those(small_config: Path, tmp_path: Path) -> None:
    config = load_sweep_config(small_config)
    out = tmp_path / "results.csv"
    run_sweep(config, out, workers=1)
    full = lines(out)
    header, *rows = out.read_text().splitlines(keepends=True)
    out.write_text(header + "".join(rows[:2] + rows[5:]))  # lose 3 rows
    summary = run_sweep(config, out, workers=1, resume=True)
    assert (summary.skipped, summary.ran) == (5, 3)
    assert lines(out) == full
    again = run_sweep(config, out, workers=1, resume=True)
    assert (again.skipped, again.ran) == (8, 0)


def test_resume_drops_a_partial_last_line_and_a_garbled_one(
    small_config: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = load_sweep_config(small_config)
    out = tmp_path / "results.csv"
    run_sweep(config, out, workers=1)
    full = lines(out)
    text = out.read_text().splitlines(keepends=True)
    garbled = [*text[:3], "garbage,line\n", *text[4:]]
    out.write_text("".join(garbled)[:-25])  # row 3 garbled, last row cut short
    with pytest.raises(Exception, match="malformed row"):
        read_results(out)
    with caplog.at_level(logging.WARNING):
        summary = run_sweep(config, out, workers=1, resume=True)
    assert "dropping malformed lines [4] and a partly written last line" in caplog.text
    assert (summary.skipped, summary.ran) == (6, 2)
    assert lines(out) == full


def test_a_file_with_only_a_partial_header_starts_again(small_config: Path, tmp_path: Path) -> None:
    out = tmp_path / "results.csv"
    out.write_text("model,clus")
    summary = run_sweep(load_sweep_config(small_config), out, workers=1, resume=True)
    assert summary.ran == 8
    assert len(lines(out)) == 8


def test_existing_results_need_resume_or_overwrite(small_config: Path, tmp_path: Path) -> None:
    config = load_sweep_config(small_config)
    out = tmp_path / "results.csv"
    run_sweep(config, out, workers=1)
    with pytest.raises(InputError, match="already exists: pass --resume"):
        run_sweep(config, out, workers=1)
    assert run_sweep(config, out, workers=1, overwrite=True).ran == 8
    assert len(lines(out)) == 8
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(Exception, match="not a pipesim sweep results file"):
        run_sweep(config, other, workers=1, resume=True)


def test_infeasible_points_are_rows_that_say_why(tmp_path: Path) -> None:
    config = parse_sweep_config(
        {
            "models": [SMALL],
            "clusters": ["dgx1-v100"],
            "overrides": [{}, {"device_memory_gib": 0.01}],
            "global_batch_sizes": [16],
            "schedules": ["gpipe"],
            "planners": ["dapple", "dp"],
            "price_per_device_hour_usd": 2.0,
        }
    )
    out = tmp_path / "results.csv"
    summary = run_sweep(config, out, workers=1)
    assert summary.statuses == {"infeasible": 2, "ok": 2}
    rows = read_results(out)
    bad = [r for r in rows if r["status"] != "ok"]
    assert [(r["planner"], r["overrides"]) for r in bad] == [
        ("dapple", "device_memory_gib=0.01"),
        ("dp", "device_memory_gib=0.01"),
    ]
    for r in bad:
        assert "fits in 0.01 GiB per device" in r["error"]
        assert r["iteration_time_s"] is None
        assert r["cost_per_million_samples_usd"] is None
    for r in rows:
        if r["status"] == "ok":
            assert r["price_per_device_hour_usd"] == 2.0
            assert r["cost_per_million_samples_usd"] == pytest.approx(
                2.0 * r["num_devices"] * r["iteration_time_s"] / 3600 / 16 * 1e6, rel=1e-12
            )
    # The price is part of the key: another price is another point.
    assert {r["key"] for r in rows}.isdisjoint({point_key(p, None) for p in config.points()})


def test_unsuitable_schedule_is_an_invalid_row(tmp_path: Path) -> None:
    # 2 ranks x 2 chunks need 4 layers; a 2-layer model cannot be interleaved.
    config = parse_sweep_config(
        {
            "models": ["gpt:layers=1,hidden=1024,heads=16,seq=512,vocab=1000"],
            "clusters": ["dgx1-v100"],
            "global_batch_sizes": [32],
            "schedules": ["gpipe", "interleaved"],
            "planners": ["gpipe"],
        }
    )
    out = tmp_path / "results.csv"
    summary = run_sweep(config, out, workers=1)
    rows = {r["schedule"]: r for r in read_results(out)}
    assert rows["gpipe"]["status"] == "ok"
    assert rows["interleaved"]["status"] in ("infeasible", "invalid")
    assert rows["interleaved"]["error"]
    assert sum(summary.statuses.values()) == 2


def _alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (zombies count as gone)."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def children_of(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid`` (Linux /proc; empty elsewhere)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_killed_with_sigkill_keeps_its_rows_and_resume_completes_it(
    tmp_path: Path, workers: int
) -> None:
    config_path = tmp_path / "long.toml"
    config_path.write_text(
        f'models = ["{LARGER}"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = {list(range(8, 88))}\n'
    )
    out = tmp_path / "results.csv"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [sys.executable, "-m", "pipesim", "sweep", str(config_path), "--out", str(out), "-q"]
    err = tmp_path / "stderr.txt"
    with err.open("wb") as stderr:
        proc = subprocess.Popen(
            [*cmd, "--workers", str(workers)], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_bytes().count(b"\n") >= 4:  # header + 3 rows
                break
            time.sleep(0.005)
        assert proc.poll() is None, f"the sweep ended before it could be killed: {err.read_text()}"
        workers_started = children_of(proc.pid)
        if workers > 1 and Path("/proc").is_dir():
            assert len(workers_started) >= workers  # the workers (and multiprocessing's resource tracker)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    # Worker processes notice that the sweep died and exit rather than run on as orphans.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(workers_started):
        time.sleep(0.05)
    assert not _alive(workers_started)
    assert proc.returncode == -signal.SIGKILL
    kept = read_results(out)  # a valid file: complete lines (a partial last one would be left out)
    assert 3 <= len(kept) < 160
    assert len({r["key"] for r in kept}) == len(kept)
    summary = run_sweep(load_sweep_config(config_path), out, workers=1, resume=True)
    assert summary.skipped == len(kept)
    assert summary.skipped + summary.ran == 160
    rows = read_results(out)
    assert len(rows) == 160
    assert {r["key"] for r in rows} == {point_key(p, None) for p in load_sweep_config(config_path).points()}


def test_dask_cluster_gives_the_same_rows(small_config: Path, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    config = load_sweep_config(small_config)
    run_sweep(config, tmp_path / "local.csv", workers=1)
    with distributed.LocalCluster(
        processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None
    ) as cluster:
        summary = run_sweep(config, tmp_path / "dask.csv", dask_scheduler=cluster.scheduler_address)
    assert summary.ran == 8
    assert lines(tmp_path / "dask.csv") == lines(tmp_path / "local.csv")


def test_cli_sweep_then_resume(
    small_config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results.csv"
    assert main(["sweep", str(small_config), "--out", str(out), "--workers", "1"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("8 points: 0 already done, 8 run (8 ok); results in")
    assert "[8/8] 100%" in captured.err
    assert main(["sweep", str(small_config), "--out", str(out), "--workers", "1"]) == 2
    assert "already exists: pass --resume" in capsys.readouterr().err
    assert main(["sweep", str(small_config), "--out", str(out), "--resume", "-q"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("8 points: 8 already done, 0 run (nothing new)")
    assert captured.err == ""
    bad = tmp_path / "bad.toml"
    bad.write_text('models = 3\nclusters = "x"\nglobal_batch_sizes = 8\n')
    assert main(["sweep", str(bad)]) == 2
    assert f"{bad}:1: models=3: must be a string" in capsys.readouterr().err


def test_dask_path_without_dask_says_how_to_install(
    small_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    with pytest.raises(InputError, match=r"pip install 'pipesim\[dask\]'"):
        run_sweep(load_sweep_config(small_config), tmp_path / "r.csv", dask_scheduler="tcp://127.0.0.1:1")
