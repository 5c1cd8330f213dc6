"""pyproject.toml installs every package directory, and the README's commands are what CI runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
MAPPING = {
    "pipesim": "pipesim",
    "profiles": "pipesim.profiles",
    "schedules": "pipesim.schedules",
    "simulator": "pipesim.simulator",
    "planner": "pipesim.planner",
}


def test_every_package_directory_is_installed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {v: k for k, v in config["package-dir"].items()} == MAPPING
    expected = set()
    for directory, package in MAPPING.items():
        for init in (ROOT / directory).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / directory)
            expected.add(".".join([package, *rel.parts]))
    assert set(config["packages"]) == expected


def test_readme_shows_two_setup_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    setup = re.findall(r"^python3 -m venv \.venv && .*$", readme, flags=re.MULTILINE)
    assert len(setup) == 2, setup
    ci = (ROOT / ".ci" / "run").read_text()
    assert "<!-- test-command -->" in ci
    marker = readme.index("<!-- test-command -->")
    test_command = re.search(r"^python3 -m venv .*$", readme[marker:], flags=re.MULTILINE)
    assert test_command is not None
    assert "pytest" in test_command.group(0)
    extracted = subprocess.run(
        ["awk", "/<!-- test-command -->/{getline; while ($0 ~ /^```/) getline; print; exit}", "README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert extracted == test_command.group(0)


def test_the_test_extra_installs_what_the_ci_pytest_line_needs() -> None:
    # `-n` / `--dist` are pytest-xdist's options: without it in the `test` extra CI's fresh
    # environment would stop at "unrecognized arguments"
    readme = (ROOT / "README.md").read_text()
    marker = readme.index("<!-- test-command -->")
    command = re.search(r"^python3 -m venv .*$", readme[marker:], flags=re.MULTILINE)
    assert command is not None
    pytest_args = command.group(0).rsplit("&& pytest", 1)[1].split()
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["test"]
    if any(arg == "-n" or arg.startswith("--dist") for arg in pytest_args):
        assert any(re.match(r"pytest-xdist\b", requirement) for requirement in extra), extra


# ------------------------------------------------------------------------------------------------
# Package data: the hardware catalog and the cluster presets are TOML files inside the package.

DATA_FILES = sorted(
    str(p.relative_to(ROOT / "profiles" / "hardware"))
    for p in (ROOT / "profiles" / "hardware" / "data").rglob("*")
    if p.is_file()
)


def test_package_data_globs_cover_every_data_file() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = config["package-data"]["pipesim.profiles.hardware"]
    assert DATA_FILES, "no data files found"
    assert {"data/devices.toml", "data/links.toml"} <= set(DATA_FILES)
    for name in DATA_FILES:
        assert any(Path(name).match(g) and name.count("/") == g.count("/") for g in globs), name


@pytest.mark.slow
def test_a_built_wheel_installs_the_data_and_runs(tmp_path: Path) -> None:
    """A non-editable install (wheel built from the tree, installed into an empty folder) has the
    catalog and the presets: importing from it, outside the source tree, finds every figure."""
    # Build from a clean copy: a build/ folder left in the tree would hide a missing package-data.
    source = tmp_path / "source"
    junk = ("build", "dist", "*.egg-info", ".venv", ".git", "__pycache__", ".*_cache", ".hypothesis")
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*junk))
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(wheels)],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (wheel,) = wheels.glob("pipesim-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    for name in DATA_FILES:
        assert f"pipesim/profiles/hardware/{name}" in shipped, name
    site = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    probe = (
        "import pipesim, json\n"
        "from pipesim.profiles import cluster_names, device_names, get_cluster, link_names\n"
        "print(json.dumps([pipesim.__file__, cluster_names(), len(device_names()), len(link_names()),"
        " get_cluster('dgx1-v100').num_devices]))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    where, presets, devices, links, dgx1 = json.loads(run.stdout)
    assert where.startswith(str(site))
    assert len(presets) == len(list((ROOT / "profiles" / "hardware" / "data" / "clusters").glob("*.toml")))
    catalog = (ROOT / "profiles" / "hardware" / "data" / "devices.toml").read_text(encoding="utf-8")
    entries = sum(1 for line in catalog.splitlines() if line.strip() == "[[device]]")
    assert (devices, links, dgx1) == (entries, 16, 8)
    assert devices == 19
