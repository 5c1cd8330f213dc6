"""Replicas laid out alike share one TP costing (simulator/tp_lowering.py: TpLowering._layout):
the costs equal each replica's own, and groups laid out differently (straddling two servers)
keep theirs."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator.tp_lowering import TpLowering

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=50257"
SIX = {"servers": 4, "gpus_per_server": 6, "intra": "nvswitch", "intra_link": "NVLink2"}


def test_replicas_share_costs_only_where_their_groups_are_laid_out_alike() -> None:
    """Servers of 6 GPUs, TP 4: groups 0-3, 8-11, 12-15, 20-23 sit in one server, 4-7 and
    16-19 straddle two (their rings cross the NICs)."""
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16", overrides=SIX)
    stage = StagePlan(first_layer=0, last_layer=profile.num_layers - 1, replicas=6, tensor_parallel=4,
                      sequence_parallel=True)
    plan = Plan(stages=(stage,), global_batch_size=12, num_microbatches=2, schedule="1f1b")
    shared = TpLowering(plan, profile, cluster, free_links=False)
    groups = shared.groups[0]
    assert [g[0] for g in groups] == [0, 4, 8, 12, 16, 20]
    costs = [shared.cost(0, 1, r) for r in range(6)]
    for r in range(6):  # each replica costed alone, by a pass that has seen no other
        alone = TpLowering(plan, profile, cluster, free_links=False)
        assert alone.cost(0, 1, r) == costs[r]
        for op in ("F", "B", "I"):
            assert alone.exposed_comm_s(op, 0, 1, r) == shared.exposed_comm_s(op, 0, 1, r)
    assert costs[0] == costs[2] == costs[3] == costs[5]
    assert costs[1] == costs[4]
    # the straddling ring's backward collectives: slower, by its NIC hops' latency (31.8 against
    # 10.2 us a call; at 24 GB/s an HDR NIC is no slower than one NVLink2's 22.5)
    assert costs[1][3] > costs[0][3] * 1.1
    assert shared.curves(groups[0]) is shared.curves(groups[5])
    assert shared.curves(groups[1]) is not shared.curves(groups[0])
    assert shared.curves(groups[1]).time_s(1e6) == pytest.approx(
        TpLowering(plan, profile, cluster, free_links=False).curves(groups[4]).time_s(1e6), rel=0)
