"""Tests of clusters: presets, link tables, routes, TOML files and what-if overrides."""

from __future__ import annotations

import itertools
import json
import pickle
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.profiles.hardware.catalog import get_device, get_link
from pipesim.profiles.hardware.cluster import (
    Cluster,
    cluster_names,
    cluster_to_dict,
    describe_cluster,
    get_cluster,
    load_cluster,
    with_overrides,
)
from pipesim.profiles.hardware.cluster_config import cluster_from_config, cluster_to_config
from pipesim.profiles.hardware.cluster_file import cluster_to_toml, load_cluster_file, save_cluster
from pipesim.profiles.hardware.fabric import FabricKind
from pipesim.profiles.hardware.topology import DGX1_NVLINKS, LinkKind, Topology


def check_routes(cluster: Cluster, devices: Sequence[int] | None = None) -> None:
    """Every route is a contiguous directed path between the right GPU nodes, with the right kinds.

    ``devices``: the sources and destinations to check (default: every device).
    """
    chosen = range(cluster.num_devices) if devices is None else devices
    rail = cluster.fabric.kind is FabricKind.RAIL
    for src in chosen:
        for dst in chosen:
            path = cluster.route(src, dst)
            if src == dst:
                assert path == ()
                continue
            links = [cluster.links[i] for i in path]
            assert links[0].src_node == cluster.gpu_node(src)
            assert links[-1].dst_node == cluster.gpu_node(dst)
            for a, b in itertools.pairwise(links):
                assert a.dst_node == b.src_node
            nodes = [links[0].src_node, *(link.dst_node for link in links)]
            assert len(nodes) == len(set(nodes)), "a route never revisits a node"
            kinds = [link.kind for link in links]
            if cluster.server_of(src) == cluster.server_of(dst):
                assert LinkKind.NETWORK not in kinds
                if cluster.topology is Topology.PCIE:
                    assert set(kinds) == {LinkKind.PCIE}
                else:
                    assert set(kinds) == {LinkKind.NVLINK}
            elif not rail:
                assert kinds.count(LinkKind.NETWORK) == 2
                assert links[kinds.index(LinkKind.NETWORK)].dst_node == "switch"
                assert kinds.count(LinkKind.NVLINK) == 0
            else:
                network = [link for link in links if link.kind is LinkKind.NETWORK]
                assert len(network) in (2, 4, 6)  # up to the leaf, spine or core and back down
                assert ".leaf" in network[0].dst_node
                first = kinds.index(LinkKind.NETWORK)
                assert all(k is not LinkKind.NETWORK for k in kinds[first + len(network) :])
                assert LinkKind.NVLINK not in kinds[first:]  # PXN forwards over NVLink before the NIC only
            every_gpu_on_a_rail = all(g.nics_per_server >= g.gpus_per_server for g in cluster.groups)
            if cluster.is_homogeneous and every_gpu_on_a_rail:
                # without PXN on both sides (a GPU with no NIC on its rail) a route and its reverse
                # may differ
                assert len(cluster.route(dst, src)) == len(path)
            assert cluster.route(src, dst) == path  # deterministic (and cached)


def check_link_table(cluster: Cluster) -> None:
    if len(cluster.links) > 20_000:  # the big presets: the template logic is the same, check a slice
        links = cluster.links[:2000] + cluster.links[-2000:]
        assert [link.index for link in links] == [
            *range(2000),
            *range(len(cluster.links) - 2000, len(cluster.links)),
        ]
        return
    pairs = [(link.src_node, link.dst_node) for link in cluster.links]
    assert len(pairs) == len(set(pairs)), "one directed link per node pair"
    assert set(pairs) == {(b, a) for a, b in pairs}, "every link has a reverse"
    for i, link in enumerate(cluster.links):
        assert link.index == i
        assert link.name == f"{link.src_node}->{link.dst_node}"
        assert link.bandwidth_bytes_per_s == pytest.approx(link.spec.effective_bandwidth_bytes_per_s)
        assert link.latency_s >= 0


@pytest.mark.parametrize("name", cluster_names())
def test_every_preset_builds_and_routes(name: str) -> None:
    cluster = get_cluster(name)
    assert cluster.name == name
    assert cluster.num_devices == cluster.num_servers * cluster.gpus_per_server
    assert cluster.description
    check_link_table(cluster)
    n = cluster.num_devices
    sample = range(n) if n <= 64 else sorted({*range(0, n, max(1, n // 24)), 1, 7, 9, n - 9, n - 1})
    check_routes(cluster, sample)
    json.dumps(cluster_to_dict(cluster, with_links=n <= 64))
    assert f"{cluster.num_devices} GPUs" in describe_cluster(cluster)


def test_required_presets_exist() -> None:
    assert {"dapple-2x8-v100", "dgx1-v100", "pcie-4x4-v100-10gbe"} <= set(cluster_names())
    dapple = get_cluster("DAPPLE-2x8-V100")
    assert (dapple.num_servers, dapple.gpus_per_server, dapple.topology) == (2, 8, Topology.DGX1)
    assert dapple.device is get_device("V100-SXM2-16GB")
    assert dapple.nic is get_link("25GbE")
    assert dapple.nics_per_server == 1
    pcie = get_cluster("pcie-4x4-v100-10gbe")
    assert (pcie.num_servers, pcie.gpus_per_server, pcie.topology) == (4, 4, Topology.PCIE)
    assert pcie.nic is get_link("10GbE")
    assert pcie.pcie_link is get_link("PCIe3")


def test_unknown_preset_lists_names() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown cluster 'nope'.*dapple-2x8-v100.*dgx1-v100"):
        get_cluster("nope")


def test_dgx1_cube_mesh() -> None:
    cluster = get_cluster("dgx1-v100")
    nvlinks = [link for link in cluster.links if link.kind is LinkKind.NVLINK]
    assert len(nvlinks) == 2 * len(DGX1_NVLINKS) == 32
    one = get_link("NVLink2").effective_bandwidth_bytes_per_s
    lanes_per_gpu = [0] * 8
    for a, b, count in DGX1_NVLINKS:
        lanes_per_gpu[a] += count
        lanes_per_gpu[b] += count
        assert cluster.route(a, b) == cluster.route(a, b)
        (link,) = (cluster.links[i] for i in cluster.route(a, b))
        assert link.bandwidth_bytes_per_s == pytest.approx(count * one)
        assert link.latency_s == pytest.approx(get_link("NVLink2").latency_s)
    assert lanes_per_gpu == [6] * 8  # every V100 uses its 6 NVLinks on 4 peers
    direct = {(a, b) for a, b, _ in DGX1_NVLINKS} | {(b, a) for a, b, _ in DGX1_NVLINKS}
    for a in range(8):
        assert sum((a, b) in direct for b in range(8)) == 4
        for b in range(8):
            if a != b and (a, b) not in direct:
                path = cluster.route(a, b)
                assert len(path) == 2  # through one intermediate GPU
    # 0 -> 5: via GPU 1 (0-1 single, 1-5 double) and via GPU 4 (0-4 double, 4-5 single) tie; lowest wins.
    assert [cluster.links[i].name for i in cluster.route(0, 5)] == ["s0.gpu0->s0.gpu1", "s0.gpu1->s0.gpu5"]


def test_cross_server_route_closed_form() -> None:
    cluster = get_cluster("dapple-2x8-v100")
    names = [cluster.links[i].name for i in cluster.route(0, 8)]
    assert names == [
        "s0.gpu0->s0.pcie0",
        "s0.pcie0->s0.nic0",
        "s0.nic0->switch",
        "switch->s1.nic0",
        "s1.nic0->s1.pcie0",
        "s1.pcie0->s1.gpu0",
    ]
    pcie, eth = get_link("PCIe3"), get_link("25GbE")
    assert cluster.route_latency_s(0, 8) == pytest.approx(2 * pcie.latency_s + eth.latency_s)
    assert cluster.route_bandwidth_bytes_per_s(0, 8) == pytest.approx(3.125e9 * eth.achievable_fraction)
    # GPU 3 sits under PCIe switch 1, the NIC under switch 0: its traffic crosses the host.
    assert [cluster.links[i].dst_node for i in cluster.route(3, 8)][:3] == ["s0.pcie1", "s0.host", "s0.pcie0"]
    assert cluster.route_bandwidth_bytes_per_s(5, 5) == float("inf")


def test_nics_are_chosen_in_blocks_next_to_their_gpus() -> None:
    cluster = get_cluster("dgx-a100-x2")  # 8 NICs: GPU g uses NIC g, under its own PCIe switch
    for g in range(8):
        nodes = [cluster.links[i].dst_node for i in cluster.route(g, 8 + g)]
        assert nodes[:2] == [f"s0.pcie{g // 2}", f"s0.nic{g}"]
        assert len(nodes) == 6
    dgx1 = with_overrides(get_cluster("dgx1-v100"), {"servers": 2})  # 4 NICs: GPUs 2k, 2k+1 share NIC k
    assert [dgx1.links[i].dst_node for i in dgx1.route(5, 8)][:2] == ["s0.pcie2", "s0.nic2"]


def test_nvswitch_route() -> None:
    cluster = get_cluster("dgx-h100-x4")
    names = [cluster.links[i].name for i in cluster.route(9, 14)]
    assert names == ["s1.gpu1->s1.nvswitch", "s1.nvswitch->s1.gpu6"]
    assert cluster.route_latency_s(9, 14) == pytest.approx(get_link("NVLink4-x18").latency_s)
    assert cluster.route_bandwidth_bytes_per_s(9, 14) == pytest.approx(450e9 * 0.8)


def test_device_queries_and_errors() -> None:
    cluster = get_cluster("pcie-4x4-v100-10gbe")
    assert cluster.server_of(0) == 0
    assert cluster.server_of(15) == 3
    assert cluster.local_index(6) == 2
    assert list(cluster.devices_of_server(1)) == [4, 5, 6, 7]
    assert cluster.gpu_node(7) == "s1.gpu3"
    for bad in (-1, 16, True):
        with pytest.raises(InputError, match=r"device=.*must be a device id in 0\.\.15"):
            cluster.server_of(bad)
    with pytest.raises(InputError, match="device"):
        cluster.route(0, 99)
    with pytest.raises(InputError, match="server"):
        cluster.devices_of_server(4)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"gpus_per_server": 4}, "dgx1 topology has exactly 8 GPUs"),
        ({"intra_link": None}, "needs an NVLink spec"),
        ({"topology": "mesh"}, "topology must be one of nvswitch, dgx1, pcie"),
        ({"servers": 0}, "servers=0"),
        ({"nics_per_server": 1.5}, "nics_per_server"),
    ],
)
def test_cluster_validation(changes: dict[str, object], match: str) -> None:
    import dataclasses

    cluster = get_cluster("dgx1-v100")
    with pytest.raises(InputError, match=match):
        dataclasses.replace(cluster.groups[0], **changes)  # type: ignore[arg-type]
    huge = dataclasses.replace(cluster.groups[0], servers=10_000)
    with pytest.raises(InputError, match="must be <= 65536"):
        dataclasses.replace(cluster, groups=(huge,))
    with pytest.raises(InputError, match="non-empty sequence of ServerGroup"):
        dataclasses.replace(cluster, groups=())


def test_pcie_cluster_rejects_nvlink() -> None:
    import dataclasses

    group = get_cluster("pcie-4x4-v100-10gbe").groups[0]
    with pytest.raises(InputError, match="only nvswitch and dgx1"):
        dataclasses.replace(group, intra_link=get_link("NVLink2"))


def test_large_cluster_builds_and_routes() -> None:
    # build and route speed: benchmarks/bench_cluster.py
    cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 128})
    assert cluster.num_devices == 1024
    total = sum(len(cluster.route(src, dst)) for src in range(0, 1024, 3) for dst in range(0, 1024, 5))
    assert total > 0
    assert len(cluster.route(0, 1023)) == len(cluster.route(1023, 0))


# ------------------------------------------------------------------------------------------------
# Configs, TOML, overrides


@pytest.mark.parametrize("name", cluster_names())
def test_toml_round_trip(name: str, tmp_path: Path) -> None:
    cluster = get_cluster(name)
    path = tmp_path / "c.toml"
    save_cluster(cluster, path)
    again = load_cluster(str(path))
    assert again == cluster
    assert [(lk.name, lk.bandwidth_bytes_per_s, lk.latency_s) for lk in again.links] == [
        (lk.name, lk.bandwidth_bytes_per_s, lk.latency_s) for lk in cluster.links
    ]
    assert cluster_from_config(cluster_to_config(cluster)) == cluster
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_toml_with_catalog_names_and_units(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(
        'servers = 3\nintra = "nvswitch"\ndevice = "a100-80gb"\nnic = "100GbE"\nnics_per_server = 2\n'
        'nic_latency_us = 5\n\n[pcie]\nbase = "PCIe4"\nbandwidth_gb_per_s = 20\n',
        encoding="utf-8",
    )
    cluster = load_cluster_file(path)
    assert cluster.name == "mine"
    assert (cluster.num_servers, cluster.gpus_per_server, cluster.nics_per_server) == (3, 8, 2)
    assert cluster.device is get_device("A100-80GB")
    assert cluster.intra_link is get_link("NVLink3-x12")  # the device's default NVSwitch port
    assert cluster.nic.name == "100GbE*"
    assert cluster.nic.latency_s == 5e-6
    assert cluster.nic.bandwidth_bytes_per_s == 12.5e9
    assert cluster.pcie_link.bandwidth_bytes_per_s == 20e9
    assert "Changed: nic_latency_us=5" in cluster.nic.source


def test_toml_custom_device(tmp_path: Path) -> None:
    path = tmp_path / "custom.toml"
    path.write_text(
        'name = "lab"\nintra = "pcie"\ngpus_per_server = 2\n\n[device]\nname = "MyGPU"\n'
        "peak_tflop_per_s = { float32 = 20, bfloat16 = 200 }\nmemory_gib = 24\n"
        "memory_bandwidth_gb_per_s = 1000\nprice_per_hour_usd = 1.5\n",
        encoding="utf-8",
    )
    cluster = load_cluster(str(path))
    assert cluster.device.name == "MyGPU"
    assert dict(cluster.device.peak_flop_per_s) == {"float32": 20e12, "bfloat16": 200e12}
    assert cluster.device.memory_bytes == 24 * 1024**3
    assert cluster.pcie_link is get_link("PCIe4")  # default for a device outside the catalog
    assert cluster.nic is get_link("100GbE")  # single server: default NIC
    assert cluster.price_per_hour_usd == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("text", "line", "match"),
    [
        ('intra = "dgx1"\ndevice = "V100"\nspeed = 3\n', 3, r"unknown key 'speed'; valid keys: name"),
        ('intra = "dgx1"\ndevice = "V200"\n', 2, r"device='V200'.*valid device names: .*V100-SXM2-16GB"),
        (
            'intra = "dgx1"\ndevice = "V100"\nservers = 2\n\n'
            '[nic]\nbase = "25GbE"\nbandwidth_gbit_per_s = -3\n',
            7,
            r"nic_bandwidth_gbit_per_s=-3: must be a finite number > 0 "
            r"\(key 'bandwidth_gbit_per_s' of table \[nic\]\)",
        ),
        ('intra = "dgx1"\ndevice = V100\n', 2, "not valid TOML"),
        (
            'intra = "dgx1"\ndevice = "V100"\n[nic]\nlatency_ms = 1\n',
            4,
            r"unknown key 'nic_latency_ms'.*nic_latency_us",
        ),
        ('intra = "torus"\ndevice = "V100"\n', 1, r"intra='torus': must be one of nvswitch, dgx1, pcie"),
        ('intra = "dgx1"\ndevice = "V100"\ngpus_per_server = 4\n', 3, "dgx1 topology has exactly 8 GPUs"),
        ('intra = "dgx1"\ndevice = "V100"\nservers = 2\n', None, r"nic: required for 2 servers"),
        ('intra = "dgx1"\ndevice = "V100"\nservers = "two"\n', 3, "servers='two': must be an integer >= 1"),
        ('intra = "pcie"\ndevice = "V100"\nintra_link = "NVLink2"\n', 3, "only nvswitch and dgx1"),
        ('intra = "nvswitch"\ndevice = "P100"\n', None, "no default NVLink for device 'P100'"),
        ('device = "V100"\n', None, "intra: required"),
        ('intra = "pcie"\n[device]\nname = "x"\nmemory_gib = 1\n', None, "device_peak_tflop_per_s: required"),
        (
            'intra = "pcie"\ndevice = "V100"\nnic = "10GbE"\nnic_latency_us = 1\nnic_latency_s = 1e-6\n',
            4,
            "give the same quantity",
        ),
        (
            'intra = "pcie"\ndevice = "V100"\ndevice_compute_efficiency = 2\n',
            3,
            r"device_compute_efficiency=2: must be a number in \(0, 1\]",
        ),
    ],
)
def test_bad_toml(tmp_path: Path, text: str, line: int | None, match: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FormatError, match=match) as info:
        load_cluster(str(path))
    assert info.value.path == str(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}{':' + str(line) if line else ''}: ")


def test_load_cluster_spec_forms(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_cluster("dgx1-v100") is get_cluster("dgx1-v100")
    with pytest.raises(InputError, match=r"cluster file 'missing\.toml' does not exist") as info:
        load_cluster("missing.toml")
    assert not isinstance(info.value, UnknownNameError)
    with pytest.raises(InputError, match="does not exist"):
        load_cluster("some/dir/cluster")
    with pytest.raises(UnknownNameError, match="valid cluster names: dapple-2x8-v100"):
        load_cluster("dgx9")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plainname").write_text(cluster_to_toml(get_cluster("dgx1-v100")), encoding="utf-8")
    assert load_cluster("plainname") == get_cluster("dgx1-v100")


def test_with_overrides() -> None:
    base = get_cluster("dapple-2x8-v100")
    what_if = with_overrides(
        base,
        {"device": "A100-80GB", "nic": "100GbE", "servers": 4, "intra": "nvswitch", "nic_latency_us": 5},
    )
    assert what_if.name.startswith("dapple-2x8-v100[")
    assert "nic_latency_us=5" in what_if.name
    assert what_if.device is get_device("A100-80GB")
    assert what_if.topology is Topology.NVSWITCH
    assert what_if.intra_link is get_link("NVLink3-x12")  # re-derived: the topology changed
    assert what_if.pcie_link is base.pcie_link  # kept
    assert what_if.nic.latency_s == 5e-6
    assert what_if.num_devices == 32
    same_box = with_overrides(base, {"device": "V100-SXM2-32GB", "name": "big-memory"})
    assert same_box.name == "big-memory"
    assert same_box.intra_link is base.intra_link
    assert with_overrides(base, {}) == base
    tweaked = with_overrides(base, {"device_compute_efficiency": 0.5, "intra_link_achievable_fraction": 0.9})
    assert tweaked.device.name == "V100-SXM2-16GB*"
    assert tweaked.device.compute_efficiency == 0.5
    assert tweaked.device.peak_flop_per_s == base.device.peak_flop_per_s
    assert tweaked.intra_link is not None
    assert tweaked.intra_link.achievable_fraction == 0.9
    with pytest.raises(InputError, match=r"unknown key 'gpus'; valid keys"):
        with_overrides(base, {"gpus": 4})
    with pytest.raises(InputError, match=r"unknown key 'device_speed'; valid device keys: device_name"):
        with_overrides(base, {"device_speed": 4})
    with pytest.raises(InputError, match="unknown link 'IB-XDR'"):
        with_overrides(base, {"nic": "IB-XDR"})


def test_clusters_pickle_and_hash() -> None:
    for name in cluster_names():
        cluster = get_cluster(name)
        again = pickle.loads(pickle.dumps(cluster))
        assert again == cluster
        assert hash(again) == hash(cluster)
        assert again.links == cluster.links
        assert again.route(0, cluster.num_devices - 1) == cluster.route(0, cluster.num_devices - 1)


def test_cluster_to_dict_shape() -> None:
    cluster = get_cluster("dapple-2x8-v100")
    data = cluster_to_dict(cluster)
    assert data["name"] == "dapple-2x8-v100"
    assert data["servers"] == 2
    assert data["gpus_per_server"] == 8
    assert data["topology"] == "dgx1"
    assert data["device"]["name"] == "V100-SXM2-16GB"  # type: ignore[index]
    assert data["nic"]["name"] == "25GbE"  # type: ignore[index]
    links = data["links"]
    assert isinstance(links, list)
    assert len(links) == len(cluster.links)
    assert set(links[0]) >= {"index", "name", "kind", "bandwidth_bytes_per_s", "latency_s"}
    assert str(LinkKind.NVLINK) == "nvlink"
    assert f"{Topology.DGX1}" == "dgx1"


@settings(max_examples=40, deadline=None)
@given(
    servers=st.integers(1, 3),
    gpus=st.integers(1, 6),
    topology=st.sampled_from(["nvswitch", "pcie", "dgx1"]),
    nics=st.integers(1, 4),
    per_switch=st.integers(1, 4),
)
def test_route_properties_on_random_clusters(
    servers: int, gpus: int, topology: str, nics: int, per_switch: int
) -> None:
    config: dict[str, object] = {
        "servers": servers,
        "gpus_per_server": 8 if topology == "dgx1" else gpus,
        "intra": topology,
        "device": "V100",
        "nic": "IB-EDR",
        "nics_per_server": nics,
        "gpus_per_pcie_switch": per_switch,
    }
    cluster = cluster_from_config(config)
    check_link_table(cluster)
    check_routes(cluster)
