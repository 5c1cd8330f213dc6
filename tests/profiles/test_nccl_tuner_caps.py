"""NCCL's tuner figures that depend on the GPU generation and the node count
(profiles/costmodels/nccl_protocol.py, NVIDIA/nccl src/graph/tuning.cc at 5067397): LL's bus
bandwidth cap (``llMaxBws``), LL128 enabled only from compute capability 7.0, the tree's own
protocol factors, and NVLS's 25 us as its whole latency. Planner curves and the simulator agree
exactly; without link classes (NCCL before 2.5) nothing of this applies."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.lines import eval_lines
from pipesim.profiles.costmodels.nccl_protocol import (
    LL,
    LL128,
    NVLS_PROTOCOL,
    PROTOCOLS,
    SIMPLE,
    LinkClass,
    NcclGpus,
    link_classes,
    ll_max_bus_bytes_per_s,
    protocols_for,
    tuned,
)
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.hardware.cluster_config import with_overrides
from tests.profiles.nccl_cluster import cluster_curves, simulated_allreduce_s

US = 1e-6
MIB = 1 << 20
GB = 1e9


_curves = cluster_curves
_simulate = simulated_allreduce_s


def test_ll_cap_per_generation_and_node_count() -> None:
    def cap(arch: str, nodes: int = 1) -> float:
        return ll_max_bus_bytes_per_s(NcclGpus.of([arch] * 8), nodes)

    assert cap("volta") == 39.0 * GB
    assert cap("turing") == 39.0 * GB  # below 8.0: NCCL's Volta row
    assert cap("ampere") == 87.7 * GB
    assert cap("ada") == 87.7 * GB
    assert cap("hopper") == 141.0 * GB
    assert cap("blackwell") == 282.0 * GB
    assert cap("hopper", 2) == 39.0 * GB  # across nodes: the CPU's row, not the GPU's
    assert cap("volta", 4) == cap("hopper", 64) == 20.4 * GB
    assert ll_max_bus_bytes_per_s(NcclGpus(), 1) == math.inf  # unknown generation
    assert ll_max_bus_bytes_per_s(NcclGpus.of(["cdna3"]), 1) == math.inf  # RCCL: not modelled
    assert NcclGpus.of(["hopper", None]) == NcclGpus()
    with pytest.raises(InputError, match="nodes"):
        ll_max_bus_bytes_per_s(NcclGpus(), 0)


def test_ll128_needs_volta_or_later_and_equal_generations() -> None:
    assert not NcclGpus.of(["pascal"] * 8).ll128_enabled()
    assert NcclGpus.of(["volta"] * 8).ll128_enabled()
    assert not NcclGpus.of(["volta", "ampere"]).ll128_enabled()  # mixed below 9.0
    assert NcclGpus.of(["hopper", "blackwell"]).ll128_enabled()  # mixed from 9.0: enabled
    assert NcclGpus().ll128_enabled()  # unknown: as before the gating
    nv = [LinkClass.NVLINK]
    assert protocols_for(nv, NcclGpus.of(["pascal"])) == PROTOCOLS
    assert protocols_for(nv, NcclGpus.of(["hopper"])) == (SIMPLE, LL, LL128)
    # a P100 in the DGX-1 mesh: LL128 is not offered any more, LL and Simple as before
    p100 = with_overrides(get_cluster("dgx1-v100"), {"device": "P100"})
    curves = _curves(p100, list(range(8)))
    assert LL128 not in curves.protocols
    v100 = _curves(get_cluster("dgx1-v100"), list(range(8)))
    assert LL128 in v100.protocols
    assert curves.ll_cap == 39.0 * GB  # compute capability 6.0 sits in NCCL's Volta row


def test_tuned_keeps_the_protocol_where_nothing_changes() -> None:
    assert tuned(SIMPLE, tree=False, one_node=True, bus_rate=300 * GB, ll_cap=1 * GB) is SIMPLE
    assert tuned(LL, tree=False, one_node=True, bus_rate=60 * GB, ll_cap=141 * GB) is LL  # 0.5 x 60 < 141
    capped = tuned(LL, tree=False, one_node=True, bus_rate=360 * GB, ll_cap=141 * GB)
    assert capped.name == "LL"
    assert capped.wire_factor == pytest.approx(360 / 141)
    assert tuned(LL, tree=False, one_node=True, bus_rate=math.inf, ll_cap=141 * GB) is LL
    tree_ll = tuned(LL, tree=True, one_node=False, bus_rate=10 * GB, ll_cap=20.4 * GB)
    assert tree_ll.wire_factor == pytest.approx(3.8 / 0.92)
    assert tuned(LL128, tree=True, one_node=True, bus_rate=1.0, ll_cap=1.0).wire_factor == pytest.approx(
        9 / 7 / 0.92
    )
    assert tuned(LL128, tree=True, one_node=False, bus_rate=1.0, ll_cap=1.0).wire_factor == pytest.approx(
        128 / 120 / 0.92
    )
    assert tuned(SIMPLE, tree=True, one_node=False, bus_rate=1.0, ll_cap=1.0).wire_factor == pytest.approx(
        1 / 0.92
    )


def test_ring_ll_is_capped_at_nccls_llmaxbw_on_a_dgx_h100() -> None:
    # 1 MiB on 8 H100s: ring LL, 15.0 us + the bus bytes 2 (n - 1) / n S at 141 GB/s (NCCL's own
    # estimate; LL's halved wire at the ring's 360 GB/s would give 180 GB/s)
    cluster = get_cluster("dgx-h100-x4")
    members = list(range(8))
    curves = _curves(cluster, members)
    assert curves.nodes == 1
    assert curves.ll_cap == 141.0 * GB
    want = 15.0 * US + 2 * 7 / 8 * MIB / (141.0 * GB)
    assert curves.protocol_for(MIB, "ring").name == "LL"
    assert curves.time_s(MIB, "ring") == pytest.approx(want, rel=1e-12)
    assert _simulate(cluster, members, MIB, "ring") == pytest.approx(want, rel=1e-12)
    # NCCL before 2.5 (no link classes): no cap, LL's plain halved wire
    legacy = _curves(cluster, members, classes=False)
    assert legacy.protocol_for(MIB, "ring") is LL
    assert legacy.ll_cap == math.inf


def test_two_nodes_take_the_cpus_cap_and_the_trees_own_factors() -> None:
    cluster = get_cluster("dgx-a100-x2")
    members = list(range(16))
    curves = _curves(cluster, members)
    assert curves.nodes == 2
    assert curves.ll_cap == 39.0 * GB
    tree = AllReduceAlgorithm.TREE
    assert curves.tree is not None
    for nbytes in (8, 256 * 1024, 4 * MIB, 256 * MIB):
        p = curves.protocol_for(nbytes, tree)
        base = {"LL": 3.8 / 0.92, "LL128": 128 / 120 / 0.92, "Simple": 1 / 0.92}[p.name]
        assert p.wire_factor >= base - 1e-12
        want = curves.fixed_s(p, tree) + curves.tree.time_s(p.wire_factor * nbytes)
        assert curves.time_s(nbytes, tree) == pytest.approx(want, rel=1e-12)
        assert _simulate(cluster, members, nbytes, "tree") == pytest.approx(want, rel=1e-12), nbytes
    big = curves.protocol_for(256 * MIB, tree)
    assert big.name == "Simple"
    assert big.wire_factor == pytest.approx(1 / 0.92)


def test_nvls_latency_is_nccls_25us_alone_with_link_classes() -> None:
    cluster = get_cluster("dgx-h100-x4")
    members = list(range(8))
    curves = _curves(cluster, members)
    assert curves.nvls is not None
    assert eval_lines(curves.nvls, 0) == 0.0  # the ports' own latency is inside NCCL's 25 us
    for nbytes in (8, 64 * MIB):
        want = NVLS_PROTOCOL.ring_launch_s + eval_lines(curves.nvls, nbytes)
        assert curves.time_s(nbytes, "nvls") == pytest.approx(want, rel=1e-12)
        assert _simulate(cluster, members, nbytes, "nvls") == pytest.approx(want, rel=1e-12)
    assert curves.time_s(8, "nvls") == pytest.approx(25.0 * US, abs=1e-9)
    # without link classes the ports' latency is paid on top, as before
    legacy = _curves(cluster, members, classes=False)
    assert legacy.nvls is not None
    assert eval_lines(legacy.nvls, 0) > 0
    assert _simulate(cluster, members, 8, "nvls", classes=False) == pytest.approx(
        legacy.time_s(8, "nvls"), rel=1e-12
    )


def test_gpus_come_from_the_routes_cluster_or_are_given() -> None:
    cluster = get_cluster("dgx-h100-x4")
    members = list(range(8))
    links = cluster.links
    bw = [lk.bandwidth_bytes_per_s for lk in links]
    lat = [lk.latency_s for lk in links]
    kinds = link_classes(links)

    def curves(route: Callable[[int, int], tuple[int, ...]], gpus: NcclGpus | None = None) -> AllReduceCurves:
        return allreduce_curves(
            members, route, bw.__getitem__, lat.__getitem__, link_class=kinds.__getitem__, gpus=gpus
        )

    assert curves(cluster.route).ll_cap == 141.0 * GB  # the route's cluster: H100s on one server
    assert LL128 in curves(cluster.route).protocols
    # given explicitly: they win over the cluster's devices
    pascal = curves(cluster.route, gpus=NcclGpus.of(["pascal"] * 8))
    assert LL128 not in pascal.protocols
    assert pascal.ll_cap == 39.0 * GB
    # a route that is not a cluster's: generation unknown (no cap inside a node, LL128 offered)
    plain = curves(lambda a, b: cluster.route(a, b))
    assert plain.ll_cap == math.inf
    assert LL128 in plain.protocols
    assert plain.protocol_for(MIB, "ring") is LL
    # the node count without server_of: the route's cluster's servers
    two = allreduce_curves(
        list(range(16)), cluster.route, bw.__getitem__, lat.__getitem__, link_class=kinds.__getitem__
    )
    assert two.nodes == 2
    assert two.ll_cap == 39.0 * GB
