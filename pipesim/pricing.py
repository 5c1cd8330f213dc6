"""What training costs: dollars per million samples, time and money to train N samples.

Prices are per device-hour (the catalog's on-demand price, ``DeviceSpec.price_per_hour_usd``,
overridable); a plan pays for every device it uses for the whole iteration, busy or idle.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.errors import invalid

__all__ = ["TrainingCost", "training_cost"]

SECONDS_PER_HOUR = 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingCost:
    """Cost figures for one plan.

    Attributes:
        devices: devices the plan pays for.
        price_per_device_hour_usd: US dollars per device per hour.
        cost_per_million_samples_usd: dollars to process one million samples.
        time_to_train_s: seconds to process ``samples`` samples (``None`` when no count given).
        cost_to_train_usd: dollars to process ``samples`` samples (``None`` when no count given).
    """

    devices: int
    price_per_device_hour_usd: float
    cost_per_million_samples_usd: float
    time_to_train_s: float | None = None
    cost_to_train_usd: float | None = None


def training_cost(
    throughput_samples_per_s: float,
    devices: int,
    price_per_device_hour_usd: float,
    *,
    samples: int | None = None,
) -> TrainingCost:
    """Dollars per million samples, and time and dollars for ``samples`` samples if given.

    Args:
        throughput_samples_per_s: samples per second of the plan.
        devices: devices the plan uses.
        price_per_device_hour_usd: price of one device for one hour, US dollars.
        samples: samples to train on (e.g. epochs x data set size), or ``None``.

    Raises:
        InputError: a throughput, device count or price that is not a finite positive number,
            or ``samples < 1``.
    """
    if not (math.isfinite(throughput_samples_per_s) and throughput_samples_per_s > 0):
        raise invalid("throughput_samples_per_s", throughput_samples_per_s, "must be a finite number > 0")
    if devices < 1:
        raise invalid("devices", devices, "must be >= 1")
    if not (math.isfinite(price_per_device_hour_usd) and price_per_device_hour_usd >= 0):
        raise invalid("price_per_device_hour_usd", price_per_device_hour_usd, "must be a finite number >= 0")
    if samples is not None and samples < 1:
        raise invalid("samples", samples, "must be >= 1")
    dollars_per_s = devices * price_per_device_hour_usd / SECONDS_PER_HOUR
    per_million = dollars_per_s / throughput_samples_per_s * 1e6
    if samples is None:
        return TrainingCost(
            devices=devices,
            price_per_device_hour_usd=price_per_device_hour_usd,
            cost_per_million_samples_usd=per_million,
        )
    seconds = samples / throughput_samples_per_s
    return TrainingCost(
        devices=devices,
        price_per_device_hour_usd=price_per_device_hour_usd,
        cost_per_million_samples_usd=per_million,
        time_to_train_s=seconds,
        cost_to_train_usd=seconds * dollars_per_s,
    )
