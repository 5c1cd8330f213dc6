"""The ``pipesim`` command line: a thin layer over the library API.

Every sub-command lives in a module of this package with a ``register(subparsers)`` function that
adds its parser and sets ``func`` (called with the parsed arguments, returning the exit code).
Errors pipesim raises on purpose (:class:`pipesim.errors.PipesimError`) and unreadable files
become one line on stderr and exit code 2; nothing the user can type produces a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib import import_module

from pipesim.errors import PipesimError

__all__ = ["EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_USAGE = 2
"""Exit code for bad input of any kind (argparse uses 2 too)."""

_COMMAND_MODULES = (
    "pipesim.cli.catalog",
    "pipesim.cli.dynamic",
    "pipesim.cli.schedule",
    "pipesim.cli.compare",
    "pipesim.cli.report",
    "pipesim.cli.simulate",
    "pipesim.cli.plan",
    "pipesim.cli.profile",
    "pipesim.cli.strategy",
    "pipesim.cli.sweep",
)
"""Modules that each register one or more sub-commands, in the order ``--help`` lists them."""


EXIT_INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT, the shell convention)."""

_USAGE_ERRORS = ("the following arguments are required", "unrecognized arguments", "invalid choice")
"""argparse messages about the shape of the command line, which the usage line helps with."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors go through the same path as every other bad input.

    The message is one line, ``pipesim: error: plan: argument --gbs: ...`` (the sub-command named
    once); the usage line is printed only when the command line's shape is wrong (a missing or
    unknown argument), not for a bad value.
    """

    def error(self, message: str) -> None:  # type: ignore[override]
        if message.startswith(_USAGE_ERRORS):
            self.print_usage(sys.stderr)
        command = self.prog.removeprefix("pipesim").strip()
        raise SystemExit(_fail(f"{command}: {message}" if command else message))


def _fail(message: str) -> int:
    print(f"pipesim: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def _quiet_broken_pipe() -> int:
    """The reader of stdout went away (``pipesim ... | head``): stop quietly.

    As the Python documentation advises for SIGPIPE, stdout is pointed at ``os.devnull`` so the
    interpreter's final flush does not fail again; the exit code is 1, as Python's own.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 1


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Build the ``pipesim`` argument parser.

    Args:
        command: the sub-command about to be parsed: when a module of :data:`_COMMAND_MODULES`
            is named after it and registers it, only that module's sub-commands are registered
            (the others' arguments are not needed to parse it; registering all ten modules takes
            about 5 ms); otherwise, and by default, every sub-command.
    """
    if command is not None and f"pipesim.cli.{command}" in _COMMAND_MODULES:
        parser, commands = _parser((f"pipesim.cli.{command}",))
        if command in commands.choices:
            return parser
    return _parser(_COMMAND_MODULES)[0]


def _parser(
    modules: Sequence[str],
) -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:  # type: ignore[type-arg]
    """The parser with the sub-commands of ``modules``, and its sub-command action."""
    from pipesim import __version__

    parser = _Parser(
        prog="pipesim",
        description="Simulate and plan pipeline + data parallel training of large models.",
    )
    parser.add_argument("--version", action="version", version=f"pipesim {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    subparsers.required = True
    for name in modules:
        register: Callable[[argparse._SubParsersAction], None] = import_module(name).register  # type: ignore[type-arg]
        register(subparsers)
    return parser, subparsers


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI with ``argv`` (default: ``sys.argv[1:]``) and return the exit code.

    Returns:
        0 on success, 2 on any bad input (unknown name, malformed file, impossible plan),
        130 after Ctrl-C, 1 when stdout's reader went away (a closed pipe).
    """
    args_in = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(next((a for a in args_in if not a.startswith("-")), None))
    try:
        args = parser.parse_args(args_in)
    except SystemExit as exc:  # --help, --version, or a usage error already reported
        return int(exc.code) if isinstance(exc.code, int) else EXIT_USAGE
    level = logging.WARNING - 10 * min(int(args.verbose), 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        code = func(args)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except PipesimError as exc:
        return _fail(str(exc))
    except OSError as exc:
        where = f" {exc.filename!r}" if getattr(exc, "filename", None) else ""
        return _fail(f"cannot access{where}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        print("pipesim: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
