"""One input path: the CLI and the Python API give identical numbers for the same inputs.

Each command runs in-process (``pipesim.cli.main([... "--json"])``) and through the API, on a
V100, an A100 and an H100 preset and with ``--set device=...``; the numbers must be equal to the
last bit, because both go through :func:`pipesim.profiles.inputs.resolve_inputs`.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

import pipesim
from pipesim.cli import main
from pipesim.cli.progress import Status
from pipesim.compare import compare
from pipesim.plan_file import load_plan
from pipesim.planner import plan as plan_api
from pipesim.profiles.inputs import resolve_inputs
from pipesim.sweep import load_sweep_config, read_results, run_sweep

MODEL = "gpt:layers=4,hidden=512,heads=8,seq=256,vocab=1000"
"""A small zoo model (measured on the V100 and re-targeted elsewhere) so the file runs fast."""
GBS = 32

CASES = [
    pytest.param("dgx1-v100", {}, id="v100"),
    pytest.param("dgx-a100-x2", {}, id="a100"),
    pytest.param("dgx-h100-x4", {}, id="h100"),
    pytest.param("dgx1-v100", {"device": "H100-SXM"}, id="v100-set-h100"),
    pytest.param("dgx-h100-x4", {"device": "A100-80GB", "servers": 1}, id="h100-set-a100"),
]


def _set(overrides: dict[str, object]) -> list[str]:
    return [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]


def _cli_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> Any:
    capsys.readouterr()
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("cluster", "overrides"), CASES)
def test_plan_and_verify_cli_equal_api(
    cluster: str, overrides: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--model", MODEL, "--cluster", cluster, *_set(overrides), "--gbs", str(GBS)]
    args += ["--schedule", "dapple", "--json"]
    planned = _cli_json(capsys, ["plan", *args, "--top", "2"])
    verified = _cli_json(capsys, ["verify", *args])
    profile, machine = resolve_inputs(MODEL, cluster, overrides=overrides)
    plans = plan_api(profile, machine, GBS, top=2, schedule="dapple")
    assert len(planned) == len(plans)
    for got, want in zip(planned, plans, strict=True):
        assert want.estimate is not None
        assert got["estimate"]["iteration_time_s"] == want.estimate.iteration_time_s
        assert got["estimate"]["peak_memory_bytes"] == want.estimate.peak_memory_bytes
    report = pipesim.verify(plans[0], cluster, profile=MODEL, overrides=overrides)
    (row,) = verified
    assert row["estimated_iteration_time_s"] == report.estimated_iteration_time_s
    assert row["simulated_iteration_time_s"] == report.simulated_iteration_time_s
    assert row["estimated_peak_memory_bytes"] == report.estimated_peak_memory_bytes
    assert row["simulated_peak_memory_bytes"] == report.simulated_peak_memory_bytes
    # The estimate is of the re-targeted model, so it agrees with the simulation of the same plan.
    assert abs(report.relative_error) < 0.05


@pytest.mark.parametrize(("cluster", "overrides"), CASES)
def test_simulate_cli_equals_api(
    cluster: str, overrides: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    got = _cli_json(
        capsys,
        [
            "simulate",
            "--model",
            MODEL,
            "--cluster",
            cluster,
            *_set(overrides),
            "--gbs",
            str(GBS),
            "--microbatches",
            "4",
            "--stages",
            "2",
            "--json",
        ],
    )
    plan = pipesim.make_plan(
        MODEL, cluster, overrides=overrides, global_batch_size=GBS, num_microbatches=4, stages=2
    )
    # the CLI records a trace only for --gantt/--trace; the API call asks for the same
    options = pipesim.SimOptions(record_trace=False)
    want = pipesim.simulate(plan, MODEL, cluster, options=options, overrides=overrides)
    assert got["iteration_time_s"] == want.iteration_time_s
    assert got["peak_memory_bytes"] == want.peak_memory_bytes
    assert got["stage_peak_memory_bytes"] == list(want.stage_peak_memory_bytes)


@pytest.mark.parametrize(("cluster", "overrides"), CASES)
def test_compare_cli_equals_api(
    cluster: str, overrides: dict[str, object], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    got = _cli_json(
        capsys,
        [
            "compare",
            "--model",
            MODEL,
            "--cluster",
            cluster,
            *_set(overrides),
            "--gbs",
            str(GBS),
            "--schedules",
            "gpipe,dapple",
            "--out",
            str(tmp_path),
            "--json",
        ],
    )
    want = compare(MODEL, cluster, GBS, overrides=overrides, schedules=["gpipe", "dapple"])
    assert [r["label"] for r in got] == [r.label for r in want]
    for row, expected in zip(got, want, strict=True):
        assert row["iteration_time_s"] == expected.result.iteration_time_s
        assert row["peak_memory_bytes"] == expected.to_dict()["peak_memory_bytes"]
        assert row["estimated_iteration_time_s"] == expected.estimated_iteration_time_s


@pytest.mark.parametrize(("cluster", "overrides"), [CASES[2], CASES[3]])
def test_sweep_row_equals_api(cluster: str, overrides: dict[str, object], tmp_path: Path) -> None:
    config = tmp_path / "sweep.toml"
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in overrides.items())
    config.write_text(
        f'models = ["{MODEL}"]\nclusters = ["{cluster}"]\noverrides = [{{{table}}}]\n'
        f'global_batch_sizes = [{GBS}]\nschedules = ["dapple"]\n'
    )
    out = tmp_path / "rows.csv"
    run_sweep(load_sweep_config(config), out, workers=1)
    (row,) = read_results(out)
    (want,) = compare(MODEL, cluster, GBS, overrides=overrides, schedules=["dapple"])
    assert row["status"] == "ok"
    assert row["iteration_time_s"] == want.result.iteration_time_s
    assert row["peak_memory_bytes"] == want.to_dict()["peak_memory_bytes"]
    assert row["estimated_iteration_time_s"] == want.estimated_iteration_time_s


def test_the_device_changes_the_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    """``--set device=...`` and the cluster's own device really reach the model's times."""
    args = ["--model", MODEL, "--gbs", str(GBS), "--json", "--top", "1"]
    v100 = _cli_json(capsys, ["plan", *args, "--cluster", "dgx1-v100"])[0]["estimate"]
    on_h100 = _cli_json(capsys, ["plan", *args, "--cluster", "dgx1-v100", "--set", "device=H100-SXM"])
    assert on_h100[0]["estimate"]["iteration_time_s"] < 0.5 * v100["iteration_time_s"]


def test_plan_estimate_matches_simulate_of_the_saved_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: ``plan`` on an H100 cluster and ``simulate --plan`` of its plan agree."""
    saved = tmp_path / "plan.json"
    common = ["--model", MODEL, "--cluster", "dgx-h100-x4", "--schedule", "dapple"]
    (planned,) = _cli_json(
        capsys, ["plan", *common, "--gbs", str(GBS), "--top", "1", "--json", "-o", str(saved)]
    )
    simulated = _cli_json(capsys, ["simulate", *common, "--plan", str(saved), "--json"])
    assert load_plan(saved).num_microbatches == planned["microbatches"]
    estimate = planned["estimate"]["iteration_time_s"]
    assert abs(estimate - simulated["iteration_time_s"]) / simulated["iteration_time_s"] < 0.05


COMMANDS_WITH_SET = [
    ["plan", "--model", MODEL, "--cluster", "dgx1-v100", "--gbs", "8"],
    ["verify", "--model", MODEL, "--cluster", "dgx1-v100", "--gbs", "8"],
    [
        "simulate",
        "--model",
        MODEL,
        "--cluster",
        "dgx1-v100",
        "--gbs",
        "8",
        "--microbatches",
        "2",
        "--stages",
        "2",
    ],
    ["compare", "--model", MODEL, "--cluster", "dgx1-v100", "--gbs", "8"],
    ["dynamic", "--mix", "uniform", "--samples", "8", "--cluster", "dgx1-v100"],
    ["strategy", "-p", "4", "-b", "16", "--simulate", "--cluster", "dgx1-v100"],
]


@pytest.mark.parametrize("argv", COMMANDS_WITH_SET, ids=lambda a: a[0])
@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("foo=bar", "overrides foo=bar: unknown key 'foo'; valid keys: "),
        ("servers=0", "servers=0: must be an integer >= 1"),
        ("device=XYZ", "unknown device 'XYZ'"),
        ("servers", "'servers' must be KEY=VALUE"),
    ],
)
def test_bad_set_is_one_message_and_exit_2(
    argv: list[str], item: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    extra = ["--out", str(tmp_path)] if argv[0] == "compare" else []
    assert main([*argv, *extra, "--set", item]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert message in captured.err
    assert "Traceback" not in captured.err
    assert not list(tmp_path.iterdir())  # nothing written


def test_set_needs_simulate_in_strategy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["strategy", "-p", "4", "-b", "8", "--set", "device=H100-SXM"]) == 2
    assert "--set" in capsys.readouterr().err


def test_dynamic_and_strategy_apply_set(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "dynamic",
        "--mix",
        "uniform",
        "--samples",
        "16",
        "--stages",
        "2",
        "--strategies",
        "pad",
        "--json",
    ]
    plain = _cli_json(capsys, [*base, "--cluster", "dgx1-v100"])
    slow = _cli_json(capsys, [*base, "--cluster", "dgx1-v100", "--set", "intra=pcie"])
    assert slow["cluster"] != plain["cluster"]
    assert slow["strategies"][0]["iteration_time_s"] > plain["strategies"][0]["iteration_time_s"]
    sim = ["strategy", "-p", "4", "-b", "16", "--simulate", "--cluster", "dgx1-v100", "--json"]
    a = _cli_json(capsys, sim)["simulation"]
    b = _cli_json(capsys, [*sim, "--set", "device=H100-SXM"])["simulation"]
    assert b["cluster"] != a["cluster"]
    assert b["compute_s"] < a["compute_s"]


# ------------------------------------------------------------------------------ the status line
class _Tty(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


def test_status_line_on_a_terminal_after_the_delay() -> None:
    stream = _Tty(True)
    with Status("planning x", delay_s=0.01, interval_s=0.01, stream=stream) as status:
        time.sleep(0.1)
        status.update("simulating y")
        time.sleep(0.1)
    text = stream.getvalue()
    assert status.shown
    assert "pipesim: planning x ... 0 s" in text
    assert "pipesim: simulating y ... 0 s" in text
    assert text.endswith("\r\033[K")  # the line is erased at the end


def test_status_line_silent_when_fast_or_not_a_terminal() -> None:
    fast, pipe = _Tty(True), _Tty(False)
    with Status("planning", delay_s=5.0, stream=fast) as quick:
        pass
    with Status("planning", delay_s=0.0, interval_s=0.01, stream=pipe) as piped:
        time.sleep(0.05)
    assert fast.getvalue() == ""
    assert not quick.shown
    assert pipe.getvalue() == ""
    assert not piped.shown


def test_status_line_silent_when_logging_to_stderr(caplog: pytest.LogCaptureFixture) -> None:
    tty = _Tty(True)
    caplog.set_level("INFO")
    with Status("planning", delay_s=0.0, interval_s=0.01, stream=tty) as status:
        time.sleep(0.05)
    assert tty.getvalue() == ""
    assert not status.shown


def test_cli_commands_show_status_on_a_tty(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``simulate`` on a (fake) terminal writes the status line to stderr and erases it."""
    import sys

    fake = _Tty(True)
    monkeypatch.setattr(sys, "stderr", fake)
    original = Status.__init__

    def quick(self: Status, text: str, **kwargs: Any) -> None:
        original(self, text, delay_s=0.0, interval_s=0.001, stream=kwargs.get("stream"))

    monkeypatch.setattr(Status, "__init__", quick)
    argv = ["simulate", "--model", "bert48", "--cluster", "dgx1-v100", "--gbs", "64",
            "--microbatches", "16", "--stages", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] > 0
    err = fake.getvalue()
    assert "pipesim: simulating bert48 on dgx1-v100" in err
    assert err.endswith("\r\033[K")


# ------------------------------------------------------------------- the other entry points
def test_dynamic_costs_follow_the_cluster_device() -> None:
    """At the calibration point the sequence cost model on a device gives the re-targeted zoo times."""
    from pipesim.dynamic import on_device
    from pipesim.profiles.costmodels.sequence import CALIBRATION_TOLERANCE, seq_cost_model

    seq = seq_cost_model("bert48")
    assert on_device(seq, "dapple-2x8-v100")[0] is seq
    moved, profile = on_device(seq, "dgx-h100-x4")
    assert profile.reference_device == "H100-SXM"
    b, s = seq.calibration_batch, seq.calibration_seq_len
    for cost, layer in zip(moved.layers, profile.layers, strict=True):
        assert float(cost.fwd_time_s.padded(b, s)) == pytest.approx(
            layer.fwd_time_s, rel=CALIBRATION_TOLERANCE
        )
        assert float(cost.bwd_time_s.padded(b, s)) == pytest.approx(
            layer.bwd_time_s, rel=CALIBRATION_TOLERANCE
        )
    for cost, before in zip(moved.layers, seq.layers, strict=True):
        assert cost.saved_bytes == before.saved_bytes


def test_hpgo_goes_through_the_input_path(tmp_path: Path) -> None:
    import pipesim.compat.hpgo as hpgo

    graph = tmp_path / "toy-pbs-4.txt"
    nodes = [
        f"node{i} -- Linear{i} -- forward_compute_time=2.0, backward_compute_time=4.0, "
        "activation_size=4194304.0, parameter_size=67108864.0"
        for i in range(4)
    ]
    graph.write_text("\n".join([*nodes, *(f"\tnode{i} -- node{i + 1}" for i in range(3))]) + "\n")
    v100 = hpgo.conductor_from_torch_graph_and_seps(str(graph), 4, 64, [8, 16])
    a100 = hpgo.conductor_from_torch_graph_and_seps(
        str(graph), 4, 64, [8, 16], overrides={"device": "A100-80GB"}
    )
    assert a100.cluster.num_devices == 16
    assert a100.cluster.device.name == a100.profile.reference_device == "A100-80GB"
    assert a100.profile.layers[0].fwd_time_s < v100.profile.layers[0].fwd_time_s
    a100.py_orchestrate()
    profile, cluster = resolve_inputs(a100.profile, a100.cluster)
    (best,) = plan_api(profile, cluster, 64, top=1, schedule="dapple")  # HPGO plans DAPPLE's schedule
    assert a100.plans[0].estimate == best.estimate


def test_make_plan_needs_a_cluster_for_overrides() -> None:
    with pytest.raises(pipesim.InputError, match=r"overrides=.*need a cluster"):
        pipesim.make_plan(MODEL, overrides={"device": "H100-SXM"}, global_batch_size=8, num_microbatches=2)


def test_show_cluster_applies_set(capsys: pytest.CaptureFixture[str]) -> None:
    shown = _cli_json(capsys, ["show", "cluster", "dgx1-v100", "--set", "device=H100-SXM", "--json"])
    assert shown["device"]["name"] == "H100-SXM"
    assert shown["name"] == "dgx1-v100[device=H100-SXM]"
