"""Shared plumbing for the experiment scripts: command line, output files and the printed table.

Every experiment script is ``python experiments/NAME.py [--out DIR] [--small]``; it writes a CSV of
its numbers and a PNG figure into ``DIR`` (default ``experiments/out/NAME``) and prints a short
table. Files are written atomically (:mod:`pipesim.fileio`); figures use matplotlib's object API
(``matplotlib.figure.Figure``, Agg), never pyplot's global state.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from pipesim.fileio import atomic_write_text

__all__ = ["OUT_ROOT", "Row", "fmt", "parse_args", "save_figure", "table", "write_csv"]

Row = dict[str, Any]
"""One line of an experiment's results: column name -> number, text, bool or ``None`` (missing)."""

OUT_ROOT = Path(__file__).resolve().parent / "out"
"""Default parent of the output folders (git-ignored)."""


def parse_args(name: str, description: str, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse ``--out DIR`` (default ``experiments/out/<name>``) and ``--small``."""
    parser = argparse.ArgumentParser(prog=f"experiments/{name}.py", description=description)
    parser.add_argument(
        "--out", type=Path, default=OUT_ROOT / name, help=f"output folder (default experiments/out/{name})"
    )
    parser.add_argument("--small", action="store_true", help="a reduced run (what the tests exercise)")
    return parser.parse_args(argv)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


def write_csv(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Write ``rows`` (same keys, in order) as CSV with ``\\n`` line ends, atomically.

    Floats are written with ``repr`` (round-trip exact); ``None`` is an empty cell.

    Raises:
        ValueError: no rows.
        OSError: the file cannot be written.
    """
    if not rows:
        raise ValueError("write_csv: no rows to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    columns = list(rows[0])
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(c)) for c in columns])
    atomic_write_text(path, buffer.getvalue())
    return path


def save_figure(fig: Figure, path: Path, *, dpi: float = 110.0) -> Path:
    """Save ``fig`` (PNG/SVG/PDF by extension) atomically; the folder is created if missing.

    Raises:
        InputError: an unsupported extension.
        OSError: the file cannot be written.
    """
    from pipesim.reports.figure_file import save_figure as save

    path.parent.mkdir(parents=True, exist_ok=True)
    return save(fig, path, dpi=dpi)


def fmt(value: Any, digits: int = 3) -> str:
    """A short text form for the printed table: ``-`` for missing, ``digits`` significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"
    return str(value)


def table(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], *, digits: int = 3) -> str:
    """A fixed-width text table of ``columns`` of ``rows``."""
    cells = [[fmt(row.get(c), digits) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.rjust(w) for v, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(lines)
