"""Plans shared by the validation modules: a transformer split into stages of whole blocks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pipesim.plan import StagePlan, block_stage_ranges

__all__ = ["block_stages"]


def block_stages(blocks: Sequence[int], num_layers: int, like: StagePlan) -> tuple[StagePlan, ...]:
    """Stages holding ``blocks[k]`` transformer blocks each, every other field as ``like``'s.

    The layer ranges are :func:`pipesim.plan.block_stage_ranges`' (the embedding with the first
    stage, the final norm and head with the last), so the published runs' Megatron-LM and
    DeepSpeed splits read the same way in every module.

    Args:
        blocks: blocks per stage (per virtual stage for interleaved schedules), each >= 1.
        num_layers: the profile's layer count.
        like: a stage whose fields other than ``first_layer`` and ``last_layer`` (replicas,
            tensor parallelism, sharding, ...) every stage takes.

    Raises:
        InputError: as :func:`pipesim.plan.block_stage_ranges`, or a field ``like`` carries
            that :class:`pipesim.plan.StagePlan` rejects for a range.
    """
    ranges = block_stage_ranges(blocks, num_layers)
    return tuple(replace(like, first_layer=a, last_layer=b) for a, b in ranges)
