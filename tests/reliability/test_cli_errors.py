"""Issue 17, findings 4-8 at the command line: one clear line and exit 2 for every bad value,
never a traceback; a closed pipe exits quietly; Ctrl-C exits 130."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pipesim.cli.simulate as simulate_cli
from pipesim.cli import EXIT_INTERRUPTED, main
from pipesim.profiles.models.fileformat import profile_to_dict
from pipesim.profiles.models.zoo import zoo_model

SMALL = ["--model", "gpt:layers=4,hidden=64,heads=2,seq=16,vocab=100", "--cluster", "dgx1-v100"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("pipesim: error: ")
    assert "error: pipesim" not in lines[0], lines[0]  # no doubled prefix
    assert "Traceback" not in err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--stages", "2", "--chunks", "3"], "chunks=3: must divide the number of stages (2)"),
        (["--stages", "4", "--chunks", "2", "--schedule", "interleaved"], None),  # 2 ranks x 2 chunks
        (["--stages", "2", "--gbs", "9" * 20], f"argument --gbs: '{'9' * 20}' must be <= 1099511627776"),
        (["--stages", "2", "--seed", "-1", "--jitter", "0.1"], "argument --seed: '-1' must be >= 0"),
        (["--stages", "2", "--jitter", "1e155", "--seed", "1"], "'1e155' must be a number in [0, 10]"),
        (["--stages", "2", "--jitter", "nan", "--seed", "1"], "argument --jitter: 'nan'"),
        (["--stages", "\u0663"], "argument --stages: '\u0663' is not an integer (ASCII digits 0-9)"),
        (["--stages", "2", "--set", "device_memory_gib=1e300"], "must be at most 1e+18 in magnitude"),
        (["--split", "1,\u0662"], "argument --split"),
    ],
)
def test_simulate_values(capsys: pytest.CaptureFixture[str], args: list[str], message: str | None) -> None:
    base = {"--gbs": "8", "--microbatches": "2"}
    argv = ["simulate", *SMALL, *args]
    for key, value in base.items():
        if key not in args:
            argv += [key, value]
    code, _out, err = run(capsys, *argv)
    if message is None:
        assert code == 0, err
        return
    assert code == 2
    line = one_error_line(err)
    assert message in line
    assert "usage:" not in err  # a bad value gets no usage dump


def test_value_errors_name_the_subcommand_once_and_shape_errors_show_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, _, err = run(capsys, "plan", *SMALL, "--gbs", "0")
    assert code == 2
    assert one_error_line(err) == "pipesim: error: plan: argument --gbs: '0' must be >= 1"
    code, _, err = run(capsys, "plan", *SMALL)
    assert code == 2
    assert "usage:" in err
    assert "the following arguments are required: --gbs" in err


@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "--stages", "1", "--gbs", "8", "--microbatches", "2", "--json"],
        ["plan", "--gbs", "8", "--json"],
        ["verify", "--gbs", "8"],
        ["compare", "--gbs", "8", "--json"],
    ],
)
def test_zero_compute_model_is_refused_before_simulating(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: list[str]
) -> None:
    data = profile_to_dict(zoo_model("gpt:layers=2,hidden=64,heads=2,seq=16,vocab=100"))
    for layer in data["layers"]:
        layer["fwd_time_s"] = 0.0
        layer["bwd_time_s"] = 0.0
    path = tmp_path / "nothing.json"
    path.write_text(json.dumps(data))
    code, out, err = run(capsys, command[0], "--model", str(path), "--cluster", "dgx1-v100", *command[1:])
    assert code == 2
    assert out == ""
    assert "has no compute time" in one_error_line(err)


def test_json_output_is_strict(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", *SMALL, "--stages", "2", "--gbs", "8", "--microbatches", "2", "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    json.loads(out, parse_constant=lambda name: pytest.fail(f"{name} in JSON output"))


def test_ctrl_c_exits_130(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(args: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(simulate_cli, "_run", interrupted)
    code, _, err = run(capsys, "simulate")
    assert code == EXIT_INTERRUPTED == 130
    assert err.strip() == "pipesim: interrupted"


def test_closed_pipe_exits_quietly() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipesim", "models"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the first write
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert err == ""


def test_plot_and_sweep_refuse_endless_devices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    if not Path("/dev/zero").is_char_device():
        pytest.skip("no /dev/zero")
    monkeypatch.setattr("pipesim.fileio.MAX_INPUT_BYTES", 4096)
    code, _, err = run(capsys, "sweep", "/dev/zero", "--out", str(tmp_path / "r.csv"))
    assert code == 2
    assert "sweep config '/dev/zero' is larger than 4096 bytes" in one_error_line(err)
    code, _, err = run(capsys, "plot", "/dev/zero", "--x", "a", "--y", "b", "-o", str(tmp_path / "p.png"))
    assert code == 2
    assert "results file '/dev/zero' is larger than 4096 bytes" in one_error_line(err)
    code, _, err = run(capsys, "convert", "/dev/zero", "-o", str(tmp_path / "p.json"))
    assert code == 2
    one_error_line(err)


def test_sweep_out_must_be_a_regular_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "s.toml"
    config.write_text('models = ["bert48"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [8]\n')
    fifo = tmp_path / "out.csv"
    os.mkfifo(fifo)
    code, _, err = run(capsys, "sweep", str(config), "--out", str(fifo), "-q")
    assert code == 2
    assert "is not a regular file" in one_error_line(err)
    assert os.path.exists(fifo)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-p", "1048576", "-m", "1048576"], "ranks x micro-batches x chunks must be at most 1048576"),
        (["-p", "2", "-m", "4", "--warmup", "1,\u0663"], "--warmup='1,\u0663': must be 'default'"),
        (["-p", "\u0662", "-m", "4"], "argument -p/--ranks: '\u0662' is not an integer"),
    ],
)
def test_schedule_show_bounds(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, "schedule", "show", "dapple", *argv)
    assert code == 2
    assert message in one_error_line(err)


def test_plan_and_cluster_files_refuse_endless_devices(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if not Path("/dev/zero").is_char_device():
        pytest.skip("no /dev/zero")
    monkeypatch.setattr("pipesim.fileio.MAX_INPUT_BYTES", 4096)
    base = ("simulate", "--model", "bert48", "--gbs", "32", "--microbatches", "4")
    code, _, err = run(capsys, *base, "--cluster", "dapple-2x8-v100", "--plan", "/dev/zero")
    assert code == 2
    assert "plan file '/dev/zero' is larger than 4096 bytes" in one_error_line(err)
    code, _, err = run(capsys, *base, "--stages", "2", "--cluster", "/dev/zero")
    assert code == 2
    assert "cluster file '/dev/zero' is larger than 4096 bytes" in one_error_line(err)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("device_compute_efficiency=1e-300", r"compute_efficiency=1e-300: must be in [0.01, 1]"),
        ("device_memory_efficiency=0.001", r"memory_efficiency=0.001: must be in [0.01, 1]"),
        ("device_memory_gib=1e17", "device_memory_gib=1e+17: must be at most"),
    ],
)
def test_absurd_device_what_ifs_are_refused(
    capsys: pytest.CaptureFixture[str], override: str, message: str
) -> None:
    code, out, err = run(
        capsys,
        "simulate",
        "--model",
        "bert48",
        "--cluster",
        "dapple-2x8-v100",
        "--gbs",
        "32",
        "--microbatches",
        "4",
        "--stages",
        "2",
        "--set",
        override,
    )
    assert code == 2
    assert out == ""
    assert message in one_error_line(err)


@pytest.mark.parametrize("planner", ["dapple", "dp", "gpipe", "pipedream"])
def test_the_largest_global_batch_plans_without_walking_it(
    capsys: pytest.CaptureFixture[str], planner: str
) -> None:
    """2**40 samples: the planners try only the divisors a plan allows (at most 2**20 micro-batches),
    found in sqrt(gbs) steps, and answer at once: here nothing fits in 16 GiB."""
    code, out, err = run(
        capsys,
        "plan",
        "--model",
        "bert48",
        "--cluster",
        "dapple-2x8-v100",
        "--gbs",
        str(2**40),
        "--planner",
        planner,
        "--rerank",
        "none",
    )
    assert code == 2
    assert out == ""
    assert "fits in 16 GiB per device" in one_error_line(err)


def test_nics_per_server_is_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "show", "cluster", "dapple-2x8-v100", "--set", "nics_per_server=1000000")
    assert code == 2
    assert "nics_per_server=1000000: must be <= 4 per GPU" in one_error_line(err)
