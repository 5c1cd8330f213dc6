"""NCCL's rings across servers, one per NIC (issue 14): the ring set's structure, closed forms of
the step on a synthetic two-server network, the single-server and DGX-1 ring sets unchanged, and
the simulator equal to the shared cost curves for a lone call.

NCCL's ring channels run "NET n -> GPU a -> .. -> GPU x -> NET n", successive channels from
different NICs (NVIDIA/nccl ``src/graph/search.cc`` at v2.8.4-1), so on servers with a NIC per
GPU the ``g`` rings cross each server boundary on ``g`` different NICs, each ring ``S / g``
(:func:`~pipesim.profiles.costmodels.ring_topology.server_rings`).

The synthetic network: servers 0 (devices 0..3) and 1 (4..7), each device with an NVSwitch port
up (link ``d``) and down (``8 + d``) of ``P`` bytes/s and a NIC up (``16 + d``) and down
(``24 + d``) of ``N`` bytes/s, no latency. A ring step moves chunk ``c = S / (n g) = S / 32``
on each of the 4 rings; a device's port carries 3 of them (``g - 1`` rings leave it inside the
server), its NIC one, and chunks sharing a link share it equally, so a step takes
``max(3 c / P, c / N)``; the all-gather ``n - 1 = 7`` steps, the all-reduce 14. The one ring in
the given order took ``S / 8 / N`` a step (its boundary NICs carrying every chunk).
"""

from __future__ import annotations

from collections import Counter

import pytest
import simpy

from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, allreduce_curves, allreduce_time_s
from pipesim.profiles.costmodels.nccl_protocol import LinkClass, link_classes
from pipesim.profiles.costmodels.ring_topology import ring_set, server_rings
from pipesim.profiles.costmodels.sharding import half_algorithm, half_time_s
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network
from pipesim.simulator.scatter_gather import all_gather, reduce_scatter

S = 32e9  # bytes per member: chunk c = S / 32 = 1e9
MEMBERS = list(range(8))


def _server(d: int) -> int:
    return d // 4


def _route(x: int, y: int) -> tuple[int, ...]:
    if x == y:
        return ()
    return (x, 8 + y) if _server(x) == _server(y) else (16 + x, 24 + y)


def _bandwidths(port: float, nic: float) -> list[float]:
    return [port] * 16 + [nic] * 16


def _step_s(port: float, nic: float) -> float:
    c = S / 32
    return max(3 * c / port, c / nic)


def test_rings_rotate_each_server_so_every_nic_carries_one_ring_each_way() -> None:
    rings = ring_set(MEMBERS, _route, lambda link: 1e9, _server)
    assert rings == (
        (0, 1, 2, 3, 4, 5, 6, 7),
        (1, 2, 3, 0, 5, 6, 7, 4),
        (2, 3, 0, 1, 6, 7, 4, 5),
        (3, 0, 1, 2, 7, 4, 5, 6),
    )
    use: Counter[int] = Counter(
        link for ring in rings for i in range(8) for link in _route(ring[i], ring[(i + 1) % 8])
    )
    for d in MEMBERS:
        assert (use[16 + d], use[24 + d]) == (1, 1)  # its NIC: one ring out, one in
        assert (use[d], use[8 + d]) == (3, 3)  # its port: the g - 1 rings that stay in the server


@pytest.mark.parametrize(("port", "nic"), [(4e9, 1e9), (4e9, 8e9)])  # NIC-bound; port-bound
def test_curves_step_closed_form(port: float, nic: float) -> None:
    bw = _bandwidths(port, nic)
    curves = allreduce_curves(MEMBERS, _route, bw.__getitem__, lambda link: 0.0, server_of=_server)
    assert curves.time_s(S, AllReduceAlgorithm.RING) == pytest.approx(14 * _step_s(port, nic), rel=1e-12)
    # without the servers: the one ring in the given order, its boundary NICs carrying S / 8 a step
    one = allreduce_curves(MEMBERS, _route, bw.__getitem__, lambda link: 0.0)
    one_step = max(S / 8 / nic, S / 8 / port)
    assert one.time_s(S, AllReduceAlgorithm.RING) == pytest.approx(14 * one_step, rel=1e-12)


def _run(port: float, nic: float, kind: str, algorithm: str = "ring") -> float:
    env = simpy.Environment()
    net = Network(env, _bandwidths(port, nic), [0.0] * 32)
    fn = {"gather": all_gather, "scatter": reduce_scatter, "reduce": allreduce}[kind]
    env.process(fn(env, net, MEMBERS, S, _route, server_of=_server, algorithm=algorithm))
    env.run()
    return float(env.now)


@pytest.mark.parametrize(("port", "nic"), [(4e9, 1e9), (4e9, 8e9)])
def test_simulated_ring_steps_closed_form(port: float, nic: float) -> None:
    step = _step_s(port, nic)
    assert _run(port, nic, "gather") == pytest.approx(7 * step, rel=1e-12)
    assert _run(port, nic, "scatter") == pytest.approx(7 * step, rel=1e-12)
    assert _run(port, nic, "reduce") == pytest.approx(14 * step, rel=1e-12)


@pytest.mark.parametrize("algorithm", ["auto", "ring", "hierarchical", "tree", "nvls"])
@pytest.mark.parametrize(("port", "nic"), [(4e9, 1e9), (4e9, 8e9)])
def test_gathers_and_scatters_run_on_the_rings_whatever_is_named(
    algorithm: str, port: float, nic: float,
) -> None:
    # NCCL runs them only on rings (sharding.half_algorithm): 7 ring steps, planner and simulator.
    # The phase-serial hierarchical form this replaces took 3 intra steps of S / 4 on the ports
    # then one inter step of S / 8 on a NIC: 10 s where NIC-bound (4e9, 1e9), against 7 s
    assert half_algorithm(algorithm) is AllReduceAlgorithm.RING
    assert _run(port, nic, "gather", algorithm) == pytest.approx(7 * _step_s(port, nic), rel=1e-12)
    assert _run(port, nic, "scatter", algorithm) == pytest.approx(7 * _step_s(port, nic), rel=1e-12)
    bw = _bandwidths(port, nic)
    curves = allreduce_curves(MEMBERS, _route, bw.__getitem__, lambda link: 0.0, server_of=_server)
    assert half_time_s(curves, S, algorithm) == pytest.approx(7 * _step_s(port, nic), rel=1e-12)


def test_uneven_servers_and_one_member_per_server_keep_the_one_ring() -> None:
    bw = lambda link: 1e9  # noqa: E731
    assert ring_set([0, 1, 2, 4, 5], _route, bw, _server) == ((0, 1, 2, 4, 5),)
    assert ring_set([0, 4], _route, bw, _server) == ((0, 4),)
    assert ring_set([1, 5], _route, bw, _server) == ((1, 5),)
    assert server_rings([[0, 1], [4, 5], [2, 3]]) == ((0, 1, 4, 5, 2, 3), (1, 0, 5, 4, 3, 2))


@pytest.mark.parametrize(("preset", "members"), [
    ("dgx1-v100", list(range(8))),
    ("dgx1-v100", [0, 1, 2, 3]),
    ("dgx-a100-x2", list(range(8))),
    ("dgx-a100-x2", [11, 9, 10]),
    ("dgx-h100-x4", [8, 9, 10, 11, 12, 13, 14, 15]),
])
def test_one_server_ring_sets_unchanged(preset: str, members: list[int]) -> None:
    cluster = get_cluster(preset)
    bw = lambda link: cluster.links[link].bandwidth_bytes_per_s  # noqa: E731
    assert ring_set(members, cluster.route, bw, cluster.server_of) == ring_set(members, cluster.route, bw)
    lat = lambda link: cluster.links[link].latency_s  # noqa: E731
    with_servers = allreduce_curves(members, cluster.route, bw, lat, server_of=cluster.server_of)
    without = allreduce_curves(members, cluster.route, bw, lat)
    assert with_servers.ring == without.ring  # bit-identical lines


def test_dgx_a100_pair_uses_every_nic_once_each_way() -> None:
    cluster = get_cluster("dgx-a100-x2")
    classes = link_classes(cluster.links)
    rings = ring_set(range(16), cluster.route, lambda link: cluster.links[link].bandwidth_bytes_per_s,
                     cluster.server_of)
    assert len(rings) == 8
    use: Counter[int] = Counter(link for ring in rings for i in range(16)
                                for link in cluster.route(ring[i], ring[(i + 1) % 16]))
    net = {link: k for link, k in use.items() if classes[link] is LinkClass.NET}
    assert sorted(net.values()) == [1] * 32  # 8 NICs a server, up and down, once each
    assert max(use.values()) == 7  # an NVSwitch port: the g - 1 rings that stay in the server


@pytest.mark.parametrize("nbytes", [1e5, 64e6])
def test_simulator_equals_the_curves_for_a_lone_call(nbytes: float) -> None:
    cluster = get_cluster("dgx-a100-x2")
    bw = [link.bandwidth_bytes_per_s for link in cluster.links]
    lat = [link.latency_s for link in cluster.links]
    members = list(range(16))
    est = allreduce_time_s(members, nbytes, cluster.route, bw.__getitem__, lat.__getitem__,
                           server_of=cluster.server_of, algorithm="ring")
    for kind in ("reduce", "gather"):
        env = simpy.Environment()
        net = Network(env, bw, lat)
        fn = allreduce if kind == "reduce" else all_gather
        env.process(fn(env, net, members, nbytes, cluster.route, server_of=cluster.server_of,
                       algorithm="ring"))
        env.run()
        assert env.now == pytest.approx(est if kind == "reduce" else est / 2, rel=1e-9)
