"""Pipeline schedules as pure data: generators, lowering passes, the validator and the analytic evaluator.

A :class:`Schedule` holds, for each pipeline rank, the ordered :class:`Action` list it runs in one
iteration; actions print and parse in torch's token form (``0F1``, ``3I0``). Generators
(:func:`make_schedule`, or lazily :func:`stream_schedule`) produce compute-only schedules; the
lowering (:func:`lowered_blocks`, :func:`lower`) derives communication and gradient all-reduces;
:func:`validate` checks a schedule; :func:`evaluate` times one on per-rank timelines without a
simulator. This layer imports only ``pipesim.errors`` and ``pipesim.units``.
"""

from __future__ import annotations

from pipesim.schedules.action import Action, Op
from pipesim.schedules.generators import dapple, gpipe, interleaved, one_f_one_b, zb_h1, zb_h2
from pipesim.schedules.lowering import (
    add_allreduce,
    add_communication,
    lower,
    lowered_blocks,
    merge_backward,
    split_backward,
)
from pipesim.schedules.order_text import parse_order, schedule_from_order
from pipesim.schedules.registry import ScheduleName, make_schedule, schedule_names, stream_schedule
from pipesim.schedules.render import format_timeline
from pipesim.schedules.schedule import Schedule, ScheduleError, ScheduleStream, format_grid
from pipesim.schedules.timing import CostSpec, Time, Timeline, evaluate
from pipesim.schedules.validate import validate

__all__ = [
    "Action",
    "CostSpec",
    "Op",
    "Schedule",
    "ScheduleError",
    "ScheduleName",
    "ScheduleStream",
    "Time",
    "Timeline",
    "add_allreduce",
    "add_communication",
    "dapple",
    "evaluate",
    "format_grid",
    "format_timeline",
    "gpipe",
    "interleaved",
    "lower",
    "lowered_blocks",
    "make_schedule",
    "merge_backward",
    "one_f_one_b",
    "parse_order",
    "schedule_from_order",
    "schedule_names",
    "split_backward",
    "stream_schedule",
    "validate",
    "zb_h1",
    "zb_h2",
]
