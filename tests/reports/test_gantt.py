"""Gantt charts and memory bar charts: formats, layout, labels, memory panel, speed, errors."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from pipesim.errors import InputError
from pipesim.reports.gantt import (
    compare_gantt_figure,
    gantt_figure,
    memory_bar_figure,
    write_compare_gantt,
    write_gantt,
    write_memory_bar,
)
from pipesim.simulator.trace import EventKind, TraceEvent
from pipesim.units import GIB, MS
from tests.simulator._fake_result import pipeline_result

MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF"}


def axes(fig: Figure, label: str) -> list[Any]:
    return [ax for ax in fig.axes if ax.get_label() == label]


def texts(ax: Any) -> list[str]:
    return [t.get_text() for t in ax.texts]


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf", ".PNG"])
def test_writes_each_format_by_extension(tmp_path: Path, suffix: str) -> None:
    path = write_gantt(pipeline_result(p=2, m=2), tmp_path / f"g{suffix}", title="tiny")
    data = path.read_bytes()
    assert len(data) > 1000
    if suffix.lower() == ".svg":
        assert b"<svg" in data[:2000]
    else:
        assert data.startswith(MAGIC[suffix.lower()])
    assert [p.name for p in tmp_path.iterdir()] == [f"g{suffix}"]  # no temporary file left behind


def test_bad_extension_names_it_and_the_valid_ones(tmp_path: Path) -> None:
    result = pipeline_result(p=2, m=1)
    message = r"extension \.jpg is not one of \.png, \.svg, \.pdf"
    with pytest.raises(InputError, match=message):
        write_gantt(result, tmp_path / "g.jpg")
    with pytest.raises(InputError, match=message):
        write_compare_gantt([("a", result)], tmp_path / "g.jpg")
    with pytest.raises(InputError, match=message):
        write_memory_bar([("a", result)], tmp_path / "g.jpg")
    with pytest.raises(InputError, match=r"extension \(none\)"):
        write_gantt(result, tmp_path / "gantt")
    assert list(tmp_path.iterdir()) == []


def test_same_figure_gives_same_svg_and_pdf_bytes(tmp_path: Path) -> None:
    result = pipeline_result(p=3, m=3, schedule="1f1b")
    for suffix in (".svg", ".pdf"):
        a = write_gantt(result, tmp_path / f"a{suffix}").read_bytes()
        b = write_gantt(result, tmp_path / f"b{suffix}").read_bytes()
        assert a == b


def test_missing_directory_raises_and_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_gantt(pipeline_result(p=2, m=1), tmp_path / "nope" / "g.png")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("p", "schedule"), [(1, "gpipe"), (4, "gpipe"), (8, "1f1b")])
def test_one_row_per_device_in_timeline_and_memory(p: int, schedule: str) -> None:
    fig = gantt_figure(pipeline_result(p=p, m=4, schedule=schedule))
    (timeline,) = axes(fig, "timeline")
    (memory,) = axes(fig, "memory")
    assert [t.get_text() for t in timeline.get_yticklabels()] == [f"gpu{d} · s{d}" for d in range(p)]
    assert [t.get_text() for t in memory.get_yticklabels()] == [f"gpu{d}" for d in range(p)]
    assert timeline.get_ylim() == (p - 0.5, -0.5)  # device 0 on top
    # idle background: one grey box per row spanning the whole iteration
    idle = timeline.collections[0]
    assert isinstance(idle, PolyCollection)
    assert len(idle.get_paths()) == p
    only_timeline = gantt_figure(pipeline_result(p=p, m=4), show_memory=False)
    assert [ax.get_label() for ax in only_timeline.axes] == ["timeline"]


def test_bars_are_drawn_where_the_events_are() -> None:
    result = pipeline_result(p=2, m=2)
    (timeline,) = axes(gantt_figure(result), "timeline")
    colours = {"#0072b2": EventKind.FORWARD, "#e69f00": EventKind.BACKWARD}
    checked = []
    for collection in timeline.collections[1:]:
        face = to_hex(collection.get_facecolor()[0])
        if face not in colours:
            continue
        kind = colours[face]
        spans = sorted(
            (round(v[:, 0].min(), 9), round(v[:, 0].max(), 9))
            for v in (path.vertices for path in collection.get_paths())
        )
        want = sorted(
            (round(e.start_s / MS, 9), round(e.end_s / MS, 9)) for e in result.events if e.kind is kind
        )
        assert spans == want
        checked.append(kind)
    assert sorted(checked) == [EventKind.BACKWARD, EventKind.FORWARD]
    assert timeline.get_xlim() == pytest.approx((0.0, result.iteration_time_s / MS))


def test_labels_on_wide_bars_only() -> None:
    """One 40 ms forward next to forty 0.05 ms ones: only the wide bar carries its number."""
    base = pipeline_result(p=1, m=1)
    narrow = [
        TraceEvent(
            resource="gpu0",
            kind=EventKind.FORWARD,
            start_s=(40 + 0.05 * k) * MS,
            end_s=(40 + 0.05 * (k + 1)) * MS,
            device=0,
            stage=0,
            microbatch=k + 1,
        )
        for k in range(40)
    ]
    wide = TraceEvent(
        resource="gpu0", kind=EventKind.FORWARD, start_s=0.0, end_s=40 * MS, device=0, stage=0, microbatch=0
    )
    result = replace(base, events=(wide, *narrow), iteration_time_s=42 * MS)
    (timeline,) = axes(gantt_figure(result), "timeline")
    assert texts(timeline) == ["0"]
    assert timeline.texts[0].get_position()[0] == pytest.approx(20.0)


def test_labels_everywhere_for_few_microbatches_and_nowhere_for_many() -> None:
    small = pipeline_result(p=4, m=4)
    (timeline,) = axes(gantt_figure(small), "timeline")
    compute = [e for e in small.events if e.kind.is_compute]
    assert sorted(texts(timeline)) == sorted(str(e.microbatch) for e in compute)
    (dense,) = axes(gantt_figure(pipeline_result(p=32, m=64), show_memory=False), "timeline")
    assert texts(dense) == []


def test_memory_panel_marks_capacity_and_overflow() -> None:
    over = pipeline_result(p=2, m=8, capacity_bytes=2.4 * GIB)  # GPipe peak 2.5 GiB > 2.4 GiB
    (memory,) = axes(gantt_figure(over), "memory")
    right = {t.get_text(): to_hex(t.get_color()) for t in memory.texts}
    assert right["2.5 / 2.4 GiB"] == "#b2182b"
    assert "band 2-2.5 GiB" in right
    dashed = [c for c in memory.collections if c.get_linestyle()[0][1] is not None]
    assert len(dashed) == 2  # one capacity line per device
    fits = pipeline_result(p=2, m=1, capacity_bytes=16 * GIB)  # capacity far above: printed, not drawn
    (memory,) = axes(gantt_figure(fits), "memory")
    assert {to_hex(t.get_color()) for t in memory.texts if "/" in t.get_text()} == {"#000000"}
    assert "2.06 / 16 GiB" in texts(memory)


def test_legend_lists_the_kinds_present() -> None:
    fig = gantt_figure(pipeline_result(p=2, m=2))
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert labels == ["forward (F)", "backward (B)", "send", "all-reduce", "idle", "memory", "capacity"]


def test_compare_shares_the_time_axis() -> None:
    gpipe = pipeline_result(p=4, m=8, schedule="gpipe")
    dapple = pipeline_result(p=4, m=8, schedule="1f1b")
    fig = compare_gantt_figure([("GPipe", gpipe), ("DAPPLE", dapple)], title="GPipe vs DAPPLE")
    timelines = axes(fig, "timeline")
    assert len(timelines) == 2
    assert len(axes(fig, "memory")) == 2
    longest = max(gpipe.iteration_time_s, dapple.iteration_time_s) / MS
    for ax in fig.axes:
        assert ax.get_xlim() == pytest.approx((0.0, longest))
    assert timelines[0].get_title(loc="left").startswith("GPipe")
    assert timelines[1].get_title(loc="left").startswith("DAPPLE")
    # timelines sit above their memory panels, first result on top
    tops = [ax.get_position().y1 for ax in fig.axes]
    assert tops == sorted(tops, reverse=True)
    assert "GPipe vs DAPPLE" in [t.get_text() for t in fig.texts]


def test_empty_inputs_and_narrow_figures_are_rejected() -> None:
    with pytest.raises(InputError, match=r"results=\[\]: must hold at least one result"):
        compare_gantt_figure([])
    with pytest.raises(InputError, match=r"rows=\[\]: must hold at least one result"):
        memory_bar_figure([])
    with pytest.raises(InputError, match=r"width_in=2.0: must be >= 6 inches"):
        gantt_figure(pipeline_result(p=1, m=1), width_in=2.0)


def test_memory_bar_figure_has_peak_static_and_capacity(tmp_path: Path) -> None:
    a = pipeline_result(p=4, m=8, schedule="gpipe")
    b = pipeline_result(p=4, m=8, schedule="1f1b")
    fig = memory_bar_figure([("GPipe", a), ("1F1B", b)], title="peak memory")
    (ax,) = axes(fig, "memory_bars")
    heights = [round(r.get_height(), 6) for r in ax.patches]
    want_peak = [round(d.peak_memory_bytes / GIB, 6) for d in a.devices]
    want_static = [round(d.static_memory_bytes / GIB, 6) for d in a.devices]
    assert heights[:8] == want_peak + want_static
    assert len(ax.patches) == 16
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gpu0", "gpu1", "gpu2", "gpu3"]
    caps_a, _ = ax.collections
    assert [seg[0][1] for seg in caps_a.get_segments()] == pytest.approx([16.0] * 4)
    path = write_memory_bar([("GPipe", a), ("1F1B", b)], tmp_path / "m.png")
    assert path.read_bytes().startswith(MAGIC[".png"])


def test_32_devices_64_microbatches_render_quickly(tmp_path: Path) -> None:
    big = pipeline_result(p=32, m=64, schedule="1f1b", gpus_per_server=8)
    start = time.perf_counter()
    write_gantt(big, tmp_path / "big.png")
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0, f"32x64 Gantt took {elapsed:.2f} s"
    fig = gantt_figure(big)
    assert len(axes(fig, "timeline")[0].get_yticklabels()) == 32
    assert fig.get_size_inches()[1] < 20.0  # thin rows keep the figure a sane height
