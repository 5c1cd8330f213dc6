"""Replica classes of uneven stages, and the estimate's timelines per class."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.plan import split_samples
from pipesim.planner.estimate import CostModel
from pipesim.planner.latency import Flow, timeline_schedule
from pipesim.planner.replicas import overlaps, replica_classes
from pipesim.profiles import get_cluster, zoo_model
from tests.planner._layouts import layout_plan


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


def test_piece_keys_split_replicas_on_unlike_routes() -> None:
    shares = [split_samples(4, 4), split_samples(4, 4)]
    # pieces 0 -> 0, ..., 3 -> 3; replicas 2 and 3 send over a slower route
    assert replica_classes(shares, [["near", "near", "far", "far"]]) == [[0, 0, 1, 1], [0, 0, 1, 1]]
    assert replica_classes(shares, [["near"] * 4]) == [[0] * 4, [0] * 4]
    with pytest.raises(InputError, match="piece_keys"):
        replica_classes(shares, [["near"]])


def test_cost_model_classes_by_route_and_link_traffic() -> None:
    model = CostModel(zoo_model("gnmt16"), get_cluster("pcie-4x4-v100-10gbe"))
    # GPUs 0, 1 sit on the NIC's PCIe switch, 2, 3 behind the host bridge
    assert model.replica_classes(((0, 1, 2, 3), (4, 5, 6, 7)), 4) == [[0, 0, 1, 1], [0, 0, 1, 1]]
    # whole servers alike: GPU 0 of servers 0 and 1 send alike (renumbering servers)
    assert model.replica_classes(((0, 4), (8, 12)), 2) == [[0, 0], [0, 0]]


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
        [(0, 5, (0, 1, 2, 3)), (6, 11, (4, 5, 6, 7)), (12, 17, (8, 9, 10, 11)), (18, 23, (12, 13, 14, 15))],
        [(0, 11, (0, 4)), (12, 23, (8, 12))],
    ],
)
def test_classes_equal_one_timeline_per_replica(
    layout: list[tuple[int, int, tuple[int, ...]]],
) -> None:
    profile = zoo_model("vgg19")
    cluster = get_cluster("pcie-4x4-v100-10gbe")
    model = CostModel(profile, cluster)
    p = layout_plan(layout, global_batch_size=128, num_microbatches=8, schedule="1f1b")
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
    # differential: one timeline per replica gives what the classes of replicas alike give
    each = [list(range(len(devices))) for devices in placement]
    per_replica = model._replica_scheduled(p, placement, 16, each, ar, nic, True)
    assert per_replica == pytest.approx(est, rel=1e-9)
