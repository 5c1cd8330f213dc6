"""Every cluster preset loads, and the issue-15 sizes exist for both GPU generations: 1024 and
16,384 GPUs of A100 (``dgx-a100-1024``, ``dgx-a100-16384``) and of H100 (``dgx-h100-1024``,
``dgx-h100-16384``), on the rail fat-trees of docs/hardware.md; ``--cluster NAME`` accepts them
and ``pipesim clusters`` and the unknown-name message list them."""

from __future__ import annotations

import pytest

from pipesim.cli import main
from pipesim.profiles.hardware.catalog import get_device, get_link
from pipesim.profiles.hardware.cluster_file import cluster_names, get_cluster
from pipesim.profiles.hardware.fabric import FabricKind, FabricSpec
from tests.profiles.test_cluster import check_routes

RAIL = FabricKind.RAIL
ISSUE_15_PRESETS = {
    # name: (servers, device, nic, fabric)
    "dgx-a100-1024": (128, "A100-80GB", "IB-HDR", FabricSpec(kind=RAIL, levels=2, servers_per_leaf=20)),
    "dgx-a100-16384": (2048, "A100-80GB", "IB-HDR",
                       FabricSpec(kind=RAIL, levels=3, servers_per_leaf=20, units_per_pod=7)),
    "dgx-h100-1024": (128, "H100-SXM", "IB-NDR", FabricSpec(kind=RAIL, levels=2, servers_per_leaf=32)),
    "dgx-h100-16384": (2048, "H100-SXM", "IB-NDR",
                       FabricSpec(kind=RAIL, levels=3, servers_per_leaf=32, units_per_pod=4)),
}


@pytest.mark.parametrize("name", cluster_names())
def test_every_preset_loads_with_a_sourced_description(name: str) -> None:
    cluster = get_cluster(name)
    assert cluster.name == name
    assert cluster.num_devices == cluster.num_servers * cluster.gpus_per_server
    assert cluster.description  # the datasheet / reference architecture it follows
    check_routes(cluster, sorted({0, 1, cluster.num_devices // 2, cluster.num_devices - 1}))


@pytest.mark.parametrize(("name", "expected"), ISSUE_15_PRESETS.items(), ids=list(ISSUE_15_PRESETS))
def test_the_issue_15_presets(name: str, expected: tuple[int, str, str, FabricSpec]) -> None:
    servers, device, nic, fabric = expected
    cluster = get_cluster(name)
    assert (cluster.num_servers, cluster.gpus_per_server, cluster.nics_per_server) == (servers, 8, 8)
    assert cluster.device == get_device(device)
    assert cluster.nic is get_link(nic)
    assert cluster.fabric == fabric
    # non-blocking: the farthest pair is limited by its NIC, not by an uplink
    far = cluster.route_bandwidth_bytes_per_s(0, cluster.num_devices - 1)
    assert far == pytest.approx(get_link(nic).effective_bandwidth_bytes_per_s)


def test_the_a100_16384_pods() -> None:
    """102 SUs of 20 servers and a partial 103rd, in pods of 7 SUs: 15 pods; the farthest pair
    climbs to the core."""
    cluster = get_cluster("dgx-a100-16384")
    names = [cluster.links[i].name for i in cluster.route(0, cluster.num_devices - 1)]
    assert "pod0.spine->core" in names
    assert "core->pod14.spine" in names
    assert "pod14.spine->su102.leaf7" in names
    # two servers under one leaf: one switch hop, no spine
    near = [cluster.links[i].name for i in cluster.route(0, 19 * 8)]
    assert not any("spine" in n for n in near)


def test_the_cli_lists_and_accepts_them(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clusters"]) == 0
    out = capsys.readouterr().out
    for name in ISSUE_15_PRESETS:
        assert name in out
    assert main(["simulate", "--model", "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000",
                 "--cluster", "dgx-h100-1024", "--stages", "2", "--gbs", "4", "--microbatches", "2"]) == 0
    assert "iteration" in capsys.readouterr().out
    assert main(["simulate", "--model", "bert48", "--cluster", "dgx-h100-2048", "--stages", "2"]) == 2
    err = capsys.readouterr().err
    assert "unknown cluster 'dgx-h100-2048'" in err
    assert "dgx-a100-16384" in err
    assert "dgx-h100-1024" in err
