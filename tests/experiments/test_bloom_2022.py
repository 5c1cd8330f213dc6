"""BLOOM-176B's simulation runs DeepSpeed's BF16_Optimizer as the run used it
(experiments/validation/bloom_2022.py)."""

from __future__ import annotations

import pytest

from experiments.validation.bloom_2022 import simulate_bloom
from pipesim.simulator import EventKind

_H, _V, _SEQ, _TP = 14336, 250880, 2048, 4


def test_gradients_are_reduced_in_bf16_and_the_weights_gathered_in_bf16() -> None:
    result = simulate_bloom(16, 2)
    events = [e for e in result.events if e.device == 0 and e.kind is EventKind.ALL_REDUCE]
    # ReduceGrads' all-reduce, then the tied embeddings' pair all-reduce with the last stage (its
    # TP shard of the vocabulary x hidden matrix in bf16), then the all-gather of the updated shards
    assert len(events) == 3
    assert events[1].nbytes == 2 * _V * _H / _TP
    stage0 = [events[0], events[2]]
    # stage 0: the embedding (vocabulary and positions) and 5 blocks of 12 h^2 + 13 h, over 4 TP
    # ranks (the few replicated parameters, positions and layer norms, are within the tolerance)
    block = 12 * _H * _H + 13 * _H
    params = ((_V + _SEQ) * _H + 5 * block) / _TP
    for event in stage0:
        assert event.nbytes == pytest.approx(2 * params, rel=1e-2)  # bf16: communication_data_type

