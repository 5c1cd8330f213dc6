"""Helpers shared by the CLI sub-commands: common arguments, tables and JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["add_model_args", "add_cluster_arg", "print_json", "format_table", "positive_int"]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def add_model_args(parser: argparse.ArgumentParser, *, required: bool = True, default: str | None = None) -> None:
    """Add ``--model`` (zoo name, gpt:..., or profile file) and ``--pbs``."""
    parser.add_argument(
        "--model",
        required=required,
        default=default,
        help="zoo model name (see `pipesim models`), gpt:layers=..,hidden=.., or a profile file "
        "(pipesim JSON/TOML or TorchGraph .txt)"
        + (f" (default: {default})" if default else ""),
    )
    parser.add_argument(
        "--pbs",
        type=positive_int,
        default=None,
        help="profile batch size of a TorchGraph file whose name carries no -pbs-N",
    )


def add_cluster_arg(parser: argparse.ArgumentParser, *, required: bool = True, default: str | None = None) -> None:
    """Add ``--cluster`` (preset name or cluster TOML file)."""
    parser.add_argument(
        "--cluster",
        required=required,
        default=default,
        help="cluster preset (see `pipesim clusters`) or a cluster TOML file"
        + (f" (default: {default})" if default else ""),
    )


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *, align: str | None = None) -> str:
    """Format rows as a plain-text table; ``align`` has one ``l``/``r`` per column (default: r)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = align or "r" * len(headers)
    lines = []
    for k, row in enumerate(cells):
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align, strict=True)]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
