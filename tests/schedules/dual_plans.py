"""Plans on the ``dual`` placement (dualpipe, chimera): the model's ``p`` stages and their copies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipesim.plan import Plan, StagePlan


def dual_plan(
    schedule: str, p: int, m: int, replicas: int = 1, schedule_options: Mapping[str, Any] | None = None
) -> Plan:
    """``p`` one-layer stages of ``replicas`` each, then their copies (stage ``p + j`` copies
    stage ``j``), ``m`` micro-batches of 4 samples per replica."""
    model = [StagePlan(first_layer=i, last_layer=i, replicas=replicas) for i in range(p)]
    return Plan(stages=tuple(model + model), global_batch_size=4 * m * replicas, num_microbatches=m,
                schedule=schedule, chunks=2, schedule_options=dict(schedule_options or {}))
