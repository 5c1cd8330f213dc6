"""Zero-bubble memory with shaped transformer layers: W keeps the weight GEMMs' inputs and output
gradients, and the planner's estimate still equals the simulator's peak exactly."""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel
from pipesim.profiles.costmodels.memory import (
    backward_working_set_bytes,
    held_until_w_fewest,
    stage_activations,
)
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, simulate

DGX1 = get_cluster("dgx1-v100")
FREE = SimOptions(free_links=True, optimizer_step=False)


def _gpt(p: int, chunks: int = 1) -> ModelProfile:
    # embedding + blocks + head: p * chunks stages of (layers + 2) / (p * chunks) layers
    blocks = 2 * p * chunks - 2
    spec = f"gpt:layers={blocks},hidden=256,heads=4,seq=128,vocab=500"
    return zoo_model(spec, dtype="float16", batch_size=1)


def _plan(profile: ModelProfile, p: int, m: int, schedule: str, mode: str, chunks: int = 1) -> Plan:
    n = profile.num_layers
    per = n // (p * chunks)
    cuts = [(k * per, (k + 1) * per - 1) for k in range(p * chunks)]
    cuts[-1] = (cuts[-1][0], n - 1)
    return Plan(
        stages=tuple(StagePlan(first_layer=a, last_layer=b) for a, b in cuts),
        global_batch_size=m,
        num_microbatches=m,
        schedule=schedule,
        recompute=mode,
        chunks=chunks,
    )


@pytest.mark.parametrize("schedule", ["1f1b", "gpipe", "zb-h1", "zb-h2", "zb-auto"])
@pytest.mark.parametrize("mode", ["none", "selective", "full"])
@pytest.mark.parametrize(("p", "m"), [(4, 2), (4, 3), (4, 5), (4, 9), (3, 7), (2, 11)])
def test_shaped_estimate_is_the_simulated_peak(schedule: str, mode: str, p: int, m: int) -> None:
    profile = _gpt(p)
    plan = _plan(profile, p, m, schedule, mode)
    estimate = CostModel(profile, DGX1, recompute=mode).estimate(plan)
    result = simulate(plan, profile, DGX1, FREE)
    assert [d.peak_memory_bytes for d in result.devices] == pytest.approx(
        list(estimate.device_peak_memory_bytes.values()), rel=1e-12
    )


@pytest.mark.parametrize("mode", ["none", "full"])
def test_w_keeps_less_than_the_stash_and_i_releases_the_rest(mode: str) -> None:
    profile = _gpt(2)
    s, h, b = 128, 256, 1
    acts = stage_activations(profile, 1, 2, b, mode)  # two blocks
    assert acts.held_bytes == pytest.approx(2 * 32 * s * b * h, rel=1e-12)
    plan = _plan(profile, 2, 4, "zb-h1", mode)
    result = simulate(plan, profile, DGX1, FREE)
    # every device ends where it started: I and W together free all that F and I allocated
    for device in result.devices:
        curve = result.memory[device.device]
        assert curve.bytes[-1] == pytest.approx(device.static_memory_bytes, rel=1e-12)


def test_fewest_pending_w_counts() -> None:
    # ZB-H1 on 6 ranks with 4 micro-batches: warm-up p - i forwards, then each I puts its W off
    assert [held_until_w_fewest("zb-h1", i, 6, 4) for i in range(6)] == [0, 0, 0, 1, 2, 3]
    assert [held_until_w_fewest("zb-h1", i, 6, 12) for i in range(6)] == [0, 1, 2, 3, 4, 5]
    # ZB-H2: 2 (p - i) - 1 warm-up forwards; 2 i put off once m >= 2 p - 1
    assert [held_until_w_fewest("zb-h2", i, 6, 8) for i in range(6)] == [0, 0, 1, 3, 5, 7]
    assert [held_until_w_fewest("zb-h2", i, 6, 20) for i in range(6)] == [0, 2, 4, 6, 8, 10]
    assert held_until_w_fewest("1f1b", 3, 4, 4) == 0


@pytest.mark.parametrize("mode", ["none", "selective", "full"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 3), (4, 5), (4, 8), (4, 16)])
def test_looped_zero_bubble_estimate_with_shapes(mode: str, p: int, m: int) -> None:
    # exact on every rank, the last one too, whose two chunks differ (its second one holds the LM
    # head): the estimate walks the order, following which chunk each stashed forward belongs to
    profile = _gpt(p, chunks=2)
    plan = _plan(profile, p, m, "zb-h1", mode, chunks=2)
    estimate = list(CostModel(profile, DGX1, recompute=mode).estimate(plan).device_peak_memory_bytes.values())
    simulated = [d.peak_memory_bytes for d in simulate(plan, profile, DGX1, FREE).devices]
    assert simulated == pytest.approx(estimate, rel=1e-12)


def test_backward_working_set_and_fp32_loss_logits_from_the_shapes() -> None:
    b, s, h, v = 2, 128, 256, 500
    t = b * s
    spec = f"gpt:layers=2,hidden={h},heads=4,seq={s},vocab={v}"
    fused = zoo_model(spec + ",flash=1", dtype="float16", batch_size=b)
    # flash attention: dQ, dK, dV (3 t h) against the GeLU's two gradients (2 x 4 h t), plus t h
    assert backward_working_set_bytes(fused, 1, b) == 2 * (t * h + max(3 * t * h, 8 * h * t))
    # the head: the logits' gradient (t V) and the GEMM's input gradient (t h), in fp16
    assert backward_working_set_bytes(fused, 3, b) == 2 * t * (v + h)
    # the embedding (no GEMM): its output, as any unshaped layer
    assert backward_working_set_bytes(fused, 0, b) == fused.activation_bytes(b)[0]
    # Megatron-LM's loss keeps an fp32 softmax of the logits whatever the training dtype: the head
    # saves the layer norm's and the GEMM's inputs in the dtype and 4 bytes per logit
    assert fused.layers[3].stashed_bytes == 2 * t * h * 2 + 4 * t * v
    fp32 = zoo_model(spec, dtype="float32", batch_size=b)
    assert fp32.layers[3].stashed_bytes == 2 * t * h * 4 + 4 * t * v
    # BERT's head (not Megatron-LM's loss) keeps its probabilities in the training dtype
    bert = zoo_model("bert48", dtype="float16", batch_size=1)
    bert32 = zoo_model("bert48", dtype="float32", batch_size=1)
    assert 2 * bert.layers[-1].stashed_bytes == bert32.layers[-1].stashed_bytes


@pytest.mark.parametrize("schedule", ["zb-h1", "zb-h2", "zbv"])
def test_both_executors_tally_the_split_backward_alike(schedule: str) -> None:
    chunks = 2 if schedule == "zbv" else 1
    profile = _gpt(4, chunks)
    plan = _plan(profile, 4, 8, schedule, "none", chunks=chunks)
    engine = simulate(plan, profile, DGX1, FREE, executor="simpy")
    fast = simulate(plan, profile, DGX1, FREE, executor="fast")
    assert [d.peak_memory_bytes for d in fast.devices] == [d.peak_memory_bytes for d in engine.devices]
    assert fast.memory == engine.memory
