"""Fixtures shared by the simulator's tests."""

from __future__ import annotations

import pytest

from pipesim.simulator import engine as engine_module
from pipesim.simulator.network import Network


@pytest.fixture
def wire_bytes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Bytes of every transfer the engine's network carries (the link records' source), a
    lock-step flow counted once per route."""
    moved: list[float] = []

    class Counting(Network):
        def transfer(self, route, nbytes, **kwargs):  # type: ignore[no-untyped-def]
            if route:
                moved.append(nbytes)
            return super().transfer(route, nbytes, **kwargs)

        def lockstep_transfer(self, routes, nbytes, **kwargs):  # type: ignore[no-untyped-def]
            moved.extend(nbytes for r in routes if r)  # a ring's hops: nbytes each
            return super().lockstep_transfer(routes, nbytes, **kwargs)

    monkeypatch.setattr(engine_module, "Network", Counting)
    return moved
