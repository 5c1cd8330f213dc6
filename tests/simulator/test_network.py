"""Network: latency + max-min fair bandwidth sharing, exact against hand-computed cases and a
brute-force reference; records, errors, determinism and speed."""

from __future__ import annotations

import math
import random
from collections.abc import Generator, Sequence
from typing import Any

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.simulator.network import LinkInterval, Network, TransferRecord

Job = tuple[float, tuple[int, ...], float]  # (start time s, route, bytes)


def run_jobs(
    caps: Sequence[float], lats: Sequence[float], jobs: Sequence[Job], **kwargs: Any
) -> tuple[dict[int, float], Network]:
    """Start each job at its time; return delivery times by job index, and the network."""
    env = simpy.Environment()
    net = Network(env, caps, lats, **kwargs)
    done: dict[int, float] = {}

    def go(i: int, start: float, route: tuple[int, ...], nbytes: float) -> Generator[Any, Any, None]:
        if start > 0:
            yield env.timeout(start)
        yield net.transfer(route, nbytes)
        done[i] = env.now

    for i, (start, route, nbytes) in enumerate(jobs):
        env.process(go(i, start, route, nbytes))
    env.run()
    return done, net


# ---------------------------------------------------------------------- reference model
def reference_maxmin(caps: Sequence[float], routes: dict[int, set[int]]) -> dict[int, float]:
    """Textbook progressive filling over all flows at once (slow and obvious)."""
    rate: dict[int, float] = {}
    left = dict(enumerate(caps))
    active = dict(routes)
    while active:
        best, bottleneck = math.inf, -1
        for link, c in left.items():
            n = sum(1 for r in active.values() if link in r)
            if n and c / n < best:
                best, bottleneck = c / n, link
        for fid in [f for f, r in active.items() if bottleneck in r]:
            rate[fid] = best
            for link in active.pop(fid):
                left[link] -= best
    return rate


def reference_times(caps: Sequence[float], lats: Sequence[float], jobs: Sequence[Job]) -> dict[int, float]:
    """Fluid simulation re-solving max-min over every flow at every start and end."""
    t = 0.0
    pending = sorted((s + sum(lats[link] for link in r), i) for i, (s, r, _) in enumerate(jobs))
    left: dict[int, float] = {}
    out: dict[int, float] = {}
    while pending or left:
        rates = reference_maxmin(caps, {i: set(jobs[i][1]) for i in left})
        t_start = pending[0][0] if pending else math.inf
        t_end = min((t + left[i] / rates[i] for i in left), default=math.inf)
        t_next = min(t_start, t_end)
        for i in left:
            left[i] -= rates[i] * (t_next - t)
        t = t_next
        for i in [i for i in left if left[i] <= 1e-9 * jobs[i][2]]:
            out[i] = t
            del left[i]
        while pending and pending[0][0] <= t:
            _, i = pending.pop(0)
            if jobs[i][2] == 0:
                out[i] = t
            else:
                left[i] = jobs[i][2]
    return out


# ---------------------------------------------------------------------- exact small cases
def test_single_flow_pays_latency_once_then_bytes_at_the_slowest_link() -> None:
    done, _ = run_jobs([4e9, 2e9], [1e-6, 3e-6], [(0.0, (0, 1), 1e9)])
    assert done[0] == pytest.approx(4e-6 + 0.5, rel=1e-12)


def test_two_flows_sharing_a_link_take_twice_as_long() -> None:
    alone, _ = run_jobs([1e9], [0.0], [(0.0, (0,), 5e8)])
    both, _ = run_jobs([1e9], [0.0], [(0.0, (0,), 5e8), (0.0, (0,), 5e8)])
    assert alone[0] == pytest.approx(0.5, rel=1e-12)
    assert both[0] == both[1] == pytest.approx(2 * alone[0], rel=1e-12)


def test_opposite_directions_do_not_share() -> None:
    # a cable's two directions are two links
    done, _ = run_jobs([1.0, 1.0], [0.0, 0.0], [(0.0, (0,), 1.0), (0.0, (1,), 1.0)])
    assert done == {0: 1.0, 1: 1.0}


def test_three_flows_get_max_min_rates_and_released_bandwidth() -> None:
    # links: L0 10 B/s, L1 4 B/s. A over L0+L1 (6 B), B over L0 (16 B), C over L1 (2 B).
    # t in [0, 1): L1 is the bottleneck, A = C = 2, B = 10 - 2 = 8; C ends at 1.
    # t in [1, 2): A alone on L1 -> A = 4, B = 6; A has 4 B left -> ends at 2; B has 8 left.
    # t >= 2: B alone, 10 B/s, 2 B left -> ends at 2.2.
    env = simpy.Environment()
    net = Network(env, [10.0, 4.0], [0.0, 0.0])
    ends: dict[str, float] = {}
    for name, route, nbytes in (("A", (0, 1), 6.0), ("B", (0,), 16.0), ("C", (1,), 2.0)):
        net.transfer(route, nbytes).callbacks.append(lambda _ev, n=name: ends.__setitem__(n, env.now))
    env.run(until=0.5)
    assert [rate for _, _, rate in net.active_flows()] == [2.0, 8.0, 2.0]
    env.run(until=1.5)
    assert [rate for _, _, rate in net.active_flows()] == [4.0, 6.0]
    env.run()
    assert ends["C"] == pytest.approx(1.0, rel=1e-12)
    assert ends["A"] == pytest.approx(2.0, rel=1e-12)
    assert ends["B"] == pytest.approx(2.2, rel=1e-12)


def test_a_flow_ending_releases_bandwidth_to_a_later_one() -> None:
    # 1 B/s link. Flow 0: 3 B from t=0; flow 1: 1 B from t=1. [0,1): 0 alone, 1 B done.
    # [1,3): both at 0.5, flow 1 done at 3 (0 has 1 B left); [3,4): flow 0 alone, done at 4.
    done, _ = run_jobs([1.0], [0.0], [(0.0, (0,), 3.0), (1.0, (0,), 1.0)])
    assert done[1] == pytest.approx(3.0, rel=1e-12)
    assert done[0] == pytest.approx(4.0, rel=1e-12)


def test_latency_is_paid_before_sharing() -> None:
    # Flow 1's bytes start flowing only after its 1 s latency; until then flow 0 is alone.
    # [0, 1): flow 0 alone, 1 B done; [1, 2): both at 0.5 B/s, flow 1 (0.5 B) done at 2;
    # [2, 2.5): flow 0 alone again, its last 0.5 B.
    done, _ = run_jobs([1.0, 1.0], [0.0, 1.0], [(0.0, (0,), 2.0), (0.0, (1, 0), 0.5)])
    assert done[1] == pytest.approx(2.0, rel=1e-12)
    assert done[0] == pytest.approx(2.5, rel=1e-12)


def test_zero_bytes_same_device_free_links_and_overhead() -> None:
    done, _ = run_jobs([1.0, 1.0], [0.25, 0.5], [(0.0, (0, 1), 0.0), (0.0, (), 100.0)], overhead_s=0.125)
    assert done[0] == 0.875  # latency + overhead only
    assert done[1] == 0.0  # same device: zero time, no overhead
    done, _ = run_jobs([1.0], [0.0], [(0.0, (0,), 4.0)], overhead_s=0.5)
    assert done[0] == 4.5
    done, _ = run_jobs([1.0], [7.0], [(0.0, (0,), 1e12), (0.0, (0,), 1e12)], free_links=True, overhead_s=1.0)
    assert done == {0: 0.0, 1: 0.0}


def test_infinite_bandwidth_link_never_limits() -> None:
    done, _ = run_jobs([math.inf, 2.0], [0.5, 0.0], [(0.0, (0, 1), 4.0), (0.0, (0,), 4.0)])
    assert done[0] == pytest.approx(2.5, rel=1e-12)
    assert done[1] == 0.5


def test_records_of_transfers_and_link_intervals() -> None:
    transfers: list[TransferRecord] = []
    intervals: list[LinkInterval] = []
    env = simpy.Environment()
    net = Network(
        env, [2.0, 4.0], [0.5, 0.0], on_transfer=transfers.append, on_link_interval=intervals.append
    )
    net.transfer((0, 1), 2.0, tag="act")
    net.transfer((1,), 2.0, tag="grad")
    env.run()
    # [0, 0.5): flow 1 alone on L1 at 4 B/s, done at 0.5; then flow 0 at 2 B/s until 1.5.
    assert transfers == [
        TransferRecord(transfer_id=1, route=(1,), nbytes=2.0, start_s=0.0, end_s=0.5, tag="grad"),
        TransferRecord(transfer_id=0, route=(0, 1), nbytes=2.0, start_s=0.0, end_s=1.5, tag="act"),
    ]
    assert sorted(intervals, key=lambda i: (i.link, i.start_s)) == [
        LinkInterval(link=0, start_s=0.5, end_s=1.5, bytes_per_s=2.0),
        LinkInterval(link=1, start_s=0.0, end_s=0.5, bytes_per_s=4.0),
        LinkInterval(link=1, start_s=0.5, end_s=1.5, bytes_per_s=2.0),
    ]
    assert net.stats.transfers == 2
    assert net.stats.active_flows == 0
    assert net.route_latency_s((0, 1)) == 0.5
    assert net.route_bandwidth_bytes_per_s((0, 1)) == 2.0
    assert net.link_name(1) == "link1"


def test_link_stretches_are_the_link_intervals_as_plain_arguments() -> None:
    def run(**hook: object) -> None:
        env = simpy.Environment()
        net = Network(env, [2.0, 4.0, 1.0], [0.5, 0.0, 0.1], **hook)  # type: ignore[arg-type]
        net.transfer((0, 1), 2.0)
        net.transfer((1,), 2.0)
        net.transfer((1, 2), 3.0)
        env.run()

    intervals: list[LinkInterval] = []
    stretches: list[tuple[int, float, float, float]] = []
    run(on_link_interval=intervals.append)
    run(on_link_stretch=lambda *args: stretches.append(args))
    assert len(intervals) >= 4
    assert stretches == [(i.link, i.start_s, i.end_s, i.bytes_per_s) for i in intervals]
    with pytest.raises(InputError, match="on_link_stretch"):
        run(on_link_interval=intervals.append, on_link_stretch=lambda *args: None)


def test_same_instant_changes_share_one_refill() -> None:
    # four flows that share link 4: the first starts alone (rated without a re-fill), the three
    # that join it at that instant share one re-fill; they end together, leaving no flow to re-rate
    _, net = run_jobs([1.0] * 5, [0.0] * 5, [(0.0, (i, 4), 1.0) for i in range(4)])
    assert (net.stats.refills, net.stats.lone_flows) == (1, 1)
    _, net = run_jobs([1.0] * 5, [0.0] * 5, [(0.0, (i, 4), 1.0) for i in range(4)] + [(0.0, (4,), 2.0)])
    assert (net.stats.refills, net.stats.lone_flows) == (2, 1)  # (4,) outlives the rest


def test_a_lone_flow_takes_latency_plus_bytes_at_its_bottleneck_without_a_refill() -> None:
    caps, lats = [4.0, 2.0, 6.0, 2.0], [0.5, 0.25, 0.0, 0.125]
    # 0 and 1 never meet; 2 joins 0 on link 2 while 0 moves bytes; 3 follows 1 on link 3 after it
    jobs: list[Job] = [(0.0, (0, 2), 4.0), (0.0, (1, 3), 2.0), (1.0, (2,), 8.0), (2.0, (3,), 1.0)]
    done, net = run_jobs(caps, lats, jobs)
    assert done[1] == 0.0 + (0.25 + 0.125) + 2.0 / 2.0  # alone: exactly latency + bytes / bottleneck
    assert done[3] == 2.0 + 0.125 + 1.0 / 2.0
    ref = reference_times(caps, lats, jobs)
    assert done == pytest.approx(ref, rel=1e-12)
    assert done[0] > 0.5 + 4.0 / 4.0  # slowed by the flow that joined it
    assert net.stats.lone_flows == 3  # 0, 1, 3; 2 joined 0 and was re-filled with it
    assert net.stats.refills == 2  # 2 joins, 2 leaves 0 alone (each end of 0, 1, 3 needs none)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bandwidth_bytes_per_s": [1.0, 0.0], "latency_s": [0.0, 0.0]}, r"bandwidth_bytes_per_s\[1\]=0.0"),
        ({"bandwidth_bytes_per_s": [1.0], "latency_s": [-1.0]}, r"latency_s\[0\]=-1.0"),
        ({"bandwidth_bytes_per_s": [1.0], "latency_s": [math.inf]}, r"latency_s\[0\]=inf"),
        ({"bandwidth_bytes_per_s": [1.0], "latency_s": [0.0, 0.0]}, "one value per link"),
        ({"bandwidth_bytes_per_s": [1.0], "latency_s": [0.0], "link_names": []}, "link_names"),
        ({"bandwidth_bytes_per_s": [1.0], "latency_s": [0.0], "overhead_s": -1.0}, "overhead_s=-1.0"),
    ],
)
def test_bad_construction_raises(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        Network(simpy.Environment(), **kwargs)


def test_bad_transfer_raises() -> None:
    net = Network(simpy.Environment(), [1.0], [0.0])
    with pytest.raises(InputError, match=r"nbytes=-1\.0"):
        net.transfer((0,), -1.0)
    with pytest.raises(InputError, match=r"route=\(0, 1\).*\[0, 1\)"):
        net.transfer((0, 1), 1.0)
    with pytest.raises(InputError, match="route"):
        net.transfer((-1,), 1.0)


# ---------------------------------------------------------------------- properties
jobs_strategy = st.integers(min_value=1, max_value=6).flatmap(
    lambda n_links: st.tuples(
        st.lists(st.sampled_from([1.0, 2.0, 3.0, 5.0, 0.7]), min_size=n_links, max_size=n_links),
        st.lists(st.sampled_from([0.0, 0.0, 0.1, 0.35]), min_size=n_links, max_size=n_links),
        st.lists(
            st.tuples(
                st.sampled_from([0.0, 0.0, 0.5, 1.0, 1.3]),
                st.lists(st.integers(0, n_links - 1), min_size=1, max_size=3, unique=True).map(tuple),
                st.sampled_from([0.0, 1.0, 2.0, 0.25, 3.7]),
            ),
            min_size=1,
            max_size=12,
        ),
    )
)


@settings(max_examples=150, deadline=None)
@given(jobs_strategy)
def test_matches_global_reference_fluid_model(case: tuple[list[float], list[float], list[Job]]) -> None:
    caps, lats, jobs = case
    got, _ = run_jobs(caps, lats, jobs)
    want = reference_times(caps, lats, jobs)
    assert got.keys() == want.keys()
    for i, t in want.items():
        assert got[i] == pytest.approx(t, rel=1e-9, abs=1e-12), i


@settings(max_examples=60, deadline=None)
@given(jobs_strategy)
def test_live_rates_are_max_min_fair(case: tuple[list[float], list[float], list[Job]]) -> None:
    caps, _, jobs = case
    env = simpy.Environment()
    net = Network(env, caps, [0.0] * len(caps))
    for _, route, _ in jobs:
        net.transfer(route, 1e6)
    env.run(until=1e-3)
    flows = net.active_flows()
    want = reference_maxmin(caps, {fid: set(route) for fid, route, _ in flows})
    for fid, _, rate in flows:
        assert rate == pytest.approx(want[fid], rel=1e-9)


def test_local_refill_matches_whole_component_refill(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    caps = [rng.choice([1.0, 2.0, 3.0, rng.uniform(1, 5)]) for _ in range(15)]
    lats = [rng.choice([0.0, 0.1]) for _ in range(15)]
    jobs = [
        (rng.random() * 3, tuple(rng.sample(range(15), rng.randint(1, 4))), rng.uniform(0.1, 5))
        for _ in range(60)
    ]
    local, net = run_jobs(caps, lats, jobs)
    assert net.stats.region_growths > 0  # the local path had to grow its region
    monkeypatch.setattr("pipesim.simulator.flow_sharing._MAX_LOCAL_ROUNDS", 1)
    whole, net = run_jobs(caps, lats, jobs)
    assert net.stats.component_refills > 0
    for i, t in local.items():
        assert whole[i] == pytest.approx(t, rel=1e-9)


def random_jobs(
    seed: int, n_flows: int, n_links: int, window_s: float
) -> tuple[list[float], list[float], list[Job]]:
    rng = random.Random(seed)
    caps = [rng.uniform(10e9, 100e9) for _ in range(n_links)]
    lats = [rng.uniform(1e-6, 5e-6) for _ in range(n_links)]
    jobs = [
        (
            rng.uniform(0, window_s),
            tuple(rng.sample(range(n_links), rng.randint(1, 3))),
            rng.uniform(1e6, 1e8),
        )
        for _ in range(n_flows)
    ]
    return caps, lats, jobs


def test_deterministic() -> None:
    caps, lats, jobs = random_jobs(3, 400, 50, 0.01)
    jobs += [(0.005, (1, 2), 1e7)] * 5  # exact ties
    records: list[list[TransferRecord]] = [[], []]
    for out in records:
        run_jobs(caps, lats, jobs, on_transfer=out.append)
    assert records[0] == records[1]
    assert len(records[0]) == len(jobs)


def test_stress_5000_flows_over_1000_links() -> None:
    # arrivals within 30 ms: about 900 flows move bytes at once at the peak (speed:
    # benchmarks/bench_network.py's dense random scenario)
    caps, lats, jobs = random_jobs(0, 5000, 1000, 0.03)
    done, net = run_jobs(caps, lats, jobs)
    assert len(done) == 5000
    assert net.stats.flows == 5000
    assert net.stats.peak_active_flows > 500


@pytest.mark.slow
def test_stress_dense_random_component() -> None:
    # ~4,800 flows at once on random links form one big component: the worst case (about 15 s).
    caps, lats, jobs = random_jobs(0, 5000, 1000, 0.001)
    done, _ = run_jobs(caps, lats, jobs)
    assert len(done) == 5000


def test_contention_free_mode_gives_every_flow_the_full_bottleneck() -> None:
    env = simpy.Environment()
    net = Network(env, [10.0, 5.0], [0.5, 0.25], contention=False)
    done: list[float] = []
    for _ in range(3):
        net.transfer((0, 1), 10.0).callbacks.append(lambda _ev: done.append(env.now))
    env.run()
    assert done == [0.75 + 10.0 / 5.0] * 3
