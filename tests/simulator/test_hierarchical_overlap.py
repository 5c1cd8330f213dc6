"""A hierarchical all-gather and reduce-scatter that meet (issue 14): closed forms of the
simulator's phase-serial lowering under max-min sharing.

The hierarchical all-gather runs its inter-server phase (NICs, ``a`` seconds alone) then its
intra-server phase (NVSwitch ports, ``b``); the reduce-scatter the reverse
(``simulator/scatter_gather.py``, ``_half_body``). Each phase ends before the next starts, so a
lone call leaves one kind of link idle at any time, and a second call in the other phase fills it:

* all-gather at 0, reduce-scatter at ``d`` (``a < b``): the reduce-scatter's intra phase runs
  alone on the ports until ``a`` (``a - d`` of it done), then shares them half and half with the
  gather's until it has ended (at ``2b - a + 2d``), then its inter phase (``a``) runs beside the
  gather's last ``a - d`` on the ports: the pair ends at ``min(2b + 2d, 2 (a + b))``, the gather
  at ``2b + d`` (``d <= a``) or ``2 (a + b) - d``; never later than one after the other (the
  "57.5 ms, not 48" of ``tests/tp/test_zero3_wide_estimate.py``'s earlier docstring was this
  pair with the next gather joining, three calls);
* two streams of such calls back to back keep their offset: their period is anything from
  ``2b`` (started together: each NIC phase beside the other's port phase) to ``2 (a + b)`` (the
  reduce-scatter ``a`` behind: NIC phases together, port phases together, every link idle half
  the time), which is why a ZeRO-3 iteration's time there depends on how its compute spaces the
  issues. NCCL pipelines its rings' chunks through every step (sources in
  ``tests/tp/test_zero3_wide_estimate.py``): a call loads all its links at once, and two that
  meet share their bottleneck whatever their offset.

Here ``a = 1 s`` and ``b = 1.5 s``: two servers of two GPUs, 12 GB per call, NICs 3 GB/s
(inter step ``S / 4``), NVSwitch ports 4 GB/s (intra step ``S / 2``), links of no latency (no
protocol launch or hand-off), so every time is exact in binary floating point.
"""

from __future__ import annotations

import pytest
import simpy

from pipesim.simulator.collective_steps import Process
from pipesim.simulator.network import Network
from pipesim.simulator.scatter_gather import all_gather, reduce_scatter

S = 12e9
A, B = 1.0, 1.5  # the inter-server (NIC) phase, the intra-server (NVSwitch) phase, seconds


def _route(x: int, y: int) -> tuple[int, ...]:
    # devices 0, 1 on server 0 and 2, 3 on server 1; links: port up d, port down 4 + d,
    # NIC up 8 + d, NIC down 12 + d
    if x == y:
        return ()
    return (x, 4 + y) if x // 2 == y // 2 else (8 + x, 12 + y)


def _streams(starts: dict[str, float], calls: int = 1) -> dict[str, list[float]]:
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
                                 algorithm="hierarchical"))
            ends[name].append(env.now)

    for name, start in starts.items():
        env.process(stream(name, start))
    env.run()
    return ends


def test_alone_each_takes_its_phases_one_after_the_other() -> None:
    assert _streams({"g": 0.0}) == {"g": [A + B]}
    assert _streams({"r": 0.0}) == {"r": [A + B]}


@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5])
def test_gather_then_reduce_scatter_closed_form(d: float) -> None:
    ends = _streams({"g": 0.0, "r": d})
    assert ends["r"] == [min(2 * B + 2 * d, 2 * (A + B))]
    assert ends["g"] == [2 * B + d if d <= A else 2 * (A + B) - d]


@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 2.5])
def test_a_pair_never_ends_later_than_one_after_the_other(d: float) -> None:
    for first, second in (("g", "r"), ("r", "g")):
        ends = _streams({first: 0.0, second: d})
        assert max(ends["g"] + ends["r"]) <= max(2 * (A + B), d + A + B)


@pytest.mark.parametrize(("d", "period"), [(0.0, 2 * B), (0.5, 2 * B + 1.0), (A, 2 * (A + B)),
                                           (1.5, 4.0), (2.0, 2 * B)])
def test_streams_keep_their_offset_and_its_period(d: float, period: float) -> None:
    ends = _streams({"g": 0.0, "r": d}, calls=5)
    gaps = [y - x for x, y in zip(ends["g"], ends["g"][1:], strict=False)]
    assert gaps == [period] * 4
