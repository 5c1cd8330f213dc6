"""The typed public API: type checkers see ``pipesim.simulate`` and friends, and typos fail."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

import pipesim

ROOT = Path(__file__).resolve().parent.parent
LAYERS = ("profiles", "schedules", "simulator", "planner")


def _type_checking_names() -> dict[str, str]:
    tree = ast.parse((ROOT / "pipesim" / "__init__.py").read_text())
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom)
                assert stmt.module
                for alias in stmt.names:
                    assert alias.asname == alias.name, "re-export needs 'import X as X'"
                    found[alias.name] = stmt.module
    return found


def test_type_checking_block_matches_lazy_exports() -> None:
    assert _type_checking_names() == pipesim._EXPORTS


def test_every_export_resolves_at_run_time() -> None:
    for name in pipesim.__all__:
        assert getattr(pipesim, name) is not None
    with pytest.raises(AttributeError, match="simulat"):
        pipesim.simulat  # type: ignore[attr-defined]  # noqa: B018


def _mypy(tmp_path: Path, snippet: str) -> tuple[str, int]:
    """Run mypy (strict) on ``snippet`` against the installed package layout (as tools/typecheck.py)."""
    api = pytest.importorskip("mypy.api")
    package = tmp_path / "tree" / "pipesim"
    package.mkdir(parents=True)
    for entry in (ROOT / "pipesim").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for layer in LAYERS:
        (package / layer).symlink_to(ROOT / layer)
    source = tmp_path / "tree" / "snippet.py"
    source.write_text(textwrap.dedent(snippet))
    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            "--follow-imports=silent",
            str(source),
        ]
    )
    return stdout + stderr, status


def test_mypy_sees_real_signatures_and_rejects_typos(tmp_path: Path) -> None:
    out, status = _mypy(
        tmp_path,
        """
        import pipesim

        def run() -> float:
            result = pipesim.simulat
            options: pipesim.SimOptions = pipesim.SimOptions(jitter="a lot")
            return pipesim.simulate.__name__ + result + str(options)
        """,
    )
    assert status == 1, out
    assert 'Module has no attribute "simulat"' in out
    assert "SimOptions" in out
    assert "jitter" in out


def test_mypy_accepts_correct_use(tmp_path: Path) -> None:
    out, status = _mypy(
        tmp_path,
        """
        import pipesim

        def run(plan: pipesim.Plan, model: pipesim.ModelProfile, cluster: pipesim.Cluster) -> float:
            result: pipesim.SimulationResult = pipesim.simulate(plan, model, cluster)
            return result.iteration_time_s
        """,
    )
    assert status == 0, out
