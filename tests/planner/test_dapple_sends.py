"""The DAPPLE search's uneven transfer lines (`planner/dapple_sends.py`) against the estimate's own
pieces, and `prune_lines` against its definition."""

from __future__ import annotations

import math
import random

import pytest

from pipesim.plan import resplit, split_samples
from pipesim.planner.cost_tables import canonical_groups
from pipesim.planner.dapple_sends import transfer_classes, uneven_lines
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import placement_unit
from pipesim.profiles import get_cluster, zoo_model
from pipesim.profiles.costmodels.lines import Lines, eval_lines, prune_lines


def _reference(
    model: CostModel, src: tuple[int, ...], dst: tuple[int, ...], samples: int
) -> tuple[Lines, Lines]:
    """Every piece's route facts, link by link (`CostModel._fact_lines`), on the renumbered devices."""
    cluster = model.cluster
    if cluster.servers_interchangeable:
        src, dst = canonical_groups(src, dst, g=placement_unit(cluster))
    fwd, bwd = [], []
    for i, k, n in resplit(split_samples(samples, len(src)), split_samples(samples, len(dst))):
        if src[i] != dst[k]:
            fwd.append((model._facts(cluster.route(src[i], dst[k])), float(n)))
            bwd.append((model._facts(cluster.route(dst[k], src[i])), float(n)))
    return model._fact_lines(fwd), model._fact_lines(bwd)


@pytest.mark.parametrize("cluster_name", ["dapple-2x8-v100", "dgx-h100-x4", "dgx-a100-1024"])
def test_uneven_lines_equal_the_lines_of_every_piece(cluster_name: str) -> None:
    # the same lines, bit for bit, for random replica sets (overlapping ones included) and
    # sample counts that split them unevenly; and the time of the micro-batch's bytes is the
    # estimate's transfer_s of them (which scales each piece's bytes, so up to rounding)
    cluster = get_cluster(cluster_name)
    model = CostModel(zoo_model("bert48"), cluster)
    rng = random.Random(cluster.num_devices)
    devices = min(cluster.num_devices, 64)
    for _ in range(300):
        src = tuple(rng.sample(range(devices), rng.randint(1, 9)))
        dst = tuple(rng.sample(range(devices), rng.randint(1, 9)))
        samples = rng.randint(max(len(src), len(dst)), 80)
        got = uneven_lines(model, transfer_classes(model, src, dst), samples)
        assert got == _reference(model, src, dst, samples)
        bytes_per_sample = rng.uniform(1e3, 1e8)
        want = model.transfer_s(src, dst, samples, bytes_per_sample)
        assert eval_lines(got[0], bytes_per_sample) == pytest.approx(want, rel=1e-12)


def test_prune_lines_keeps_the_maximum_and_only_needed_lines() -> None:
    # the maximum over the kept lines is the maximum over all at every x >= 0 tried; every kept
    # line is the only maximum somewhere (at its own breakpoints' midpoint); steepest first
    rng = random.Random(7)
    for _ in range(3000):
        pool = [0.0, -0.0, 1.0, 2.0, 0.5]
        lines = [
            (
                rng.choice(pool) if rng.random() < 0.4 else rng.uniform(0, 3),
                rng.choice(pool) if rng.random() < 0.4 else rng.uniform(0, 3),
            )
            for _ in range(rng.randint(0, 7))
        ]
        kept = prune_lines(lines)
        assert set(kept) <= set(lines)
        for x in (0.0, 0.1, 0.5, 1.0, 3.0, 100.0):
            assert eval_lines(kept, x) == eval_lines(tuple(lines), x)
        assert [b for _, b in kept] == sorted((b for _, b in kept), reverse=True)
        assert len({b for _, b in kept}) == len(kept)
        for j, (a, b) in enumerate(kept):  # intercepts rise as slopes fall: each one is needed
            if j:
                assert a > kept[j - 1][0]
                assert b < kept[j - 1][1]
        if lines:
            assert max(a for a, _ in kept) == max(a for a, _ in lines)
            assert kept[0][1] == max(b for _, b in lines)
            assert not math.isnan(eval_lines(kept, 1.0))
