"""Full recomputation of shaped transformer blocks, one layer at a time (memory.layerwise_replays).

Megatron-LM (``--checkpoint-activations``, ``checkpoint_num_layers`` 1), DeepSpeed's pipeline
engine and GPT-NeoX keep each checkpointed block's input and re-materialise one block at a time;
GPipe re-materialises a whole partition at once. For a stage of ``L`` blocks, each keeping ``I``
bytes of input and saving ``S`` bytes, with ``K`` micro-batches in flight and backward working set
``W``, the two differ in closed form:

    per layer:  K (L I) + (S + W)        per stage (GPipe):  K I + (L S + W)

so the per-stage peak exceeds the per-layer one by ``(L - 1)(S - K I)``.
"""

from __future__ import annotations

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.costmodels.memory import stage_activations, static_memory_bytes
from pipesim.profiles.costmodels.tensor_parallel import tp_stage_activations
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, simulate

FREE = SimOptions(free_links=True, optimizer_step=False)
S_, B_, H_, A_, FFN = 128, 2, 256, 4, 1024  # seq, micro-batch, hidden, heads, MLP width
GPT = f"gpt:layers=8,hidden={H_},heads={A_},seq={S_},vocab=1000"
I_ = 2 * S_ * B_ * H_  # a block's checkpointed input in fp16: 131072 bytes
S_SAVED = 34 * S_ * B_ * H_ + 5 * A_ * S_ * S_ * B_  # Korthikanti Eq. 1: 2883584 bytes
W_ = 2 * (S_ * B_ * H_ + max(2 * A_ * S_ * S_ * B_, 2 * FFN * S_ * B_))  # 1179648 bytes


def _plan(recompute: str, m: int) -> Plan:
    # embedding + 2 blocks | 4 blocks | 2 blocks + head: the middle stage holds L = 4 blocks
    return Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=2, replicas=1),
            StagePlan(first_layer=3, last_layer=6, replicas=1),
            StagePlan(first_layer=7, last_layer=9, replicas=1),
        ),
        global_batch_size=B_ * m,
        num_microbatches=m,
        schedule="1f1b",
        recompute=recompute,
    )


def test_a_middle_stage_of_blocks_keeps_their_inputs_and_remats_one() -> None:
    profile = zoo_model(GPT, dtype="fp16", batch_size=B_)
    blocks = 4
    acts = stage_activations(profile, 3, 6, B_, "full")
    assert acts.stash_bytes == pytest.approx(blocks * I_, rel=1e-12)  # the received input is block 3's
    assert acts.work_bytes == pytest.approx(S_SAVED + W_, rel=1e-12)
    # the same on one device of a TP group: the checkpoints whole without sequence parallelism,
    # divided by t with it; the re-materialised block as its kept bytes without recomputation
    assert tp_stage_activations(profile, 3, 6, B_, "full", 1, False) == acts
    none_tp = tp_stage_activations(profile, 3, 6, B_, "none", 2, False)
    none_one = stage_activations(profile, 3, 6, B_, "none")
    sp = tp_stage_activations(profile, 3, 6, B_, "full", 2, True)
    assert sp.stash_bytes == pytest.approx(blocks * I_ / 2, rel=1e-12)
    assert sp.work_bytes == pytest.approx((S_SAVED + W_) / 2, rel=1e-12)
    whole = tp_stage_activations(profile, 3, 6, B_, "full", 2, False)
    assert whole.stash_bytes == pytest.approx(blocks * I_, rel=1e-12)
    block_tp = (none_tp.stash_bytes - I_) / blocks  # Korthikanti Table 2: 10 + 24 / t + 5 a s / (h t)
    assert block_tp == pytest.approx(S_SAVED - (24 / 2 + 5 * A_ * S_ / H_ / 2) * S_ * B_ * H_, rel=1e-12)
    assert whole.work_bytes == pytest.approx(block_tp + (none_one.work_bytes) / 2, rel=1e-12)


def test_simulated_peak_per_layer_against_gpipe_per_stage() -> None:
    """GPT-NeoX-20B-like: the per-stage (GPipe) reading would exceed the simulated per-layer peak
    of the middle stage by (L - 1)(S - K I)."""
    profile = zoo_model(GPT, dtype="fp16", batch_size=B_)
    cluster = get_cluster("dgx1-v100")
    m, blocks, k = 6, 4, 2  # 1F1B on 3 ranks: the middle rank holds p - 1 = 2 micro-batches
    full = simulate(_plan("full", m), profile, cluster, FREE).devices[1].peak_memory_bytes
    none = simulate(_plan("none", m), profile, cluster, FREE).devices[1].peak_memory_bytes
    # without recomputation: static + K (I + L S) + W; with it: static + K (L I) + (S + W)
    static = none - k * (I_ + blocks * S_SAVED) - W_
    assert full == pytest.approx(static + k * blocks * I_ + S_SAVED + W_, rel=1e-12)
    per_stage = static + k * I_ + blocks * S_SAVED + W_
    assert per_stage - full == pytest.approx((blocks - 1) * (S_SAVED - k * I_), rel=1e-12)
    optimizer = _plan("none", m).optimizer
    assert static == pytest.approx(static_memory_bytes(profile, range(3, 7), optimizer), rel=1e-12)
