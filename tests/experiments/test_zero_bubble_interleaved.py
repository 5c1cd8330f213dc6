"""The 1F1B-I throughput records run the authors' interleaved layout (zero_bubble_2024.py)."""

from __future__ import annotations

import pytest

from experiments.validation.zero_bubble_2024 import (
    MODELS,
    interleaved_split,
    megatron_chunk_layers,
    samples_per_gpu_per_s,
    simulated,
)
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator.trace import EventKind


@pytest.mark.parametrize(("model", "chunks_per_rank"), [("1.5b", 3), ("6.2b", 4), ("14.6b", 3), ("28.3b", 2)])
def test_table_3_models_pad_two_layers_into_the_end_chunks(model: str, chunks_per_rank: int) -> None:
    # --allow-padding-num-layers pads to a multiple of p (22 -> 24 on 8 ranks, ...); one layer
    # per chunk; the two padding layers come off chunk 0 (embedding) and the last (head).
    layers, p = MODELS[model][0], MODELS[model][3]
    sizes = megatron_chunk_layers(layers, p)
    assert len(sizes) == chunks_per_rank * p
    assert sum(sizes) == layers
    assert sizes[0] == sizes[-1] == 0
    assert set(sizes[1:-1]) == {1}
    assert interleaved_split(layers, p) == [1] * (layers + 2)


def test_chunk_rule_without_padding_and_with_more_padding_than_embedding_and_head() -> None:
    assert megatron_chunk_layers(16, 8) == [1] * 16
    # 21 layers on 8 ranks: three padding layers, taken off chunks -1, 0 and 1; chunk 1 is then a
    # bare no-op layer, which the zoo profile has no entry for.
    sizes = megatron_chunk_layers(21, 8)
    assert (sizes[-1], sizes[0], sizes[1]) == (0, 0, 0)
    assert sum(sizes) == 21
    with pytest.raises(ValueError, match="no-op"):
        interleaved_split(21, 8)
    with pytest.raises(ValueError, match="at least 1"):
        megatron_chunk_layers(0, 8)


def test_interleaved_ranks_hold_every_p_th_chunk_and_do_all_their_work() -> None:
    # Rank r holds chunks r, r + p, r + 2p (embedding on rank 0, head on rank p - 1) and runs
    # each of them forward and backward once per micro-batch.
    layers, heads, hidden, p, mbs = MODELS["1.5b"]
    m = 24
    result = simulated("1.5b", m, "1f1b-i")
    assert result.num_stages == layers + 2
    profile, _ = resolve_inputs(f"gpt:layers={layers},hidden={hidden},heads={heads},seq=1024,vocab=32000",
                                "dgx-a100-x2", overrides={"servers": 1}, dtype="fp16")
    fwd, bwd = profile.fwd_times_s(mbs), profile.bwd_times_s(mbs)
    passes = (EventKind.FORWARD, EventKind.BACKWARD)
    for device in result.devices:
        assert tuple(device.stages) == tuple(range(device.device, layers + 2, p))
        work = m * sum(fwd[s] + bwd[s] for s in device.stages)
        ran = sum(e.end_s - e.start_s for e in result.events
                  if e.device == device.device and e.kind in passes)
        assert ran == pytest.approx(work, rel=1e-9)


def test_interleaving_beats_1f1b_by_less_as_micro_batches_grow() -> None:
    # Its bubble (p - 1) / (v m + p - 1) shrinks towards 1F1B's at large m, as Table 4's rows do.
    gains = [samples_per_gpu_per_s("6.2b", m, "1f1b-i") / samples_per_gpu_per_s("6.2b", m, "1f1b")
             for m in (24, 32, 64)]
    assert gains[0] > gains[1] > gains[2] > 1.0
