"""Every TP rank's pipeline send on the network where the ranks' routes share a link
(simulator/tp_lowering.py ``TpLowering.rank_sends``, profiles/costmodels/dp_rings.py
``shared_sends``): each TP rank sends its ``1/t`` share to its peer in the next stage; where a
server has fewer NICs than GPUs (dapple-2x8-v100: one 25GbE NIC per 8 V100; pcie-4x4-v100-10gbe:
one 10GbE NIC per 4) the ``t`` sends cross one NIC and each gets a share of it, so the stream
carries every rank's send; where each rank has a NIC of its own (DGX presets, rails) the first
rank's send stands for all, as before. The 3D estimate counts the same sends on the links they
cross (planner/nic_sharing.py ``send_terms``, ``pipeline_sends``)."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.dp_rings import shared_sends
from pipesim.profiles.costmodels.tied_embeddings import without_ties
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.instructions import Recv, Send
from pipesim.simulator.lowering import lower
from pipesim.simulator.tp_lowering import TpLowering
from pipesim.simulator.trace import EventKind, SimulationResult

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000"


def _inputs(cluster: str, **overrides: object) -> tuple[ModelProfile, Cluster]:
    profile, cl = resolve_inputs(GPT, cluster, overrides=overrides or None)  # type: ignore[arg-type]
    return without_ties(profile), cl  # no tied pair all-reduce after the drain


def _two_stages(t: int, leads: tuple[int, int], m: int = 1, d: int = 1, step: int = 0, **kw: object) -> Plan:
    t1 = kw.pop("t1", t)
    stages = tuple(
        StagePlan(first_layer=a, last_layer=b, tensor_parallel=tt, replicas=d,  # type: ignore[arg-type]
                  devices=tuple(lead + k * step for k in range(d)), **kw)  # type: ignore[arg-type]
        for (a, b), lead, tt in zip([(0, 2), (3, 5)], leads, [t, t1], strict=True))
    return Plan(stages=stages, global_batch_size=d * m, num_microbatches=m, schedule="1f1b")


def _mirrored(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first rank's send standing for all, as before (the other ranks' sends not run)."""
    monkeypatch.setattr(TpLowering, "rank_sends", lambda *args: ())


def _sends(result: SimulationResult) -> list[tuple[int | None, int | None, float]]:
    return [(e.device, e.peer, e.end_s - e.start_s) for e in result.events
            if e.kind in (EventKind.SEND_ACTIVATION, EventKind.SEND_GRADIENT)]


def test_shared_sends_only_where_the_ranks_routes_meet() -> None:
    _, dapple = _inputs("dapple-2x8-v100")
    bw = dapple.links.bandwidths_bytes_per_s().__getitem__
    assert shared_sends(0, 8, 2, dapple.route, bw) == ((0, 8), (1, 9))  # one NIC per server
    assert shared_sends(0, 8, 1, dapple.route, bw) == ()
    assert shared_sends(0, 4, 2, dapple.route, bw) == ()  # inside the server: NVLink of their own
    _, dgx = _inputs("dgx-a100-x2", servers=2)
    assert shared_sends(0, 8, 4, dgx.route, dgx.links.bandwidths_bytes_per_s().__getitem__) == ()
    # a rail-optimised fabric: the ranks' routes meet on its aggregated spine and core links,
    # wide enough for all of them (each at its NIC's rate): one send stands for all
    _, rails = _inputs("dgx-h100-16384")
    route = rails.route
    assert set(route(0, 1024)) & set(route(1, 1025))
    assert shared_sends(0, 1024, 8, route, rails.links.bandwidths_bytes_per_s().__getitem__) == ()


@pytest.mark.parametrize(("cluster", "leads"), [("dapple-2x8-v100", (0, 8)), ("pcie-4x4-v100-10gbe", (0, 4))])
def test_two_ranks_sends_on_one_nic_take_twice_the_wire_time(
    cluster: str, leads: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hand-computed: TP 2 on servers of one NIC (25GbE, 10GbE) of ``B`` bytes/s: each rank's
    share ``S`` of the activation crosses the NIC at ``B/2`` while both run, ``lat + 2 S / B``
    against ``lat + S / B`` alone; one micro-batch crosses it forward and back, so the
    iteration grows by exactly ``2 S / B``."""
    profile, cl = _inputs(cluster)
    plan = _two_stages(2, leads)
    program = lower(plan, profile, cl, SimOptions())
    src, dst = leads
    sends = [i for i in program.instructions(src) if isinstance(i, Send)]
    assert [(s.dst_device, s.route) for s in sends] == [
        (dst, cl.route(src, dst)), (dst + 1, cl.route(src + 1, dst + 1))]
    share = sends[0].nbytes
    assert sends[1].nbytes == share
    (recv,) = [i for i in program.instructions(dst) if isinstance(i, Recv)]
    assert recv.pieces == 2  # the receiver waits for both
    nic = cl.route_bandwidth_bytes_per_s(src, dst)
    lat = cl.route_latency_s(src, dst)
    options = SimOptions(optimizer_step=False, record_trace=True)
    shared = simulate(plan, profile, cl, options)
    assert len(_sends(shared)) == 4
    for _, _, took in _sends(shared):
        assert took - lat == pytest.approx(2 * share / nic, rel=1e-9)
    _mirrored(monkeypatch)
    alone = simulate(plan, profile, cl, options)
    ((_, _, fwd), (_, _, bwd)) = _sends(alone)
    assert fwd - lat == pytest.approx(share / nic, rel=1e-9)
    assert bwd - lat == pytest.approx(share / nic, rel=1e-9)
    grown = shared.iteration_time_s - alone.iteration_time_s
    assert grown == pytest.approx(2 * share / nic, rel=1e-9)


def test_different_degrees_and_context_parallel_ranks() -> None:
    """Between TP 4 and TP 2 the transfer is split over 2 ranks (``1/min``); with CP each of
    the ``t c`` ranks sends its share of its sequence chunk: 4 sends on the one NIC."""
    profile, cl = _inputs("dapple-2x8-v100")
    mixed = lower(_two_stages(4, (0, 8), t1=2), profile, cl, SimOptions())
    sends = [i for i in mixed.instructions(0) if isinstance(i, Send)]
    assert [(s.dst_device, s.route) for s in sends] == [(8, cl.route(0, 8)), (9, cl.route(1, 9))]
    cp = lower(_two_stages(2, (0, 8), context_parallel=2), profile, cl, SimOptions())
    sends = [i for i in cp.instructions(0) if isinstance(i, Send)]
    assert [s.dst_device for s in sends] == [8, 9, 10, 11]
    assert [i.pieces for i in cp.instructions(8) if isinstance(i, Recv)] == [4]
    result = simulate(_two_stages(2, (0, 8), m=2, context_parallel=2), profile, cl, SimOptions())
    assert result.iteration_time_s > 0


DIFFERENTIAL = [
    pytest.param("dgx-a100-x2", {"servers": 2}, 2, (0, 8), 1, id="dgx-a100-t2"),
    pytest.param("dgx-a100-x2", {"servers": 2}, 4, (0, 8), 2, id="dgx-a100-t4-d2"),
    pytest.param("dgx-h100-x4", {}, 8, (0, 16), 2, id="dgx-h100-t8-d2"),
    pytest.param("dgx-a100-1024", {}, 8, (0, 512), 2, id="rails-t8-d2"),
    pytest.param("dgx-h100-16384", {}, 8, (0, 1024), 2, id="rails-3-levels-t8-d2"),
    pytest.param("dapple-2x8-v100", {}, 1, (0, 8), 2, id="dapple-t1"),
    pytest.param("dapple-2x8-v100", {}, 2, (0, 2), 2, id="dapple-inside-a-server"),
]


@pytest.mark.parametrize(("cluster", "overrides", "t", "leads", "d"), DIFFERENTIAL)
def test_ranks_with_routes_of_their_own_stand_for_each_other(
    cluster: str, overrides: dict[str, object], t: int, leads: tuple[int, int], d: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A NIC per GPU (DGX, rails), ``t = 1`` or sends inside a server: one send per piece and
    the very same result as with the first rank's send standing for all."""
    profile, cl = _inputs(cluster, **overrides)
    step = 4 if cluster.startswith("dapple") else t
    plan = _two_stages(t, leads, m=4, d=d, step=step, sequence_parallel=t > 1)
    options = SimOptions(optimizer_step=False)
    program = lower(plan, profile, cl, options)
    src = program.stages[0].devices[0]
    assert len([i for i in program.instructions(src) if isinstance(i, Send)]) == 4
    got = simulate(plan, profile, cl, options)
    _mirrored(monkeypatch)
    before = simulate(plan, profile, cl, options)
    assert got.iteration_time_s == before.iteration_time_s
    assert got.devices == before.devices  # busy, waiting, bubble, all-reduce and memory alike
    assert got.num_events == before.num_events


ESTIMATED = [
    pytest.param("dapple-2x8-v100", 2, (0, 8), 1, 1, {}, 1e-9, id="t2"),
    pytest.param("dapple-2x8-v100", 2, (0, 8), 4, 1, {}, 1e-9, id="t2-m4"),
    pytest.param("dapple-2x8-v100", 4, (0, 8), 4, 1, {"sequence_parallel": True}, 1e-9, id="t4-sp"),
    pytest.param("dapple-2x8-v100", 2, (0, 8), 2, 1, {"context_parallel": 2}, 1e-9, id="t2-cp2"),
    # two replicas: their four sends on the NIC (+0.007%: +0.008% before, their gradient rings)
    pytest.param("dapple-2x8-v100", 2, (0, 8), 4, 2, {}, 2e-4, id="t2-d2"),
    # the TP ring on PCIe crosses the GPUs' links to the switch that the sends take (-0.05%)
    pytest.param("pcie-4x4-v100-10gbe", 2, (0, 4), 4, 1, {}, 1e-3, id="pcie-t2"),
]


@pytest.mark.parametrize(("cluster", "t", "leads", "m", "d", "kw", "rel"), ESTIMATED)
def test_the_3d_estimate_counts_every_ranks_send(
    cluster: str, t: int, leads: tuple[int, int], m: int, d: int, kw: dict[str, object], rel: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On these plans the TP groups are inside their servers and only the sends share the NIC:
    the estimate, which counts every rank's send on the links they cross (the NIC busy from the
    first one's arrival: GPUs 2 and 3 reach it through the host bridge), equals the simulation,
    which grew by them."""
    profile, cl = _inputs(cluster)
    plan = _two_stages(t, leads, m=m, d=d, step=2 * t, **kw)
    options = SimOptions(optimizer_step=False)
    sim = simulate(plan, profile, cl, options).iteration_time_s
    est = estimate_3d(plan, profile, cl, optimizer_step=False).iteration_time_s
    assert est == pytest.approx(sim, rel=rel)
    _mirrored(monkeypatch)
    assert simulate(plan, profile, cl, options).iteration_time_s < sim
