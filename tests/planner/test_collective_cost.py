"""The route-based all-reduce estimate (pipesim.profiles.costmodels.collective): closed forms, the
simulator's estimate, and its use by the planner."""

from __future__ import annotations

import math

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.planner.estimate import CostModel
from pipesim.profiles import get_cluster, with_overrides, zoo_model
from pipesim.profiles.costmodels.collective import allreduce_curves, allreduce_time_s
from pipesim.profiles.costmodels.lines import eval_lines, prune_lines
from pipesim.profiles.costmodels.nccl_protocol import SIMPLE, link_classes
from pipesim.simulator.collective_costs import estimate_allreduce_time_s
from pipesim.simulator.network import Network

BW, LAT = 1e9, 1e-5


def _star(n: int) -> tuple[dict[tuple[int, int], tuple[int, ...]], list[float], list[float]]:
    """n devices, each with its own up and down link into a non-blocking switch."""
    routes = {(a, b): (a, n + b) for a in range(n) for b in range(n) if a != b}
    return routes, [BW] * (2 * n), [LAT / 2] * (2 * n)


def test_ring_closed_form() -> None:
    n, nbytes = 5, 3e8
    routes, bw, lat = _star(n)
    got = allreduce_time_s(range(n), nbytes, lambda a, b: routes[(a, b)], bw.__getitem__, lat.__getitem__)
    # NCCL's Simple protocol at 300 MB: its launch, and its hand-off at each of the 8 steps
    want = SIMPLE.ring_launch_s + 2 * (n - 1) * (LAT + SIMPLE.ring_step_s + nbytes / n / BW)
    assert got == pytest.approx(want, rel=1e-12)
    assert allreduce_time_s([3], nbytes, lambda a, b: (), bw.__getitem__, lat.__getitem__) == 0.0


def test_hierarchical_closed_form_on_a_cluster() -> None:
    # 4 servers x 4 GPUs on PCIe: intra ring over PCIe, 4 inter rings sharing each server's NIC
    cluster = with_overrides(get_cluster("pcie-4x4-v100-10gbe"), {"servers": 4})
    links = cluster.links
    devices = list(range(16))
    curves = allreduce_curves(
        devices,
        cluster.route,
        lambda i: links[i].bandwidth_bytes_per_s,
        lambda i: links[i].latency_s,
        server_of=cluster.server_of,
    )
    assert curves.hierarchical is not None
    nbytes = 1e8
    hier = curves.time_s(nbytes, "hierarchical")
    ring = curves.time_s(nbytes, "ring")
    assert curves.time_s(nbytes) == min(hier, ring)
    # the inter-server part alone: 2 (k - 1) steps of S / (g k) with 4 rings on one NIC
    nic = cluster.route_bandwidth_bytes_per_s(0, 4)
    assert hier > 2 * 3 * nbytes / 16 / (nic / 4)


@settings(max_examples=25, deadline=None)
@given(
    servers=st.integers(1, 3),
    members=st.lists(st.integers(0, 23), min_size=1, max_size=10, unique=True),
    nbytes=st.floats(0, 1e9),
    algorithm=st.sampled_from(["ring", "hierarchical", "auto"]),
)
def test_matches_the_simulator_estimate(
    servers: int, members: list[int], nbytes: float, algorithm: str
) -> None:
    cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": servers})
    members = [m % cluster.num_devices for m in members]
    members = list(dict.fromkeys(members))
    links = cluster.links
    network = Network(
        simpy.Environment(), [x.bandwidth_bytes_per_s for x in links], [x.latency_s for x in links]
    )
    sim = estimate_allreduce_time_s(
        network, members, nbytes, cluster.route, server_of=cluster.server_of, algorithm=algorithm
    )
    ours = allreduce_time_s(
        members,
        nbytes,
        cluster.route,
        lambda i: links[i].bandwidth_bytes_per_s,
        lambda i: links[i].latency_s,
        server_of=cluster.server_of,
        algorithm=algorithm,
    )
    assert ours == pytest.approx(sim, rel=1e-9, abs=1e-15)


def test_planner_uses_it() -> None:
    cluster = get_cluster("dapple-2x8-v100")
    model = CostModel(zoo_model("gnmt16"), cluster)
    links = cluster.links
    classes = link_classes(links)
    for devices in [(0, 1, 2, 3), (0, 8), (0, 8, 1, 9), tuple(range(16)), (3, 11, 4, 12)]:
        direct = allreduce_time_s(
            devices,
            5e8,
            cluster.route,
            lambda i: links[i].bandwidth_bytes_per_s,
            lambda i: links[i].latency_s,
            server_of=cluster.server_of,
            link_class=classes.__getitem__,  # the planner's curves know the links' NCCL classes
        )
        assert model.allreduce_s(devices, 5e8) == pytest.approx(direct, rel=1e-12)
    # renumbering servers gives the same cost (the planner caches by that key)
    big = CostModel(zoo_model("gnmt16"), with_overrides(cluster, {"servers": 4}))
    assert big.allreduce_s((16, 24, 17, 25), 5e8) == pytest.approx(big.allreduce_s((0, 8, 1, 9), 5e8))


def test_lines() -> None:
    lines = prune_lines([(1.0, 2.0), (0.5, 1.0), (3.0, 0.0), (1.0, 2.0)])
    assert lines == ((1.0, 2.0), (3.0, 0.0))
    assert eval_lines(lines, 0.5) == 3.0
    assert eval_lines(lines, 2.0) == 5.0
    assert eval_lines((), 7.0) == 0.0


def test_errors() -> None:
    route = lambda a, b: (0,)  # noqa: E731
    one = lambda i: 1.0  # noqa: E731
    with pytest.raises(InputError, match="algorithm"):
        allreduce_time_s([0, 1], 1.0, route, one, one, algorithm="butterfly")
    with pytest.raises(InputError, match="members"):
        allreduce_time_s([0, 0], 1.0, route, one, one)
    with pytest.raises(InputError, match="nbytes"):
        allreduce_time_s([0, 1], math.nan, route, one, one)
    with pytest.raises(InputError, match="server_of"):
        allreduce_time_s([0, 1], 1.0, route, one, one, algorithm="hierarchical")
