"""pipesim's schedules run the same compute order as torch 2.13's pipelining schedules.

``torch_golden.json`` holds the per-rank orders torch 2.13 runs for small (p, m, v), recorded with
``_torch_orders.torch_order``, so the check runs without torch. With torch installed the orders are
also re-read live. Regenerate the file (only on purpose) with
``PIPESIM_REGEN_TORCH_GOLDEN=1 pytest tests/schedules/test_sched_torch_golden.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipesim.schedules import make_schedule

GOLDEN = Path(__file__).with_name("torch_golden.json")
CASES = [
    (name, p, m, v)
    for name, chunk_range in (
        ("gpipe", (1,)),
        ("1f1b", (1,)),
        ("interleaved", (1, 2, 3)),
        ("zb-h1", (1, 2, 3)),
    )
    for v in chunk_range
    for p in range(1, 5)
    for m in range(1, 9)
]


def _key(name: str, p: int, m: int, v: int) -> str:
    return f"{name} p={p} m={m} v={v}"


def _ours(name: str, p: int, m: int, v: int) -> list[list[str]]:
    chunks = {"chunks": v} if name in ("interleaved", "zb-h1") else {}
    schedule = make_schedule(name, num_ranks=p, num_microbatches=m, **chunks)
    return [[str(a) for a in row] for row in schedule.ranks]


def _load() -> dict[str, list[str]]:
    data: dict[str, list[str]] = json.loads(GOLDEN.read_text())
    return data


def test_regenerate_golden_on_request() -> None:
    if os.environ.get("PIPESIM_REGEN_TORCH_GOLDEN") != "1":
        pytest.skip("set PIPESIM_REGEN_TORCH_GOLDEN=1 to rewrite torch_golden.json")
    pytest.importorskip("torch")
    from ._torch_orders import torch_order

    data = {}
    for name, p, m, v in CASES:
        try:
            rows = torch_order(name, p, m, v)
        except (ValueError, RuntimeError):
            continue  # torch rejects this configuration (e.g. 1F1B with m < p)
        data[_key(name, p, m, v)] = [" ".join(row) for row in rows]
    GOLDEN.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n")


def test_golden_covers_every_torch_class() -> None:
    data = _load()
    assert len(data) > 150
    for name in ("gpipe", "1f1b", "interleaved", "zb-h1"):
        assert any(key.startswith(name + " ") for key in data)


@pytest.mark.parametrize("key", sorted(_load()))
def test_order_equals_recorded_torch_order(key: str) -> None:
    name, *params = key.split()
    p, m, v = (int(x.split("=")[1]) for x in params)
    assert [" ".join(row) for row in _ours(name, p, m, v)] == _load()[key]


def test_dapple_default_equals_torch_1f1b() -> None:
    data = _load()
    for key, rows in data.items():
        if key.startswith("1f1b "):
            p, m = (int(x.split("=")[1]) for x in key.split()[1:3])
            schedule = make_schedule("dapple", num_ranks=p, num_microbatches=m)
            assert [" ".join(map(str, row)) for row in schedule.ranks] == rows


@pytest.mark.parametrize(("name", "p", "m", "v"), [c for c in CASES if c[1] in (2, 4) and c[2] in (3, 4, 8)])
def test_order_equals_live_torch(name: str, p: int, m: int, v: int) -> None:
    pytest.importorskip("torch")
    from ._torch_orders import torch_order

    try:
        expected = torch_order(name, p, m, v)
    except (ValueError, RuntimeError):
        pytest.skip("torch rejects this configuration")
    assert _ours(name, p, m, v) == expected
