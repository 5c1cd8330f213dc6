"""Gantt charts and memory bar charts: formats, layout, labels, memory panel, speed, errors."""

from __future__ import annotations

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
    write_compare_gantt,
    write_gantt,
)
from pipesim.reports.memory_bars import memory_bar_figure, write_memory_bar
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
def test_one_row_per_stage_in_timeline_and_memory(p: int, schedule: str) -> None:
    fig = gantt_figure(pipeline_result(p=p, m=4, schedule=schedule))
    (timeline,) = axes(fig, "timeline")
    (memory,) = axes(fig, "memory")
    assert [t.get_text() for t in timeline.get_yticklabels()] == [f"s{d} · gpu{d}" for d in range(p)]
    assert [t.get_text().split("  ")[0] for t in memory.get_yticklabels()] == [f"s{d}" for d in range(p)]
    by_device = gantt_figure(pipeline_result(p=p, m=4, schedule=schedule), rows="device")
    (timeline_d,) = axes(by_device, "timeline")
    assert [t.get_text() for t in timeline_d.get_yticklabels()] == [f"gpu{d} · s{d}" for d in range(p)]
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
    fig = gantt_figure(over)
    (memory,) = axes(fig, "memory")
    ticks = {t.get_text(): to_hex(t.get_color()) for t in memory.get_yticklabels()}
    assert ticks["s0  2.5 GiB"] == "#b2182b"  # the row over capacity is named in red
    (scale,) = axes(fig, "memory_scale")
    assert [t.get_text() for t in scale.get_yticklabels()][-2:] == ["2.5", "2.0"] or "2.5" in [
        t.get_text() for t in scale.get_yticklabels()
    ]
    assert scale.get_ylabel() == "GiB"
    (capacity,) = [c for c in memory.collections if c.get_linestyle()[0][1] is not None]
    assert len(capacity.get_segments()) == 2  # one capacity line per row
    assert to_hex(capacity.get_color()[0]) == "#b2182b"  # not the memory curve's colour
    (legend,) = fig.legends
    assert "over capacity" in [t.get_text() for t in legend.get_texts()]
    fits = pipeline_result(p=2, m=1, capacity_bytes=16 * GIB)  # capacity far above: not drawn
    fig = gantt_figure(fits)
    (memory,) = axes(fig, "memory")
    assert {to_hex(t.get_color()) for t in memory.get_yticklabels()} == {"#000000"}
    assert "s0  2.1 GiB" in [t.get_text() for t in memory.get_yticklabels()]
    (legend,) = fig.legends
    assert "over capacity" not in [t.get_text() for t in legend.get_texts()]


def test_legend_lists_the_kinds_present() -> None:
    fig = gantt_figure(pipeline_result(p=2, m=2))
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    want = [
        "forward (F)",
        "backward (B)",
        "send",
        "all-reduce",
        "idle",
        "iteration end",
        "memory",
        "capacity",
    ]
    assert labels == want


def test_header_and_numbers_are_consistent() -> None:
    (timeline,) = axes(gantt_figure(pipeline_result(p=1, m=1)), "timeline")
    header = timeline.get_title(loc="left")
    assert "1 stage x 1 micro-batch" in header
    assert "1 stages" not in header
    (timeline,) = axes(gantt_figure(pipeline_result(p=2, m=4)), "timeline")
    assert "2 stages x 4 micro-batches" in timeline.get_title(loc="left")


def _replicated() -> Any:
    import pipesim

    model = "gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1000"
    profile, cluster = pipesim.resolve_inputs(model, "dgx1-v100")
    plan = pipesim.make_plan(
        profile, cluster, global_batch_size=32, num_microbatches=8, stages=4, replicas=[2, 2, 2, 2]
    )
    return pipesim.simulate(plan, profile, cluster)


def test_replicas_share_a_row_unless_expanded() -> None:
    result = _replicated()
    (timeline,) = axes(gantt_figure(result), "timeline")
    labels = [t.get_text() for t in timeline.get_yticklabels()]
    assert labels == ["s0 · gpu0-1", "s1 · gpu2-3", "s2 · gpu4-5", "s3 · gpu6-7"]
    # the row draws the group's first device: as many forward bars as that device ran
    forward = [c for c in timeline.collections if to_hex(c.get_facecolor()[0]) == "#0072b2"]
    drawn = sum(len(c.get_paths()) for c in forward)
    wanted = sum(1 for e in result.events if e.kind is EventKind.FORWARD and e.device in (0, 2, 4, 6))
    assert drawn == wanted
    (expanded,) = axes(gantt_figure(result, rows="device"), "timeline")
    assert len(expanded.get_yticklabels()) == 8


def test_gpipe_forwards_carry_their_microbatch_numbers() -> None:
    result = pipeline_result(p=4, m=8, schedule="gpipe", fwd_s=2e-3, bwd_s=2e-3)
    (timeline,) = axes(gantt_figure(result, show_memory=False), "timeline")
    forward_labels = [t for t in timeline.texts if to_hex(t.get_color()) == "#ffffff"]
    assert sorted(int(t.get_text()) for t in forward_labels) == sorted(
        e.microbatch for e in result.events if e.kind is EventKind.FORWARD and e.microbatch is not None
    )


@pytest.mark.parametrize(("size", "width"), [("single", 3.5), ("double", 7.16), ("screen", 11.0)])
def test_paper_sizes(size: str, width: float) -> None:
    fig = gantt_figure(pipeline_result(p=4, m=8), figsize=size)
    assert fig.get_size_inches()[0] == pytest.approx(width)
    fixed = gantt_figure(pipeline_result(p=4, m=8), figsize=(7.0, 4.0))
    assert tuple(fixed.get_size_inches()) == pytest.approx((7.0, 4.0))
    for ax in fixed.axes:  # every panel inside the figure
        box = ax.get_position()
        assert box.x0 > 0
        assert box.y0 > 0
        assert box.x1 < 1
        assert box.y1 < 1


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
    with pytest.raises(InputError, match=r"figsize=\(2.0, 5.0\): width must be 3-100 in"):
        gantt_figure(pipeline_result(p=1, m=1), figsize=(2.0, 5.0))
    with pytest.raises(InputError, match=r"figsize='poster': must be one of screen, double, single"):
        gantt_figure(pipeline_result(p=1, m=1), figsize="poster")
    with pytest.raises(InputError, match=r"rows='gpu': must be 'stage'"):
        gantt_figure(pipeline_result(p=1, m=1), rows="gpu")


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


def test_64_stages_256_microbatches_stay_readable(tmp_path: Path) -> None:
    big = pipeline_result(p=64, m=256, schedule="1f1b", gpus_per_server=8)
    fig = gantt_figure(big)
    assert len(axes(fig, "timeline")[0].get_yticklabels()) == 64
    assert fig.get_size_inches()[1] < 30.0
    for label in axes(fig, "timeline")[0].get_yticklabels():
        assert label.get_fontsize() >= 5.0
    # one collection per colour, not one artist per op (the render time is in benchmarks/)
    assert len(axes(fig, "timeline")[0].collections) <= 8
    write_gantt(big, tmp_path / "big.png")


def test_tp_and_cp_ranks_collapse_per_stage_and_expand_per_device() -> None:
    """A TP 2 x CP 2 plan with 2 replicas per stage: the stage row names all 8 devices of the
    stage; ``rows="device"`` draws each of them with its replica's stream; the TP collectives
    are on every row's communication lane."""
    import pipesim
    from pipesim.plan import Plan, StagePlan
    from pipesim.reports.gantt import replica_mirrors

    profile, cluster = pipesim.resolve_inputs("gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000",
                                              "dgx-a100-x2")
    stages = tuple(StagePlan(first_layer=a, last_layer=b, replicas=2, tensor_parallel=2, context_parallel=2)
                   for a, b in ((0, 2), (3, 5)))
    plan = Plan(stages=stages, global_batch_size=8, num_microbatches=4, schedule="1f1b")
    result = pipesim.simulate(plan, profile, cluster, pipesim.SimOptions(record_trace=True))
    mirrors = replica_mirrors(plan, result)
    assert mirrors == {0: (0, 1, 2, 3), 4: (4, 5, 6, 7), 8: (8, 9, 10, 11), 12: (12, 13, 14, 15)}
    (timeline,) = axes(gantt_figure(result, mirrors=mirrors), "timeline")
    assert [t.get_text() for t in timeline.get_yticklabels()] == ["s0 · gpu0-7", "s1 · gpu8-15"]
    (plain,) = axes(gantt_figure(result), "timeline")  # without mirrors: the stream devices only
    assert [t.get_text() for t in plain.get_yticklabels()] == ["s0 · gpu0,4", "s1 · gpu8,12"]
    (expanded,) = axes(gantt_figure(result, rows="device", mirrors=mirrors), "timeline")
    labels = [t.get_text() for t in expanded.get_yticklabels()]
    assert labels == [f"gpu{d} · s{0 if d < 8 else 1}" for d in range(16)]

    def bars(ax: Any, colour: str) -> int:
        return sum(len(c.get_paths()) for c in ax.collections if to_hex(c.get_facecolor()[0]) == colour)

    tp = [e for e in result.events if e.kind is EventKind.TP_COLLECTIVE]
    assert tp  # TP collectives on the communication rows
    forwards = sum(1 for e in result.events if e.kind is EventKind.FORWARD)
    assert bars(expanded, "#0072b2") == 4 * forwards  # every stream on its replica's 4 devices
    assert bars(expanded, "#882255") == 4 * len(tp)
    assert bars(timeline, "#882255") == sum(1 for e in tp if e.device in (0, 8))
    with pytest.raises(InputError, match="mirrors"):
        compare_gantt_figure([("a", result)], mirrors=[mirrors, mirrors])
