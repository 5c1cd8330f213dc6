"""Bounds on user-given numbers, shared by the command line, the sweep config and the API.

Each bound is far above any real run and small enough that every time, size and cost computed
from a value inside it stays a finite float (so no ``OverflowError``, NaN or Infinity reaches an
output). docs/reliability.md lists them with the inputs they guard.
"""

from __future__ import annotations

__all__ = [
    "MAX_COUNT",
    "MAX_GLOBAL_BATCH",
    "MAX_JITTER_CV",
    "MAX_OVERRIDE_MAGNITUDE",
    "MAX_PRICE_PER_DEVICE_HOUR_USD",
    "MAX_SEED",
    "MAX_TRAIN_SAMPLES",
]

MAX_COUNT = 2**20
"""The largest count (stages, micro-batches, replicas, workers, ...) a command line accepts."""
MAX_GLOBAL_BATCH = 2**40
"""The largest global batch size, samples (about 1.1e12: far above any real run, small enough
that every time and cost computed from it stays finite)."""
MAX_TRAIN_SAMPLES = 10**15
"""The most samples a time-and-cost-to-train question may name (``compare --train-samples``):
far above the largest published runs (15e12 tokens at 4096 per sample is about 4e9 samples)."""
MAX_SEED = 2**63 - 1
"""The largest random seed (seeds are integers in ``0..2**63-1``)."""
MAX_JITTER_CV = 10.0
"""The largest ``--jitter`` (coefficient of variation of op times): beyond it the log-normal op
times reach the limits of a float and say nothing about a real machine."""
MAX_OVERRIDE_MAGNITUDE = 1e18
"""The largest magnitude of a number given to ``--set`` (and a sweep's overrides): bigger than
any real size, bandwidth or count in the unit its key names, small enough that converting it
(GiB to bytes, us to s) stays finite."""
MAX_PRICE_PER_DEVICE_HOUR_USD = 1e6
"""The largest price of one device for one hour, US dollars (real prices are 0.1 to 100)."""
