"""A plan from an explicit layout, for the planner tests."""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.plan import Plan, StagePlan

Layout = Sequence[tuple[int, int, tuple[int, ...]]]
"""``(first layer, last layer, device ids)`` per stage; the replica count is the device count."""


def layout_plan(layout: Layout, *, global_batch_size: int, num_microbatches: int, schedule: str) -> Plan:
    """The plan that places each stage of ``layout`` on its listed devices."""
    return Plan(
        stages=tuple(
            StagePlan(first_layer=a, last_layer=b, replicas=len(d), devices=d) for a, b, d in layout
        ),
        global_batch_size=global_batch_size,
        num_microbatches=num_microbatches,
        schedule=schedule,
    )
