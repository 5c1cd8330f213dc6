"""The planner's fluid link sharing, per flow class, against a per-transfer reference."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Hashable, Sequence

import pytest

from pipesim.planner.latency import _fluid_transfers

Loads = Sequence[tuple[Hashable, float]]


def reference(
    events: list[tuple[float, int, int, int]],
    solo_s: Sequence[float],
    loads: Sequence[Loads],
    deliver: Callable[[int, int, float], None],
) -> None:
    """Every transfer on its own: re-rate all transfers on the touched links at each event."""
    now = 0.0
    active: dict[int, list[float | int]] = {}  # id -> [remaining, rate, flow, microbatch]
    demand: dict[Hashable, float] = {}
    next_id = 0

    def step_to(t: float) -> None:
        for st in active.values():
            st[0] = float(st[0]) - float(st[1]) * (t - now)

    def rerate() -> None:
        for st in active.values():
            over = max([1.0, *(demand[link] for link, _ in loads[int(st[2])])])
            st[1] = 1.0 / (solo_s[int(st[2])] * over)

    while events or active:
        t_done, who = math.inf, -1
        for j, st in active.items():
            t = now + float(st[0]) / float(st[1])
            if t < t_done:
                t_done, who = t, j
        t_ready = events[0][0] if events else math.inf
        if t_done <= t_ready:
            step_to(t_done)
            now = max(now, t_done)
            st = active.pop(who)
            flow = int(st[2])
            for link, busy in loads[flow]:
                demand[link] -= busy / solo_s[flow]
            rerate()
            deliver(flow, int(st[3]), now)
        else:
            _, _, flow, k = heapq.heappop(events)
            step_to(t_ready)
            now = max(now, t_ready)
            if solo_s[flow] <= 0:
                deliver(flow, k, now)
                continue
            active[next_id] = [1.0, 0.0, flow, k]
            next_id += 1
            for link, busy in loads[flow]:
                demand[link] = demand.get(link, 0.0) + busy / solo_s[flow]
            rerate()


def run(impl: Callable[..., None], seed: int) -> list[tuple[int, int, float]]:
    rng = random.Random(seed)
    flows = rng.randint(1, 5)
    links = ["nic0", "nic1", "pcie", "nvl"]
    solo = [rng.choice([0.0, 0.5, 1.0, 2.0, 3.0]) for _ in range(flows)]
    loads = [
        tuple((link, s * rng.choice([0.25, 0.5, 1.0])) for link in rng.sample(links, rng.randint(0, 3)))
        for s in solo
    ]
    events: list[tuple[float, int, int, int]] = []
    for k in range(rng.randint(1, 12)):
        heapq.heappush(events, (rng.choice([0.0, 0.5, 1.0, 1.5, 4.0]), k, rng.randrange(flows), k))
    seq = [100]
    out: list[tuple[int, int, float]] = []

    def deliver(flow: int, k: int, t: float) -> None:
        out.append((flow, k, t))
        if flow + 1 < flows and k % 2 == 0:  # a chain: the next flow starts when this one lands
            heapq.heappush(events, (t, seq[0], flow + 1, k + 1000))
            seq[0] += 1

    impl(events, solo, loads, deliver)
    return out


@pytest.mark.parametrize("seed", range(200))
def test_per_class_equals_per_transfer(seed: int) -> None:
    got = run(_fluid_transfers, seed)
    want = run(reference, seed)
    assert sorted((f, k) for f, k, _ in got) == sorted((f, k) for f, k, _ in want)
    times_got = {(f, k): t for f, k, t in got}
    for f, k, t in want:
        assert times_got[(f, k)] == pytest.approx(t, rel=1e-9, abs=1e-12)


def test_two_equal_transfers_on_one_link_take_twice_as_long() -> None:
    out: list[tuple[int, int, float]] = []
    events = [(0.0, 0, 0, 0), (0.0, 1, 0, 1)]
    _fluid_transfers(events, [1.0], [(("nic", 1.0),)], lambda f, k, t: out.append((f, k, t)))
    assert [t for _, _, t in out] == [pytest.approx(2.0), pytest.approx(2.0)]
