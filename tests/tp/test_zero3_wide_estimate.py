"""ZeRO-3 on wide blocks whose gathers outlast their compute: the 3D estimate's backward follows
the simulation (profiles/costmodels/zero3_timing.py, ``zero3_times_s``).

GPT-3-wide blocks (hidden 12288, sequence 256) on 16 replicas over two DGX A100 servers were
charged 1.26-1.32x the simulation (main 0060781), under both ZeRO-3 runtimes: the estimate paired
each unit's gather with that unit's own reduce-scatter (the one that meets it in the simulation is
the previous unit's), charged every reduce-scatter in full inside the backward and again in the
tail (taken against the bare compute, not the gated backward: 613 ms where the last unit's 162 ms
remain). The backward now runs the gather and reduce-scatter streams as the simulator does,
sharing the links half and half while both carry a transfer, and the steady backward's last
reduce-scatters meet the next forward's first gather. With the ring algorithm the estimate is the
simulation to 0.1% (both runtimes, with and without full recomputation). What remains: with
``hierarchical`` (``auto``'s choice here before issue 14's rings) a gather and a reduce-scatter
that meet share only some of their phases' links in the simulation (intra-server steps on NVSwitch,
inter-server on the NICs), so they slow each other less than half and half: +1.3% to +2.2% without
recomputation, +5.6% (FSDP) and +8.6% (DeepSpeed) with full recomputation's larger backward
gathers; DeepSpeed's 2021 runtime on hidden 20480 (on-demand gathers) +15% to +20%. Those are not
held here. Since DeepSpeed's memory passes around each call (``zero3_exposure.call_pass_s``) the
DeepSpeed case without recomputation is held on the ring; with ``hierarchical`` (a strict xfail, so
it fails once mended) the estimate is +15.6%, the two charging the same per-unit exposure (within
0.5%). ``auto`` was that hierarchical form here (+15.7%, full recomputation +4.6%) until the ring
across servers became NCCL's one ring per NIC (``ring_topology.server_rings``, issue 14): 8 rings,
each NIC carrying one each way, beat the hierarchical form's NIC phase then NVSwitch phase for the
large calls, so ``auto`` now runs the ring there and is held (+0.2%, full recomputation +0.4%).

Traced (issue 14; closed forms in ``tests/simulator/test_hierarchical_overlap.py``): the simulator
runs a hierarchical gather's inter-server phase (NICs, ``a`` = 10.7 ms alone here) then its
intra-server phase (NVSwitch ports, ``b`` = 13.3 ms), a reduce-scatter the reverse, each phase
ending before the next begins (``simulator/scatter_gather.py``). Max-min is exact there: no link
sits idle while a flow that could use it waits, no rate outlives its link, and a lone pair never
ends later than one after the other (gather at 0, reduce-scatter at ``d``: the pair ends at
``min(2b + 2d, 2a + 2b)``, 47.80 ms at ``d`` = 11.6 ms against 47.92; the "57.5 ms, not 48" once
quoted here was that pair with the next gather joining it at 36.2 ms). But the backward's two
streams of back-to-back calls keep whatever offset the compute gives them, and their period follows
it, from ``2b`` (started together: each NIC phase beside the other call's port phase) to ``2a+2b``
(NIC phases together, port phases together, each kind of link idle half the time). Without
DeepSpeed's memory passes (all three) the streams lock at the latter (port s0.gpu0 busy 137.0 to
163.4, 183.0 to 209.4, 229.1 to 255.6 ms; NIC s0.nic0's uplink 162.5 to 183.9, 208.5 to 229.9):
0.292 s, the estimate's half and half (estimate +1.3%); with them each pair starts together (160.13
ms; 26.45 ms for both against 47.92): 0.267 s, which the estimate misses. That gain is the
phase-serial lowering's, not NCCL's: NCCL 2.8.4 (spring 2021) runs all-gathers and reduce-scatters
only on rings (``src/graph/tuning.cc``, ``if (coll != ncclFuncAllReduce && a != NCCL_ALGO_RING)
continue;``), whose chunks move on through every step as they arrive
(``src/collectives/device/all_gather.h``, ``directRecvCopySend`` per chunk with ``NCCL_STEPS`` = 8
slots in flight per connection, ``src/include/devcomm.h``; tag v2.8.4-1, commit 911d61f214d4), so a
call loads its NVLink and NIC hops together for its whole length and two that meet share their
bottleneck (the NICs here) whatever their offset, as the estimate's half and half does. Pipelining
the hierarchical form would change every lone call as well (``b`` instead of ``a+b`` here) and the
planner's curves with it (``profiles/costmodels/collective.py``): not done, and the estimate is not
taught an alignment NCCL would not show.
"""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.zero3_timing import zero3_times_s
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate

WIDE = "gpt:layers=4,hidden=12288,heads=96,seq=256,vocab=1024"
TOLERANCE = 0.03
"""Estimate vs simulation on these plans: +0.1% (ring) to +2.2% (hierarchical, FSDP; module docstring)."""


def test_gather_and_reduce_scatter_streams_share_the_links() -> None:
    # units of no compute, gathers and reduce-scatters of 1 s alone. Backward (units 1, 0): unit
    # 1's gather (issued as the forward's last unit starts: no lead here) takes 0 .. 1 s; unit 0's
    # gather (issued as unit 1 starts) and unit 1's reduce-scatter run together at half speed
    # until 3 s; the next forward's first gather (issued as unit 0 starts, at 3 s) and
    # unit 0's reduce-scatter until 5 s: the forward waits 2 s for it, then 1 s for its second.
    # A cycle moves 6 s of bytes in 6 s; the first forward, with no reduce-scatter beside its
    # gather, takes 1 s less; the last backward's reduce-scatter alone is its 1 s tail.
    # (the 1 s the forward waits beyond a forward after a forward is the spill; no idle time
    # in the cycle hides it, so the 3D estimate charges it to that forward: 3 s, first -1 s)
    x = zero3_times_s([0.0, 0.0], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0])
    assert (x.fwd_s, x.spill_s, x.bwd_s, x.first_extra_s, x.last_tail_s, x.idle_s) == (
        2.0, 1.0, 3.0, 0.0, 1.0, 0.0)
    # a compute-bound backward hides every transfer but the first gather and the last scatter
    x = zero3_times_s([2.0, 2.0], [4.0, 4.0], [0.5, 0.5], [0.5, 0.5])
    assert (x.fwd_s, x.bwd_s, x.first_extra_s, x.last_tail_s, x.spill_s) == (4.0, 8.0, 0.5, 0.5, 0.0)


@pytest.mark.parametrize(("runtime", "allreduce", "recompute"), [
    ("fsdp", "auto", "none"), ("fsdp", "ring", "none"), ("deepspeed-2021", "ring", "none"),
    ("deepspeed-2021", "ring", "full"), ("deepspeed-2021", "auto", "none"),
    ("deepspeed-2021", "auto", "full"),
    pytest.param("deepspeed-2021", "hierarchical", "none", marks=pytest.mark.xfail(strict=True, reason=(
        "estimate +15.6%: the simulator's phase-serial hierarchical gather and reduce-scatter, "
        "started together, run each one's NIC phase beside the other's NVSwitch phase; the "
        "estimate shares half and half, as NCCL's pipelined rings would (module docstring)"))),
])
def test_wide_blocks_on_two_servers_within_tolerance(runtime: str, allreduce: str, recompute: str) -> None:
    profile, cluster = resolve_inputs(WIDE, "dgx-a100-x2", dtype="fp16")
    stage = StagePlan(first_layer=0, last_layer=profile.num_layers - 1, replicas=16, sharding="zero3")
    plan = Plan(stages=(stage,), global_batch_size=16, num_microbatches=1, schedule="1f1b",
                zero3_runtime=runtime, allreduce=allreduce, recompute=recompute)  # type: ignore[arg-type]
    sim = simulate(plan, profile, cluster, SimOptions(optimizer_step=False, record_trace=False))
    est = estimate_3d(plan, profile, cluster, optimizer_step=False)
    assert est.iteration_time_s / sim.iteration_time_s == pytest.approx(1.0, abs=TOLERANCE)
