"""Replica classes of uneven stages, and the estimate's timelines per class."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan, split_samples
from pipesim.planner.costs import CostModel
from pipesim.planner.latency import Flow, timeline_schedule
from pipesim.planner.replicas import overlaps, replica_classes
from pipesim.profiles import get_cluster, zoo_model


def _classes(samples: int, *replicas: int) -> list[list[int]]:
    return replica_classes([split_samples(samples, r) for r in replicas])


def test_overlaps_merge_two_splits() -> None:
    assert overlaps(split_samples(16, 3), split_samples(16, 2)) == [
        (0, 0, 6),
        (1, 0, 2),
        (1, 1, 3),
        (2, 1, 5),
    ]
    assert overlaps(((0, 4),), ((0, 1), (1, 4))) == [(0, 0, 1), (0, 1, 3)]


def test_classes_of_pipedreams_vgg19_plan() -> None:
    # 16 samples: stage 0 shares 2,2,2,2,1,...; stage 1 shares 6,5,5. Replicas 0-2 feed stage 1's
    # replica 0 only, replica 3 (2 samples) feeds replica 1 with 4-6 (1 sample), 7-11 feed replica 2
    assert _classes(16, 12, 3, 1) == [[0, 0, 0, 1, 2, 2, 2, 3, 3, 3, 3, 3], [0, 1, 2], [0]]
    # stage 1's equal shares split by the class of their sources
    assert _classes(16, 12, 4) == [[0] * 4 + [1] * 8, [0, 0, 1, 1]]


@pytest.mark.parametrize("replicas", [(1,), (4, 2), (2, 8, 4, 1), (16, 16)])
def test_equal_shares_are_one_class_per_stage(replicas: tuple[int, ...]) -> None:
    assert _classes(16, *replicas) == [[0] * r for r in replicas]


def test_an_allreduce_shares_its_nic_with_a_gradient() -> None:
    # two stages, one micro-batch; stage 1's all-reduce (10 alone) starts at its backward's end
    # (3) while the gradient to stage 0 (10 alone) crosses the same NIC: both at half speed
    orders = [[("F", 0), ("B", 0)], [("F", 0), ("B", 0)]]
    flows = [Flow("F", 0, 1, 0.0), Flow("B", 1, 0, 10.0, (("nic", 10.0),))]
    tails = [([1], 10.0, (("nic", 10.0),))]
    makespan, last_b = timeline_schedule(orders, [1.0, 1.0], [1.0, 1.0], flows, tails=tails)
    assert last_b == [pytest.approx(24.0), pytest.approx(3.0)]  # gradient arrives at 3 + 20
    assert makespan == pytest.approx(24.0)
    alone, _ = timeline_schedule(orders, [1.0, 1.0], [1.0, 1.0], flows, shared_links=False, tails=tails)
    assert alone == pytest.approx(14.0)  # 3 + 10 + stage 0's backward; all-reduce ends at 13


@pytest.mark.parametrize(
    "layout",
    [
        [(0, 9, (0, 1, 2, 3)), (10, 23, (4, 5))],
        [(0, 6, (0, 8, 1, 9)), (7, 15, (2, 10)), (16, 23, (15,))],
    ],
)
def test_one_class_per_stage_equals_the_stage_timelines(
    layout: list[tuple[int, int, tuple[int, ...]]],
) -> None:
    # differential: the per-class path on an even plan is the per-stage path
    profile = zoo_model("vgg19")
    cluster = get_cluster("pcie-4x4-v100-10gbe")
    model = CostModel(profile, cluster)
    p = Plan(
        stages=tuple(
            StagePlan(first_layer=a, last_layer=b, replicas=len(d), devices=d) for a, b, d in layout
        ),
        global_batch_size=128,
        num_microbatches=8,
        schedule="1f1b",
    )
    est = model.estimate(p).iteration_time_s
    placement = p.placement(cluster.num_devices)
    ar = []
    nic = []
    for s, stage in enumerate(p.stages):
        if s:
            ar.append(0.0)
        ar.append(model.allreduce_s(placement[s], model.parameter_bytes(stage.first_layer, stage.last_layer)))
        devices = placement[s]
        nic.append(model.allreduce_network_links(devices) if len(devices) > 1 else frozenset())
    by_class = model._replica_scheduled(p, placement, 16, ar, nic, True)
    assert by_class == pytest.approx(est, rel=1e-9)
