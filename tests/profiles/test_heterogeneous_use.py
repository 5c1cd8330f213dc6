"""Heterogeneous and rail-fabric clusters as the simulator and the planner see them."""

from __future__ import annotations

import itertools

import pytest

from pipesim.errors import InputError
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import Placement, device_order, placement_grid, placement_unit, stage_start
from pipesim.planner.search import plan as plan_search
from pipesim.profiles.hardware.cluster import Cluster, get_cluster, with_overrides
from pipesim.profiles.hardware.cluster_config import cluster_from_config
from pipesim.simulator.engine import simulate
from pipesim.simulator.options import SimOptions
from tests.simulator.builders import equal_profile, one_layer_per_stage


def mixed(second_device: str = "V100-SXM2-16GB", gpus: tuple[int, int] = (1, 1)) -> Cluster:
    return cluster_from_config(
        {
            "intra": "pcie",
            "device": "A100-80GB",
            "nic": "IB-HDR",
            "group": [
                {"servers": 1, "gpus_per_server": gpus[0]},
                {"servers": 1, "gpus_per_server": gpus[1], "device": second_device},
            ],
        }
    )


def test_the_simulator_costs_each_device_by_its_own_type() -> None:
    cluster = mixed()
    profile = equal_profile(2)
    assert profile.dtype == "float32"
    factor = cluster.compute_time_factor(1, "float32")
    assert factor == pytest.approx(19.5 / 15.7)  # A100 vs V100 fp32 peak (equal efficiencies)
    assert cluster.device_speed_factors("float32") == {1: pytest.approx(15.7 / 19.5)}
    plan = one_layer_per_stage(2, 4)
    free = SimOptions(free_links=True)
    result = simulate(plan, profile, cluster, free)
    # the same as an all-A100 pair with device 1 slowed by the ratio
    same = with_overrides(cluster, {"group": [{"servers": 2, "gpus_per_server": 1}]})
    assert same.is_homogeneous
    reference = simulate(plan, profile, same, SimOptions(free_links=True, speed_factors={1: 1 / factor}))
    assert result.iteration_time_s == pytest.approx(reference.iteration_time_s, rel=1e-12)
    assert result.iteration_time_s > simulate(plan, profile, same, free).iteration_time_s
    # what-if speed factors multiply with the device types
    both = simulate(plan, profile, cluster, SimOptions(free_links=True, speed_factors={1: 0.5}))
    half = simulate(plan, profile, same, SimOptions(free_links=True, speed_factors={1: 0.5 / factor}))
    assert both.iteration_time_s == pytest.approx(half.iteration_time_s, rel=1e-12)


def test_each_device_has_its_own_memory_capacity() -> None:
    cluster = mixed()
    result = simulate(one_layer_per_stage(2, 4), equal_profile(2), cluster, SimOptions(free_links=True))
    capacity = {m.device: m.memory_capacity_bytes for m in result.devices}
    assert capacity == {0: 80 * 2**30, 1: 16 * 2**30}


def test_uneven_servers_of_one_device_simulate_at_one_speed() -> None:
    cluster = mixed("A100-80GB", gpus=(1, 2))
    assert cluster.device_speed_factors("float32") == {}
    profile = equal_profile(2)
    result = simulate(one_layer_per_stage(2, 4), profile, cluster, SimOptions(free_links=True))
    assert result.iteration_time_s > 0


def test_the_planner_refuses_mixed_device_types() -> None:
    cluster = mixed()
    with pytest.raises(InputError, match="the planner needs one device type"):
        CostModel(equal_profile(4), cluster)
    with pytest.raises(InputError, match=r"cluster='custom': the planner needs one device type"):
        plan_search(equal_profile(4), cluster, global_batch_size=8)


def uneven() -> Cluster:
    """Issue 18: two V100 servers of 8 and 12 GPUs."""
    return cluster_from_config(
        {
            "intra": "nvswitch",
            "device": "V100-SXM2-32GB",
            "nic": "IB-EDR",
            "nics_per_server": 4,
            "group": [{"servers": 1, "gpus_per_server": 8}, {"servers": 1, "gpus_per_server": 12}],
        }
    )


def test_placement_on_servers_of_different_sizes() -> None:
    cluster = uneven()
    assert placement_grid(cluster) == (0, 12, 20)  # boundaries counted from the end of the order
    assert placement_grid(get_cluster("dapple-2x8-v100")) == 8
    assert placement_unit(cluster) == 4
    scatter = device_order(cluster, Placement.SCATTER_FIRST)
    assert scatter[:4] == (0, 8, 1, 9)
    assert scatter[16:] == (16, 17, 18, 19)  # GPUs 8..11 exist only on the second server
    assert sorted(scatter) == list(range(20))
    assert device_order(cluster, Placement.FRESH_FIRST) == tuple(range(20))
    assert [stage_start(q, Placement.FRESH_FIRST, (0, 12, 20)) for q in (0, 1, 12, 13, 20)] == [
        0,
        12,
        12,
        20,
        20,
    ]
    assert stage_start(13, Placement.APPEND_FIRST, (0, 12, 20)) == 13


def test_dapple_plans_servers_of_8_and_12_gpus() -> None:
    cluster = uneven()
    profile = equal_profile(8)
    for policy in Placement:
        plans = plan_search(
            profile, cluster, global_batch_size=48, planner="dapple", placements=[policy], top=3
        )
        assert plans
        for found in plans:
            devices = [d for stage in found.stages for d in stage.devices or ()]
            assert len(devices) == len(set(devices))
            assert set(devices) <= set(range(20))
            if policy is Placement.FRESH_FIRST:  # no server is shared by two stages
                servers = [{cluster.server_of(d) for d in stage.devices or ()} for stage in found.stages]
                for a, b in itertools.combinations(servers, 2):
                    assert not a & b
    best = plan_search(profile, cluster, global_batch_size=48, planner="dapple", top=1)[0]
    assert best.estimate is not None
    result = simulate(best, profile, cluster)
    assert result.iteration_time_s > 0
    with pytest.raises(InputError, match="servers of different GPU counts"):
        plan_search(profile, cluster, global_batch_size=48, planner="pipedream")


def test_the_planner_on_a_rail_fabric_keeps_server_identity() -> None:
    # Two SUs of one server each, 2:1 oversubscribed: a transfer between the SUs is slower than
    # one inside an SU; the estimate's cache must not renumber servers into each other.
    base = get_cluster("dgx-a100-x2")
    rail = with_overrides(
        base, {"servers": 3, "fabric": "rail", "servers_per_leaf": 2, "oversubscription": 4}
    )
    assert not rail.servers_interchangeable
    assert base.servers_interchangeable
    model = CostModel(equal_profile(4), rail)
    near = model.transfer_lines((0, 1, 2, 3, 4, 5, 6, 7), (8, 9, 10, 11, 12, 13, 14, 15))
    far = model.transfer_lines((0, 1, 2, 3, 4, 5, 6, 7), (16, 17, 18, 19, 20, 21, 22, 23))
    assert near != far
