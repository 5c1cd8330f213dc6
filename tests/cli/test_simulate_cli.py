"""`pipesim simulate`: the default case, JSON output, files and bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import pipesim
from pipesim.cli import main
from pipesim.plan_file import save_plan


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_lazy_export_resolves() -> None:
    for name in pipesim.__all__:
        assert getattr(pipesim, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = pipesim.nope  # type: ignore[attr-defined]


def test_default_case_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "simulate")
    assert code == 0, err
    assert "bert48 on dapple-2x8-v100: 4 stages, replicas 4,4,4,4" in out
    assert re.search(r"iteration [\d.]+ ms", out)
    assert out.count("yes") + out.count("NO") == 16


def test_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "simulate",
        "--model",
        "bert48",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "32",
        "--microbatches",
        "8",
        "--stages",
        "4",
        "--replicas",
        "2,2,2,2",
        "--schedule",
        "gpipe",
        "--json",
    )
    assert code == 0
    data = json.loads(out)
    for key in ("iteration_time_s", "throughput_samples_per_s", "bubble_fraction", "devices"):
        assert key in data
    assert data["throughput_samples_per_s"] == pytest.approx(32 / data["iteration_time_s"])
    assert len(data["devices"]) == 8
    for device in data["devices"]:
        assert set(device) >= {"device", "stage", "busy_time_s", "peak_memory_bytes", "fits"}
    assert [d["stage"] for d in data["devices"]] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_gantt_and_trace_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    gantt, trace = tmp_path / "g.png", tmp_path / "t.json"
    code, _out, err = run(
        capsys,
        "simulate",
        "--model",
        "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000",
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "8",
        "--microbatches",
        "4",
        "--split",
        "2,2,2",
        "--gantt",
        str(gantt),
        "--trace",
        str(trace),
    )
    assert code == 0, err
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(trace.read_text())["traceEvents"]


def test_saved_plan_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = pipesim.load_model("bert48")
    plan = pipesim.make_plan(profile, global_batch_size=16, num_microbatches=4, stages=2, replicas=[2, 2])
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    code, out, _ = run(
        capsys, "simulate", "--model", "bert48", "--cluster", "dgx1-v100", "--plan", str(path), "--json"
    )
    assert code == 0
    assert len(json.loads(out)["devices"]) == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "8",
                "--microbatches",
                "3",
                "--stages",
                "2",
            ],
            r"num_microbatches=3: must divide the global batch size \(8\)",
        ),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "8",
                "--microbatches",
                "2",
                "--stages",
                "60",
            ],
            "at most",
        ),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "64",
                "--microbatches",
                "2",
                "--stages",
                "2",
                "--replicas",
                "8,8",
            ],
            r"16 devices.*cluster has 8",
        ),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "64",
                "--microbatches",
                "2",
                "--stages",
                "2",
                "--replicas",
                "1,2,3",
            ],
            r"replicas=\[1, 2, 3\]: must give one count per pipeline rank \(2\)",
        ),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "8",
                "--microbatches",
                "2",
                "--split",
                "1,1",
            ],
            "must add up to the model's",
        ),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "8",
                "--microbatches",
                "2",
                "--stages",
                "2",
                "--schedule",
                "nosuch",
            ],
            "unknown schedule 'nosuch'",
        ),
        (["--model", "bert48", "--cluster", "dgx1-v100", "--gbs", "8"], "give one of them"),
        (["--model", "bert48", "--cluster", "dgx1-v100", "--plan", "missing.json"], "missing.json"),
        (
            [
                "--model",
                "bert48",
                "--cluster",
                "dgx1-v100",
                "--gbs",
                "8",
                "--microbatches",
                "2",
                "--stages",
                "2",
                "--jitter",
                "0.1",
            ],
            "seed",
        ),
    ],
)
def test_bad_input_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, _, err = run(capsys, "simulate", *argv)
    assert code == 2
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_plan_file_with_unknown_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    path.write_text(
        json.dumps(
            {
                "stages": [
                    {"layers": [0, 10], "replicas": 1, "devices": [99]},
                    {"layers": [11, 49], "replicas": 1},
                ],
                "global_batch_size": 8,
                "microbatches": 2,
            }
        )
    )
    code, _, err = run(capsys, "simulate", "--model", "bert48", "--cluster", "dgx1-v100", "--plan", str(path))
    assert code == 2
    assert "device 99 is not in the cluster" in err


def test_no_lazy_export_is_shadowed_by_a_submodule() -> None:
    # `import pipesim.x` binds the module to `pipesim.x`, hiding an export of the same name.
    from pathlib import Path

    package = Path(pipesim.__file__).parent
    submodules = {p.stem for p in package.glob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    assert not (set(pipesim.__all__) & submodules)


def test_simulate_without_figures_does_not_load_matplotlib() -> None:
    """A table or --json run needs no plotting library: matplotlib's import alone costs more than
    simulating a thousand micro-batches (benchmarks/bench_simulator.py case (c))."""
    import subprocess
    import sys

    code = (
        "import sys; from pipesim.cli import main; "
        "main(['simulate', '--model', 'bert48', '--cluster', 'dapple-2x8-v100', '--gbs', '32', "
        "'--microbatches', '4', '--stages', '2', '--figsize', 'double', '--json']); "
        "print('matplotlib' in sys.modules, file=sys.stderr)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False"


def test_p2p_channels_option(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["simulate", "--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "32"]
    args += ["--microbatches", "8", "--stages", "4", "--replicas", "4,4,4,4", "--json"]
    code, one, err = run(capsys, *args)
    assert code == 0, err
    code, four, err = run(capsys, *args, "--p2p-channels", "4")
    assert code == 0, err
    assert json.loads(four)["iteration_time_s"] > 0
    assert json.loads(one)["iteration_time_s"] > 0
    code, _, err = run(capsys, *args, "--p2p-channels", "0")
    assert code == 2
    assert "p2p_channels=0" in err
    assert "Traceback" not in err
