"""pyproject.toml installs every package directory, and the README's commands are what CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
