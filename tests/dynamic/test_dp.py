"""The dynamic program is exact for its objective: checked against brute force on small batches."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import Infeasible, InputError
from pipesim.planner.dynamic import PipelineCosts, partition_objective, partition_sorted
from pipesim.profiles.costmodels.sequence import seq_cost_model

BERT4 = PipelineCosts.build(seq_cost_model("bert48"), num_stages=4)
GPT2 = PipelineCosts.build(
    seq_cost_model("gpt:layers=4,hidden=512,heads=8,seq=1024,vocab=1000"), num_stages=2
)


def brute_force(lengths: Sequence[int], costs: PipelineCosts, limit: float, weight: float) -> float:
    """The least objective over every split of the sorted lengths into contiguous runs."""
    n = len(lengths)
    best = float("inf")
    for cuts in itertools.product((False, True), repeat=n - 1):
        bounds, start = [], 0
        for i, cut in enumerate(cuts, start=1):
            if cut:
                bounds.append((start, i))
                start = i
        bounds.append((start, n))
        if any(costs.padded_memory_bytes(b - a, lengths[b - 1]) > limit for a, b in bounds):
            continue
        best = min(best, partition_objective(lengths, bounds, costs, weight)[0])
    return best


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 512), min_size=1, max_size=9),
    slack=st.floats(1.0, 12.0),
    gpt=st.booleans(),
    weight=st.sampled_from([None, 0.0, 1.0, 7.5]),
    probes=st.sampled_from([1, 3, 48]),
)
def test_matches_brute_force(
    lengths: list[int], slack: float, gpt: bool, weight: float | None, probes: int
) -> None:
    costs = GPT2 if gpt else BERT4
    lengths = sorted(lengths)
    limit = costs.padded_memory_bytes(1, lengths[-1]) * slack
    w = float(costs.num_stages - 1) if weight is None else weight
    part = partition_sorted(lengths, costs, memory_limit_bytes=limit, bubble_weight=weight, max_probes=probes)
    expected = brute_force(lengths, costs, limit, w)
    assert part.objective_s == pytest.approx(expected, rel=1e-12)
    # the partition is real: contiguous, covering, within memory, with the stated objective
    assert part.bounds[0][0] == 0
    assert part.bounds[-1][1] == len(lengths)
    assert all(a < b for a, b in part.bounds)
    assert all(x[1] == y[0] for x, y in itertools.pairwise(part.bounds))
    assert all(costs.padded_memory_bytes(b - a, lengths[b - 1]) <= limit for a, b in part.bounds)
    assert partition_objective(lengths, part.bounds, costs, w)[0] == pytest.approx(
        part.objective_s, rel=1e-12
    )


def test_equal_lengths_fill_micro_batches_to_balance_the_bubble() -> None:
    lengths = [128] * 64
    limit = BERT4.padded_memory_bytes(8, 128)
    part = partition_sorted(lengths, BERT4, memory_limit_bytes=limit)
    assert all(b - a <= 8 for a, b in part.bounds)
    assert (
        part.objective_s <= partition_objective(lengths, [(i, i + 8) for i in range(0, 64, 8)], BERT4, 3)[0]
    )


def test_errors() -> None:
    with pytest.raises(InputError, match="empty"):
        partition_sorted([], BERT4, memory_limit_bytes=1e12)
    with pytest.raises(InputError, match="ascending"):
        partition_sorted([5, 3], BERT4, memory_limit_bytes=1e12)
    with pytest.raises(Infeasible, match="smaller than one sample of 500 tokens"):
        partition_sorted([10, 500], BERT4, memory_limit_bytes=BERT4.padded_memory_bytes(1, 499))


def test_plans_4096_samples() -> None:
    # its speed (< 1 s) is benchmarks/bench_dynamic.py's business
    from pipesim.planner.dynamic import dynamic_microbatches, generate_mix

    batch = generate_mix("flan-like", 4096, seed=0, max_len=512)
    plan = dynamic_microbatches(batch, BERT4, memory_limit_bytes=3 * 2**30)
    assert sorted(i for mb in plan.microbatches for i in mb.samples) == list(range(4096))
