"""Issue 15's model-shapes bullet: the zoo's transformers and ``gpt:`` specs carry a shape on
every layer, the embedding and the LM head as their own layers (first and last), so the
Megatron planner puts them on the first and last stage and TP splits the head by vocabulary."""

from __future__ import annotations

import pytest

from pipesim.planner.three_d import ThreeDCosts, chunk_ranges
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.costmodels.tp_comm import layer_collectives
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.shape import LayerKind

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=50257"


@pytest.mark.parametrize(("model", "vocab"), [("bert48", 30522), ("xlnet36", 32000), (GPT, 50257)])
def test_transformers_carry_shapes_with_embedding_and_head_layers(model: str, vocab: int) -> None:
    profile, cluster = resolve_inputs(model, "dgx-a100-x2")
    shapes = [layer.shape for layer in profile.layers]
    assert all(s is not None for s in shapes)
    kinds = [s.kind for s in shapes if s is not None]
    assert kinds[0] is LayerKind.EMBEDDING
    assert kinds[-1] is LayerKind.HEAD
    assert set(kinds[1:-1]) == {LayerKind.BLOCK}
    head = shapes[-1]
    assert head is not None
    assert head.vocab == vocab
    # the planner's chunks: the embedding with the first, the head with the last
    costs = ThreeDCosts(profile, cluster, Recompute.NONE)
    p = 2
    ranges = chunk_ranges(costs, p, 1)
    assert ranges[0][0] == 0
    assert ranges[-1][1] == profile.num_layers - 1
    # vocabulary-parallel head: its forward all-reduces are the fp32 per-token softmax terms
    # (b s values), not b s h activations
    fwd = [c for c in layer_collectives(head, 8, False, 1, 2) if c.phase == "F"]
    assert [c.nbytes for c in fwd] == [head.seq * 4] * 3
