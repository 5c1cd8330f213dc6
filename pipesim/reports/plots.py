"""Plots of sweep results: one line or bar series per group, any column against any other.

``plot_sweep("results.csv", x="global_batch_size", y="throughput_samples_per_s", by="schedule")``
returns a :class:`matplotlib.figure.Figure` (built without pyplot, so no display is needed);
:func:`write_sweep_plot` saves it as PNG, SVG or PDF by the file's extension.

Axes are labelled in words with units (``throughput (samples/s)``, see :func:`axis_label`);
counts that grow in powers of two (batch sizes, micro-batches, devices, stages) get a base-2
logarithmic axis with a tick at each value drawn; the legend sits outside the data, at the right.
Rows that differ only in a ``seed`` column (repeated jittered runs) are one point: their mean,
with an error bar of one standard deviation.

Colours: the Okabe-Ito colour-blind-safe palette (Okabe & Ito, "Color Universal Design", 2008).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, NullLocator

from pipesim.errors import InputError, invalid

__all__ = ["KINDS", "axis_label", "plot_sweep", "write_sweep_plot"]

log = logging.getLogger(__name__)

KINDS = ("line", "bar")
"""The plot kinds: ``line`` (one line per group) and ``bar`` (grouped bars per x value)."""

_COLOURS = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

Rows = Sequence[Mapping[str, Any]]
FilterValue = object | Sequence[object]


_LABELS: dict[str, str] = {
    "global_batch_size": "global batch size (samples)",
    "num_microbatches": "micro-batches per iteration",
    "num_stages": "pipeline stages",
    "num_devices": "GPUs",
    "iteration_time_s": "iteration time (s)",
    "estimated_iteration_time_s": "estimated iteration time (s)",
    "throughput_samples_per_s": "throughput (samples/s)",
    "bubble_fraction": "bubble (fraction of the iteration)",
    "peak_memory_bytes": "peak memory (bytes)",
    "price_per_device_hour_usd": "price per GPU-hour (USD)",
    "cost_per_million_samples_usd": "cost per million samples (USD)",
    "fits": "fits in memory",
}
_UNIT_SUFFIXES = (
    ("_samples_per_s", "samples/s"),
    ("_bytes_per_s", "bytes/s"),
    ("_per_s", "1/s"),
    ("_bytes", "bytes"),
    ("_usd", "USD"),
    ("_s", "s"),
)
_POWER_OF_TWO_COLUMNS = frozenset(
    {"global_batch_size", "num_microbatches", "num_stages", "num_devices", "microbatches", "devices", "gpus"}
)
_REPEAT_COLUMNS = ("seed",)  # rows differing only here are repeats of one point (error bars)


def axis_label(column: str) -> str:
    """A human axis label with its unit for a results column: ``throughput_samples_per_s`` ->
    ``throughput (samples/s)``; unknown columns lose their unit suffix to a ``(unit)`` and their
    underscores to spaces."""
    if column in _LABELS:
        return _LABELS[column]
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix) and len(column) > len(suffix):
            return f"{column[: -len(suffix)].replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def _text(value: object) -> str:
    """A cell as text, as the results file writes it (``true``, ``16``, ``0.5``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_columns(columns: Sequence[str], wanted: Sequence[tuple[str, str]]) -> None:
    for field, column in wanted:
        if column not in columns:
            raise invalid(field, column, f"is not a column; columns: {', '.join(columns)}")


def _select(rows: Rows, filters: Mapping[str, FilterValue]) -> list[Mapping[str, Any]]:
    kept = list(rows)
    for column, wanted in filters.items():
        values = wanted if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
        allowed = {_text(v) for v in values}
        kept = [r for r in kept if _text(r[column]) in allowed]
    return kept


def _group_label(row: Mapping[str, Any], by: Sequence[str]) -> str:
    return ", ".join(_text(row[c]) or "(none)" for c in by)


def _check_unique(
    rows: Sequence[Mapping[str, Any]], x: str, by: Sequence[str], columns: Sequence[str]
) -> None:
    seen: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in rows:
        spot = (_group_label(row, by) if by else "", _text(row[x]))
        other = seen.setdefault(spot, row)
        if other is not row:
            differ = [c for c in columns if c not in ("key",) and _text(row[c]) != _text(other[c])]
            differ = [c for c in differ if c not in _REPEAT_COLUMNS]
            if not [c for c in differ if c in _PARAMETERS or c in by or c == x] and any(
                c in _REPEAT_COLUMNS for c in columns
            ):
                continue  # repeats of one point under different seeds: averaged, with error bars
            params = [c for c in differ if c in _PARAMETERS] or differ
            raise InputError(
                f"several rows share x {x}={spot[1]}"
                + (f" in group {spot[0]!r}" if by else "")
                + f"; they differ in {', '.join(params)}: add those columns to by or pick one with a filter"
            )


_PARAMETERS = ("model", "cluster", "overrides", "global_batch_size", "planner", "schedule")


def plot_sweep(
    rows_or_path: Rows | str | os.PathLike[str],
    *,
    x: str,
    y: str,
    by: str | Sequence[str] | None = None,
    kind: str = "line",
    filters: Mapping[str, FilterValue] | None = None,
    title: str | None = None,
    log_x: bool | None = None,
    log_y: bool = False,
) -> Figure:
    """Plot ``y`` against ``x`` for sweep results, one series per value of the ``by`` columns.

    Only rows with status ``ok`` and a value in ``x`` and ``y`` are drawn. Numeric ``x`` values
    are placed on a numeric axis (lines) or as sorted categories (bars); other values are sorted
    categories.

    Args:
        rows_or_path: a results CSV (see :func:`pipesim.sweep.read_results`) or rows (column -> value).
        x: the column on the horizontal axis.
        y: the column on the vertical axis.
        by: column(s) whose values name the series (default: one series).
        kind: ``"line"`` or ``"bar"``.
        filters: keep only rows whose column has this value (or one of these values); values
            compare by their text in the results file (``16``, ``true``, ``gpipe``).
        title: figure title (default: ``"<y> by <by>"``).
        log_x: logarithmic horizontal axis (lines with numeric x only); ``None`` (default) picks
            base 2 for power-of-two counts (batch sizes, micro-batches, stages, GPUs) whose
            values span at least a factor of 4.
        log_y: logarithmic vertical axis.

    Returns:
        The figure.

    Raises:
        InputError: an unknown column (the message lists the columns), an unknown ``kind``, no
            rows left to plot, or two rows at the same ``x`` in one series (the message names
            the columns they differ in).
        FormatError: the results file is malformed.
    """
    from pipesim.sweep.store import read_results

    rows: Rows = read_results(rows_or_path) if isinstance(rows_or_path, str | os.PathLike) else rows_or_path
    if kind not in KINDS:
        raise invalid("kind", kind, f"must be one of {', '.join(KINDS)}")
    by_columns = [by] if isinstance(by, str) else list(by or [])
    filters = dict(filters or {})
    if not rows:
        raise InputError("no rows to plot")
    columns = list(rows[0])
    _check_columns(
        columns, [("x", x), ("y", y), *(("by", c) for c in by_columns), *(("filter", c) for c in filters)]
    )
    selected = _select(rows, filters)
    drawn = [
        r for r in selected if r.get("status", "ok") == "ok" and r[x] not in (None, "") and _is_number(r[y])
    ]
    if not drawn:
        raise InputError(
            f"no rows to plot: {len(rows)} rows, {len(selected)} after the filters, none with status ok "
            f"and values in {x} and {y}"
        )
    _check_unique(drawn, x, by_columns, columns)
    numeric_x = all(_is_number(r[x]) for r in drawn)
    categories = sorted({r[x] for r in drawn}) if numeric_x else sorted({_text(r[x]) for r in drawn})
    position = {c: i for i, c in enumerate(categories)}
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in sorted(drawn, key=lambda r: _group_label(r, by_columns) if by_columns else ""):
        groups.setdefault(_group_label(row, by_columns) if by_columns else y, []).append(row)

    fig = Figure(figsize=(7.0, 4.2), layout="constrained")
    ax = fig.subplots()
    width = 0.8 / len(groups)
    any_errors = False
    for i, (label, members) in enumerate(groups.items()):
        colour = _COLOURS[i % len(_COLOURS)]
        points: dict[Any, list[float]] = {}  # x key -> y values (several: repeats under seeds)
        for r in members:
            points.setdefault(r[x] if numeric_x else _text(r[x]), []).append(float(r[y]))
        keys = sorted(points, key=lambda k: position[k])
        slots = [position[k] for k in keys]
        values = [float(np.mean(points[k])) for k in keys]
        errors = [float(np.std(points[k])) if len(points[k]) > 1 else 0.0 for k in keys]
        yerr = errors if any(errors) else None
        any_errors |= yerr is not None
        if kind == "bar":
            offsets = [s - 0.4 + width * (i + 0.5) for s in slots]
            ax.bar(offsets, values, width=width, color=colour, label=label, yerr=yerr, capsize=3)
        else:
            xs = [float(k) for k in keys] if numeric_x else slots
            ax.plot(xs, values, marker=_MARKERS[i % len(_MARKERS)], color=colour, label=label)
            if yerr is not None:
                ax.errorbar(xs, values, yerr=yerr, fmt="none", ecolor=colour, capsize=3)
    if kind == "bar" or not numeric_x:
        ax.set_xticks(range(len(categories)), [_text(c) for c in categories])
    else:
        positive = all(float(c) > 0 for c in categories)
        span = float(categories[-1]) / float(categories[0]) if positive else 0.0
        auto = x in _POWER_OF_TWO_COLUMNS and positive and span >= 4
        if log_x or (log_x is None and auto):
            ax.set_xscale("log", base=2)
        if (log_x or (log_x is None and auto)) and len(categories) <= 16:
            ax.xaxis.set_major_locator(FixedLocator([float(c) for c in categories]))
            ax.xaxis.set_minor_locator(NullLocator())
            ax.set_xticklabels([_text(c) for c in categories])
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(axis_label(x))
    ax.set_ylabel(axis_label(y))
    ax.grid(True, axis="y", alpha=0.3)
    if by_columns or any_errors:
        legend_title = ", ".join(by_columns) + (" (mean ± s.d. over seeds)" if any_errors else "")
        longest = max(len(label) for label in groups)
        where: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0)}  # right of the data
        if longest > 24:  # long names: below the axes, so the plot keeps its width
            where = {"loc": "upper center", "bbox_to_anchor": (0.5, -0.14), "ncol": 1 if longest > 40 else 2}
        ax.legend(title=legend_title.strip(), fontsize="small", frameon=False, **where)
    default_title = axis_label(y) + (f" by {', '.join(by_columns)}" if by_columns else "")
    ax.set_title(title if title is not None else default_title[:1].upper() + default_title[1:])
    log.debug("plotted %d rows in %d series", len(drawn), len(groups))
    return fig


def write_sweep_plot(
    rows_or_path: Rows | str | os.PathLike[str], path: str | os.PathLike[str], **options: Any
) -> Path:
    """Plot (see :func:`plot_sweep`, which takes ``options``) and save atomically as PNG, SVG or
    PDF, chosen by the extension of ``path``.

    Returns:
        The path written.

    Raises:
        InputError: as for :func:`plot_sweep`, or an extension other than ``.png``, ``.svg``, ``.pdf``.
        OSError: the file cannot be written.
    """
    from pipesim.reports.figure_file import save_figure

    return save_figure(plot_sweep(rows_or_path, **options), path)
