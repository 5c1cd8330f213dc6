"""Figure sizes: paper column widths by name, or width x height in inches.

Kept apart from the charts so that checking a ``--figsize`` does not import matplotlib.
"""

from __future__ import annotations

import math

from pipesim.errors import invalid

__all__ = ["FIGSIZES", "figure_width", "parse_figsize"]

FIGSIZES: dict[str, float] = {"screen": 11.0, "double": 7.16, "single": 3.5}
"""Named figure widths in inches: a screen, a two-column paper's full text width (IEEE, 7.16 in)
and one column (3.5 in)."""
_MIN_WIDTH_IN = 3.0


def parse_figsize(text: str) -> str | tuple[float, float]:
    """A ``--figsize`` value: a name from :data:`FIGSIZES`, or ``WxH`` in inches (``7x4``).

    Raises:
        InputError: neither a known name nor two numbers joined by ``x``.
    """
    if text in FIGSIZES:
        return text
    width, sep, height = text.partition("x")
    try:
        if sep:
            size = (float(width), float(height))
            if all(math.isfinite(v) for v in size):
                return size
    except ValueError:
        pass
    raise invalid("--figsize", text, f"must be {', '.join(FIGSIZES)} or WxH in inches (e.g. 7x4)")


def figure_width(figsize: str | tuple[float, float]) -> tuple[float, float | None]:
    """``(width, height or None)`` in inches of a figure size (a name or ``(width, height)``).

    Raises:
        InputError: an unknown name, or a width outside 3-100 in or a height outside 0-200 in.
    """
    if isinstance(figsize, str):
        if figsize not in FIGSIZES:
            raise invalid("figsize", figsize, f"must be one of {', '.join(FIGSIZES)} or (width, height)")
        return FIGSIZES[figsize], None
    if len(figsize) != 2:
        raise invalid("figsize", figsize, "must be a name or (width, height) in inches")
    width, height = (float(v) for v in figsize)
    if not width >= _MIN_WIDTH_IN or not height > 0 or width > 100 or height > 200:
        raise invalid("figsize", figsize, f"width must be {_MIN_WIDTH_IN:g}-100 in, height 0-200 in")
    return width, height
