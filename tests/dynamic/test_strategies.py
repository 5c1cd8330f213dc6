"""Micro-batching strategies: pad, pack and dynamic, and their invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import Infeasible, InputError, UnknownNameError
from pipesim.planner.dynamic import (
    LengthBatch,
    PipelineCosts,
    generate_mix,
    make_microbatches,
    pack_microbatches,
    pad_microbatches,
)
from pipesim.profiles.costmodels.sequence import seq_cost_model

COSTS = PipelineCosts.build(seq_cost_model("bert48"), num_stages=4)
LIMIT = 3 * 2**30


def test_pad_fixed_size_padded_to_the_longest_in_each() -> None:
    batch = LengthBatch(inputs=(10, 30, 20, 5, 7))
    plan = pad_microbatches(batch, COSTS, memory_limit_bytes=LIMIT, microbatch_size=2)
    assert plan.sizes == (2, 2, 1)
    assert [mb.row_len for mb in plan.microbatches] == [30, 20, 7]
    assert plan.computed_tokens == 60 + 40 + 7
    assert plan.padding_fraction == pytest.approx(1 - 72 / 107)
    assert plan.microbatches[0].square_tokens == 2 * 30 * 30


def test_pad_default_size_is_the_most_that_fit_at_the_longest_length() -> None:
    batch = generate_mix("glue-like", 300, seed=1, max_len=512)
    plan = pad_microbatches(batch, COSTS, memory_limit_bytes=LIMIT)
    size = plan.sizes[0]
    longest = max(batch.tokens)
    assert COSTS.padded_memory_bytes(size, longest) <= LIMIT < COSTS.padded_memory_bytes(size + 1, longest)


def test_pack_rows_hold_whole_samples() -> None:
    batch = LengthBatch(inputs=(300, 200, 250, 100, 60, 500))
    plan = pack_microbatches(batch, COSTS, memory_limit_bytes=LIMIT, rows_per_microbatch=2)
    assert sorted(i for mb in plan.microbatches for i in mb.samples) == list(range(6))
    assert all(mb.row_len == 512 for mb in plan.microbatches)
    rows = sum(mb.rows for mb in plan.microbatches)
    assert rows == 3  # best-fit decreasing: 500 | 300 + 200 | 250 + 100 + 60
    assert plan.computed_tokens == 3 * 512
    full = plan.microbatches[0].square_tokens
    assert full == 2 * 512 * 512
    per_sample = pack_microbatches(
        batch, COSTS, memory_limit_bytes=LIMIT, rows_per_microbatch=2, attention="per-sample"
    )
    assert per_sample.microbatches[0].square_tokens == 500**2 + 12**2 + 300**2 + 200**2 + 12**2
    with pytest.raises(InputError, match="attention"):
        pack_microbatches(batch, COSTS, memory_limit_bytes=LIMIT, attention="flash")
    with pytest.raises(InputError, match="longest sample"):
        pack_microbatches(batch, COSTS, memory_limit_bytes=LIMIT, row_len=400)


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 512), min_size=1, max_size=60),
    strategy=st.sampled_from(["pad", "pack", "dynamic"]),
)
def test_every_strategy_places_every_sample_once(lengths: list[int], strategy: str) -> None:
    batch = LengthBatch(inputs=tuple(lengths))
    plan = make_microbatches(strategy, batch, COSTS, memory_limit_bytes=LIMIT)
    assert sorted(i for mb in plan.microbatches for i in mb.samples) == list(range(len(lengths)))
    assert plan.real_tokens == sum(lengths)
    assert 0 <= plan.padding_fraction < 1
    for mb in plan.microbatches:
        assert all(lengths[i] <= mb.row_len for i in mb.samples)
        assert COSTS.memory_bytes(mb.shape) <= LIMIT


def test_dynamic_pads_less_than_pad_and_estimates_faster() -> None:
    batch = generate_mix("flan-like", 512, seed=2, max_len=512)
    pad = make_microbatches("pad", batch, COSTS, memory_limit_bytes=LIMIT)
    dyn = make_microbatches("dynamic", batch, COSTS, memory_limit_bytes=LIMIT)
    assert dyn.padding_fraction < 0.05 < pad.padding_fraction
    assert dyn.estimate_s < pad.estimate_s
    # micro-batches come out by ascending length
    rows = [mb.row_len for mb in dyn.microbatches]
    assert rows == sorted(rows)


def test_errors() -> None:
    batch = LengthBatch(inputs=(400,))
    with pytest.raises(UnknownNameError, match="valid strategy names: dynamic, pack, pad"):
        make_microbatches("bucket", batch, COSTS, memory_limit_bytes=LIMIT)
    with pytest.raises(InputError, match="must be > 0"):
        make_microbatches("pad", batch, COSTS, memory_limit_bytes=0)
    small = COSTS.padded_memory_bytes(1, 400) / 2
    for name in ("pad", "pack", "dynamic"):
        with pytest.raises(Infeasible, match="smaller than one"):
            make_microbatches(name, batch, COSTS, memory_limit_bytes=small)
    with pytest.raises(InputError, match="empty"):
        LengthBatch(inputs=())
