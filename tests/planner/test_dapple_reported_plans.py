"""pipesim's DAPPLE plan against the plan shapes DAPPLE runs on 2 x 8 V100 (issue 18).

The shapes are those of DAPPLE's own runtime scripts (github.com/AlibabaPAI/DAPPLE at fd75dcf):
``vgg19/run_15_1_pipeline.sh`` runs VGG-19 as two stages, 15 replicas of the convolutional
features and 1 of the classifier; ``bert/run.sh`` and ``amoeba_net/run.sh`` run a two-stage
pipeline across the two servers (``device_num=2``, ``cross_node=1``), i.e. 8:8 with one stage per
server; XLNet-36 is given the same shape. (The paper's own table of planner results, Fan et al.,
PPoPP'21, Sec. 6, could not be re-read in the session that wrote this test: the 8:8 shapes and the
global batch sizes, from the range ``experiments/planner_speedup.py`` sweeps, are to be checked
against it.) Every shape is given its best cut (balanced by time, or VGG-19's features |
classifier) and its best micro-batch count (simulated, from :data:`MICROBATCHES`, which bounds
pipesim's search too); pipesim's plan (the DAPPLE planner with its defaults, i.e. DAPPLE's full
replica space, the only one that holds 15 replicas; its shortlist reranked by simulation) must
simulate at least as fast, on the zoo's V100 profiles and ``dapple-2x8-v100``.

Measured 2026-11-24 09:07 UTC with the full space as the default (simulated iteration, pipesim vs
DAPPLE's shape): VGG-19 gbs 1024 0.3582 s vs 0.3582 s (pipesim finds 15:1 itself, 21 | 3 layers,
2 micro-batches; the structured replica space, the default before, cannot express 15 replicas
and its best, pure data parallelism, simulated at 0.544 s, 1.52x slower); BERT-48 gbs 64
0.7784 s vs 0.9018 s; XLNet-36 gbs 128 1.8597 s vs 2.0553 s; AmoebaNet-36 gbs 128 0.9896 s vs
1.2655 s.
"""

from __future__ import annotations

import logging

import pytest

from pipesim.api import make_plan
from pipesim.errors import Infeasible
from pipesim.planner import plan
from pipesim.profiles.inputs import resolve_inputs
from pipesim.rerank import simulated_rerank
from pipesim.simulator import SimOptions, simulate

log = logging.getLogger(__name__)

CLUSTER = "dapple-2x8-v100"
OPTIONS = SimOptions(record_trace=False)
MICROBATCHES = (1, 2, 4, 8, 16)
"""Micro-batch counts both sides may use (DAPPLE's scripts run 8 and 12)."""


def _best_shape_s(model: str, gbs: int, replicas: tuple[int, int]) -> float:
    """Simulated iteration time of the fastest plan of DAPPLE's shape (over micro-batch counts)."""
    profile, cluster = resolve_inputs(model, CLUSTER)
    split = None
    if replicas == (15, 1):  # VGG-19: features | classifier, as DAPPLE's script cuts it
        fc = [lay.name for lay in profile.layers].index("fc1")
        split = [fc, profile.num_layers - fc]
    best = float("inf")
    for m in MICROBATCHES:
        if gbs % m or gbs // m < max(replicas):
            continue
        shape = make_plan(
            profile,
            global_batch_size=gbs,
            num_microbatches=m,
            stages=None if split else 2,
            split=split,
            replicas=list(replicas),
        )
        try:
            result = simulate(shape, profile, cluster, OPTIONS)
        except Infeasible:
            continue
        if result.fits:
            best = min(best, result.iteration_time_s)
    return best


@pytest.mark.parametrize(
    ("model", "gbs", "replicas"),
    [
        ("vgg19", 1024, (15, 1)),
        ("bert48", 64, (8, 8)),
        ("xlnet36", 128, (8, 8)),
        ("amoebanet36", 128, (8, 8)),
    ],
)
def test_pipesim_plan_is_at_least_as_fast_as_dapples_shape(
    model: str, gbs: int, replicas: tuple[int, int]
) -> None:
    # the default (full) replica space holds 8:8 and the 15:1 plan
    dapple_s = _best_shape_s(model, gbs, replicas)
    mine = plan(
        model,
        CLUSTER,
        gbs,
        top=1,
        microbatch_counts=[m for m in MICROBATCHES if gbs % m == 0],
        rerank=simulated_rerank(model, CLUSTER),
    )[0]
    profile, cluster = resolve_inputs(model, CLUSTER)
    result = simulate(mine, profile, cluster, OPTIONS)
    assert result.fits
    assert result.iteration_time_s <= dapple_s * (1 + 1e-9), (
        model,
        [s.replicas for s in mine.stages],
        mine.num_microbatches,
        result.iteration_time_s,
        dapple_s,
    )
    log.info(
        "%s gbs %d: pipesim %.4f s, DAPPLE's %s %.4f s",
        model,
        gbs,
        result.iteration_time_s,
        replicas,
        dapple_s,
    )
