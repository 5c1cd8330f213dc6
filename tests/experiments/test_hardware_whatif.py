"""Hardware what-if: newer GPUs are faster, faster NICs are never slower, costs add up."""

from __future__ import annotations

from typing import Any

import pytest

from experiments import hardware_whatif as hw
from pipesim.profiles import get_device


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return hw.run(small=True)


def throughput(rows: list[dict[str, Any]], device: str, nic: str) -> float:
    (row,) = [r for r in rows if r["device"] == device and r["nic"] == nic]
    return float(row["throughput_samples_per_s"])


def test_newer_gpus_are_faster(rows: list[dict[str, Any]]) -> None:
    v100, a100, h100 = hw.DEVICES
    for nic in hw.SMALL_NICS:
        assert throughput(rows, a100, nic) > 1.5 * throughput(rows, v100, nic)
        assert throughput(rows, h100, nic) > 1.5 * throughput(rows, a100, nic)


def test_faster_nic_is_never_slower(rows: list[dict[str, Any]]) -> None:
    slow, fast = hw.SMALL_NICS
    for device in hw.DEVICES:
        assert throughput(rows, device, fast) >= throughput(rows, device, slow) * (1 - 1e-9)


def test_cost_per_million_samples(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        price = get_device(r["device"]).price_per_hour_usd
        assert price is not None
        assert r["price_per_device_hour_usd"] == price
        expected = r["devices_used"] * price / (r["throughput_samples_per_s"] * 3600) * 1e6
        assert r["usd_per_million_samples"] == pytest.approx(expected, rel=1e-12)
        assert r["fits"] is True
        estimate = r["estimated_throughput_samples_per_s"]
        # GPipe's closed form is exact here; DAPPLE's 1F1B form is an approximation with links.
        # Measured 2026-11-24 (main 0060781, full run): the estimate is up to 6.6% optimistic on
        # the V100's and A100's 2 x 8 plans over the slow NICs (V100 10GbE +6.6%, A100 25GbE
        # +6.3%) and up to 2.4% pessimistic on the H100's deep plans; earlier at most 10.2%
        assert estimate == pytest.approx(r["throughput_samples_per_s"], rel=0.12)
    # Per sample, H100s are the cheapest and V100s the dearest on every NIC (README): the newer
    # GPUs' speed-up outgrows their price.
    for nic in hw.SMALL_NICS:
        cost = {r["device"]: r["usd_per_million_samples"] for r in rows if r["nic"] == nic}
        assert cost["H100-SXM"] < cost["A100-80GB"] < cost["V100-SXM2-16GB"]
