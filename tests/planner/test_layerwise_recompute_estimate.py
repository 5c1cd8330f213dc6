"""Full recomputation of shaped blocks, one at a time (memory.layerwise_replays), in the planner:
the estimate's memory is the simulator's, and the DAPPLE search's stage rows count the bytes as
stage_activations does (the received input once, as the first block's checkpoint)."""

from __future__ import annotations

import itertools

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.dapple import dapple_search
from pipesim.planner.estimate import CostModel
from pipesim.profiles.costmodels.memory import stage_activations
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, simulate

DGX1 = get_cluster("dgx1-v100")
FREE = SimOptions(free_links=True)
GPT = "gpt:layers=8,hidden=256,heads=4,seq=128,vocab=1000"


def _plan(schedule: str, cuts: tuple[int, ...], m: int) -> Plan:
    bounds = [0, *cuts, 10]
    stages = tuple(StagePlan(first_layer=a, last_layer=b - 1) for a, b in itertools.pairwise(bounds))
    return Plan(stages=stages, global_batch_size=2 * m, num_microbatches=m, schedule=schedule,
                recompute="full")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "dapple", "zb-h1", "zb-h2"])
@pytest.mark.parametrize(("cuts", "m"), [((3, 7), 6), ((2, 4, 6), 4), ((1, 5), 8)])
def test_estimated_peak_is_the_simulated_one(schedule: str, cuts: tuple[int, ...], m: int) -> None:
    profile = zoo_model(GPT, dtype="fp16", batch_size=2)
    plan = _plan(schedule, cuts, m)
    estimate = CostModel(profile, DGX1, recompute="full").estimate(plan)
    result = simulate(plan, profile, DGX1, FREE)
    assert [d.peak_memory_bytes for d in result.devices] == pytest.approx(
        list(estimate.device_peak_memory_bytes.values()), rel=1e-12
    )


def test_the_dapple_search_rows_count_the_bytes_of_stage_activations() -> None:
    """Every stage row the DAPPLE search built (planner/dapple_dp.py) holds the stash and working
    set of stage_activations for its layers and share: the received input once where the stage
    starts with a block (that block's checkpoint), one block re-materialised at a time."""
    profile = zoo_model("bert48")
    cluster = get_cluster("dapple-2x8-v100")
    model = CostModel(profile, cluster, recompute="full")
    assert dapple_search(model, 256, microbatch_counts=(8,), top=1)
    n, span = profile.num_layers, cluster.num_devices + 1
    checked = starting_with_a_block = 0
    for key, floors in model.memo.items():
        if not (isinstance(key, tuple) and key[:1] == ("dapple-floor",)):
            continue
        for (b, _, _), found in floors.items():  # type: ignore[attr-defined]
            for rows in found.rows.values():
                for index, row in list(rows.items())[::5]:  # every fifth: a second of checks
                    rest, _ = divmod(index, n)
                    rest, r = divmod(rest, span)
                    i = rest // span  # the stage is layers row[0] .. i - 1 on r replicas
                    first, stash, work = row[0], row[3], row[4]
                    acts = stage_activations(profile, first, i - 1, -(-b // r), "full")
                    assert stash == pytest.approx(acts.stash_bytes, rel=1e-12)
                    assert work == pytest.approx(acts.work_bytes, rel=1e-12)
                    checked += 1
                    starting_with_a_block += first > 0 and profile.layers[first].shape is not None
    assert checked > 100
    assert starting_with_a_block > 100
