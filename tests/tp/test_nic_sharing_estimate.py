"""Other traffic on a cross-server TP ring's NICs in the 3D estimate (planner/nic_sharing.py,
planner/zero_ops.py): ZeRO's per-unit gathers and reduce-scatters cross the NIC that a
straddling TP ring has its bottleneck hop on, and the simulator shares that link max-min fairly
between them (simulator/network.py); the estimate now charges the op's TP block the DP
transfers still in flight when its bytes start.

Tolerance against the simulation: 6% on these plans (they were 6.6% to 9.5% low without it; +0.6%
to +4.1% since the TP collectives pay NCCL's hand-off by link class and the block's delay adds to
the gated ZeRO-3 op, planner/zero_ops.py).
What remains: the estimate's serial, work-conserving account of the DP transfers (the simulator
runs gathers and reduce-scatters on their own streams, sharing the link among themselves and with
the block's other hops), and DeepSpeed's 2021 runtime's per-tensor calls (its issue time is
charged per unit, not per transfer; both executors cost it on the stage's compute under TP).
Where nothing shares the ring's links the estimate is unchanged: one-rank plans exact
(tests/tp/test_cross_server_estimate.py)."""

from __future__ import annotations

import pytest

import pipesim.planner.three_d as three_d
from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import MegatronPins, estimate_3d, megatron_plans
from pipesim.planner.nic_sharing import (
    RingSharers,
    concurrent_delay_s,
    dp_left_s,
    ring_sharers,
    shared_op_s,
    shares_ring_link,
    zero_transfers,
)
from pipesim.planner.three_d_tail import cooldown_delays_s
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, simulate

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=50257"
TOLERANCE = 0.06
"""Estimate vs simulation where ZeRO's collectives share a TP ring's NIC (module docstring)."""


def _inputs(servers: int) -> tuple[ModelProfile, Cluster]:
    return resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16", overrides={"servers": servers})  # 8 A100 each


def _stage(first: int, last: int, **kw: object) -> StagePlan:
    return StagePlan(first_layer=first, last_layer=last, **kw)  # type: ignore[arg-type]


def test_a_straddling_ring_shares_its_nic_with_the_replicas_ring() -> None:
    _, cluster = _inputs(4)
    # TP 4 at 6-9: its hop 9 -> 6 enters GPU 6 by its NIC, as the DP ring's 22 -> 6 does
    assert shares_ring_link(cluster, [(6, 7, 8, 9), (22, 23, 24, 25)], (6, 22))
    # TP 16 over servers 0 and 1: hop 15 -> 0 and the DP ring 16 -> 0 (replica 2 at 16-31)
    assert shares_ring_link(cluster, [tuple(range(16)), tuple(range(16, 32))], (0, 16))
    # groups inside a server: their bottleneck is NVSwitch, which no DP ring crosses
    assert not shares_ring_link(cluster, [(0, 1, 2, 3), (16, 17, 18, 19)], (0, 16))
    assert not shares_ring_link(cluster, [(6, 7, 8, 9)], (6,))


def test_the_shared_block_closed_forms() -> None:
    # no DP left: the block alone; DP longer than the block's bytes: delayed by all of them
    assert shared_op_s(1.0, 2.0, 1.5, []) == 3.0
    assert shared_op_s(1.0, 2.0, 1.5, [(0.5, 5.0)]) == 3.0 + 1.5
    # DP that ends during the block's latency (its first 0.5 s) does not delay it
    assert shared_op_s(1.0, 2.0, 1.5, [(0.0, 1.4)]) == 3.0
    # 0.25 s left when the bytes start at 1.5 s
    assert shared_op_s(1.0, 2.0, 1.5, [(0.0, 1.75)]) == 3.25
    # transfers carried one after another: the second waits for the first
    assert dp_left_s([(0.0, 1.0), (0.5, 1.0)], 1.5) == 0.5
    assert dp_left_s([(0.0, 1.0), (2.0, 1.0)], 1.5) == 1.0
    # a backward runs units 2, 1, 0: unit 1's gather at unit 2's start, unit 2's scatter at its end
    assert zero_transfers([1.0, 2.0, 3.0], [0.1, 0.2, 0.3], [0.4, 0.5, 0.6], True, 0.7) == [
        (0.0, 0.2), (3.0, 0.6), (3.0, 0.1), (5.0, 0.5), (6.0, 0.4), (6.0, 0.7)]


STRADDLE = {"tensor_parallel": 4, "replicas": 2, "devices": (6, 22)}
CASES = [
    pytest.param(4, [_stage(0, 5, **STRADDLE, sharding="zero3")], 8, 4, {}, id="zero3"),
    pytest.param(4, [_stage(0, 5, **STRADDLE, sharding="zero2")], 8, 4, {}, id="zero2"),
    pytest.param(4, [_stage(0, 5, **STRADDLE, sharding="zero3", sequence_parallel=True)], 8, 4, {},
                 id="zero3-sp"),
    pytest.param(4, [_stage(0, 5, **STRADDLE, sharding="zero3")], 8, 4, {"zero3_runtime": "deepspeed-2021"},
                 id="zero3-deepspeed"),
    pytest.param(4, [_stage(0, 5, **STRADDLE, sharding="zero3")], 16, 8, {}, id="zero3-m8"),
    pytest.param(4, [_stage(0, 5, tensor_parallel=16, replicas=2, sharding="zero3")], 8, 4, {},
                 id="tp16-zero3"),
    pytest.param(8, [_stage(0, 2, tensor_parallel=16, replicas=2, sharding="zero3"),
                     _stage(3, 5, tensor_parallel=16, replicas=2, sharding="zero3")], 16, 4, {},
                 id="pipeline"),
]


@pytest.mark.parametrize(("servers", "stages", "gbs", "m", "kw"), CASES)
def test_zero_traffic_on_a_tp_rings_nic_within_tolerance(
    servers: int, stages: list[StagePlan], gbs: int, m: int, kw: dict[str, object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile, cluster = _inputs(servers)
    plan = Plan(stages=tuple(stages), global_batch_size=gbs, num_microbatches=m, schedule="1f1b",
                **kw)  # type: ignore[arg-type]
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=TOLERANCE)
    monkeypatch.setattr(three_d, "shares_ring_link", lambda *args: False)  # the ring seen alone
    alone = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est >= alone
    assert abs(est / sim - 1) <= abs(alone / sim - 1) + 0.01  # no worse (the TP-16 rings: +1.3%)


def test_straddling_zero3_was_low_and_is_now_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """The straddling ZeRO-3 plan of docs/parallelism.md's limit row: 8.0% low before (main
    6c579c8), 4.2% low with the ring seen alone (the TP block now at the op's end, where the next
    forward's first gather hides behind it), 2.0% low with the shared NIC charged, +1.3% since the
    block's delay adds to the gated ZeRO-3 op and the TP collectives pay NCCL's hand-off by link
    class (branch h-tpnet)."""
    profile, cluster = _inputs(4)
    plan = Plan(stages=(_stage(0, 5, **STRADDLE, sharding="zero3"),), global_batch_size=8,
                num_microbatches=4, schedule="1f1b")
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=0.025)
    monkeypatch.setattr(three_d, "shares_ring_link", lambda *args: False)
    alone = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert alone / sim < 0.97
    assert est > alone


# ------------------------------------------------------------------------------------------------
# Other ranks' traffic: TP rings of two pipeline ranks on one NIC, later ranks' gradient collectives

RANKS_TOLERANCE = 0.06
"""Estimate vs simulation where two pipeline ranks' straddling TP rings meet on a server's one
NIC (dapple-2x8-v100, pcie-4x4-v100-10gbe): -2.5% to +5.6% on these plans since the fp32 loss's
kernels were costed one by one (roofline.LayerCost.cross_entropy, branch h-h100c: the last
stage's head, 50,257-wide logits, grew; every plan's ratio rose 2.6-4.3 points, the SP plan's to
+5.6%, not traced: the tolerance was 0.05); -3.3% to +2.7% since every TP rank's
pipeline send runs on the network and the estimate charges the sends on a straddling ring's NICs
(tests/tp/test_tp_sends.py; -2.4% to +3.5% with the V100 fp16 GEMM share at 0.5, -4.7% to +2.7%
before; the fluid account charges every one of the
m - 1 steady cycles; the simulation's first and last are partly alone);
they were 25% to 32% low with each ring seen alone. +0.4% to +4.6% before every TP rank's tied
pair and data-parallel ring were on the network (tests/tp/test_dp_rings.py): the simulation grew
more than the estimate, whose tied pairs are charged at the fair share of their links alone."""


def _ranks_plan(t: int, leads: list[int], layers: list[tuple[int, int]], m: int, d: int = 1,
                step: int = 16, **kw: object) -> Plan:
    stages = tuple(_stage(a, b, tensor_parallel=t, replicas=d, devices=tuple(x + k * step for k in range(d)),
                          **kw) for x, (a, b) in zip(leads, layers, strict=True))
    return Plan(stages=stages, global_batch_size=2 * d * m, num_microbatches=m, schedule="1f1b")


TWO = [(0, 2), (3, 5)]
THREE = [(0, 1), (2, 3), (4, 5)]
RANK_CASES = [
    # TP 4 at 6-9 and 14-17 on servers of one 25GbE NIC: hops 9 -> 6 and 15 -> 16 both leave server 1
    pytest.param("dapple-2x8-v100", 4, _ranks_plan(4, [6, 14], TWO, 4), id="tp4-p2-m4"),
    pytest.param("dapple-2x8-v100", 4, _ranks_plan(4, [6, 14], TWO, 8), id="tp4-p2-m8"),
    pytest.param("dapple-2x8-v100", 4, _ranks_plan(4, [6, 14, 22], THREE, 8), id="tp4-p3-m8"),
    pytest.param("dapple-2x8-v100", 4, _ranks_plan(4, [6, 14], TWO, 4, sequence_parallel=True),
                 id="tp4-p2-sp"),
    # two replicas: rank 1's all-reduce (14 <-> 30) crosses server 1's NIC during rank 0's last backward
    pytest.param("dapple-2x8-v100", 5, _ranks_plan(4, [6, 14], TWO, 4, d=2), id="tp4-p2-d2"),
    pytest.param("dapple-2x8-v100", 5, _ranks_plan(4, [6, 14], TWO, 4, d=2, sharding="distributed"),
                 id="tp4-p2-d2-distributed"),
    # TP 2 across servers of 4 V100 on PCIe and one 10GbE NIC
    pytest.param("pcie-4x4-v100-10gbe", 4, _ranks_plan(2, [3, 7], TWO, 4), id="pcie-tp2-p2"),
]


@pytest.mark.parametrize(("cluster_name", "servers", "plan"), RANK_CASES)
def test_other_ranks_rings_on_a_tp_nic_within_tolerance(
    cluster_name: str, servers: int, plan: Plan, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile, cluster = resolve_inputs(GPT, cluster_name, dtype="fp16", overrides={"servers": servers})
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=RANKS_TOLERANCE)
    monkeypatch.setattr(three_d, "ring_sharers", lambda *args: None)  # every ring seen alone
    alone = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert alone / sim < 0.9


def test_ring_sharers_on_servers_of_one_nic() -> None:
    _, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides={"servers": 5})
    # ranks at 6-9 and 14-17: each ring's NIC hops leave server 1 (9 -> 6 and 15 -> 16) and
    # enter it (7 -> 8 and 17 -> 14); their gradient rings 6 <-> 22 and 14 <-> 30
    got = ring_sharers(cluster, [[(6, 7, 8, 9), (22, 23, 24, 25)], [(14, 15, 16, 17), (30, 31, 32, 33)]],
                       [(6, 22), (14, 30)])
    # every TP rank's gradient ring: 6 -> 22 and 7 -> 23 leave server 0 by its NIC, 8 -> 24 and
    # 9 -> 25 server 1 (rank 0's bottleneck hops 7 -> 8 and 9 -> 6 leave them too); 14 -> 30 and
    # 15 -> 31 leave server 1: two on each
    assert got == RingSharers(tp=(((1,),), ((0,),)), dp=((1,), (0,)), own=(1, 1), own_dp=(2, 2))
    # rings inside their servers (0-3, 8-11): NVLink bottlenecks that nothing else crosses
    inside = ring_sharers(cluster, [[(0, 1, 2, 3)], [(8, 9, 10, 11)]], [(0,), (8,)])
    assert inside == RingSharers(tp=((), ()), dp=((), ()), own=(1, 1), own_dp=(0, 0))
    # rank 1's gradient sends to rank 0 (14 -> 6 and 15 -> 7 out of server 1's NIC, 16 -> 8 and
    # 17 -> 9 into it) meet two of its gradient rings on each of those links (14 -> 30, 15 -> 31
    # out; 30 -> 14, 31 -> 15 in): each send gets 1/4 of the NIC, not 1/2: 2 / bandwidth per byte more
    sent = ring_sharers(cluster, [[(6, 7, 8, 9), (22, 23, 24, 25)], [(14, 15, 16, 17), (30, 31, 32, 33)]],
                        [(6, 22), (14, 30)], 4, ((0, 1),))
    assert sent.drain == (0.0, pytest.approx(2 / cluster.route_bandwidth_bytes_per_s(14, 6)))
    # one rank's two replicas at 6-9 and 14-17: both rings leave server 1 by its one NIC
    assert ring_sharers(cluster, [[(6, 7, 8, 9), (14, 15, 16, 17)]], [(6, 14)]).own == (2,)
    # the fluid share: the block waits the others' seconds on its worst link, at most its own
    assert concurrent_delay_s(2.0, [[0.5, 0.75], [1.0]]) == 1.25
    assert concurrent_delay_s(1.0, [[3.0]]) == 1.0
    assert concurrent_delay_s(1.0, []) == 0.0


def test_later_ranks_gradients_delay_rank_0s_last_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gradient collective of rank 1 runs while rank 0's last backward runs its TP block on
    the same NIC: the estimate charges what is left of it (the block's whole 10.7 ms on the NIC
    here). That collective starts with rank 1's last gradient send to rank 0, which leaves server
    1 by the same NIC beside two of its rings and so takes a quarter of it, not a half: 0.89 ms
    more before rank 0's last backward starts (nic_sharing.drain_sends; the simulation: 0.84 ms).
    With both the estimate's gap between one and two replicas is 65.12 ms, the simulation's
    64.98 ms (64.23 ms without the send's: 0.75 ms short since the tied copy, 25.7 MB per TP rank,
    joined the last stage's reduction, which now outlasts the send)."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides={"servers": 5})
    one, two = _ranks_plan(4, [6, 14], TWO, 4), _ranks_plan(4, [6, 14], TWO, 4, d=2)
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim_gap = simulate(two, profile, cluster, options).iteration_time_s - simulate(
        one, profile, cluster, options).iteration_time_s
    est_gap = (estimate_3d(two, profile, cluster, optimizer_step=False).iteration_time_s
               - estimate_3d(one, profile, cluster, optimizer_step=False).iteration_time_s)
    assert est_gap == pytest.approx(sim_gap, abs=2e-4)
    real = three_d.ring_sharers
    monkeypatch.setattr(three_d, "ring_sharers", lambda *a: real(*a)._replace(dp=((), ())))
    without = estimate_3d(two, profile, cluster, optimizer_step=False).iteration_time_s
    assert estimate_3d(two, profile, cluster, optimizer_step=False).iteration_time_s == without
    monkeypatch.undo()
    assert estimate_3d(two, profile, cluster, optimizer_step=False).iteration_time_s - without > 2e-3
    monkeypatch.setattr(three_d, "ring_sharers", lambda *a: real(*a)._replace(drain=()))
    no_drain = estimate_3d(two, profile, cluster, optimizer_step=False).iteration_time_s
    share = 2 * 1024 * 1024 * 2 / 4  # 2 samples of 1024 x 1024 fp16 over 4 TP ranks, bytes
    assert est_gap - (no_drain - estimate_3d(one, profile, cluster, optimizer_step=False).iteration_time_s) \
        == pytest.approx(share * 2 / cluster.route_bandwidth_bytes_per_s(14, 6))


def test_replicas_pipeline_sends_share_a_servers_one_nic() -> None:
    """Two replicas' ranks at 0 and 4 send to 8 and 12 at once: on servers of one NIC both sends
    cross server 0's NIC out and server 1's NIC in, each at half its bandwidth."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides={"servers": 2})
    costs = three_d.ThreeDCosts(profile, cluster, three_d.Recompute.NONE)
    nic = cluster.route_bandwidth_bytes_per_s(0, 8)
    both = costs.send_terms(((0, 8), (4, 12)))  # GPU 4 reaches the NIC through the host bridge
    # the NIC is busy from the first send's arrival (GPU 0's route is shorter) with both sends' bytes
    nbytes = 1e6
    together = cluster.route_latency_s(0, 8) + 2 * nbytes / nic
    assert max(a + nbytes * b for a, b in both) == pytest.approx(together)
    assert costs.send_terms(((0, 8),)) == ((cluster.route_latency_s(0, 8), pytest.approx(1 / nic)),)
    # inside a server the replicas' sends take their own NVLink routes
    ((_, inside),) = costs.send_terms(((0, 2), (4, 6)))
    assert inside == pytest.approx(1 / cluster.route_bandwidth_bytes_per_s(0, 2))


SIX = {"servers": 4, "gpus_per_server": 6, "intra": "nvswitch", "intra_link": "NVLink2"}


SENDS_TOLERANCE = 0.03
"""Interleaved on the straddling plan below: -2.2% since a stage's gradient collective, posted
when its last backward ends, slows the rank's cool-down TP blocks on the NICs where its rings
cross them (every TP rank's ring and the block each get a fifth of the NIC: 43.0 ms more on
rank 1 and so on rank 0, the simulation 44.2 ms; planner/three_d_tail.py ``cooldown_ends_s``);
-10.8% without it since the last stage's reduction carries the tied copy (32 MB, was 6 MB: a
61 ms reduction outlasts both cool-down blocks), -4.6% before the copy. Its three pipeline sends
each way per micro-batch cross the NICs the TP rings' bottleneck hops take, and a send's delay
to a TP block it meets is charged as if it met one every time (planner/nic_sharing.py
``pipeline_sends``; -5.5% before, when it was not charged; -6.9% before every TP rank's tied pair
and data-parallel ring were on the network; the 1F1B family's order, timed per stage; -3.8%
when every rank was charged the slowest rank's time, which hid it)."""


@pytest.mark.parametrize(("schedule", "m", "tolerance"), [
    ("1f1b", 4, RANKS_TOLERANCE), ("1f1b", 8, RANKS_TOLERANCE),
    ("interleaved", 8, SENDS_TOLERANCE)])
def test_three_replicas_on_servers_of_six_gpus_and_one_nic_within_tolerance(
    schedule: str, m: int, tolerance: float
) -> None:
    """TP 4 x 3 replicas per rank on servers of 6 GPUs and one 25GbE NIC: the group at 4-7
    straddles servers 0 and 1, and the three replicas' pipeline sends (0, 4 and 8 to 12, 16 and
    20) share the NICs: -1.0%, -0.8% and -2.2% since rank 1's gradient collective slows its last
    sends and (interleaved: :data:`SENDS_TOLERANCE`) its cool-down TP blocks (-1.6%, -1.2% and
    -10.8% before, with the tied copy in the last stage's reduction; -1.3%, -1.8% and -5.5% before
    every TP rank's send was on them; -1.5%, -2.2% and -6.9% before every TP rank's tied pair ran
    on the network, 25-31% longer simulations)."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides=SIX)
    cuts = [(0, 1), (2, 2), (3, 3), (4, 5)] if schedule == "interleaved" else [(0, 2), (3, 5)]
    leads = [(0, 4, 8), (12, 16, 20)] * (len(cuts) // 2)
    plan = Plan(stages=tuple(_stage(a, b, tensor_parallel=4, replicas=3, devices=x)
                             for (a, b), x in zip(cuts, leads, strict=True)),
                global_batch_size=6 * m, num_microbatches=m, schedule=schedule, chunks=len(cuts) // 2)
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=tolerance)


def test_the_planners_automatic_placement_charges_what_estimate_3d_charges() -> None:
    """The Megatron planner costs automatic placement without building plans
    (``ThreeDCosts.auto_sharers``, ``auto_send_terms``); on servers of 6 GPUs and one NIC its TP-4
    groups straddle servers and share NICs, and every plan's estimate is ``estimate_3d`` of it."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides=SIX)
    # top 16: the tied embeddings' pair all-reduce over the 25GbE NICs puts the pipelines below
    # the first 8 (ZeRO-3 pinned off: it fits without pipelines)
    plans = megatron_plans(profile, cluster, 48, memory_limit_bytes=cluster.device.memory_bytes, top=16,
                           pins=MegatronPins(tensor_parallel=4, context_parallel=1, sharding="zero1"))
    assert any(p.num_ranks > 1 for p in plans)
    costs = three_d.ThreeDCosts(profile, cluster, three_d.Recompute.NONE)
    assert costs.auto_sharers(4, 1, 3, 2) is not None  # the group at 4-7 straddles
    for plan in plans:
        assert plan.estimate is not None
        again = estimate_3d(plan, profile, cluster)
        assert again.iteration_time_s == pytest.approx(plan.estimate.iteration_time_s, rel=1e-12)


FIVE = {"servers": 4, "gpus_per_server": 5, "intra": "nvswitch", "intra_link": "NVLink2"}


@pytest.mark.parametrize("m", [1, 2])
@pytest.mark.parametrize("sharding", ["none", "distributed"])
def test_one_ranks_replicas_rings_on_one_nic_within_tolerance(
    m: int, sharding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TP 4 x 5 replicas on servers of 5 GPUs and one NIC: the groups at 4-7, 8-11 and 12-15
    straddle, two rings leave (and enter) servers 1 and 2 by one NIC, in lock step, each at half
    of it: +0.1% to +0.3% (20% low with each TP ring seen alone; 36% before every TP rank's
    data-parallel ring was on the network, simulator/dp_collectives.py ``Collective.rings``, and
    charged its share of the NIC, ThreeDCosts.curves ``ranks``)."""
    gpt5 = "gpt:layers=5,hidden=1024,heads=16,seq=1024,vocab=50257"
    profile, cluster = resolve_inputs(gpt5, "dapple-2x8-v100", dtype="fp16", overrides=FIVE)
    plan = Plan(stages=(_stage(0, 6, tensor_parallel=4, replicas=5, sharding=sharding),),
                global_batch_size=10, num_microbatches=m, schedule="1f1b")
    options = SimOptions(optimizer_step=False, record_trace=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=0.01)
    monkeypatch.setattr(three_d, "ring_sharers", lambda *args: None)
    assert estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s / sim < 0.85


def test_the_cool_down_closed_forms() -> None:
    """A stage's reduction (10 s alone) beside a rank's two later ops of 1.5 s, 1 s of it TP bytes
    on the link where k = 4 of its rings run: each block takes 4 s more while 4 x 1 s of the
    reduction is left (the reduction runs alone during the 0.5 s of compute)."""
    ops = [(-1.0, 10.0), (1.5, 1.0), (1.5, 1.0)]
    assert cooldown_delays_s([ops], [0.0], [4]) == [8.0]  # 10 - 0.5 - 4 - 0.5 = 1 s left after
    assert cooldown_delays_s([ops], [9.0], [4]) == [0.5]  # it ran alone 9 s first: 0.5 s left at the block
    assert cooldown_delays_s([ops], [0.0], [0]) == [0.0]  # no ring on the link
    # rank 1's 8 s reach rank 0 and it waits them: with 1 s of its own idle, 1 s of its reduction left
    assert cooldown_delays_s([ops, ops], [1.0, 0.0], [4, 4]) == [8.5, 8.0]
    # a second stage's reduction joins when its own last backward (the second op) ends
    assert cooldown_delays_s([[(-1.0, 2.0), (1.0, 0.5), (-1.0, 3.0), (1.0, 0.5)]], [0.0], [1]) == [1.0]


def test_a_stages_reduction_slows_the_ranks_cool_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interleaved TP 4 x 3 on servers of 6 GPUs and one NIC: rank 1's stage 3 posts its
    reduction (every TP rank's ring crosses the NICs of servers 2 and 3) when its last backward
    ends, before rank 1's two cool-down backwards of stage 1, whose TP blocks (group 16-19 across
    servers 2 and 3) then get a fifth of the NIC: in the simulation they take four times their
    NIC seconds more, as the estimate charges; without that charge it is 10% low."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100", dtype="fp16", overrides=SIX)
    plan = Plan(stages=tuple(_stage(a, b, tensor_parallel=4, replicas=3, devices=x) for (a, b), x in zip(
        [(0, 1), (2, 2), (3, 3), (4, 5)], [(0, 4, 8), (12, 16, 20)] * 2, strict=True)),
        global_batch_size=48, num_microbatches=8, schedule="interleaved", chunks=2)
    result = simulate(plan, profile, cluster, SimOptions(optimizer_step=False, record_trace=True))
    reduce_start = min(e.start_s for e in result.events if e.resource == "gpu16.comm"
                       and e.kind.value == "allreduce" and e.stage == 3)
    blocks = sorted((e for e in result.events if e.resource == "gpu16.comm" and e.kind.value == "tp"
                     and e.stage == 1), key=lambda e: e.start_s)
    # each micro-batch's second block is its backward's
    backward = [e for k, e in enumerate(blocks) if e.microbatch in {x.microbatch for x in blocks[:k]}]
    cool = [e for e in backward if e.start_s > reduce_start]
    assert sorted(e.microbatch for e in cool) == [6, 7]
    alone = min(e.duration_s for e in backward if e.start_s < reduce_start)
    costs = three_d.ThreeDCosts(profile, cluster, three_d.Recompute.NONE)
    wire = costs.wire_s(2, 2, 2, 4, False, 1, costs.ring([(16, 17, 18, 19)]), "B")  # 5.37 ms
    assert sum(e.duration_s - alone for e in cool) == pytest.approx(2 * 4 * wire, rel=0.05)  # 44.2 ms
    sim = result.iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est / sim == pytest.approx(1.0, abs=SENDS_TOLERANCE)
    real = three_d.ring_sharers
    monkeypatch.setattr(three_d, "ring_sharers", lambda *a: real(*a)._replace(own_dp=(0, 0)))
    assert estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s / sim < 0.92
