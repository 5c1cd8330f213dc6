"""The engine's event loop (``engine._run_events``) against SimPy's own ``Environment.run``."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest
import simpy
from simpy.events import URGENT, EventPriority

from pipesim.simulator.engine import _run_events


def _scenario(env: simpy.Environment, log: list[tuple[float, str]]) -> None:
    """Processes, timeouts, succeeded events and late-priority events, many at one instant."""

    def worker(name: str, delays: tuple[float, ...]) -> Generator[simpy.Event, Any, None]:
        for d in delays:
            yield env.timeout(d)
            log.append((env.now, name))
            done = env.event()
            done.callbacks.append(lambda _e, n=name: log.append((env.now, n + ".cb")))
            done.succeed()

    def late(_e: simpy.Event) -> None:
        log.append((env.now, "late"))

    for i in range(4):
        env.process(worker(f"w{i}", (1.0, 0.5 * i, 0.0, 2.0)))
    for priority in (EventPriority(2), URGENT):
        ev = simpy.Event(env)
        ev._ok = True
        ev._value = None
        ev.callbacks.append(late)
        env.schedule(ev, priority, 1.0)


def test_the_loop_processes_events_in_simpys_order() -> None:
    want: list[tuple[float, str]] = []
    env = simpy.Environment()
    _scenario(env, want)
    env.run()
    got: list[tuple[float, str]] = []
    env = simpy.Environment()
    _scenario(env, got)
    _run_events(env)
    assert got == want
    assert len(got) == 4 * 4 * 2 + 2
    assert env.now == 4.5  # (w3: 1 + 1.5 + 0 + 2)


def test_a_failed_process_raises_as_simpy_raises_it() -> None:
    def failing(env: simpy.Environment) -> Generator[simpy.Event, Any, None]:
        yield env.timeout(1.0)
        raise ValueError("boom")

    env = simpy.Environment()
    env.process(failing(env))
    with pytest.raises(ValueError, match="boom") as raised:
        _run_events(env)
    assert isinstance(raised.value.__cause__, ValueError)
    assert env.now == 1.0
