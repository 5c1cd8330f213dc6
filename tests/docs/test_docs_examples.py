"""The documentation's examples run, and the output it quotes is what the commands print.

Commands are read from the fenced code blocks of README.md, docs/sweep.md and docs/dynamic.md
(lines starting with ``pipesim`` or ``$ pipesim``, ``\\`` continuations joined, ``  # ...``
comments dropped) and run through :func:`pipesim.cli.main` in a scratch directory. Cheap ones run
in the default suite, the rest under ``pytest -m slow``; those that need a file or package the
repository does not ship are listed in ``NEEDS`` with the reason.
"""

from __future__ import annotations

import re
import shlex
import time
from pathlib import Path

import pytest

from pipesim.cli import main

ROOT = Path(__file__).resolve().parent.parent.parent

NEEDS = {
    "convert": "a TorchGraph profile file (vgg-19-pbs-32.txt) that is not in the repository",
    "profile": "PyTorch and the user's own model module",
}
SLOW = ("compare", "report", "sweep", "plot", "dynamic", "strategy", "verify")
"""Sub-commands that take seconds; they run under ``pytest -m slow``."""


def fenced_blocks(path: Path) -> list[list[str]]:
    """The lines of each fenced code block of a Markdown file."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current = []
            else:
                blocks.append(current)
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def commands(block: list[str]) -> list[list[str]]:
    """The ``pipesim`` commands of a block, as argument lists (without ``pipesim``)."""
    joined: list[str] = []
    pending = ""
    for line in block:
        text = pending + line.strip()
        if text.endswith("\\"):
            pending = text[:-1].rstrip() + " "
            continue
        pending = ""
        joined.append(text)
    found = []
    for text in joined:
        text = text.removeprefix("$ ")
        if not text.startswith("pipesim "):
            continue
        text = re.split(r"\s{2,}#", text)[0]
        found.append(shlex.split(text)[1:])
    return found


def doc_commands(name: str) -> list[list[str]]:
    """The runnable commands of a document (synopses, with ``[...]`` or ``|`` choices, left out)."""
    return [
        cmd
        for block in fenced_blocks(ROOT / name)
        for cmd in commands(block)
        if not any(token.startswith("[") or "|" in token for token in cmd)
    ]


def _run_all(
    cmds: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[str]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    ran = []
    for cmd in cmds:
        if cmd[0] in NEEDS:
            continue
        started = time.perf_counter()
        code = main(cmd)
        _out, err = capsys.readouterr()
        assert code == 0, f"pipesim {shlex.join(cmd)} failed: {err}"
        ran.append(f"{shlex.join(cmd)} ({time.perf_counter() - started:.1f} s)")
    return ran


def test_the_parser_reads_continuations_and_comments() -> None:
    block = ["$ pipesim plot r.csv --x a \\", "    --by b  # a comment", "not a command", "pipesim models"]
    assert commands(block) == [["plot", "r.csv", "--x", "a", "--by", "b"], ["models"]]


def test_every_readme_command_is_known() -> None:
    from pipesim.cli import build_parser

    parser = build_parser()
    for cmd in doc_commands("README.md") + doc_commands("docs/sweep.md"):
        if cmd[0] in NEEDS:
            continue
        try:
            parser.parse_args(cmd)
        except SystemExit:
            pytest.fail(f"the docs show `pipesim {shlex.join(cmd)}`, which the CLI does not accept")


def test_readme_cheap_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cheap = [c for c in doc_commands("README.md") if c[0] not in SLOW]
    assert len(cheap) >= 8
    _run_all(cheap, tmp_path, monkeypatch, capsys)


@pytest.mark.slow
def test_readme_slow_commands_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = [c for c in doc_commands("README.md") if c[0] in SLOW]
    _run_all(slow, tmp_path, monkeypatch, capsys)


def _quoted_outputs(name: str) -> list[tuple[list[str], list[str]]]:
    """``$ pipesim ...`` blocks: the command and the output lines the document quotes."""
    quoted = []
    for block in fenced_blocks(ROOT / name):
        if not block or not block[0].startswith("$ pipesim"):
            continue
        lines = list(block)
        head = []
        while lines and (not head or head[-1].endswith("\\")):
            head.append(lines.pop(0))
        (cmd,) = commands(head)
        quoted.append((cmd, lines))
    return quoted


def test_dynamic_md_quoted_output(capsys: pytest.CaptureFixture[str]) -> None:
    ((cmd, want),) = _quoted_outputs("docs/dynamic.md")
    assert main(cmd) == 0
    got = capsys.readouterr().out.splitlines()
    first, _, _ = want[0].partition("; ...")
    assert got[0].startswith(first)
    rows = [line for line in got if line.split()[:1] in (["pad"], ["pack"], ["dynamic"])]
    wanted = [line for line in want if line.split()[:1] in (["pad"], ["pack"], ["dynamic"])]
    assert [r.split()[:-1] for r in rows] == [w.split()[:-1] for w in wanted]  # all but plan ms


@pytest.mark.slow
def test_readme_quoted_compare_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    ((cmd, want),) = _quoted_outputs("README.md")
    assert main(cmd) == 0
    got = capsys.readouterr().out.splitlines()
    assert got[: len(want)] == want


@pytest.mark.slow
def test_sweep_md_examples_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cmds = doc_commands("docs/sweep.md")
    runnable = [
        c for c in cmds if "CONFIG.toml" not in c and "RESULTS.csv" not in c and "sweep.toml" not in c
    ]
    assert [c[0] for c in runnable[:2]] == ["sweep", "plot"]
    _run_all(runnable[:2], tmp_path, monkeypatch, capsys)
    assert (tmp_path / "throughput.png").read_bytes().startswith(b"\x89PNG")
    python = [b for b in fenced_blocks(ROOT / "docs/sweep.md") if any("plot_sweep" in line for line in b)]
    for block in python:
        exec(compile("\n".join(block), "docs/sweep.md", "exec"), {})
    assert (tmp_path / "cost.svg").exists()
    assert (tmp_path / "throughput.pdf").read_bytes().startswith(b"%PDF")
