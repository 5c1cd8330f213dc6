"""`pipesim show cluster`, `pipesim plan` and `pipesim simulate` with fat-tree and heterogeneous clusters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main

MIXED = """\
name = "mixed"
intra = "nvswitch"
nic = "IB-HDR"
nics_per_server = 8
fabric = "rail"
servers_per_leaf = 1

[[group]]
servers = 1
device = "A100-80GB"

[[group]]
servers = 1
device = "V100-SXM2-32GB"
"""


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_show_cluster_prints_the_fabric_and_summarises_big_link_tables(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "show", "cluster", "dgx-h100-16384")
    assert code == 0
    assert "2048 servers x 8 H100-SXM = 16384 GPUs" in out
    assert "rail-optimised 3-level fat-tree, 32 servers per leaf, 4 SUs per pod, non-blocking" in out
    assert "IB-NDR-leaf-uplink   1024" in out
    assert "(148512 links: --json lists every one)" in out
    code, out, _ = run(
        capsys,
        "show",
        "cluster",
        "dgx-a100-x2",
        "--set",
        "fabric=rail",
        "--set",
        "servers=4",
        "--set",
        "servers_per_leaf=2",
        "--set",
        "oversubscription=2",
    )
    assert code == 0
    assert "2:1 oversubscribed" in out
    assert "su1.leaf7->spine" in out  # small enough: one row per link


def test_show_heterogeneous_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "mixed.toml"
    path.write_text(MIXED, encoding="utf-8")
    code, out, _ = run(capsys, "show", "cluster", str(path), "--json")
    assert code == 0
    data = json.loads(out)
    assert [g["device"] for g in data["groups"]] == ["A100-80GB", "V100-SXM2-32GB"]
    assert data["fabric"]["kind"] == "rail"
    assert len(data["links"]) == data["num_links"]


def test_bad_group_and_planning_a_heterogeneous_cluster_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(MIXED.replace('device = "V100-SXM2-32GB"', 'device = "V200"'), encoding="utf-8")
    code, _, err = run(capsys, "show", "cluster", str(bad))
    assert code == 2
    assert "group 1: device='V200': unknown device 'V200'" in err
    assert "Traceback" not in err
    good = tmp_path / "mixed.toml"
    good.write_text(MIXED, encoding="utf-8")
    code, _, err = run(capsys, "plan", "--model", "bert48", "--cluster", str(good), "--gbs", "64")
    assert code == 2
    assert "the planner needs one device type" in err
    code, out, _ = run(
        capsys,
        "simulate",
        "--model",
        "bert48",
        "--cluster",
        str(good),
        "--gbs",
        "64",
        "--microbatches",
        "8",
        "--stages",
        "2",
        "--replicas",
        "8,8",
        "--json",
    )
    assert code == 0
    devices = json.loads(out)["devices"]
    assert {d["memory_capacity_bytes"] for d in devices} == {80 * 2**30, 32 * 2**30}
