"""Type-check pipesim with mypy (strict) as the one import root it installs as.

mypy cannot follow setuptools' ``package-dir`` mapping (``simulator/`` installs as
``pipesim.simulator``), so this script builds a throw-away tree of symbolic links with the
installed layout and runs mypy on it with the settings in pyproject.toml. Exit code: mypy's.

Usage: ``python tools/typecheck.py``
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("profiles", "schedules", "simulator", "planner")


def main() -> int:
    """Build the link tree, run mypy on it and return mypy's exit status."""
    with tempfile.TemporaryDirectory(prefix="pipesim-typecheck-") as tmp:
        package = Path(tmp) / "pipesim"
        package.mkdir()
        for entry in (ROOT / "pipesim").iterdir():
            if entry.name != "__pycache__":
                (package / entry.name).symlink_to(entry)
        for layer in LAYERS:
            (package / layer).symlink_to(ROOT / layer)
        stdout, stderr, status = api.run(
            [
                "--config-file",
                str(ROOT / "pyproject.toml"),
                "--cache-dir",
                str(ROOT / ".mypy_cache"),
                str(package),
                str(ROOT / "experiments"),
            ]
        )
    sys.stdout.write(stdout.replace(tmp + "/pipesim/", ""))
    sys.stderr.write(stderr)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
