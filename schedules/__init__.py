"""Pipeline schedules as pure data: generators, lowering passes, the validator and the analytic evaluator.

A :class:`Schedule` holds, for each pipeline rank, the ordered :class:`Action` list it runs in one
iteration; actions print and parse in torch's token form (``0F1``, ``3I0``). Generators
(:func:`make_schedule`, or lazily :func:`stream_schedule`; :func:`schedule_info` and
``pipesim schedule list`` describe each) produce compute-only schedules, their stages placed on
ranks looped, in a V or in two directions (:mod:`pipesim.schedules.placement`); an overlapped
forward-and-backward pair (``FB`` then ``B``, DualPipe's ``F&B``) runs as one unit
(:mod:`pipesim.schedules.pairs`); the
lowering (:func:`lowered_blocks`, :func:`lower`) derives communication and gradient all-reduces;
:func:`validate` checks a schedule; :func:`evaluate` times one on per-rank timelines without a
simulator. This layer imports only ``pipesim.errors`` and ``pipesim.units``.
"""

from __future__ import annotations

from pipesim.schedules.action import FORWARD_OPS, Action, Op
from pipesim.schedules.async_pipedream import pipedream_2bw, pipedream_async, steady_iteration_time
from pipesim.schedules.controllable import v_half, v_min
from pipesim.schedules.generators import (
    dapple,
    gpipe,
    interleaved,
    interleaved_zb,
    looped_bfs,
    one_f_one_b,
    zb_h1,
    zb_h2,
)
from pipesim.schedules.greedy import zb_auto
from pipesim.schedules.lowering import (
    add_allreduce,
    add_communication,
    lower,
    lowered_blocks,
    merge_backward,
    split_backward,
)
from pipesim.schedules.order_text import parse_order, read_schedule, read_schedule_file, schedule_from_order
from pipesim.schedules.pairs import pair_time
from pipesim.schedules.placement import PLACEMENTS, stage_rank, stage_ranks
from pipesim.schedules.registry import (
    ScheduleInfo,
    ScheduleName,
    make_schedule,
    schedule_info,
    schedule_names,
    stream_schedule,
)
from pipesim.schedules.render import format_timeline
from pipesim.schedules.schedule import Schedule, ScheduleError, ScheduleStream, format_grid
from pipesim.schedules.timing import CostSpec, Time, Timeline, evaluate
from pipesim.schedules.validate import validate
from pipesim.schedules.vshape import dualpipev, zbv

__all__ = [
    "FORWARD_OPS",
    "PLACEMENTS",
    "Action",
    "CostSpec",
    "Op",
    "Schedule",
    "ScheduleError",
    "ScheduleInfo",
    "ScheduleName",
    "ScheduleStream",
    "Time",
    "Timeline",
    "add_allreduce",
    "add_communication",
    "dapple",
    "dualpipev",
    "evaluate",
    "format_grid",
    "format_timeline",
    "gpipe",
    "interleaved",
    "interleaved_zb",
    "looped_bfs",
    "lower",
    "lowered_blocks",
    "make_schedule",
    "merge_backward",
    "one_f_one_b",
    "pair_time",
    "parse_order",
    "pipedream_2bw",
    "pipedream_async",
    "read_schedule",
    "read_schedule_file",
    "schedule_from_order",
    "schedule_info",
    "schedule_names",
    "split_backward",
    "stage_rank",
    "stage_ranks",
    "steady_iteration_time",
    "stream_schedule",
    "v_half",
    "v_min",
    "validate",
    "zb_auto",
    "zb_h1",
    "zb_h2",
    "zbv",
]
