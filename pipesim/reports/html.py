"""A comparison as one self-contained HTML page: table, Gantt chart, memory chart and plan.

The page has no external resources: the figures are SVG embedded as ``data:`` URIs in ``<img>``
elements, the style sheet is inline, and there is no script, so it opens offline and can be mailed
or attached as one file. Same comparison in, same bytes out (the SVG writer uses a fixed id salt
and no date).
"""

from __future__ import annotations

import base64
import html
import io
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import matplotlib
from matplotlib.figure import Figure

from pipesim.fileio import atomic_write_text
from pipesim.plan import Plan
from pipesim.simulator.trace import SimulationResult
from pipesim.units import GIB, MS


class CompareRow(Protocol):
    """What the report reads of a :class:`pipesim.compare.CompareRow` (kept structural, so that
    this module does not import :mod:`pipesim.compare`, which imports it)."""

    @property
    def label(self) -> str: ...
    @property
    def plan(self) -> Plan: ...
    @property
    def result(self) -> SimulationResult: ...
    def to_dict(self) -> dict[str, Any]: ...


__all__ = ["compare_report_html", "figure_data_uri", "write_compare_report"]

log = logging.getLogger(__name__)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.3em 0.7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f4f4f4; }
td.no { color: #b2182b; font-weight: bold; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
p.note { color: #555; font-size: 0.9em; }
"""


def figure_data_uri(fig: Figure) -> str:
    """``fig`` as an SVG ``data:`` URI (base64), reproducible byte for byte."""
    buffer = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "pipesim"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None})
    return "data:image/svg+xml;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _cells(tag: str, values: Sequence[str], classes: Sequence[str] = ()) -> str:
    out = []
    for i, v in enumerate(values):
        cls = f' class="{classes[i]}"' if i < len(classes) and classes[i] else ""
        out.append(f"<{tag}{cls}>{html.escape(v)}</{tag}>")
    return "<tr>" + "".join(out) + "</tr>"


def _summary_table(rows: Sequence[CompareRow]) -> str:
    head = [
        "schedule",
        "iteration (ms)",
        "samples/s",
        f"vs {rows[0].label}",
        "bubble",
        "peak memory (GiB)",
        "capacity (GiB)",
        "fits",
        "estimate (ms)",
        "$ / M samples",
    ]
    lines = [_cells("th", head)]
    for row in rows:
        d = row.to_dict()
        est = d["estimated_iteration_time_s"]
        cost = d["cost_per_million_samples_usd"]
        values = [
            row.label,
            f"{d['iteration_time_s'] / MS:.1f}",
            f"{d['throughput_samples_per_s']:.1f}",
            f"{d['speedup']:.2f}x",
            f"{d['bubble_fraction']:.1%}",
            f"{d['peak_memory_bytes'] / GIB:.1f}",
            f"{d['memory_capacity_bytes'] / GIB:.1f}",
            "yes" if d["fits"] else "NO",
            "-" if est is None else f"{est / MS:.1f}",
            "-" if cost is None else f"{cost:.2f}",
        ]
        lines.append(_cells("td", values, ["", "", "", "", "", "", "", "" if d["fits"] else "no"]))
    return "<table>\n" + "\n".join(lines) + "\n</table>"


def _plan_table(row: CompareRow) -> str:
    plan = row.plan
    lines = [_cells("th", ["stage", "layers", "replicas", "devices"])]
    for i, stage in enumerate(plan.stages):
        devices = "auto" if stage.devices is None else ",".join(str(d) for d in stage.devices)
        layers = f"{stage.first_layer}-{stage.last_layer}"
        lines.append(_cells("td", [str(i), layers, str(stage.replicas), devices]))
    facts = (
        f"schedule {plan.schedule.value}, global batch {plan.global_batch_size} in "
        f"{plan.num_microbatches} micro-batches, {plan.num_devices} devices, optimizer "
        f"{plan.optimizer.value}, recompute {plan.recompute.value}, all-reduce {plan.allreduce.value}"
        + (f", planner {plan.planner}" if plan.planner else "")
    )
    return f"<p>{html.escape(facts)}</p>\n<table>\n" + "\n".join(lines) + "\n</table>"


def compare_report_html(rows: Sequence[CompareRow], *, title: str) -> str:
    """The report page of a comparison (see :func:`pipesim.compare.compare`).

    Args:
        rows: the comparison rows (at least one).
        title: the page title (e.g. ``"bert48 on dapple-2x8-v100"``).

    Returns:
        The HTML document as text.

    Raises:
        InputError: ``rows`` is empty.
    """
    from pipesim.errors import invalid
    from pipesim.reports.gantt import compare_gantt_figure
    from pipesim.reports.memory_bars import memory_bar_figure

    if not rows:
        raise invalid("rows", [], "must hold at least one comparison row")
    labelled = [(row.label, row.result) for row in rows]
    gantt = figure_data_uri(compare_gantt_figure(labelled, title=None))
    memory = figure_data_uri(memory_bar_figure(labelled, title=None))
    plans: list[str] = []
    seen: list[Any] = []
    for row in rows:  # the schedules share one split; show each distinct plan shape once
        key = (row.plan.stages, row.plan.num_microbatches)
        if key in seen:
            continue
        seen.append(key)
        plans.append(f"<h3>{html.escape(row.label)}</h3>\n{_plan_table(row)}")
    esc = html.escape(title)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{esc}: pipesim comparison</title>
<style>{_STYLE}</style>
</head>
<body>
<h1>{esc}</h1>
<p class="note">Simulated with pipesim. One training iteration per schedule on the same plan.</p>
<h2>Summary</h2>
{_summary_table(rows)}
<h2>Timelines</h2>
<img id="gantt" alt="Gantt chart: one row per pipeline stage, with memory over time" src="{gantt}">
<h2>Peak memory per device</h2>
<img id="memory" alt="Peak memory per device for each schedule" src="{memory}">
<h2>Plan</h2>
{chr(10).join(plans)}
</body>
</html>
"""


def write_compare_report(rows: Sequence[CompareRow], path: str | os.PathLike[str], *, title: str) -> Path:
    """Write :func:`compare_report_html` to ``path`` atomically.

    Raises:
        InputError: ``rows`` is empty.
        OSError: the file cannot be written.
    """
    target = Path(path)
    text = compare_report_html(rows, title=title)
    atomic_write_text(target, text)
    log.debug("wrote %s (%d characters)", target, len(text))
    return target
