"""Figure files: one writer for every chart, PNG, SVG or PDF chosen by the file's extension."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure

from pipesim.errors import invalid
from pipesim.fileio import atomic_write_bytes

__all__ = ["FORMATS", "figure_format", "save_figure"]

log = logging.getLogger(__name__)

FORMATS: dict[str, str] = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
"""File extension -> matplotlib format for the chart writers."""


def save_figure(fig: Figure, path: str | os.PathLike[str], *, dpi: float = 110.0) -> Path:
    """Save ``fig`` atomically as PNG, SVG or PDF, chosen by the extension of ``path``.

    SVG and PDF are written without a creation date and with a fixed SVG id salt, so the same
    figure gives the same bytes.

    Args:
        fig: the figure.
        path: the target file; the extension (case-insensitive) picks the format.
        dpi: resolution for PNG, dots per inch.

    Returns:
        The path written.

    Raises:
        InputError: the extension is not ``.png``, ``.svg`` or ``.pdf``.
        OSError: the file cannot be written.
    """
    target = Path(path)
    fmt = figure_format(target)
    metadata: dict[str, Any] = {"svg": {"Date": None}, "pdf": {"CreationDate": None}}.get(fmt, {})
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "pipesim"}):
        fig.savefig(buffer, format=fmt, dpi=dpi, metadata=metadata)
    atomic_write_bytes(target, buffer.getvalue())
    log.debug("wrote %s (%d bytes)", target, buffer.tell())
    return target


def figure_format(path: str | os.PathLike[str]) -> str:
    """The matplotlib format a figure file's extension asks for (``png``, ``svg`` or ``pdf``).

    Raises:
        InputError: any other extension.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise invalid("path", str(path), f"extension {suffix or '(none)'} is not one of {', '.join(FORMATS)}")
    return FORMATS[suffix]
