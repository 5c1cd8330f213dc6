"""Sweep plots: the API returns the data it was given, files by extension, clear errors; the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pipesim.cli import main
from pipesim.errors import InputError
from pipesim.reports.plots import plot_sweep, write_sweep_plot
from pipesim.sweep import COLUMNS
from pipesim.sweep.store import ResultsWriter


def row(schedule: str, gbs: int, throughput: float, model: str = "m", status: str = "ok") -> dict[str, Any]:
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    out.update(
        model=model,
        cluster="c",
        overrides="",
        global_batch_size=gbs,
        planner="dapple",
        schedule=schedule,
        throughput_samples_per_s=None if status != "ok" else throughput,
        status=status,
        error="",
        key=f"{abs(hash((schedule, gbs, model))):016x}"[:16],
    )
    return out


ROWS = [
    row("gpipe", 32, 300.0),
    row("gpipe", 16, 200.0),
    row("dapple", 16, 250.0),
    row("dapple", 32, 350.0),
    row("dapple", 64, 0.0, status="infeasible"),
    row("gpipe", 16, 999.0, model="other"),
]


def test_lines_one_per_group_sorted_by_x() -> None:
    fig = plot_sweep(
        ROWS, x="global_batch_size", y="throughput_samples_per_s", by="schedule", filters={"model": "m"}
    )
    (ax,) = fig.axes
    data = {line.get_label(): line.get_xydata().tolist() for line in ax.get_lines()}
    assert data == {"dapple": [[16, 250], [32, 350]], "gpipe": [[16, 200], [32, 300]]}
    assert ax.get_xlabel() == "global batch size (samples)"
    assert ax.get_ylabel() == "throughput (samples/s)"
    assert ax.get_title() == "Throughput (samples/s) by schedule"


def test_bars_grouped_by_category() -> None:
    fig = plot_sweep(
        ROWS,
        x="schedule",
        y="throughput_samples_per_s",
        by="global_batch_size",
        kind="bar",
        filters={"model": ["m"]},
    )
    (ax,) = fig.axes
    heights = sorted(p.get_height() for p in ax.patches)
    assert heights == [200, 250, 300, 350]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["dapple", "gpipe"]


def test_several_by_columns_and_filters_on_either_value() -> None:
    fig = plot_sweep(
        ROWS,
        x="global_batch_size",
        y="throughput_samples_per_s",
        by=["model", "schedule"],
        filters={"schedule": ["gpipe", "dapple"]},
    )
    labels = sorted(line.get_label() for line in fig.axes[0].get_lines())
    assert labels == ["m, dapple", "m, gpipe", "other, gpipe"]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {"x": "batch", "y": "throughput_samples_per_s"},
            "x='batch': is not a column; columns: model, cluster",
        ),
        ({"x": "global_batch_size", "y": "speed"}, "y='speed': is not a column"),
        ({"x": "global_batch_size", "y": "throughput_samples_per_s", "by": "colour"}, "by='colour'"),
        (
            {"x": "global_batch_size", "y": "throughput_samples_per_s", "filters": {"nope": 1}},
            "filter='nope'",
        ),
        ({"x": "global_batch_size", "y": "throughput_samples_per_s", "kind": "pie"}, "kind='pie'"),
        (
            {"x": "global_batch_size", "y": "throughput_samples_per_s", "by": "schedule"},
            "several rows share x global_batch_size=16 in group 'gpipe'; they differ in model",
        ),
        (
            {"x": "global_batch_size", "y": "throughput_samples_per_s", "filters": {"model": "zzz"}},
            "no rows to plot: 6 rows, 0 after the filters",
        ),
    ],
)
def test_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        plot_sweep(ROWS, **kwargs)


@pytest.mark.parametrize(("suffix", "magic"), [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_files_by_extension(tmp_path: Path, suffix: str, magic: bytes) -> None:
    path = write_sweep_plot(
        ROWS[:4],
        tmp_path / f"fig{suffix}",
        x="global_batch_size",
        y="throughput_samples_per_s",
        by="schedule",
    )
    assert path.read_bytes().startswith(magic)


def test_bad_extension(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"extension \.jpg"):
        write_sweep_plot(
            ROWS[:4], tmp_path / "fig.jpg", x="global_batch_size", y="throughput_samples_per_s", by="schedule"
        )


def test_cli_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.csv"
    with ResultsWriter(results) as writer:
        for r in ROWS:
            writer.append(r)
    fig = tmp_path / "fig.svg"
    argv = [
        "plot",
        str(results),
        "--x",
        "global_batch_size",
        "--y",
        "throughput_samples_per_s",
        "--by",
        "schedule",
        "--filter",
        "model=m",
        "-o",
        str(fig),
    ]
    assert main(argv) == 0
    assert capsys.readouterr().out == f"wrote {fig}\n"
    assert fig.read_bytes().startswith(b"<?xml")
    assert (
        main(
            [
                *argv[:-4],
                "--kind",
                "bar",
                "--filter",
                "model=m",
                "--filter",
                "model=other",
                "--by",
                "model,schedule",
                "-o",
                str(tmp_path / "bar.png"),
            ]
        )
        == 0
    )
    assert (tmp_path / "bar.png").read_bytes().startswith(b"\x89PNG")
    capsys.readouterr()
    assert main(["plot", str(results), "--x", "gbs", "--y", "throughput_samples_per_s", "-o", str(fig)]) == 2
    err = capsys.readouterr().err
    assert "x='gbs': is not a column; columns: model, cluster, overrides, global_batch_size" in err
    assert (
        main(
            [
                "plot",
                str(results),
                "--x",
                "global_batch_size",
                "--y",
                "iteration_time_s",
                "--filter",
                "oops",
                "-o",
                str(fig),
            ]
        )
        == 2
    )
    assert "--filter='oops': must be COLUMN=VALUE" in capsys.readouterr().err


def test_human_labels_log2_batch_axis_and_legend_outside() -> None:
    rows = [
        {"schedule": s, "global_batch_size": g, "throughput_samples_per_s": float(g + k), "status": "ok"}
        for k, s in enumerate(["gpipe", "dapple"])
        for g in (64, 128, 256)
    ]
    fig = plot_sweep(rows, x="global_batch_size", y="throughput_samples_per_s", by="schedule")
    (ax,) = fig.axes
    assert ax.get_xlabel() == "global batch size (samples)"
    assert ax.get_ylabel() == "throughput (samples/s)"
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [64.0, 128.0, 256.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["64", "128", "256"]
    legend = ax.get_legend()
    fig.canvas.draw()
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1  # right of the data
    linear = plot_sweep(rows, x="global_batch_size", y="throughput_samples_per_s", by="schedule", log_x=False)
    assert linear.axes[0].get_xscale() == "linear"


def test_axis_label_units() -> None:
    from pipesim.reports.plots import axis_label

    assert axis_label("peak_memory_bytes") == "peak memory (bytes)"
    assert axis_label("comm_wait_time_s") == "comm wait time (s)"
    assert axis_label("link_bandwidth_bytes_per_s") == "link bandwidth (bytes/s)"
    assert axis_label("schedule") == "schedule"


def test_repeats_under_seeds_become_error_bars() -> None:
    rows = [
        {
            "schedule": "gpipe",
            "jitter": 0.1,
            "seed": seed,
            "num_devices": n,
            "iteration_time_s": n + 0.1 * seed,
        }
        for n in (2, 4, 8)
        for seed in range(3)
    ]
    fig = plot_sweep(rows, x="num_devices", y="iteration_time_s", by="schedule")
    (ax,) = fig.axes
    (line,) = ax.lines[:1]
    assert list(line.get_ydata()) == pytest.approx([2.1, 4.1, 8.1])  # the mean of seeds 0, 1, 2
    bars = [c for c in ax.collections if c.get_segments()]
    (segments,) = [c.get_segments() for c in bars]
    spread = float(np.std([0.0, 0.1, 0.2]))
    assert [seg[1][1] - seg[0][1] for seg in segments] == pytest.approx([2 * spread] * 3)
    assert "s.d. over seeds" in ax.get_legend().get_title().get_text()
    assert ax.get_xscale() == "log"
