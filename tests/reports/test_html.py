"""The self-contained HTML report of a comparison: parses, embeds its images, needs no network;
and in headless Chromium (when installed) it loads without console errors and shows the charts."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from pipesim.compare import CompareRow, compare, write_compare_outputs
from pipesim.errors import InputError
from pipesim.reports.html import compare_report_html, write_compare_report

MODEL = "gpt:layers=8,hidden=512,heads=8,seq=256,vocab=1000"


@pytest.fixture(scope="module")
def rows() -> list[CompareRow]:
    return compare(MODEL, "dgx1-v100", 32, schedules=("gpipe", "dapple"))


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.open: list[str] = []
        self.attrs: list[tuple[str, str, str]] = []  # tag, attribute, value
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag not in ("meta", "img", "br", "link"):
            self.open.append(tag)
        self.attrs += [(tag, k, v or "") for k, v in attrs]

    def handle_endtag(self, tag: str) -> None:
        assert self.open, f"</{tag}> closes nothing"
        assert self.open.pop() == tag, f"</{tag}> closes the wrong element"

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_page_parses_embeds_images_and_has_no_external_urls(rows: list[CompareRow]) -> None:
    page = compare_report_html(rows, title="tiny gpt on dgx1")
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert parser.open == []
    assert page.startswith("<!DOCTYPE html>")
    text = " ".join(parser.text)
    for needed in ("Summary", "Timelines", "Peak memory per device", "Plan", "gpipe", "dapple"):
        assert needed in text
    images = [v for tag, k, v in parser.attrs if tag == "img" and k == "src"]
    assert len(images) == 2
    for src in images:
        head, _, data = src.partition(",")
        assert head == "data:image/svg+xml;base64"
        svg = ET.fromstring(base64.b64decode(data))
        assert svg.tag.endswith("svg")
        hrefs = [v for e in svg.iter() for k, v in e.attrib.items() if k.endswith("href")]
        assert all(h.startswith(("#", "data:")) for h in hrefs), hrefs
    links = [v for _tag, k, v in parser.attrs if k in ("src", "href", "action")]
    assert all(link.startswith("data:") for link in links)
    assert not re.search(r"https?://", page.replace("http://www.w3.org/2000/svg", ""))
    assert "<script" not in page


def test_table_holds_the_rows_numbers(rows: list[CompareRow]) -> None:
    page = compare_report_html(rows, title="t")
    for row in rows:
        assert f"{row.result.iteration_time_s * 1e3:.1f}" in page
        assert f"{row.result.throughput_samples_per_s:.1f}" in page


def test_same_rows_same_bytes(rows: list[CompareRow], tmp_path: Path) -> None:
    a = write_compare_report(rows, tmp_path / "a.html", title="t").read_bytes()
    b = write_compare_report(rows, tmp_path / "b.html", title="t").read_bytes()
    assert a == b


def test_empty_rows_rejected() -> None:
    with pytest.raises(InputError, match="rows"):
        compare_report_html([], title="t")


def test_compare_outputs_write_report_and_chosen_format(rows: list[CompareRow], tmp_path: Path) -> None:
    written = write_compare_outputs(rows, tmp_path, title="t", figure_format="svg", html=True)
    names = sorted(p.name for p in written)
    assert "report.html" in names
    assert "gantt.svg" in names
    assert "memory.svg" in names
    assert not list(tmp_path.glob("*.png"))
    with pytest.raises(InputError, match="figure_format"):
        write_compare_outputs(rows, tmp_path, title="t", figure_format="jpg")


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def test_report_in_headless_chromium(rows: list[CompareRow], tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("no chromium on this machine (apt-get install chromium)")
    page = write_compare_report(rows, tmp_path / "report.html", title="tiny gpt on dgx1")
    shot = tmp_path / "shot.png"
    common = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--allow-file-access-from-files",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
    ]
    run = subprocess.run(
        [*common, f"--screenshot={shot}", "--window-size=1280,2400", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    console = [line for line in run.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []
    image = imread(str(shot))
    assert image.shape[:2] == (2400, 1280)
    rgb = (image[:, :, :3] * 255).round().astype(int)
    # the Gantt chart's forward bars (#0072B2) and backward bars (#E69F00) were drawn on screen
    for colour in ((0x00, 0x72, 0xB2), (0xE6, 0x9F, 0x00)):
        close = np.abs(rgb - np.array(colour)).sum(axis=2) < 12
        assert close.sum() > 500, f"colour {colour} not on the screenshot"
    dom = subprocess.run(
        [*common, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120, check=False
    )
    assert dom.returncode == 0
    assert dom.stdout.count("<img") == 2
    assert "Summary" in dom.stdout


def test_report_command_writes_one_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipesim.cli import main

    out = tmp_path / "r.html"
    code = main(["report", "--model", MODEL, "--cluster", "dgx1-v100", "--gbs", "32", "-o", str(out)])
    assert code == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]
    parser = _Page()
    parser.feed(out.read_text())
    assert [v for tag, k, v in parser.attrs if tag == "img" and k == "src" and v.startswith("data:")]
    assert main(["report", "-o", str(tmp_path / "r.png")]) == 2
    assert "--out" in capsys.readouterr().err
