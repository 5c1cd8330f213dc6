"""Dynamic micro-batching for variable-length, multi-task batches (DynaPipe): ``pipesim.planner.dynamic``.

Global batches as sequence lengths (:mod:`~pipesim.planner.dynamic.lengths`), per-stage costs of a
micro-batch shape (:mod:`~pipesim.planner.dynamic.stage_costs`), the micro-batching strategies pad, pack
and dynamic (:mod:`~pipesim.planner.dynamic.microbatch`, the exact dynamic program in
:mod:`~pipesim.planner.dynamic.dp`), and schedules and orders for variable-sized micro-batches
(:mod:`~pipesim.planner.dynamic.ordering`).
"""

from pipesim.planner.dynamic.dp import Partition, partition_objective, partition_sorted
from pipesim.planner.dynamic.lengths import (
    MIXES,
    LengthBatch,
    Task,
    check_lengths,
    generate_mix,
    load_lengths,
    mix_names,
    parse_lengths,
)
from pipesim.planner.dynamic.microbatch import (
    PACK_ATTENTION,
    Microbatch,
    MicrobatchPlan,
    Strategy,
    dynamic_microbatches,
    make_microbatches,
    pack_microbatches,
    pad_microbatches,
)
from pipesim.planner.dynamic.ordering import (
    MEMORY_AWARE,
    best_order,
    forward_counts,
    memory_aware,
    variable_schedule,
)
from pipesim.planner.dynamic.stage_costs import MicrobatchShape, PipelineCosts, StagePolys

__all__ = [
    "MEMORY_AWARE",
    "MIXES",
    "PACK_ATTENTION",
    "LengthBatch",
    "Microbatch",
    "MicrobatchPlan",
    "MicrobatchShape",
    "Partition",
    "PipelineCosts",
    "StagePolys",
    "Strategy",
    "Task",
    "best_order",
    "check_lengths",
    "dynamic_microbatches",
    "forward_counts",
    "generate_mix",
    "load_lengths",
    "make_microbatches",
    "memory_aware",
    "mix_names",
    "pack_microbatches",
    "pad_microbatches",
    "parse_lengths",
    "partition_objective",
    "partition_sorted",
    "variable_schedule",
]
