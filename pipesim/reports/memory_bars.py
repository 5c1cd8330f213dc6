"""Peak memory per device as grouped bars, one colour per simulated result."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from pipesim.errors import invalid
from pipesim.reports.figure_file import figure_format, save_figure
from pipesim.reports.gantt import RESULT_COLOURS
from pipesim.simulator.trace import SimulationResult
from pipesim.units import GIB

__all__ = ["memory_bar_figure", "write_memory_bar"]


def memory_bar_figure(rows: Sequence[tuple[str, SimulationResult]], *, title: str | None = None) -> Figure:
    """Peak memory per device for one or more results, as grouped bars with the capacity dashed.

    Each device has a group of bars, one per result (colour = result); the hatched lower part of a
    bar is the device's static memory (weights, gradients, optimizer state), the rest its peak
    activations. The device's capacity is a dashed line across each bar. GiB on the y axis.

    Args:
        rows: ``(name, result)`` pairs.
        title: a title, or ``None``.

    Returns:
        A :class:`matplotlib.figure.Figure`.

    Raises:
        InputError: ``rows`` is empty.
    """
    if not rows:
        raise invalid("rows", [], "must hold at least one result")
    devices = sorted({d.device for _, r in rows for d in r.devices})
    k = len(rows)
    width_in = min(24.0, max(8.0, 1.8 + len(devices) * (0.16 * k + 0.12)))
    fig = Figure(figsize=(width_in, 4.6))
    ax = fig.add_axes((0.9 / width_in, 0.7 / 4.6, 1.0 - 1.2 / width_in, 3.2 / 4.6))
    bar_w = 0.8 / k
    column = {d: i for i, d in enumerate(devices)}
    handles: list[Any] = []
    for j, (name, result) in enumerate(rows):
        colour = RESULT_COLOURS[j % len(RESULT_COLOURS)]
        xs = [column[d.device] - 0.4 + (j + 0.5) * bar_w for d in result.devices]
        ax.bar(
            xs,
            [d.peak_memory_bytes / GIB for d in result.devices],
            width=bar_w,
            color=colour,
            edgecolor="white",
            linewidth=0.4,
            zorder=2,
        )
        ax.bar(
            xs,
            [d.static_memory_bytes / GIB for d in result.devices],
            width=bar_w,
            color=colour,
            hatch="////",
            edgecolor="white",
            linewidth=0.0,
            zorder=3,
        )
        handles.append(
            Patch(facecolor=colour, label=f"{name} (max {result.peak_memory_bytes / GIB:.1f} GiB)")
        )
        caps = [(x, d.memory_capacity_bytes / GIB) for x, d in zip(xs, result.devices, strict=True)]
        caps = [(x, c) for x, c in caps if c > 0]
        if caps:
            ax.hlines(
                [c for _, c in caps],
                [x - bar_w / 2 for x, _ in caps],
                [x + bar_w / 2 for x, _ in caps],
                colors="black",
                linestyles="--",
                linewidth=0.9,
                zorder=4,
            )
    handles.append(
        Patch(facecolor="#999999", hatch="////", edgecolor="white", label="static (weights, grads, opt.)")
    )
    handles.append(Line2D([], [], color="black", linestyle="--", linewidth=0.9, label="capacity"))
    ax.set_xticks(range(len(devices)))
    ax.set_xticklabels([f"gpu{d}" for d in devices], fontsize=8, rotation=90 if len(devices) > 16 else 0)
    ax.set_xlim(-0.6, len(devices) - 0.4)
    ax.set_ylabel("peak memory (GiB)", fontsize=9)
    ax.grid(axis="y", color="#DDDDDD", linewidth=0.5, zorder=0)
    ax.set_axisbelow(True)
    ax.set_label("memory_bars")
    legend = {"ncol": min(len(handles), 4), "frameon": False, "fontsize": 8}
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0 - 0.08 / 4.6), **legend)
    if title:
        ax.set_title(title, fontsize=11, pad=4)
    return fig


def write_memory_bar(
    rows: Sequence[tuple[str, SimulationResult]],
    path: str | os.PathLike[str],
    *,
    dpi: float = 110.0,
    **kw: Any,
) -> Path:
    """Draw :func:`memory_bar_figure` and save it (PNG, SVG or PDF by extension).

    Raises:
        InputError: bad extension (checked before drawing) or no rows.
        OSError: the file cannot be written.
    """
    figure_format(path)
    return save_figure(memory_bar_figure(rows, **kw), path, dpi=dpi)
