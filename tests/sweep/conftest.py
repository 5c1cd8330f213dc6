"""Small sweep inputs shared by the sweep tests (written inside each test's tmp_path)."""

from __future__ import annotations

from pathlib import Path

import pytest

SMALL = "gpt:layers=4,hidden=256,heads=4,seq=128,vocab=1000"
LARGER = "gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1000"

SMALL_SWEEP = f"""\
# 2 models x 2 batch sizes x 2 schedules on one DGX-1
models = ["{SMALL}", "{LARGER}"]
clusters = ["dgx1-v100"]
global_batch_sizes = [16, 32]
schedules = ["gpipe", "dapple"]
"""


@pytest.fixture
def small_config(tmp_path: Path) -> Path:
    path = tmp_path / "small.toml"
    path.write_text(SMALL_SWEEP)
    return path
