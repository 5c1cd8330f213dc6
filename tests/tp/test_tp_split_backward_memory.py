"""Zero-bubble's split backward on tensor-parallel ranks: ``I`` releases all but what ``W`` reads
(each rank's shards of the weight GEMMs' inputs and output gradients), in the simulator's TP
lowering and in the 3D estimate's memory, which equals the simulated peak."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.three_d import ThreeDCosts, estimate_config
from pipesim.profiles.costmodels.memory import Recompute, stage_activations, wgrad_kept_bytes
from pipesim.profiles.costmodels.sharding import Sharding
from pipesim.profiles.costmodels.tensor_parallel import tp_stage_activations
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, simulate

CLUSTER = get_cluster("dgx-a100-x2")
FREE = SimOptions(free_links=True, optimizer_step=False)
H, S, V = 256, 128, 512


def _gpt(stages: int) -> ModelProfile:
    # embedding + blocks + head: ``stages`` stages of two layers each
    spec = f"gpt:layers={2 * stages - 2},hidden={H},heads=4,seq={S},vocab={V}"
    profile, _ = resolve_inputs(spec, "dgx-a100-x2", dtype="bfloat16")
    return profile


def _plan(profile: ModelProfile, p: int, m: int, schedule: str, t: int, sp: bool, mode: str) -> Plan:
    v = 2 if schedule == "zbv" else 1
    stages = tuple(
        StagePlan(first_layer=2 * k, last_layer=2 * k + 1, tensor_parallel=t, sequence_parallel=sp)
        for k in range(p * v)
    )
    return Plan(stages=stages, global_batch_size=2 * m, num_microbatches=m, schedule=schedule, recompute=mode,
                chunks=v)


def _estimated_peak(plan: Plan, profile: ModelProfile) -> float:
    first = plan.stages[0]
    model = ThreeDCosts(profile, CLUSTER, Recompute.parse(plan.recompute))
    chunks = [(s.first_layer, s.last_layer) for s in plan.stages]
    est = estimate_config(
        model, CLUSTER, plan.optimizer.value, plan.allreduce.value, plan.global_batch_size, chunks,
        first.tensor_parallel, plan.num_ranks, 1, plan.global_batch_size // plan.num_microbatches,
        plan.num_microbatches, plan.chunks, first.sequence_parallel, Recompute.parse(plan.recompute),
        Sharding.NONE, float("inf"), schedule=plan.schedule, optimizer_step=False,
    )
    assert est is not None
    return est.peak_memory_bytes


@pytest.mark.parametrize(("schedule", "p", "m"), [("zb-h1", 4, 6), ("zb-h2", 2, 5), ("zbv", 2, 4)])
@pytest.mark.parametrize(("t", "sp"), [(2, False), (2, True), (4, False), (4, True)])
@pytest.mark.parametrize("mode", ["none", "full"])
def test_3d_estimate_is_the_simulated_peak(
    schedule: str, p: int, m: int, t: int, sp: bool, mode: str
) -> None:
    v = 2 if schedule == "zbv" else 1
    profile = _gpt(p * v)
    plan = _plan(profile, p, m, schedule, t, sp, mode)
    simulated = max(d.peak_memory_bytes for d in simulate(plan, profile, CLUSTER, FREE).devices)
    assert _estimated_peak(plan, profile) == pytest.approx(simulated, rel=1e-12)


def test_i_releases_all_but_the_wgrad_shards_on_a_tp_rank() -> None:
    profile = _gpt(4)
    plan = _plan(profile, 4, 8, "zb-h1", 2, False, "none")
    result = simulate(plan, profile, CLUSTER, FREE)
    acts = tp_stage_activations(profile, 4, 5, 2, "none", 2, False)  # rank 2's stage (two blocks)
    assert acts.held_bytes < acts.stash_bytes
    # ZB-H1's rank i peaks when its p - i warm-up forwards and the i put-off W passes since its
    # first I are held: 4 stashes of which 2 hold only what W reads, then an I's working set
    for device in (d for d in result.devices if d.stages == (2,)):
        held = device.peak_memory_bytes - device.static_memory_bytes
        assert held == pytest.approx(2 * acts.stash_bytes + 2 * acts.held_bytes + acts.work_bytes, rel=1e-12)


@pytest.mark.parametrize("t", [1, 2, 4])
def test_wgrad_shards_from_megatrons_linear_layers(t: int) -> None:
    profile = _gpt(2)
    b = 2
    tokens, d, ffn = b * S, 2, 4 * H
    one = wgrad_kept_bytes(profile, 1, b, float("inf"))
    assert one == d * tokens * (3 * H + ffn + 5 * H + ffn)  # 32 s b h at ffn = 4 h (Qi et al., Table 1)
    # sequence parallelism: every stored tensor is the rank's shard
    with_sp = wgrad_kept_bytes(profile, 1, b, float("inf"), t=t, sequence_parallel=True)
    assert with_sp == pytest.approx(one / t)
    # without: the column-parallel GEMMs' inputs and the row-parallel ones' output gradients whole
    whole = d * tokens * 4 * H
    split = d * tokens * (H + ffn + 3 * H + ffn) / t
    assert wgrad_kept_bytes(profile, 1, b, float("inf"), t=t) == pytest.approx(whole + split)
    # the vocabulary-parallel head: its input (a sequence shard with SP) and a logits' gradient shard
    assert wgrad_kept_bytes(profile, 3, b, float("inf"), t=t) == pytest.approx(d * tokens * (H + V / t))
    assert wgrad_kept_bytes(profile, 3, b, float("inf"), t=t, sequence_parallel=True) == pytest.approx(
        d * tokens * (H + V) / t
    )
    if t == 1:  # one device: the stage model without TP
        ours = tp_stage_activations(profile, 1, 3, b, "full", 1, False)
        assert ours == stage_activations(profile, 1, 3, b, "full")


def test_both_executors_tally_a_tp_split_backward_alike() -> None:
    profile = _gpt(4)
    plan = _plan(profile, 2, 4, "zbv", 2, True, "full")
    engine = simulate(plan, profile, CLUSTER, FREE, executor="simpy")
    fast = simulate(plan, profile, CLUSTER, FREE, executor="fast")
    assert [d.peak_memory_bytes for d in fast.devices] == [d.peak_memory_bytes for d in engine.devices]
