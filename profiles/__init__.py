"""Model profiles and hardware: what a model costs per layer, and what it runs on.

This layer imports no other pipesim layer (only :mod:`pipesim.errors` and :mod:`pipesim.units`).
"""

from pipesim.profiles.model import DTYPE_BYTES, DTYPES, BatchPoint, Cut, Layer, ModelProfile

__all__ = ["DTYPES", "DTYPE_BYTES", "BatchPoint", "Cut", "Layer", "ModelProfile"]
