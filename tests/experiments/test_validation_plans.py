"""The validation modules' shared block split: ranges from block_stage_ranges, fields from the template."""

from __future__ import annotations

import pytest

from experiments.validation._plans import block_stages
from pipesim.errors import InputError
from pipesim.plan import StagePlan


def test_block_stages_take_the_ranges_and_every_other_field() -> None:
    like = StagePlan(first_layer=0, last_layer=0, replicas=3, tensor_parallel=2, tp_dgrad_overlap=False)
    # 10 layers: embedding (0), blocks 1..8, head (9); two stages of 3 and 5 blocks
    stages = block_stages([3, 5], 10, like)
    assert [(s.first_layer, s.last_layer) for s in stages] == [(0, 3), (4, 9)]
    for s in stages:
        assert (s.replicas, s.tensor_parallel, s.tp_dgrad_overlap) == (3, 2, False)


def test_block_stages_reject_more_blocks_than_layers() -> None:
    like = StagePlan(first_layer=0, last_layer=0)
    with pytest.raises(InputError, match="blocks"):
        block_stages([6, 6], 10, like)
