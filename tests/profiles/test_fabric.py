"""Tests of rail-optimised fat-trees, oversubscription, heterogeneous clusters and the large presets."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import FormatError, InputError
from pipesim.profiles.hardware.catalog import get_device, get_link
from pipesim.profiles.hardware.cluster import (
    Cluster,
    cluster_to_dict,
    describe_cluster,
    get_cluster,
    load_cluster,
    with_overrides,
)
from pipesim.profiles.hardware.cluster_config import cluster_from_config, cluster_to_config
from pipesim.profiles.hardware.cluster_file import cluster_from_toml, cluster_to_toml, save_cluster
from pipesim.profiles.hardware.fabric import DEFAULT_SWITCH_LATENCY_S, FabricKind, FabricSpec
from pipesim.profiles.hardware.topology import LinkKind
from pipesim.simulator.network import Network
from tests.profiles.test_cluster import check_link_table, check_routes


def rail_cluster(**changes: object) -> Cluster:
    """4 DGX A100-like servers, 2 per leaf, 8 NICs each: a small rail-optimised two-level tree."""
    config: dict[str, object] = {
        "servers": 4,
        "intra": "nvswitch",
        "device": "A100-80GB",
        "nic": "IB-HDR",
        "nics_per_server": 8,
        "fabric": "rail",
        "servers_per_leaf": 2,
    }
    config.update(changes)
    return cluster_from_config(config)


def names(cluster: Cluster, src: int, dst: int) -> list[str]:
    return [cluster.links[i].name for i in cluster.route(src, dst)]


# ------------------------------------------------------------------------------------------------
# Routes and links


def test_same_leaf_route_is_nic_leaf_nic() -> None:
    cluster = rail_cluster()
    assert names(cluster, 3, 11) == [
        "s0.gpu3->s0.pcie1",
        "s0.pcie1->s0.nic3",
        "s0.nic3->su0.leaf3",
        "su0.leaf3->s1.nic3",
        "s1.nic3->s1.pcie1",
        "s1.pcie1->s1.gpu3",
    ]
    pcie, hdr = get_link("PCIe4"), get_link("IB-HDR")
    assert cluster.route_latency_s(3, 11) == pytest.approx(2 * pcie.latency_s + hdr.latency_s)
    assert cluster.route_bandwidth_bytes_per_s(3, 11) == pytest.approx(hdr.effective_bandwidth_bytes_per_s)


def test_other_leaf_route_goes_through_the_spine() -> None:
    cluster = rail_cluster()
    route = names(cluster, 3, 8 * 2 + 3)
    assert route[2:6] == ["s0.nic3->su0.leaf3", "su0.leaf3->spine", "spine->su1.leaf3", "su1.leaf3->s2.nic3"]
    extra = cluster.route_latency_s(3, 19) - cluster.route_latency_s(3, 11)
    assert extra == pytest.approx(2 * DEFAULT_SWITCH_LATENCY_S)  # two more switch crossings


def test_cross_rail_uses_pxn_over_nvlink() -> None:
    cluster = rail_cluster()
    # GPU 0 of server 0 to GPU 5 of server 2: NVLink to s0.gpu5, then rail 5.
    route = names(cluster, 0, 16 + 5)
    assert route[:2] == ["s0.gpu0->s0.nvswitch", "s0.nvswitch->s0.gpu5"]
    assert route[4] == "s0.nic5->su0.leaf5"
    kinds = [cluster.links[i].kind for i in cluster.route(0, 21)]
    assert kinds[:2] == [LinkKind.NVLINK, LinkKind.NVLINK]
    assert kinds.count(LinkKind.NETWORK) == 4
    # same leaf, other rail: PXN keeps it one switch hop
    assert [n for n in names(cluster, 0, 8 + 5) if "leaf" in n] == [
        "s0.nic5->su0.leaf5",
        "su0.leaf5->s1.nic5",
    ]


def test_three_level_routes_climb_to_the_lowest_common_level() -> None:
    cluster = rail_cluster(servers=8, fabric_levels=3, units_per_pod=2)
    assert cluster.fabric.levels == 3
    same_pod = names(cluster, 0, 2 * 8)  # server 2: SU 1, pod 0
    assert [n for n in same_pod if "spine" in n] == ["su0.leaf0->pod0.spine", "pod0.spine->su1.leaf0"]
    other_pod = names(cluster, 0, 6 * 8)  # server 6: SU 3, pod 1
    assert [n for n in other_pod if "spine" in n or "core" in n] == [
        "su0.leaf0->pod0.spine",
        "pod0.spine->core",
        "core->pod1.spine",
        "pod1.spine->su3.leaf0",
    ]
    check_link_table(cluster)
    check_routes(cluster, [0, 5, 8, 13, 17, 30, 47, 50, 63])


def test_uplink_bandwidths_and_link_count_are_linear() -> None:
    hdr = get_link("IB-HDR").effective_bandwidth_bytes_per_s
    cluster = rail_cluster(servers=8, fabric_levels=3, units_per_pod=2, oversubscription=2)
    links = {link.name: link for link in cluster.links}
    assert links["su0.leaf0->pod0.spine"].bandwidth_bytes_per_s == pytest.approx(2 * hdr / 2)
    assert links["pod0.spine->su0.leaf0"].bandwidth_bytes_per_s == pytest.approx(2 * hdr / 2)
    # a pod's core link carries all its leaves' uplinks: 2 SUs x 8 rails
    assert links["pod1.spine->core"].bandwidth_bytes_per_s == pytest.approx(16 * 2 * hdr / 2)
    assert links["su0.leaf0->pod0.spine"].latency_s == DEFAULT_SWITCH_LATENCY_S
    per_server = len(with_overrides(rail_cluster(servers=1), {"fabric": "switch"}).links)
    assert per_server == 2 * (8 + 4 + 8 + 8 + 8)  # GPU, PCIe-switch and NIC PCIe links, NVSwitch, NIC ports
    for servers in (2, 6, 40):
        c = rail_cluster(servers=servers, fabric_levels=3, units_per_pod=2)
        units = -(-servers // 2)
        pods = -(-units // 2)
        assert len(c.links) == servers * per_server + 2 * units * 8 + 2 * pods


def test_switch_fabric_is_unchanged_and_refuses_rail_fields() -> None:
    plain = get_cluster("dgx-a100-x2")
    assert plain.fabric == FabricSpec()
    assert "fabric" not in cluster_to_config(plain)
    with pytest.raises(InputError, match="apply only to fabric = rail"):
        with_overrides(plain, {"oversubscription": 2})
    with pytest.raises(InputError, match=r"fabric='ring': must be one of switch, rail"):
        with_overrides(plain, {"fabric": "ring"})
    with pytest.raises(InputError, match=r"oversubscription=0\.5: must be a finite number >= 1"):
        rail_cluster(oversubscription=0.5)
    with pytest.raises(InputError, match=r"fabric_levels=4: must be 2 or 3"):
        rail_cluster(fabric_levels=4)
    back = with_overrides(rail_cluster(oversubscription=2), {"fabric": "switch"})
    assert back.fabric == FabricSpec()


# ------------------------------------------------------------------------------------------------
# Oversubscription, measured with the simulator's network model


def _simulate(cluster: Cluster, pairs: list[tuple[int, int]], nbytes: float) -> float:
    env = simpy.Environment()
    links = list(cluster.links)
    net = Network(env, [lk.bandwidth_bytes_per_s for lk in links], [lk.latency_s for lk in links])
    for src, dst in pairs:
        net.transfer(cluster.route(src, dst), nbytes)
    env.run()
    return float(env.now)


def test_traffic_across_leaves_slows_by_the_oversubscription_factor() -> None:
    nbytes = 1e9
    # Every GPU of SU 0 (servers 0, 1) sends to the same GPU index of SU 1 (servers 2, 3).
    across = [(s * 8 + g, (s + 2) * 8 + g) for s in (0, 1) for g in range(8)]
    within = [(g, 8 + g) for g in range(8)]  # server 0 -> server 1, under the same leaves
    hdr = get_link("IB-HDR").effective_bandwidth_bytes_per_s
    times = {}
    for factor in (1, 2, 4):
        cluster = rail_cluster(oversubscription=factor)
        latency = cluster.route_latency_s(0, 16)
        times[factor] = _simulate(cluster, across, nbytes) - latency
        assert times[factor] == pytest.approx(factor * nbytes / hdr, rel=1e-9)
        same_leaf = _simulate(cluster, within, nbytes) - cluster.route_latency_s(0, 8)
        assert same_leaf == pytest.approx(nbytes / hdr, rel=1e-9)  # below the leaf: unaffected
    assert times[2] / times[1] == pytest.approx(2)
    assert times[4] / times[1] == pytest.approx(4)


# ------------------------------------------------------------------------------------------------
# Heterogeneous clusters


MIXED = """\
name = "mixed"
intra = "nvswitch"
nic = "IB-HDR"
nics_per_server = 8
fabric = "rail"
servers_per_leaf = 2

[[group]]
servers = 2
device = "A100-80GB"

[[group]]
servers = 1
device = "V100"
gpus_per_server = 4
nics_per_server = 4
"""


def test_heterogeneous_cluster_from_toml(tmp_path: Path) -> None:
    cluster = cluster_from_toml(MIXED)
    assert not cluster.is_homogeneous
    assert [g.servers for g in cluster.groups] == [2, 1]
    assert cluster.num_devices == 20
    assert cluster.num_servers == 3
    assert cluster.server_gpu_counts == (8, 8, 4)
    assert cluster.device is get_device("A100-80GB")
    assert cluster.device_spec(0) is get_device("A100-80GB")
    assert cluster.device_spec(16) is get_device("V100-SXM2-16GB")
    assert cluster.groups[1].intra_link is get_link("NVLink2-x6")  # the V100's NVSwitch default
    assert (cluster.server_of(17), cluster.local_index(17), cluster.gpu_node(17)) == (2, 1, "s2.gpu1")
    assert list(cluster.devices_of_server(2)) == [16, 17, 18, 19]
    # V100 fp16 125 TFLOPS vs A100 312: the same work takes 312/125 as long
    assert cluster.compute_time_factor(17, "float16") == pytest.approx(312 / 125)
    assert cluster.compute_time_factor(3, "float16") == 1.0
    with pytest.raises(InputError, match="servers of different GPU counts"):
        _ = cluster.gpus_per_server
    assert cluster.price_per_hour_usd == pytest.approx(16 * 5.12 + 4 * 3.06)
    check_link_table(cluster)
    check_routes(cluster)
    # V100 server has NICs 0..3 only: GPU 7 of server 0 (rail 7) reaches it without PXN on rail 7?
    # No: the destination is on rail <= 3, so the source forwards over NVLink to that rail's GPU.
    assert names(cluster, 7, 19)[:2] == ["s0.gpu7->s0.nvswitch", "s0.nvswitch->s0.gpu3"]
    # From the V100 server to rail 7 of server 0: it has no GPU on rail 7, so it crosses at the spine.
    route = names(cluster, 19, 7)
    assert "su1.leaf3->spine" in route
    assert "spine->su0.leaf7" in route
    text = describe_cluster(cluster)
    assert "2 x 8 A100-80GB + 1 x 4 V100-SXM2-16GB = 20 GPUs" in text
    data = cluster_to_dict(cluster)
    assert data["gpus_per_server"] is None
    assert [g["device"] for g in data["groups"]] == ["A100-80GB", "V100-SXM2-16GB"]  # type: ignore[index, union-attr]
    path = tmp_path / "mixed.toml"
    save_cluster(cluster, path)
    assert load_cluster(str(path)) == cluster
    assert cluster_from_config(cluster_to_config(cluster)) == cluster
    again = pickle.loads(pickle.dumps(cluster))
    assert again == cluster
    assert again.route(19, 7) == cluster.route(19, 7)


def test_uneven_gpu_counts_of_one_device() -> None:
    cluster = cluster_from_config(
        {
            "intra": "nvswitch",
            "device": "A100-80GB",
            "nic": "IB-HDR",
            "group": [{"servers": 1, "gpus_per_server": 8}, {"servers": 1, "gpus_per_server": 12}],
        }
    )
    assert cluster.server_gpu_counts == (8, 12)
    assert cluster.num_devices == 20
    assert {cluster.device_spec(d).name for d in range(20)} == {"A100-80GB"}
    assert cluster.server_of(19) == 1
    assert cluster.local_index(19) == 11
    check_routes(cluster)


def test_identical_groups_merge() -> None:
    one = cluster_from_config(
        {"intra": "nvswitch", "device": "A100", "nic": "IB-HDR", "group": [{"servers": 1}, {"servers": 2}]}
    )
    assert one.is_homogeneous
    assert one == cluster_from_config({"intra": "nvswitch", "device": "A100", "nic": "IB-HDR", "servers": 3})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('intra = "nvswitch"\ndevice = "A100"\ngroup = 3\n', r"group=3: must be a non-empty list of tables"),
        ('intra = "nvswitch"\ndevice = "A100"\ngroup = []\n', r"must be a non-empty list of tables"),
        (
            'intra = "nvswitch"\ndevice = "A100"\n[[group]]\ngpus_per_server = 4\n',
            r"group 0: servers: required",
        ),
        (
            'intra = "nvswitch"\ndevice = "A100"\nnic = "IB-HDR"\n'
            '[[group]]\nservers = 1\n[[group]]\nservers = 1\ndevice = "V200"\n',
            r"group 1: device='V200': unknown device 'V200'; valid device names: ",
        ),
        (
            'intra = "nvswitch"\ndevice = "A100"\n[[group]]\nservers = 1\nnic = "IB-HDR"\n',
            r"group 0: unknown key 'nic'; valid keys: servers, gpus_per_server",
        ),
        (
            'intra = "nvswitch"\ndevice = "A100"\n[[group]]\nservers = 0\n',
            r"group 0: servers=0: must be an integer >= 1",
        ),
        (
            'intra = "nvswitch"\ndevice = "A100"\nservers = 2\n[[group]]\nservers = 1\n',
            r"servers: give it in each \[\[group\]\]",
        ),
        (
            'device = "V100"\nnic = "IB-HDR"\n'
            '[[group]]\nservers = 1\nintra = "dgx1"\n[[group]]\nservers = 1\n',
            r"group 1: intra: required",
        ),
    ],
)
def test_bad_groups(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FormatError, match=match):
        load_cluster(str(path))


def test_overrides_on_a_heterogeneous_cluster() -> None:
    cluster = cluster_from_toml(MIXED)
    slower = with_overrides(cluster, {"nic": "IB-EDR", "oversubscription": 2})
    assert slower.groups == cluster.groups
    assert slower.fabric.oversubscription == 2
    with pytest.raises(
        InputError, match="has 2 server groups; change its servers with a whole new group list"
    ):
        with_overrides(cluster, {"servers": 4})


# ------------------------------------------------------------------------------------------------
# Presets and scale


def test_large_presets() -> None:
    a100 = get_cluster("dgx-a100-1024")
    assert (a100.num_devices, a100.num_servers, a100.nics_per_server) == (1024, 128, 8)
    assert a100.fabric == FabricSpec(kind=FabricKind.RAIL, levels=2, servers_per_leaf=20)
    assert a100.nic is get_link("IB-HDR")
    h100 = get_cluster("dgx-h100-16384")
    assert (h100.num_devices, h100.num_servers) == (16384, 2048)
    assert h100.fabric == FabricSpec(kind=FabricKind.RAIL, levels=3, servers_per_leaf=32, units_per_pod=4)
    assert h100.nic is get_link("IB-NDR")
    ndr = get_link("IB-NDR").effective_bandwidth_bytes_per_s
    # the RA's counts: 64 SUs x 8 rails = 512 leaves; 16 pods of 4 SUs
    leaf_up = [
        lk for lk in h100.links[-1056:] if lk.name.startswith("su") and lk.name.endswith("->pod0.spine")
    ]
    assert len(leaf_up) == 32
    assert leaf_up[0].bandwidth_bytes_per_s == pytest.approx(32 * ndr)
    last = h100.route(0, 16383)
    assert [h100.links[i].name for i in last][5:9] == [
        "su0.leaf7->pod0.spine",
        "pod0.spine->core",
        "core->pod15.spine",
        "pod15.spine->su63.leaf7",
    ]
    assert h100.route_bandwidth_bytes_per_s(0, 16383) == pytest.approx(ndr)  # non-blocking: the NIC


@pytest.mark.parametrize(
    ("name", "servers"), [("dgx-h100-16384", 3), ("dgx-a100-1024", 4096), ("dgx-h100-x4", 700)]
)
def test_servers_override_works_for_any_size(name: str, servers: int) -> None:
    base = get_cluster(name)
    cluster = with_overrides(base, {"servers": servers})
    assert cluster.num_servers == servers
    assert cluster.fabric == base.fabric
    assert cluster.route(0, cluster.num_devices - 1)
    check_routes(cluster, [0, 1, 9, cluster.num_devices - 2, cluster.num_devices - 1])


def test_building_is_deterministic() -> None:
    a = rail_cluster(servers=8, fabric_levels=3, units_per_pod=2)
    b = rail_cluster(servers=8, fabric_levels=3, units_per_pod=2)
    assert a == b
    assert a.links == b.links
    assert [a.route(s, d) for s in range(0, 64, 7) for d in range(0, 64, 5)] == [
        b.route(s, d) for s in range(0, 64, 7) for d in range(0, 64, 5)
    ]
    assert cluster_to_toml(a) == cluster_to_toml(b)
    assert dataclasses.replace(a, name="x").links == a.links


@settings(max_examples=30, deadline=None)
@given(
    servers=st.integers(1, 7),
    gpus=st.integers(1, 4),
    nics=st.integers(1, 4),
    per_leaf=st.integers(1, 3),
    levels=st.sampled_from([2, 3]),
    per_pod=st.integers(1, 2),
    intra=st.sampled_from(["nvswitch", "pcie"]),
    second=st.integers(0, 3),
)
def test_route_properties_on_random_rail_clusters(
    servers: int, gpus: int, nics: int, per_leaf: int, levels: int, per_pod: int, intra: str, second: int
) -> None:
    groups: list[dict[str, object]] = [{"servers": servers, "gpus_per_server": gpus, "nics_per_server": nics}]
    if second:  # a second group of servers with another GPU count and fewer NICs
        groups.append({"servers": 1, "gpus_per_server": second, "nics_per_server": 1})
    cluster = cluster_from_config(
        {
            "intra": intra,
            "device": "A100",
            "nic": "IB-HDR",
            "fabric": "rail",
            "fabric_levels": levels,
            "servers_per_leaf": per_leaf,
            "units_per_pod": per_pod,
            "group": groups,
        }
    )
    check_link_table(cluster)
    check_routes(cluster)


def test_bad_fabric_key_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "fab.toml"
    path.write_text(
        'intra = "nvswitch"\ndevice = "A100"\nnic = "IB-HDR"\nservers = 2\n'
        'fabric = "rail"\noversubscription = 0.5\n',
        encoding="utf-8",
    )
    with pytest.raises(FormatError, match=r"oversubscription=0\.5: must be a finite number >= 1") as info:
        load_cluster(str(path))
    assert info.value.line == 6
