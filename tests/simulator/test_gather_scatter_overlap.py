"""An all-gather and a reduce-scatter that meet (issue 14): closed forms of the simulator's ring
form under max-min sharing, whatever algorithm is named.

NCCL runs all-gathers and reduce-scatters only on rings (``src/graph/tuning.cc`` at v2.8.4-1:
every algorithm but the ring is skipped for any collective but the all-reduce), and a ring's
chunks move on through every step as they arrive, so a call loads all its hops at once for its
whole length (``sharding.half_algorithm``, the planner's rule and the simulator's). Two calls on
the same rings then share every link they use, their common bottleneck half and half: a pair
started ``d`` apart ends ``2 R`` after the first starts (``d <= R``, ``R`` one call alone), the
first at ``2 R - d``, and two streams of such calls back to back run at one period ``2 R``
whatever their offset. The phase-serial hierarchical form pipesim ran before (inter-server phase
``a`` to its end, then intra-server ``b``) ended such a pair anywhere from ``2 b`` to ``2 (a + b)``
by the offset alone, each kind of link idle half the time at the worst, which no NCCL call shows;
named ``hierarchical`` now, a gather or reduce-scatter runs the ring.

Here two servers of two GPUs, 12 GB per call, NICs 3 GB/s, NVSwitch ports 4 GB/s, links of no
latency (no protocol launch or hand-off): NCCL's two rings across the servers
(``ring_topology.server_rings``: ``(0, 1, 2, 3)`` and ``(1, 0, 3, 2)``), each carrying chunks of
``S / (n g)`` = 1.5 GB over 3 steps, every port and NIC link on one ring's hop; NIC-bound,
``R`` = 3 x 1.5 GB / 3 GB/s = 1.5 s (the hierarchical form took ``a + b`` = 1 + 1.5 s). Every time
is exact in binary floating point.
"""

from __future__ import annotations

import logging

import pytest
import simpy

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.collective_steps import Process
from pipesim.simulator.network import Network
from pipesim.simulator.scatter_gather import all_gather, reduce_scatter

S = 12e9
R = 1.5  # one call alone, seconds: 3 steps of 1.5 GB on 3 GB/s NICs


def _route(x: int, y: int) -> tuple[int, ...]:
    # devices 0, 1 on server 0 and 2, 3 on server 1; links: port up d, port down 4 + d,
    # NIC up 8 + d, NIC down 12 + d
    if x == y:
        return ()
    return (x, 4 + y) if x // 2 == y // 2 else (8 + x, 12 + y)


def _streams(starts: dict[str, float], calls: int = 1, algorithm: str = "ring") -> dict[str, list[float]]:
    """Each stream (``g``: all-gathers, ``r``: reduce-scatters) runs ``calls`` calls back to back
    from its start; returns each stream's call ends, seconds."""
    env = simpy.Environment()
    net = Network(env, [4e9] * 8 + [3e9] * 8, [0.0] * 16)
    ends: dict[str, list[float]] = {name: [] for name in starts}

    def stream(name: str, start: float) -> Process:
        yield env.timeout(start)
        for _ in range(calls):
            fn = all_gather if name == "g" else reduce_scatter
            yield env.process(fn(env, net, [0, 1, 2, 3], S, _route, server_of=lambda d: d // 2,
                                 algorithm=algorithm))
            ends[name].append(env.now)

    for name, start in starts.items():
        env.process(stream(name, start))
    env.run()
    return ends


@pytest.mark.parametrize("algorithm", ["ring", "auto", "hierarchical"])
def test_alone_each_takes_its_ring_steps(algorithm: str) -> None:
    assert _streams({"g": 0.0}, algorithm=algorithm) == {"g": [R]}
    assert _streams({"r": 0.0}, algorithm=algorithm) == {"r": [R]}


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical"])
@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 1.0, 1.5, 2.0])
def test_a_pair_shares_its_bottleneck_whatever_its_offset(algorithm: str, d: float) -> None:
    ends = _streams({"g": 0.0, "r": d}, algorithm=algorithm)
    if d <= R:  # half and half while both run: the pair ends 2 R after the first starts
        assert ends == {"g": [2 * R - d], "r": [2 * R]}
    else:
        assert ends == {"g": [R], "r": [d + R]}


@pytest.mark.parametrize("d", [0.0, 0.5, 1.0, 1.5])
def test_streams_run_at_one_period_whatever_their_offset(d: float) -> None:
    # both streams run at one period, 2 R, every call sharing the links with the other stream's
    # (the first gather runs its first d alone; the reduce-scatters stay d behind, their last
    # finishing its remaining d alone once the gathers are done, at 10 R)
    ends = _streams({"g": 0.0, "r": d}, calls=5, algorithm="hierarchical")
    assert ends["g"] == [2 * R - d + 2 * R * k for k in range(5)]
    assert ends["r"] == [2 * R + d + 2 * R * k for k in range(4)] + [10 * R]


def test_a_plan_naming_hierarchical_runs_its_zero_collectives_on_the_rings(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # ZeRO-3 over two DGX A100 servers: no all-reduce, so every collective runs the ring, and the
    # plan is told so once; the simulation is the ring's to the bit
    profile, cluster = resolve_inputs("gpt:layers=2,hidden=1024,heads=16,seq=512,vocab=1024", "dgx-a100-x2",
                                      dtype="fp16")
    stage = StagePlan(first_layer=0, last_layer=profile.num_layers - 1, replicas=16, sharding="zero3")
    times = {}
    for algorithm in ("ring", "hierarchical"):
        plan = Plan(stages=(stage,), global_batch_size=16, num_microbatches=1, schedule="1f1b",
                    allreduce=algorithm)  # type: ignore[arg-type]
        with caplog.at_level(logging.INFO, logger="pipesim.simulator.dp_collectives"):
            caplog.clear()
            result = simulate(plan, profile, cluster, SimOptions(record_trace=False))
            told = [r.getMessage() for r in caplog.records if "NCCL's rings" in r.getMessage()]
        assert len(told) == (algorithm == "hierarchical")
        times[algorithm] = result.iteration_time_s
    assert times["hierarchical"] == times["ring"]
