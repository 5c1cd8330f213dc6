"""One published measurement, the pipesim prediction for it, and the tolerance it is held to."""

from __future__ import annotations

import importlib
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Record", "all_records", "relative_error"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """A published figure and how pipesim predicts it.

    Attributes:
        name: short unique id, e.g. ``"megatron-2021-t1-row3-tflops"``.
        source: where the figure is published: paper (authors, venue, year), table or figure,
            row; or the public log and its line.
        quantity: what is measured, with its unit, e.g. ``"iteration time (s)"``.
        kind: ``"ratio"`` (speed-ups, schedule-vs-schedule, bubble rates) or ``"absolute"``
            (iteration times, throughputs, memory).
        published: the published value, in the unit of ``quantity``.
        predict: computes pipesim's prediction in the same unit (runs the library; no constants).
        tolerance: the largest accepted relative error, e.g. ``0.15``.
        note: how the setting was mapped onto pipesim's inputs (what is assumed).
        known_miss: empty, or why pipesim misses this record today (a modelling gap, named): the
            test then expects the miss (strict xfail), so fixing the physics makes it fail until the
            record is moved back to the held ones. Never a way to hide a record.
    """

    name: str
    source: str
    quantity: str
    kind: str
    published: float
    predict: Callable[[], float]
    tolerance: float
    note: str = ""
    known_miss: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ("ratio", "absolute"):
            raise ValueError(f"Record {self.name}: kind={self.kind!r} must be 'ratio' or 'absolute'")
        if not (self.published > 0 and math.isfinite(self.published)):
            raise ValueError(f"Record {self.name}: published={self.published!r} must be finite and > 0")
        if not 0 < self.tolerance < 1:
            raise ValueError(f"Record {self.name}: tolerance={self.tolerance!r} must be in (0, 1)")


def relative_error(predicted: float, published: float) -> float:
    """``(predicted - published) / published`` (signed)."""
    return (predicted - published) / published


def all_records() -> list[Record]:
    """The records of every topic module of :mod:`experiments.validation`, by module name then order.

    Topic modules are the package's modules other than ``record``, ``__main__`` and the shared
    helpers whose names start with an underscore.

    Raises:
        ValueError: two records share a name.
    """
    import experiments.validation as package

    out: list[Record] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.name in ("record", "__main__") or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"experiments.validation.{info.name}")
        out.extend(module.records())
    names = [r.name for r in out]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise ValueError(f"validation records share names: {duplicated}")
    return out
