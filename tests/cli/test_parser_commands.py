"""The CLI registers only the sub-command's own module when it can (``build_parser(command)``)."""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from pipesim.cli import build_parser, main


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


FULL = _commands(build_parser())


def test_every_sub_command_parses_as_with_the_full_parser() -> None:
    """Each sub-command's parser, built alone or with all the others, prints the same help."""
    assert {"simulate", "plan", "verify", "models", "sweep", "plot", "schedule"} <= FULL.keys()
    for name, full in FULL.items():
        alone = _commands(build_parser(name))
        assert name in alone
        assert alone[name].format_help() == full.format_help()


def test_simulate_alone_registers_only_its_module() -> None:
    assert set(_commands(build_parser("simulate"))) == {"simulate"}
    assert set(_commands(build_parser("plan"))) == {"plan", "verify"}


@pytest.mark.parametrize("command", ["catalog", "nosuch", "_common", None])
def test_a_name_that_is_no_command_gets_every_sub_command(command: str | None) -> None:
    """``catalog`` is a module that registers ``models``, ``clusters``, ...: not a command itself."""
    assert _commands(build_parser(command)).keys() == FULL.keys()


def test_unknown_command_lists_every_choice(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["catalog"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'catalog'" in err
    assert "simulate" in err
    assert "models" in err


def test_verbose_before_the_command() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["-v", "simulate", "--help"]) == 0
    assert out.getvalue() == FULL["simulate"].format_help()
