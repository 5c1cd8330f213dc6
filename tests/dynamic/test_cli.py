"""``pipesim dynamic``: output, JSON document and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main


def test_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dynamic", "--mix", "glue-like", "--samples", "48", "--seed", "2"]) == 0
    out = capsys.readouterr().out
    assert "bert48 on dapple-2x8-v100: 4 stages, schedule 1f1b; 48 samples" in out
    for name in ("pad", "pack", "dynamic"):
        assert f"\n{name} " in out


def test_json_document(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text(
        "\n".join(str(n) for n in [12, 300, 40, 41, 500, 7, 64, 64, 200, 90]) + "\n", encoding="utf-8"
    )
    code = main(
        [
            "dynamic",
            "--lengths",
            str(path),
            "--strategies",
            "pad,dynamic",
            "--schedule",
            "memory-aware",
            "--stages",
            "2",
            "--memory-limit-gib",
            "4",
            "--json",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["samples"] == 10
    assert data["real_tokens"] == 1318
    assert data["memory_limit_bytes"] == 4 * 2**30
    assert [s["name"] for s in data["strategies"]] == ["pad", "dynamic"]
    for s in data["strategies"]:
        assert set(s) >= {
            "name",
            "tokens_per_s",
            "padding_fraction",
            "iteration_time_s",
            "peak_memory_bytes",
            "microbatches",
        }
        assert sum(s["microbatch_sizes"]) == 10
        assert s["tokens_per_s"] == pytest.approx(1318 / s["iteration_time_s"])


def test_gpt_with_pairs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([[100, 20], [30, 2], [700, 60], [50, 50]]), encoding="utf-8")
    code = main(
        [
            "dynamic",
            "--model",
            "gpt:layers=8,hidden=512,heads=8,seq=1024",
            "--lengths",
            str(path),
            "--dtype",
            "float16",
            "--json",
            "--strategies",
            "dynamic",
        ]
    )
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert data["real_tokens"] == 1012


@pytest.mark.parametrize(
    ("content", "extra", "message"),
    [
        ("", [], "empty"),
        ("12\n600\n", [], "lengths[1]=600: sample is longer than bert48's maximum sequence length (512"),
        ("12\n400\n", ["--memory-limit-gib", "0.05"], "smaller than one sample of 400 tokens"),
        ("12\n", ["--memory-limit-gib", "-1"], "--memory-limit: '-1' must be a number in (0, 1e+18]"),
        ("12\n", ["--schedule", "bogus"], "--schedule='bogus'"),
        ("12\n", ["--strategies", "bucket"], "unknown strategy 'bucket'"),
        ("12\n", ["--model", "xlnet36"], "supports bert48, gpt"),
        ("12\nx\n", [], ":2: 'x' is not an integer"),
    ],
)
def test_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, extra: list[str], message: str
) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text(content, encoding="utf-8")
    assert main(["dynamic", "--lengths", str(path), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_needs_lengths_or_mix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dynamic"]) == 2
    assert "--lengths" in capsys.readouterr().err
