"""Every TP rank's data-parallel ring on the network (simulator/dp_collectives.py
``Collective.rings``, simulator/tp_lowering.py ``TpLowering.dp_rings``): where a server has fewer
NICs than GPUs (dapple-2x8-v100: one 25GbE NIC per 8-GPU server) the ``t`` TP ranks' rings of a
stage cross the same NIC and each gets a share of it; where every rank has NICs of its own
(DGX A100: one per GPU) the first rank's ring stands for all, as before."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import simpy

import pipesim.simulator.engine as engine
from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.tied_embeddings import without_ties
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.collective_steps import all_of
from pipesim.simulator.lowering import lower
from pipesim.simulator.network import Network
from pipesim.simulator.scatter_gather import collective

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000"


def _plan(t: int, devices: tuple[int, ...], sharding: str = "none") -> Plan:
    return Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=t, replicas=len(devices),
                                  devices=devices, sharding=sharding),),
                global_batch_size=8, num_microbatches=4, schedule="1f1b", allreduce="ring")


def _alone_s(cluster: Cluster, kind: str, groups: list[tuple[int, ...]], nbytes: float) -> float:
    """Seconds the collective takes on ``groups`` at once, nothing else on the network."""
    env = simpy.Environment()
    net = Network.over_links(env, cluster.links)
    runs = [env.process(collective(env, net, kind, list(g), nbytes, cluster.route,
                                   server_of=cluster.server_of, algorithm="ring"))
            for g in groups]
    env.run(all_of(env, runs))
    return float(env.now)


def test_two_tp_ranks_rings_share_the_servers_one_nic(monkeypatch: pytest.MonkeyPatch) -> None:
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100")
    profile = without_ties(profile)
    plan = _plan(2, (0, 8))  # replicas on servers 0 and 1, TP ranks 0-1 and 8-9
    (spec,) = lower(plan, profile, cluster, SimOptions()).collectives
    assert spec.members == (0, 8)
    assert spec.rings == ((1, 9),)
    # hand-computed: the 2-member ring moves 2 steps of S/2 over its 25GbE NIC bottleneck B, S/B
    # alone; the two rings share the NIC (and the PCIe switch to it) max-min: each at B/2, 2 S/B
    nic_bps = cluster.route_bandwidth_bytes_per_s(0, 8)
    assert nic_bps == cluster.links[58].bandwidth_bytes_per_s  # s0.nic0->switch
    alone = _alone_s(cluster, spec.kind, [(0, 8)], spec.nbytes)
    both = _alone_s(cluster, spec.kind, [(0, 8), (1, 9)], spec.nbytes)
    assert both - alone == pytest.approx(spec.nbytes / nic_bps, rel=1e-9)
    result = simulate(plan, profile, cluster, SimOptions())
    for d in result.devices:
        assert d.allreduce_time_s == pytest.approx(both, rel=1e-12)
    # the iteration grows by the second ring's share (the all-reduce, after the last backward,
    # is on the critical path): against the same program with the first rank's ring alone
    lower_all = engine.lower

    def first_rank_only(*args: Any, **kw: Any) -> Any:
        program = lower_all(*args, **kw)
        program.collectives = tuple(dataclasses.replace(c, rings=()) for c in program.collectives)
        return program

    monkeypatch.setattr(engine, "lower", first_rank_only)
    mirrored = simulate(plan, profile, cluster, SimOptions())
    assert mirrored.devices[0].allreduce_time_s == pytest.approx(alone, rel=1e-12)
    grown = result.iteration_time_s - mirrored.iteration_time_s
    assert grown == pytest.approx(spec.nbytes / nic_bps, rel=1e-9)


def test_zero1_halves_run_on_every_rank_too() -> None:
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100")
    profile = without_ties(profile)
    program = lower(_plan(4, (0, 8), "zero1"), profile, cluster, SimOptions())
    assert [c.kind for c in program.collectives] == ["reduce-scatter", "all-gather"]
    assert all(c.rings == ((1, 9), (2, 10), (3, 11)) for c in program.collectives)


def test_ranks_with_nics_of_their_own_stand_for_each_other() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", overrides={"servers": 2})  # a NIC per GPU
    profile = without_ties(profile)
    (spec,) = lower(_plan(2, (0, 8)), profile, cluster, SimOptions()).collectives
    assert spec.rings == ()


def test_every_tp_ranks_tied_pair_crosses_the_nic() -> None:
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100")  # tied word embeddings (GPT's default)
    plan = Plan(stages=(StagePlan(first_layer=0, last_layer=2, tensor_parallel=2, devices=(0,)),
                        StagePlan(first_layer=3, last_layer=5, tensor_parallel=2, devices=(8,))),
                global_batch_size=8, num_microbatches=4, schedule="1f1b", allreduce="ring")
    (pair,) = lower(plan, profile, cluster, SimOptions()).collectives
    assert pair.members == (0, 8)
    assert pair.shared_with == 1
    assert pair.rings == ((1, 9),)  # rank 1's pair leaves server 0 by the same NIC
    both = _alone_s(cluster, pair.kind, [(0, 8), (1, 9)], pair.nbytes)
    alone = _alone_s(cluster, pair.kind, [(0, 8)], pair.nbytes)
    assert both - alone == pytest.approx(pair.nbytes / cluster.route_bandwidth_bytes_per_s(0, 8), rel=1e-9)


@pytest.mark.parametrize(("t", "sharding", "tied"),
                         [(2, "none", False), (4, "zero1", False), (2, "none", True)])
def test_the_3d_estimate_charges_every_ranks_ring(t: int, sharding: str, tied: bool) -> None:
    """The estimate divides each link's bandwidth by the TP ranks' rings on it
    (ThreeDCosts.curves ``ranks``) and counts every rank's tied pair: on these one-NIC plans it
    equals the simulation, which grew by the other ranks' rings."""
    profile, cluster = resolve_inputs(GPT, "dapple-2x8-v100")
    if tied:  # one replica, the tied pair between the two servers
        plan = Plan(stages=(StagePlan(first_layer=0, last_layer=2, tensor_parallel=t, devices=(0,)),
                            StagePlan(first_layer=3, last_layer=5, tensor_parallel=t, devices=(8,))),
                    global_batch_size=8, num_microbatches=4, schedule="1f1b", allreduce="ring")
    else:
        profile = without_ties(profile)
        plan = _plan(t, (0, 8), sharding)
    options = SimOptions(optimizer_step=False)
    sim = simulate(plan, profile, cluster, options).iteration_time_s
    est = estimate_3d(plan, profile, cluster, optimizer_step=False).iteration_time_s
    assert est == pytest.approx(sim, rel=1e-9)
