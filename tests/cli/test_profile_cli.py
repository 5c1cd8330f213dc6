"""`pipesim profile`: arguments and the missing-torch message (no torch needed), then runs with torch."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipesim.cli import main
from pipesim.profiles import load_model

NETS = textwrap.dedent(
    """
    import torch.nn as nn

    def make_mlp():
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))

    def make_tokens():
        return nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 4))
    """
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Run in ``tmp_path``; restore sys.path and forget the modules the test imported."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith(("cli_nets", "_pipesim_user_")):
            del sys.modules[name]


# --------------------------------------------------------------------------------------------
# Without torch
def test_help_lists_profile(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    assert "profile" in out
    code, out, _ = run(capsys, "profile", "--help")
    assert code == 0
    for flag in (
        "--batch-size",
        "--input-shape",
        "--device",
        "--dtype",
        "--repeats",
        "-o",
        "pipeline_blocks()",
    ):
        assert flag in out


def test_missing_torch_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    code, out, err = run(capsys, "profile", "nets:make_mlp", "--batch-size", "2", "-o", "p.json")
    assert code == 2
    assert err.strip() == "pipesim: error: torch is not installed: pip install 'pipesim[torch]'"
    assert out == ""
    assert not (isolated / "p.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--batch-size", "0"], "batch sizes must be >= 1"),
        (["--batch-size", "2,x"], "'x' is not an integer"),
        (["--batch-size", "4,4"], "distinct"),
        (["--batch-size", "2", "--input-shape", "3xq"], "'q' is not an integer"),
        (["--batch-size", "2", "--dtype", "float64"], "invalid choice"),
        (["--batch-size", "2", "--device", "tpu"], "invalid choice"),
        (["--batch-size", "2", "--repeats", "0"], "must be >= 1"),
        ([], "--batch-size"),
    ],
)
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = run(capsys, "profile", "nets:make_mlp", "-o", "p.json", *args)
    assert code == 2
    assert message in err


def test_bad_spec_and_output_fail_before_torch(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, isolated: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    code, _, err = run(capsys, "profile", "no_colon", "--batch-size", "2", "-o", "p.json")
    assert code == 2
    assert "must be MODULE:FACTORY" in err
    code, _, err = run(capsys, "profile", "nets:make", "--batch-size", "2", "-o", "p.csv")
    assert code == 2
    assert "unknown extension '.csv'" in err
    code, _, err = run(capsys, "profile", "nets:make", "--batch-size", "2", "--warmup", "-1", "-o", "p.json")
    assert code == 2
    assert "argument --warmup: '-1' must be >= 0" in err


# --------------------------------------------------------------------------------------------
# With torch
@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


FAST = ("--repeats", "2", "--warmup", "1", "--threads", "1")


def test_profile_a_dotted_module_and_simulate_it(
    torch: Any, capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    (isolated / "cli_nets_a.py").write_text(NETS)
    code, out, err = run(
        capsys, "profile", "cli_nets_a:make_mlp", "--batch-size", "1,2,4", *FAST, "-o", "mlp.json"
    )
    assert code == 0, err
    assert "linear0" in out
    assert "relu1" in out
    assert "linear2" in out
    assert "batch scaling over 1,2,4" in out
    assert "R^2" in out
    assert "wrote mlp.json" in out
    profile = load_model("mlp.json")
    assert profile.name == "make_mlp"
    assert profile.profile_batch_size == 4
    assert [p.batch_size for p in profile.batch_points] == [1, 2]
    assert profile.layers[2].activation_bytes == 4 * 2 * 4
    code, out, err = run(
        capsys, "simulate", "--model", "mlp.json", "--cluster", "dgx1-v100", "--gbs", "8",
        "--microbatches", "2", "--stages", "2", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["iteration_time_s"] > 0


def test_profile_a_file_with_token_input_as_toml_and_json_report(
    torch: Any, capsys: pytest.CaptureFixture[str], isolated: Path
) -> None:
    (isolated / "nets_file.py").write_text(NETS)
    code, out, err = run(
        capsys, "profile", "./nets_file.py:make_tokens", "--batch-size", "3", "--input-shape", "5",
        "--name", "tok", *FAST, "--json", "-o", "tok.toml",
    )  # fmt: skip
    assert code == 0, err
    report = json.loads(out)
    assert report["output"] == "tok.toml"
    assert report["profile_batch_size"] == 3
    embedding = report["blocks"][0]
    assert embedding["output_shapes"] == [[3, 5, 8]]
    assert embedding["saved_activation_bytes"] == 3 * 5 * 8  # int64 token ids
    assert report["linearity"][0]["r_squared"] is None
    assert load_model("tok.toml").name == "tok"


def test_user_errors_exit_2(torch: Any, capsys: pytest.CaptureFixture[str], isolated: Path) -> None:
    (isolated / "cli_nets_b.py").write_text(NETS)
    cases = [
        (["cli_nets_b:make_nothing"], "has no 'make_nothing'"),
        (["missing_nets_zz:make"], "'missing_nets_zz' not found"),
        (["./nope.py:make"], "does not exist"),
        (["cli_nets_b:nn"], "is a module, not a callable"),
        (["cli_nets_b:make_mlp", "--input-shape", "7"], "does not accept the synthetic input"),
        (["cli_nets_b:make_tokens"], "cannot infer the input shape"),
    ]
    for args, message in cases:
        code, _, err = run(capsys, "profile", *args, "--batch-size", "2", *FAST, "-o", "x.json")
        assert code == 2, (args, err)
        assert message in err, (args, err)
        assert "Traceback" not in err
    assert not (isolated / "x.json").exists()
