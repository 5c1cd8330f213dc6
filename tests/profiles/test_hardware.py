"""Tests of the hardware catalog: device and link specs, lookups and validation."""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path

import pytest

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.profiles.hardware.catalog import (
    DeviceSpec,
    LinkSpec,
    default_link,
    device_names,
    get_device,
    get_link,
    link_names,
)
from pipesim.profiles.hardware.cluster import (
    cluster_names,
    device_spec_to_dict,
    get_cluster,
    link_spec_to_dict,
)
from pipesim.profiles.hardware.cluster_config import cluster_to_config

GIB = 1024**3


def test_device_names_are_the_catalog() -> None:
    assert set(device_names()) >= {
        "V100-SXM2-16GB",
        "V100-SXM2-32GB",
        "P100",
        "A100-40GB",
        "A100-80GB",
        "H100-SXM",
    }
    assert list(device_names()) == sorted(device_names())


@pytest.mark.parametrize(
    ("name", "fp32", "fp16", "bf16", "memory_gib", "bandwidth"),
    [
        ("V100-SXM2-16GB", 15.7e12, 125e12, None, 16, 900e9),
        ("V100-SXM2-32GB", 15.7e12, 125e12, None, 32, 900e9),
        ("P100", 10.6e12, 21.2e12, None, 16, 732e9),
        ("A100-40GB", 19.5e12, 312e12, 312e12, 40, 1555e9),
        ("A100-80GB", 19.5e12, 312e12, 312e12, 80, 2039e9),
        ("H100-SXM", 66.9e12, 989e12, 989e12, 80, 3.35e12),
    ],
)
def test_device_datasheet_values(
    name: str, fp32: float, fp16: float, bf16: float | None, memory_gib: int, bandwidth: float
) -> None:
    spec = get_device(name)
    assert spec.name == name
    assert spec.peak_flop_per_s["float32"] == pytest.approx(fp32)
    assert spec.peak_flop_per_s["float16"] == pytest.approx(fp16)
    if bf16 is None:
        assert "bfloat16" not in spec.peak_flop_per_s
        assert not spec.supports("bfloat16")
    else:
        assert spec.peak_flop_per_s["bfloat16"] == pytest.approx(bf16)
    assert spec.memory_bytes == memory_gib * GIB
    assert spec.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth)
    assert 0.3 <= spec.compute_efficiency <= 0.5
    assert 0 < spec.memory_efficiency <= 1
    assert spec.price_per_hour_usd is not None
    assert spec.price_per_hour_usd > 0
    assert "datasheet" in spec.source.lower()
    assert "$" in spec.source


def test_device_lookup_is_case_insensitive_with_aliases() -> None:
    assert get_device("v100") is get_device("V100-SXM2-16GB")
    assert get_device("  v100_sxm2_32gb ") is get_device("V100-SXM2-32GB")
    assert get_device("a100-80gb") is get_device("A100-80GB")
    assert get_device("H100") is get_device("H100-SXM")


def test_unknown_device_lists_valid_names() -> None:
    with pytest.raises(UnknownNameError, match=r"unknown device 'V200'.*A100-40GB.*V100-SXM2-16GB") as info:
        get_device("V200")
    assert info.value.valid == device_names()


def test_achievable_rates() -> None:
    v100 = get_device("V100")
    assert v100.achievable_flop_per_s("float16") == pytest.approx(125e12 * v100.compute_efficiency)
    assert v100.achievable_memory_bandwidth_bytes_per_s == pytest.approx(900e9 * v100.memory_efficiency)
    with pytest.raises(InputError, match=r"dtype='bfloat16'.*supports only float32, float16"):
        v100.peak_for("bfloat16")


def test_device_spec_is_frozen_hashable_and_read_only() -> None:
    spec = get_device("A100-80GB")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.memory_bytes = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.peak_flop_per_s["float32"] = 1.0  # type: ignore[index]
    copy = dataclasses.replace(spec)
    assert copy == spec
    assert hash(copy) == hash(spec)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"name": ""}, "device.name"),
        ({"peak_flop_per_s": {}}, "peak_flop_per_s"),
        ({"peak_flop_per_s": {"float64": 1e12}}, "dtype must be one of"),
        ({"peak_flop_per_s": {"float32": -1.0}}, r"peak_flop_per_s\[float32\]"),
        ({"memory_bytes": 0}, "memory_bytes"),
        ({"memory_bytes": 1.5}, "memory_bytes"),
        ({"memory_bandwidth_bytes_per_s": float("inf")}, "memory_bandwidth_bytes_per_s"),
        ({"compute_efficiency": 0.0}, r"compute_efficiency=0.0: must be a number in \(0, 1\]"),
        ({"memory_efficiency": 1.5}, "memory_efficiency"),
        ({"price_per_hour_usd": -1.0}, "price_per_hour_usd"),
    ],
)
def test_device_spec_validation(changes: dict[str, object], match: str) -> None:
    base = get_device("V100")
    with pytest.raises(InputError, match=match):
        dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def test_link_names_are_the_catalog() -> None:
    assert set(link_names()) >= {
        "NVLink2",
        "NVLink3",
        "NVLink4",
        "PCIe3",
        "PCIe4",
        "10GbE",
        "25GbE",
        "100GbE",
        "IB-EDR",
        "IB-HDR",
        "IB-NDR",
    }


@pytest.mark.parametrize(
    ("name", "bandwidth"),
    [
        ("NVLink2", 25e9),
        ("NVLink2-x6", 150e9),
        ("NVLink3", 25e9),
        ("NVLink3-x12", 300e9),
        ("NVLink4-x18", 450e9),
        ("PCIe3", 15.75e9),
        ("PCIe4", 31.5e9),
        ("10GbE", 1.25e9),
        ("25GbE", 3.125e9),
        ("100GbE", 12.5e9),
        ("IB-EDR", 12.5e9),
        ("IB-HDR", 25e9),
        ("IB-NDR", 50e9),
    ],
)
def test_link_bandwidths(name: str, bandwidth: float) -> None:
    spec = get_link(name)
    assert spec.bandwidth_bytes_per_s == pytest.approx(bandwidth)
    # nccl-tests bus bandwidth over link peak: 0.75-0.85 for Ethernet, PCIe, NVLink3/4; 0.9 for
    # NVLink2 (135.5 of 150 GB/s on a DGX-1 topology); 0.96 for an InfiniBand NIC (24 of 25 GB/s per
    # HDR NIC, 192 GB/s over a DGX A100's 8: experiments/validation/nccl.py; 46-49 of 50 per NDR NIC)
    assert 0.7 <= spec.achievable_fraction <= (0.96 if name.startswith("IB-") else 0.9)
    assert spec.effective_bandwidth_bytes_per_s == pytest.approx(bandwidth * spec.achievable_fraction)
    assert spec.source


def test_link_latencies_are_ordered_as_documented() -> None:
    nvlink, pcie = get_link("NVLink2").latency_s, get_link("PCIe3").latency_s
    eth, ib = get_link("25GbE").latency_s, get_link("IB-HDR").latency_s
    assert 1e-6 <= nvlink <= 5e-6
    assert 1e-6 <= pcie <= 5e-6
    assert 1e-6 <= ib <= 2e-6
    assert 10e-6 <= eth <= 100e-6


def test_link_lookup_and_unknown() -> None:
    assert get_link("ib-hdr") is get_link("IB-HDR")
    assert get_link("nvlink2") is get_link("NVLink2")
    assert get_link("pcie3") is get_link("PCIe3")
    with pytest.raises(UnknownNameError, match=r"unknown link 'NVLink9'.*IB-EDR"):
        get_link("NVLink9")


def test_link_bundled() -> None:
    one = get_link("NVLink2")
    two = one.bundled(2)
    assert two.name == "NVLink2-x2"
    assert two.bandwidth_bytes_per_s == 2 * one.bandwidth_bytes_per_s
    assert two.latency_s == one.latency_s
    assert one.bundled(1) is one
    with pytest.raises(InputError, match="count"):
        one.bundled(0)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"bandwidth_bytes_per_s": 0.0}, "bandwidth_bytes_per_s"),
        ({"latency_s": -1e-6}, "latency_s"),
        ({"achievable_fraction": 1.01}, "achievable_fraction"),
        ({"name": " "}, "link.name"),
    ],
)
def test_link_spec_validation(changes: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        dataclasses.replace(get_link("25GbE"), **changes)  # type: ignore[arg-type]


def test_custom_specs() -> None:
    dev = DeviceSpec(
        name="X", peak_flop_per_s={"bfloat16": 1e15}, memory_bytes=GIB, memory_bandwidth_bytes_per_s=1e12
    )
    assert dev.price_per_hour_usd is None
    assert dev.supports("bfloat16")
    assert not dev.supports("float32")
    link = LinkSpec(name="L", bandwidth_bytes_per_s=1e9, latency_s=0.0)
    assert link.effective_bandwidth_bytes_per_s == pytest.approx(0.8e9)


# ------------------------------------------------------------------------------------------------
# Golden: every figure of the catalog data and the presets, as they were when they were Python
# literals (tests/profiles/data/hardware_golden.json). A change to a figure must change both.

GOLDEN = Path(__file__).parent / "data" / "hardware_golden.json"


def test_catalog_and_presets_match_the_golden_figures_exactly() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert device_names() == tuple(golden["devices"])
    assert link_names() == tuple(golden["links"])
    for name, expected in golden["devices"].items():
        assert device_spec_to_dict(get_device(name)) == expected, name
    for name, expected in golden["links"].items():
        assert link_spec_to_dict(get_link(name)) == expected, name
    for alias, name in golden["device_aliases"].items():
        assert get_device(alias).name == name, alias
    for alias, name in golden["link_aliases"].items():
        assert get_link(alias).name == name, alias
    roles = {"nvswitch": "nvswitch_link", "dgx1": "dgx1_link", "pcie": "pcie"}
    for kind, role in roles.items():
        for name in device_names():
            link = default_link(name, role)  # type: ignore[arg-type]
            assert (None if link is None else link.name) == golden["defaults"][kind].get(name), (name, role)
    assert cluster_names() == tuple(golden["clusters"])
    for name, expected in golden["clusters"].items():
        assert json.loads(json.dumps(cluster_to_config(get_cluster(name)))) == expected, name


def test_every_catalog_entry_and_preset_names_its_source() -> None:
    for name in device_names():
        assert "datasheet" in get_device(name).source, name
    for name in link_names():
        source = get_link(name).source
        assert any(word in source for word in ("datasheet", "specification", "IEEE", "IBTA")), name
    for name in cluster_names():
        assert "(" in get_cluster(name).description, name  # the citation is in parentheses


def test_catalog_data_errors_name_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipesim.profiles.hardware import catalog

    real = catalog.data_text
    # a private cache for this test: clearing the real one would leave every cluster built before
    # with links that are no longer the catalog's (``cluster.nic is get_link(...)`` would fail)
    fresh = functools.cache(catalog._catalog.__wrapped__)
    monkeypatch.setattr(catalog, "_catalog", fresh)
    bad = {
        "links.toml": real("data", "links.toml").replace("latency_us = 25", "latency_us = -25", 1),
        "devices.toml": real("data", "devices.toml").replace("memory_gib = 16", "memory_gb1 = 16", 1),
    }
    for file, text in bad.items():
        monkeypatch.setattr(
            catalog, "data_text", lambda *parts, t=text, f=file: t if parts[-1] == f else real(*parts)
        )
        fresh.cache_clear()
        with pytest.raises(FormatError, match=rf"data/{file}: .*(latency_us=-25|unknown key 'memory_gb1')"):
            catalog.get_device("v100")
    monkeypatch.setattr(catalog, "data_text", real)
    fresh.cache_clear()
    assert catalog.get_device("v100").name == "V100-SXM2-16GB"
