"""Explicit per-micro-batch costs: variable-length micro-batches whose costs are not a profile's."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.errors import invalid

__all__ = ["MicrobatchCosts"]

_Table = tuple[tuple[float, ...], ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class MicrobatchCosts:
    """Costs of every (stage, micro-batch) pair for the whole micro-batch, indexed ``[stage][microbatch]``.

    Given to :func:`pipesim.simulator.simulate`, they replace the costs the simulator would derive
    from the profile's per-layer figures. A stage replicated ``r`` ways gives each replica the
    share of every figure proportional to its share of the micro-batch's samples.

    Attributes:
        fwd_time_s: forward time of the stage for the whole micro-batch, seconds.
        bwd_time_s: backward time (input and weight gradients), seconds.
        stash_bytes: bytes the stage keeps from the micro-batch's forward until its backward ends.
        work_bytes: transient bytes during the micro-batch's backward.
        out_bytes: activation bytes crossing from the stage to the next one (0 for the last stage);
            the gradient sent back over the same boundary has the same size.

    Raises:
        InputError: tables of different shapes, no stage or no micro-batch, or an entry that is
            not a finite number >= 0.
    """

    fwd_time_s: _Table
    bwd_time_s: _Table
    stash_bytes: _Table
    work_bytes: _Table
    out_bytes: _Table

    def __post_init__(self) -> None:
        stages = len(self.fwd_time_s)
        if stages < 1:
            raise invalid("fwd_time_s", [], "needs at least one stage")
        m = len(self.fwd_time_s[0])
        if m < 1:
            raise invalid("fwd_time_s[0]", [], "needs at least one micro-batch")
        for name in ("fwd_time_s", "bwd_time_s", "stash_bytes", "work_bytes", "out_bytes"):
            table = getattr(self, name)
            if len(table) != stages:
                raise invalid(name, f"{len(table)} stages", f"must have {stages} stages like fwd_time_s")
            for s, row in enumerate(table):
                if len(row) != m:
                    raise invalid(f"{name}[{s}]", f"{len(row)} entries", f"must have {m} micro-batches")
                for k, value in enumerate(row):
                    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                        raise invalid(f"{name}[{s}][{k}]", value, "must be a finite number >= 0")

    @property
    def num_stages(self) -> int:
        """Stages the tables cover."""
        return len(self.fwd_time_s)

    @property
    def num_microbatches(self) -> int:
        """Micro-batches the tables cover."""
        return len(self.fwd_time_s[0])

    def check_shape(self, num_stages: int, num_microbatches: int) -> None:
        """Check the tables fit a plan of ``num_stages`` stages and ``num_microbatches`` micro-batches.

        Raises:
            InputError: the shape differs.
        """
        if (self.num_stages, self.num_microbatches) != (num_stages, num_microbatches):
            raise invalid(
                "costs",
                f"{self.num_stages} stages x {self.num_microbatches} micro-batches",
                f"must match the plan's {num_stages} stages x {num_microbatches} micro-batches",
            )
