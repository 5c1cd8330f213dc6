"""`pipesim models | clusters | show | convert` and the CLI's error handling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main

TORCHGRAPH = (
    "node1 -- Input -- forward_compute_time=0.0, backward_compute_time=0.0, activation_size=4096.0, "
    "parameter_size=0.0\n"
    "node2 -- Linear(in=8, out=8) -- forward_compute_time=1.5, backward_compute_time=3.0, "
    "activation_size=4096.0, parameter_size=288.0\n"
    "node3 -- ReLU -- forward_compute_time=0.5, backward_compute_time=0.5, activation_size=4096.0, "
    "parameter_size=0.0\n"
    "\tnode1 -- node2\n"
    "\tnode2 -- node3\n"
)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_models_lists_the_zoo(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "models")
    assert code == 0
    for name in ("vgg19", "resnet50", "gnmt16", "bert48", "xlnet36", "amoebanet36", "gpt"):
        assert name in out
    code, out, _ = run(capsys, "models", "--json")
    assert {row["name"] for row in json.loads(out)} >= {"bert48", "gpt"}


def test_clusters_lists_the_presets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "clusters")
    assert code == 0
    for name in ("dapple-2x8-v100", "dgx1-v100", "pcie-4x4-v100-10gbe"):
        assert name in out


def test_show_model_json_has_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "model", "bert48", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["name"] == "bert48"
    assert data["profile_batch_size"] >= 1
    assert abs(data["parameter_count"] - 637e6) / 637e6 < 0.03
    layer = data["layers"][1]
    for key in ("name", "fwd_time_s", "bwd_time_s", "activation_bytes", "parameter_bytes"):
        assert key in layer


def test_show_model_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "model", "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000")
    assert code == 0
    assert "fwd ms" in out
    assert "total" in out


def test_show_cluster_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "cluster", "dapple-2x8-v100")
    assert code == 0
    assert "GB/s" in out
    code, out, _ = run(capsys, "show", "cluster", "dapple-2x8-v100", "--json")
    data = json.loads(out)
    assert data["name"] == "dapple-2x8-v100"
    assert data["links"]


def test_convert_torchgraph_and_show_the_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "tiny-pbs-4.txt"
    src.write_text(TORCHGRAPH)
    out_file = tmp_path / "tiny.json"
    code, out, err = run(capsys, "convert", str(src), "-o", str(out_file))
    assert code == 0, err
    data = json.loads(out_file.read_text())
    assert data["profile_batch_size"] == 4
    assert [layer["fwd_time_s"] for layer in data["layers"]] == [0.0, 0.0015, 0.0005]
    code, out, _ = run(capsys, "show", "model", str(out_file), "--json")
    assert code == 0
    assert json.loads(out)["num_layers"] == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "model", "nosuchmodel"], "unknown model 'nosuchmodel'.*bert48"),
        (["show", "cluster", "nosuchcluster"], "unknown cluster 'nosuchcluster'.*dapple-2x8-v100"),
        (["show", "model", "missing/profile.json"], "missing/profile.json"),
        (["show", "model", "gpt:layers=0"], "layers"),
        (["models", "--bogus"], "unrecognized arguments"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "Traceback" not in err
    assert err.count("pipesim: error:") == 1
    import re

    assert re.search(message, err), err


def test_malformed_torchgraph_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad-pbs-2.txt"
    bad.write_text(TORCHGRAPH.replace("backward_compute_time=3.0", "backward_compute_time=oops"))
    code, _, err = run(capsys, "convert", str(bad), "-o", str(tmp_path / "x.json"))
    assert code == 2
    assert "bad-pbs-2.txt:2" in err
    assert not (tmp_path / "x.json").exists()
