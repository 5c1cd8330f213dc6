"""load_model (file or zoo name) and convert_torchgraph."""

from __future__ import annotations

import json
from importlib import import_module
from pathlib import Path

import pytest

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.profiles.models.fileformat import load_profile_file, save_profile
from pipesim.profiles.models.loader import convert_torchgraph, load_model
from pipesim.profiles.models.profile import Layer, ModelProfile

GRAPH = (
    "n1 -- Input -- forward_compute_time=1.0, backward_compute_time=0.0, activation_size=64.0, "
    "parameter_size=0.0\n"
    "n2 -- Linear(in_features=4, out_features=4) -- forward_compute_time=2.0, backward_compute_time=4.0, "
    "activation_size=64.0, parameter_size=80.0\n"
    "\tn1 -- n2\n"
)


def _profile(pbs: int = 8) -> ModelProfile:
    layer = Layer(name="a", fwd_time_s=0.5, bwd_time_s=1.0, activation_bytes=10, parameter_bytes=4)
    return ModelProfile(name="saved", layers=(layer,), profile_batch_size=pbs)


@pytest.fixture
def fake_zoo(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Replace the zoo's lookup with one that knows 'tiny' and 'gpt-1.3b'; records the calls."""
    calls: list[str] = []
    known = {"tiny": _profile(4), "gpt-1.3b": _profile(2)}

    def zoo_model(spec: str) -> ModelProfile:
        calls.append(spec)
        if spec not in known:
            raise UnknownNameError("model", spec, known)
        return known[spec]

    monkeypatch.setattr(import_module("pipesim.profiles.models.zoo"), "zoo_model", zoo_model, raising=False)
    return calls


@pytest.mark.parametrize("ext", [".json", ".toml", ".JSON"])
def test_pipesim_format_files(tmp_path: Path, ext: str) -> None:
    path = tmp_path / f"m{ext}"
    save_profile(_profile(8), path.with_suffix(ext.lower()))
    if ext != ext.lower():
        path.with_suffix(ext.lower()).rename(path)
    assert load_model(str(path)) == _profile(8)
    assert load_model(str(path), pbs=8) == _profile(8)  # agrees with the file: fine
    with pytest.raises(InputError, match=r"pbs=16 conflicts with .*profiled at batch size 8"):
        load_model(str(path), pbs=16)


def test_torchgraph_files(tmp_path: Path) -> None:
    path = tmp_path / "lin-pbs-16.txt"
    path.write_text(GRAPH)
    profile = load_model(str(path))
    assert profile.profile_batch_size == 16
    assert profile.name == "lin"
    assert [layer.name for layer in profile.layers] == ["Input", "Linear(in_features=4, out_features=4)"]
    assert load_model(str(path), pbs=4).profile_batch_size == 4
    # any extension other than .json/.toml is TorchGraph, including none
    other = tmp_path / "graph"
    other.write_text(GRAPH)
    assert load_model(str(other), pbs=2).num_layers == 2
    with pytest.raises(InputError, match=r"no '-pbs-N'"):
        load_model(str(other))
    bad = tmp_path / "bad-pbs-1.dat"
    bad.write_text("garbage\n")
    with pytest.raises(FormatError, match=r"bad-pbs-1\.dat:1: expected a node line"):
        load_model(str(bad))


def test_relative_path_without_separator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rel-pbs-3.txt").write_text(GRAPH)
    monkeypatch.chdir(tmp_path)
    assert load_model("rel-pbs-3.txt").profile_batch_size == 3


@pytest.mark.parametrize(
    "spec", ["missing.json", "missing.toml", "missing.txt", "dir/model", "./x", "a/b.json"]
)
def test_missing_files(
    spec: str, fake_zoo: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=rf"model file '{spec}' does not exist") as info:
        load_model(spec)
    assert not isinstance(info.value, UnknownNameError)
    assert fake_zoo == []  # never asked the zoo


def test_directory_is_not_a_model(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"is not a regular file"):
        load_model(str(tmp_path))


def test_zoo_names(fake_zoo: list[str]) -> None:
    assert load_model("tiny") == _profile(4)
    assert load_model("gpt-1.3b") == _profile(2)  # a dot in a zoo name is not an extension
    assert fake_zoo == ["tiny", "gpt-1.3b"]
    with pytest.raises(UnknownNameError, match=r"unknown model 'nope'; valid model names: gpt-1\.3b, tiny"):
        load_model("nope")
    with pytest.raises(InputError, match=r"model file 'model\.csv' does not exist"):
        load_model("model.csv")
    with pytest.raises(InputError, match=r"pbs=4 given for zoo model 'tiny'"):
        load_model("tiny", pbs=4)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_pbs(bad: object) -> None:
    with pytest.raises(InputError, match=r"pbs=.*: must be an integer >= 1"):
        load_model("tiny", pbs=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("ext", [".json", ".toml"])
def test_convert_torchgraph(tmp_path: Path, ext: str) -> None:
    src = tmp_path / "lin-pbs-16.txt"
    src.write_text(GRAPH)
    dst = tmp_path / f"out{ext}"
    profile = convert_torchgraph(src, dst)
    assert load_profile_file(dst) == profile
    assert profile.profile_batch_size == 16
    assert convert_torchgraph(src, dst, pbs=32).profile_batch_size == 32
    assert load_model(str(dst)).profile_batch_size == 32
    if ext == ".json":
        assert json.loads(dst.read_text())["layers"][1]["fwd_time_s"] == 0.002


def test_convert_never_leaves_a_partial_file(tmp_path: Path) -> None:
    src = tmp_path / "bad-pbs-1.txt"
    src.write_text(GRAPH + "\tn2 -- n9\n")
    dst = tmp_path / "out.json"
    with pytest.raises(FormatError, match=r"bad-pbs-1\.txt:4: edge n2 -- n9 names unknown node 'n9'"):
        convert_torchgraph(src, dst)
    assert not dst.exists()
    dst.write_text("keep")
    with pytest.raises(FormatError):
        convert_torchgraph(src, dst)
    assert dst.read_text() == "keep"
    with pytest.raises(InputError, match=r"output file .*out\.yaml.*unknown extension '\.yaml'"):
        convert_torchgraph(tmp_path / "never-read.txt", tmp_path / "out.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad-pbs-1.txt", "out.json"]
