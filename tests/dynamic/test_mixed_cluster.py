"""Dynamic micro-batching on a heterogeneous cluster: each stage sees its own GPU's memory."""

from __future__ import annotations

import pytest

from pipesim.dynamic import default_memory_limit
from pipesim.planner.dynamic import PipelineCosts
from pipesim.profiles.costmodels.memory import static_memory_bytes
from pipesim.profiles.costmodels.sequence import seq_cost_model
from pipesim.profiles.hardware.cluster_file import cluster_from_toml

MIXED = """\
name = "a100-then-v100"
intra = "nvswitch"
nic = "IB-HDR"
nics_per_server = 2

[[group]]
servers = 1
device = "A100-80GB"
gpus_per_server = 2

[[group]]
servers = 1
device = "V100"
gpus_per_server = 2
"""


def test_memory_limit_uses_the_tightest_stage_device() -> None:
    cluster = cluster_from_toml(MIXED)
    costs = PipelineCosts.build(seq_cost_model("bert48"), num_stages=4)
    profile = costs.model.profile()
    static = [static_memory_bytes(profile, range(a, b + 1), "adam") for a, b in costs.ranges]
    capacity = [float(cluster.device_spec(s).memory_bytes) for s in range(4)]
    assert capacity[0] > capacity[3]  # stages 2 and 3 run on the smaller V100s
    room = min(c - s for c, s in zip(capacity, static, strict=True))
    assert default_memory_limit(costs, cluster) == pytest.approx(room / 4, rel=1e-12)
    # the first group's device alone would have allowed more
    assert room < capacity[0] - max(static)


def test_pase_strategy_computes_each_device_at_its_own_rate() -> None:
    from pipesim.strategy import lower_strategy, plan_strategy, slowest_device

    cluster = cluster_from_toml(MIXED)
    plan = plan_strategy("alexnet", 4, 128)
    devices = [cluster.device_spec(d) for d in range(4)]
    steps = lower_strategy(plan.graph, plan.result.choice, devices)
    rate = [spec.achievable_flop_per_s("float32") for spec in devices]
    assert rate[3] < rate[0]
    on_v100 = 0
    for step in steps:
        flops = {d: t * rate[d] for d, t in step.compute_s.items()}  # the same work everywhere
        assert all(f == pytest.approx(flops[0], rel=1e-12) for f in flops.values())
        on_v100 += any(d >= 2 and t > 0 for d, t in step.compute_s.items())
    assert on_v100 > 0
    assert slowest_device(cluster, 4) is cluster.device_spec(3)
    assert slowest_device(cluster, 2) is cluster.device_spec(0)
