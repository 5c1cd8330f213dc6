"""NCCL's per-link-class hand-offs and LL128 (profiles/costmodels/nccl_protocol.py): with link
classes a step's hand-off is NCCL's figure for its class (the NVLink/PCIe links' own latency not
added), only network links add their latency, LL128 is offered where no route is PCIe-class; the
simulator (a Network built with ``link_classes``) and the planner's curves agree exactly; without
classes nothing changes."""

from __future__ import annotations

import pytest
import simpy

from pipesim.errors import InputError
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves
from pipesim.profiles.costmodels.lines import eval_lines
from pipesim.profiles.costmodels.nccl_protocol import (
    LL,
    LL128,
    PROTOCOLS,
    SIMPLE,
    LinkClass,
    Protocol,
    link_classes,
    protocols_for,
    route_class,
)
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.hardware.topology import LinkKind
from pipesim.simulator.collective_costs import ring_allreduce_time_s
from pipesim.simulator.network import Network
from tests.profiles.nccl_cluster import cluster_curves, simulated_allreduce_s

US = 1e-6
MIB = 1 << 20


def _curves(preset: str, members: list[int], *, classes: bool = True) -> AllReduceCurves:
    return cluster_curves(get_cluster(preset), members, classes=classes)


def _simulate(
    preset: str, members: list[int], nbytes: float, algorithm: str = "auto", *, classes: bool = True
) -> float:
    return simulated_allreduce_s(get_cluster(preset), members, nbytes, algorithm, classes=classes)


def test_handoff_tables_are_nccls() -> None:
    # NVIDIA/nccl src/graph/tuning.cc (5067397) hwLatencies, ring and tree, per class
    assert LL.ring_handoff_s == pytest.approx((0.6 * US, 1.0 * US, 2.7 * US))
    assert LL128.ring_handoff_s == pytest.approx((1.9 * US, 2.5 * US, 4.0 * US))
    assert SIMPLE.ring_handoff_s == pytest.approx((3.4 * US, 5.7 * US, 14.0 * US))
    assert LL.tree_handoff_s == pytest.approx((0.6 * US, 1.0 * US, 5.0 * US))
    assert LL128.tree_handoff_s == pytest.approx((1.25 * US, 1.9 * US, 8.5 * US))
    assert SIMPLE.tree_handoff_s == pytest.approx((4.0 * US, 4.0 * US, 14.0 * US))
    assert (LL128.ring_launch_s, LL128.wire_factor) == pytest.approx((14.0 * US, 1 / 0.92))
    # the NVLink figure is the one the class-less model adds to the routes' latencies
    for p in (LL, LL128, SIMPLE):
        assert p.handoff_s(LinkClass.NVLINK) == p.ring_step_s
        assert p.handoff_s(LinkClass.NVLINK, tree=True) == p.tree_step_s
    with pytest.raises(InputError, match="ring_handoff_s"):
        Protocol(
            name="x",
            ring_launch_s=0,
            tree_launch_s=0,
            ring_step_s=0,
            tree_step_s=0,
            wire_factor=1,
            ring_handoff_s=(0.0, 0.0),  # type: ignore[arg-type]
        )


def test_route_class_is_the_slowest_link_and_ll128_needs_no_pcie() -> None:
    cluster = get_cluster("dgx-a100-x2")
    kinds = link_classes(cluster.links)
    assert route_class(cluster.route(0, 1), kinds.__getitem__) is LinkClass.NVLINK
    cross = cluster.route(0, 8)
    assert {cluster.links[i].kind for i in cross} >= {LinkKind.NETWORK}
    assert route_class(cross, kinds.__getitem__) is LinkClass.NET
    assert route_class((), kinds.__getitem__) is LinkClass.NVLINK
    pcie = get_cluster("pcie-4x4-v100-10gbe")
    pk = link_classes(pcie.links)
    assert route_class(pcie.route(0, 1), pk.__getitem__) is LinkClass.PCI
    assert protocols_for([LinkClass.NVLINK, LinkClass.NET]) == (SIMPLE, LL, LL128)
    assert protocols_for([LinkClass.NVLINK, LinkClass.PCI]) == PROTOCOLS


def test_small_allreduce_is_nccls_own_estimate_on_nvlink() -> None:
    # 8 bytes on 8 NVSwitch GPUs: ring LL, 6.6 us launch + 14 steps of 0.6 us (NCCL's tuner: 15.0 us);
    # the NVSwitch route's own 2 us latency is inside NCCL's hand-off, not added (was 43 us)
    want = LL.ring_launch_s + 14 * LL.handoff_s(LinkClass.NVLINK)
    members = list(range(8))
    for preset in ("dgx-h100-x4", "dgx-a100-x2", "dgx1-v100"):
        curves = _curves(preset, members)
        assert curves.protocol_for(8).name == "LL"  # with LL's cap (llMaxBws): a copy, more wire bytes
        assert curves.time_s(8) == pytest.approx(want, abs=1e-9)  # + 16 wire bytes
        assert _simulate(preset, members, 8) == pytest.approx(curves.time_s(8), rel=1e-12)
    assert want == pytest.approx(15.0 * US)
    # without link classes: the route's latency plus the NVLink figure, as before
    legacy = _curves("dgx-h100-x4", members, classes=False)
    assert legacy.time_s(8) == pytest.approx(6.6 * US + 14 * (2.0 + 0.6) * US, abs=1e-9)
    assert _simulate("dgx-h100-x4", members, 8, classes=False) == pytest.approx(legacy.time_s(8), rel=1e-12)


def test_pcie_steps_pay_pci_figures_and_no_ll128() -> None:
    members = [0, 1, 2, 3]  # one server of pcie-4x4-v100-10gbe: PCIe only
    curves = _curves("pcie-4x4-v100-10gbe", members)
    assert LL128 not in curves.protocols
    assert curves.classes is not None
    assert curves.classes[0] is LinkClass.PCI
    assert all(a == 0 for a, _ in curves.ring)  # PCIe's latency is inside the hand-off
    for nbytes in (8, 64 * 1024, 16 * MIB):
        p = curves.protocol_for(nbytes, "ring")
        want = (
            p.ring_launch_s + 6 * p.handoff_s(LinkClass.PCI) + eval_lines(curves.ring, p.wire_factor * nbytes)
        )
        assert curves.time_s(nbytes, "ring") == pytest.approx(want, rel=1e-12)
        assert _simulate("pcie-4x4-v100-10gbe", members, nbytes, "ring") == pytest.approx(want, rel=1e-12)


def test_hierarchical_steps_pay_their_own_class_and_the_network_latency() -> None:
    cluster = get_cluster("dgx-a100-x2")
    members = list(range(16))  # two servers of 8
    curves = _curves("dgx-a100-x2", members)
    assert curves.classes is not None
    assert curves.classes[1:3] == (LinkClass.NVLINK, LinkClass.NET)
    assert curves.hierarchical_inter_steps == 2
    net_latency = sum(
        cluster.links[i].latency_s for i in cluster.route(0, 8) if cluster.links[i].kind is LinkKind.NETWORK
    )
    for p in (LL, SIMPLE, LL128):
        want = (
            p.ring_launch_s
            + 14 * p.handoff_s(LinkClass.NVLINK)
            + 2 * (p.handoff_s(LinkClass.NET) + net_latency)
        )
        assert curves.fixed_s(p, AllReduceAlgorithm.HIERARCHICAL) + 2 * net_latency == pytest.approx(
            want, rel=1e-12
        )
    h = AllReduceAlgorithm.HIERARCHICAL
    assert curves.hierarchical is not None
    assert eval_lines(curves.hierarchical, 0) == pytest.approx(
        2 * net_latency, rel=1e-12
    )  # the NIC hops only
    ll = curves.protocol_for(8, h)
    assert ll.name == "LL"
    assert curves.time_s(8, h) == pytest.approx(
        LL.ring_launch_s + 14 * 0.6 * US + 2 * 2.7 * US + eval_lines(curves.hierarchical, 8 * ll.wire_factor),
        rel=1e-12,
    )
    for nbytes in (8, 4 * MIB, 256 * MIB):
        for algorithm in ("hierarchical", "tree", "ring", "auto"):
            assert _simulate("dgx-a100-x2", members, nbytes, algorithm) == pytest.approx(
                curves.time_s(nbytes, algorithm), rel=1e-12
            ), (nbytes, algorithm)


def test_ll128_wins_medium_messages_on_nvlink() -> None:
    # between LL's halved wire and Simple's slow hand-off, as NCCL's tuner picks on A100
    curves = _curves("dgx-a100-x2", list(range(8)))
    assert curves.protocol_for(4 * MIB, "ring") is LL128
    assert curves.protocol_for(8, "ring").name == "LL"
    assert curves.protocol_for(1 << 30, "ring") is SIMPLE
    want = LL128.ring_launch_s + 14 * 1.9 * US + eval_lines(curves.ring, 4 * MIB / 0.92)
    assert curves.time_s(4 * MIB, "ring") == pytest.approx(want, rel=1e-12)
    assert _simulate("dgx-a100-x2", list(range(8)), 4 * MIB, "ring") == pytest.approx(want, rel=1e-12)


def test_network_link_classes_are_checked() -> None:
    env = simpy.Environment()
    with pytest.raises(InputError, match="link_classes"):
        Network(env, [1.0, 2.0], [0.0, 0.0], link_classes=[LinkClass.NVLINK])
    net = Network(env, [1.0, 2.0], [1e-6, 2e-6], link_classes=[LinkClass.NVLINK, LinkClass.NET])
    assert net.has_link_classes
    assert net.link_class(1) is LinkClass.NET
    assert net.collective_latency_s((0, 1)) == pytest.approx(2e-6)
    assert net.route_latency_s((0, 1)) == pytest.approx(3e-6)  # point-to-point: unchanged
    plain = Network(env, [1.0], [1e-6])
    assert not plain.has_link_classes
    assert plain.collective_latency_s((0,)) == pytest.approx(1e-6)


def test_closed_form_ring_with_a_link_class() -> None:
    bw, lat = 300e9, 2e-6
    inside = ring_allreduce_time_s(8, 8, bw, lat, link_class=LinkClass.NVLINK)
    assert inside == pytest.approx(6.6 * US + 14 * 0.6 * US + 2 * 14 / 8 * 8 / bw, rel=1e-12)
    # across a network the hop's latency adds to NCCL's NET hand-off
    across = ring_allreduce_time_s(2, 8, bw, lat, link_class=LinkClass.NET)
    assert across == pytest.approx(6.6 * US + 2 * (2.7 * US + lat) + 2 * 2 / 2 * 8 / bw, rel=1e-12)
    # LL128 runs where it is fastest, on NVLink only
    mid = ring_allreduce_time_s(8, 4 * MIB, 240e9, lat, link_class=LinkClass.NVLINK)
    assert mid == pytest.approx(14.0 * US + 14 * 1.9 * US + 14 / 8 * 4 * MIB / 0.92 / 240e9, rel=1e-12)
    pci = ring_allreduce_time_s(8, 4 * MIB, 240e9, lat, link_class=LinkClass.PCI)
    assert pci < ring_allreduce_time_s(8, 4 * MIB, 240e9, lat)  # no 2 us per step on top
    # ideal links (no latency): the bare wire, no protocol
    assert ring_allreduce_time_s(8, 8, bw, 0.0, link_class=LinkClass.NVLINK) == pytest.approx(14 / 8 * 8 / bw)
