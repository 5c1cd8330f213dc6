"""The planner's fluid link sharing (max-min fair, per flow class) against a per-transfer reference."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Hashable, Sequence

import pytest

from pipesim.planner.latency import _fluid_transfers

Loads = Sequence[tuple[Hashable, float]]


def maxmin(active: Sequence[int], solo_s: Sequence[float], loads: Sequence[Loads]) -> list[float]:
    """Max-min fair fractions ``x`` of full speed of transfers ``active`` (flow indices, repeats
    allowed): progressive filling, one transfer at a time frozen when a link it uses fills."""
    x = [0.0] * len(active)
    live = set(range(len(active)))
    room: dict[Hashable, float] = {}
    for flow in active:
        for link, _ in loads[flow]:
            room[link] = 1.0
    level = 0.0
    while live:
        ask: dict[Hashable, float] = {}
        for i in live:
            for link, busy in loads[active[i]]:
                ask[link] = ask.get(link, 0.0) + busy / solo_s[active[i]]
        step = min([1.0 - level, *(room[link] / a for link, a in ask.items() if a > 0)])
        level += step
        for link, a in ask.items():
            room[link] -= step * a
        for i in list(live):
            if level >= 1.0 - 1e-12 or any(room[link] <= 1e-12 for link, _ in loads[active[i]]):
                x[i] = level
                live.discard(i)
    return x


def reference(
    events: list[tuple[float, int, int, int]],
    solo_s: Sequence[float],
    loads: Sequence[Loads],
    deliver: Callable[[int, int, float], None],
) -> None:
    """Every transfer on its own: re-fill all active transfers (max-min) at each event."""
    now = 0.0
    active: dict[int, list[float | int]] = {}  # id -> [remaining, rate, flow, microbatch]
    next_id = 0

    def step_to(t: float) -> None:
        for st in active.values():
            st[0] = float(st[0]) - float(st[1]) * (t - now)

    def rerate() -> None:
        ids = list(active)
        x = maxmin([int(active[j][2]) for j in ids], solo_s, loads)
        for j, xj in zip(ids, x, strict=True):
            active[j][1] = xj / solo_s[int(active[j][2])]

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
            rerate()
            deliver(int(st[2]), int(st[3]), now)
        else:
            _, _, flow, k = heapq.heappop(events)
            step_to(t_ready)
            now = max(now, t_ready)
            if solo_s[flow] <= 0:
                deliver(flow, k, now)
                continue
            active[next_id] = [1.0, 0.0, flow, k]
            next_id += 1
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


def test_a_transfer_held_back_elsewhere_leaves_the_link_to_the_other() -> None:
    # flow 0 crosses "a" and "b"; flow 1 only "a"; two transfers of flow 2 fill "b". Max-min:
    # flow 0 gets 1/3 (its share of "b"), flow 1 the other 2/3 of "a" (processor sharing of "a"
    # would hold it at 1/2)
    out: list[tuple[int, int, float]] = []
    events = [(0.0, 0, 0, 0), (0.0, 1, 1, 0), (0.0, 2, 2, 0), (0.0, 3, 2, 1)]
    loads = [(("a", 1.0), ("b", 1.0)), (("a", 1.0),), (("b", 1.0),)]
    _fluid_transfers(events, [1.0, 1.0, 1.0], loads, lambda f, k, t: out.append((f, k, t)))
    times = {(f, k): t for f, k, t in out}
    assert times[(1, 0)] == pytest.approx(1.5)
    assert times[(0, 0)] == pytest.approx(3.0)


def test_a_bundle_of_pieces_on_one_link_shares_it_per_piece() -> None:
    # flow 0 bundles 3 pieces of 1 s each on "nic" (busy 3); flow 1 is one such piece: 4 pieces
    # share the link, each at 1/4, so both land at 4
    out: list[tuple[int, int, float]] = []
    events = [(0.0, 0, 0, 0), (0.0, 1, 1, 0)]
    loads = [(("nic", 3.0),), (("nic", 1.0),)]
    _fluid_transfers(events, [1.0, 1.0], loads, lambda f, k, t: out.append((f, k, t)))
    assert sorted(t for _, _, t in out) == [pytest.approx(4.0), pytest.approx(4.0)]
