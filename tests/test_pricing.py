"""Dollars per million samples and time/cost to train."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.pricing import training_cost


def test_closed_form() -> None:
    # 16 devices at $3.60/h cost $0.016 per second; at 100 samples/s a million samples take
    # 10,000 s and cost $160.
    cost = training_cost(100.0, 16, 3.6, samples=2_000_000)
    assert cost.cost_per_million_samples_usd == pytest.approx(160.0)
    assert cost.time_to_train_s == pytest.approx(20_000.0)
    assert cost.cost_to_train_usd == pytest.approx(320.0)
    assert training_cost(100.0, 16, 3.6).time_to_train_s is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0.0, 1, 1.0), "throughput_samples_per_s=0.0"),
        ((1.0, 0, 1.0), "devices=0"),
        ((1.0, 1, -1.0), "price_per_device_hour_usd=-1.0"),
    ],
)
def test_bad_values(args: tuple[float, int, float], message: str) -> None:
    with pytest.raises(InputError, match=message):
        training_cost(*args)


def test_samples_must_be_positive() -> None:
    with pytest.raises(InputError, match="samples=0"):
        training_cost(1.0, 1, 1.0, samples=0)
