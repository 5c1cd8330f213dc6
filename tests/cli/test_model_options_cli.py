"""The zoo's framework option (``bert48:framework=tf1``) through every command and API call that
takes a model: accepted, listed, and a bad value rejected with exit 2 and one clear message."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pipesim.api import make_plan, simulate
from pipesim.cli import main
from pipesim.errors import InputError
from pipesim.profiles.inputs import resolve_inputs

BAD = "bert48:framework=tf2"
BAD_MESSAGE = r"bert48\.framework='tf2': must be pytorch \(fused kernels, the default\) or tf1"
SMALL_RUN = ("--cluster", "dgx1-v100", "--gbs", "16")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_the_tf1_forms(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models")
    assert code == 0
    assert re.search(r"^bert48:framework=tf1 +BERT-48 as TensorFlow 1\.x", out, re.MULTILINE)
    assert re.search(r"^xlnet36:framework=tf1 +XLNet-36 as TensorFlow 1\.x", out, re.MULTILINE)


def test_show_model_tf1(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", "model", "bert48:framework=tf1", "--json")
    assert code == 0, err
    tf1 = json.loads(out)
    code, out, _ = run(capsys, "show", "model", "bert48", "--json")
    fused = json.loads(out)
    assert tf1["name"] == "bert48:framework=tf1"
    assert tf1["parameter_count"] == fused["parameter_count"]
    assert tf1["fwd_time_s"] > fused["fwd_time_s"]


def test_simulate_tf1_is_slower_than_fused(capsys: pytest.CaptureFixture[str]) -> None:
    times = {}
    for model in ("xlnet36", "xlnet36:framework=tf1"):
        code, out, err = run(capsys, "simulate", "--model", model, *SMALL_RUN, "--microbatches", "4",
                             "--stages", "2", "--json")
        assert code == 0, err
        times[model] = json.loads(out)["iteration_time_s"]
    assert times["xlnet36:framework=tf1"] > times["xlnet36"]


@pytest.mark.parametrize(
    "argv",
    [
        ["show", "model", BAD],
        ["simulate", "--model", BAD, *SMALL_RUN, "--microbatches", "4", "--stages", "2"],
        ["plan", "--model", BAD, *SMALL_RUN],
        ["verify", "--model", BAD, *SMALL_RUN],
        ["compare", "--model", BAD, *SMALL_RUN],
        ["report", "--model", BAD, *SMALL_RUN],
    ],
    ids=lambda argv: argv[0],
)
def test_bad_framework_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err
    assert re.search(BAD_MESSAGE, err), err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_sweep_config_with_bad_framework_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "s.toml"
    config.write_text(f'models = ["{BAD}"]\nclusters = ["dgx1-v100"]\nglobal_batch_sizes = [16]\n')
    code, _, err = run(capsys, "sweep", str(config), "--out", str(tmp_path / "r.csv"), "-q")
    assert code == 2
    assert "Traceback" not in err
    assert re.search(BAD_MESSAGE, err), err


def test_api_takes_the_option() -> None:
    profile, _ = resolve_inputs("bert48:framework=tf1", "dgx1-v100")
    assert profile.name == "bert48:framework=tf1"
    fused = simulate(make_plan("bert48", "dgx1-v100", global_batch_size=16, num_microbatches=4, stages=2),
                     "bert48", "dgx1-v100")
    plan = make_plan("bert48:framework=tf1", "dgx1-v100", global_batch_size=16, num_microbatches=4, stages=2)
    tf1 = simulate(plan, "bert48:framework=tf1", "dgx1-v100")
    assert tf1.iteration_time_s > fused.iteration_time_s
    with pytest.raises(InputError, match=BAD_MESSAGE):
        make_plan(BAD, "dgx1-v100", global_batch_size=16, num_microbatches=4, stages=2)
    with pytest.raises(InputError, match=BAD_MESSAGE):
        resolve_inputs(BAD, "dgx1-v100")
