"""GNMT-16: Google's neural machine translation model with 8 encoder and 8 decoder LSTM layers.

Shape of PipeDream's GNMT-16 (Narayanan et al., SOSP 2019; the ``gnmt_large`` model of their
runtime, derived from the MLPerf v0.5 GNMT reference): hidden 1024, a shared 32320-token
vocabulary with separate source and target embedding tables, a bidirectional first encoder layer,
seven unidirectional encoder layers (residual connections from the third on), a recurrent
attention module (one LSTM layer plus normalised Bahdanau attention), seven decoder layers that
read the attention context concatenated with the previous output (residual from the second on),
and a classifier. 277,686,273 parameters.

The model is a DAG in topological order: the target embedding has no input from the encoder and
sits just before the decoder, the encoder output feeds the attention layer, and the attention
context feeds every decoder layer. LSTMs are costed as cuDNN runs them (Appleyard, Kocisky &
Blunsom, "Optimizing Performance of Recurrent Neural Networks on GPUs", arXiv:1604.01946): the
four gates' GEMMs combined into one, one GEMM for the input projection of all time steps, one
small GEMM and one fused gate kernel per time step, and one GEMM for each weight gradient over
all steps; the backward of the recurrence is per step too. The input projection (in the
backward, the input gradient) runs on a stream beside the recurrence, and the two directions of
a bidirectional layer beside each other: they overlap as far as the GPU's throughput allows
(:meth:`~pipesim.profiles.costmodels.compute.ComputeModel.concurrent_time_s`). cuDNN launches
the per-step kernels itself, so they pay the GPU launch gap but not the framework's
per-operator dispatch.
"""

from __future__ import annotations

from pipesim.profiles.costmodels.compute import GemmShape
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.profiles.models.zoo.roofline import LayerCost, Roofline

__all__ = ["GNMT16_BATCH", "GNMT16_SEQ", "gnmt16", "lstm"]

GNMT16_SEQ = 50
"""Tokens per sentence (source and target): the maximum training length of the MLPerf v0.5 GNMT
reference that PipeDream's GNMT code derives from (``max_length_train = 50``)."""
GNMT16_BATCH = 64
"""Default profile batch, sentences: a per-GPU batch in the range PipeDream's and MLPerf's GNMT
runs used (64-128)."""

_VOCAB = 32320  # MLPerf GNMT BPE vocabulary (PipeDream's gnmt_large uses the same size)
_HIDDEN = 1024


def lstm(lc: LayerCost, *, steps: int, batch: int, fan_in: int, hidden: int, directions: int = 1) -> None:
    """One (optionally bidirectional) LSTM layer over ``steps`` x ``batch`` tokens, as cuDNN runs it.

    Forward: per direction one input GEMM for all steps (``tokens x 4h x fan_in``) and a chain of
    ``steps`` recurrent GEMMs (``batch x 4h x h``) each followed by one fused gate kernel. The
    input GEMMs and the chains of both directions are independent streams, timed together by
    :meth:`~pipesim.profiles.costmodels.compute.ComputeModel.concurrent_time_s`.
    Backward data (``cudnnRNNBackwardData``): per direction a chain of fused gate-gradient
    kernels and ``batch x h x 4h`` GEMMs (the gradient to ``h_{t-1}``) beside one input-gradient
    GEMM over all steps, again concurrent. Backward weights (``cudnnRNNBackwardWeights``, called
    after it): one GEMM per weight matrix over all steps, in turn (weight-gradient work).
    """
    model = lc.rl.model
    d = lc.rl.elem_bytes
    tokens = steps * batch
    gates = 4 * hidden
    gate_bytes = d * batch * hidden * 8  # read 4h gates and c, write c and h (and keep them)
    gate_flop = 10.0 * batch * hidden
    step = GemmShape(m=batch, n=gates, k=hidden)  # h_{t-1} @ W_hh
    step_back = GemmShape(m=batch, n=hidden, k=gates)  # gradient to h_{t-1}
    project = GemmShape(m=tokens, n=gates, k=fan_in)  # x @ W_ih for all steps
    project_back = GemmShape(m=tokens, n=fan_in, k=gates)  # gradient to x
    weight_grads = (GemmShape(m=fan_in, n=gates, k=tokens), GemmShape(m=hidden, n=gates, k=tokens))

    def gemm_bytes(shape: GemmShape) -> float:
        return d * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n) * shape.count

    def gemm_s(shape: GemmShape) -> float:
        return model.gemm_time_s(shape, gemm_bytes(shape))

    for direction, chain_gemm, chain_gate_bytes, parallel in (
        ("fwd", step, gate_bytes, project),
        ("bwd", step_back, 1.5 * gate_bytes, project_back),
    ):
        chain_s = steps * (gemm_s(chain_gemm) + lc.rl.memory_kernel_s(gate_flop, chain_gate_bytes))
        gemm_flop = directions * (steps * chain_gemm.flop + parallel.flop)
        memory_bytes = directions * steps * chain_gate_bytes
        time_s = model.concurrent_time_s(
            [chain_s] * directions + [gemm_s(parallel)] * directions,
            flop=gemm_flop, memory_bytes=memory_bytes,
        )
        target = lc.fwd if direction == "fwd" else lc.bwd
        moved = memory_bytes + directions * (steps * gemm_bytes(chain_gemm) + gemm_bytes(parallel))
        target.add(time_s, gemm_flop + directions * steps * gate_flop, moved)
    for _ in range(directions):
        lc.gemm_shapes.append(project)
        for shape in weight_grads:
            lc.gemm_kernel("bwd", shape, wgrad=True, internal=True)
        lc.params += gates * fan_in + gates * hidden + 2 * gates  # PyTorch keeps two bias vectors
        # cuDNN's reserve space: the input (for the W_ih gradient), gates, cell and hidden states.
        lc.save(tokens * (fan_in + gates + 2 * hidden))


def _embedding(rl: Roofline, name: str, tokens: int, vocab: int) -> Layer:
    lc = LayerCost(name, rl)
    lc.eltwise(tokens * _HIDDEN, fwd_passes=2, bwd_passes=2, wgrad_params=True)  # gather / scatter-add
    lc.params += vocab * _HIDDEN
    return lc.build(output_elements=tokens * _HIDDEN)


def _attention(lc: LayerCost, *, batch: int, tgt: int, src: int, hidden: int) -> None:
    """Normalised Bahdanau attention of ``tgt`` queries over ``src`` encoder outputs per sample."""
    big = batch * tgt * src * hidden  # the tanh(q + k) tensor
    lc.gemm(batch * tgt, hidden, hidden)  # query projection
    lc.gemm(batch * src, hidden, hidden)  # key projection
    lc.params += 2 * hidden * hidden + 2 * hidden + 1  # W_q, W_k, v, normalisation bias and scalar
    lc.eltwise(big, fwd_passes=3, bwd_passes=4, flop_per_element=20)  # broadcast add + tanh
    lc.gemm(batch * tgt * src, 1, hidden)  # scores = tanh(.) @ v (reads the big tensor)
    lc.eltwise(batch * tgt * src, fwd_passes=2, bwd_passes=3, flop_per_element=5)  # mask + softmax
    lc.gemm(tgt, hidden, src, count=batch, weight=False)  # context = probabilities @ keys
    lc.save(big)  # tanh output
    lc.save(batch * (tgt + src) * hidden)  # projected queries and keys
    lc.save(batch * tgt * src)  # probabilities


def gnmt16(rl: Roofline, batch: int, *, seq: int = GNMT16_SEQ, vocab: int = _VOCAB) -> ModelProfile:
    """GNMT-16 (8 + 8 LSTM layers, hidden 1024) as a DAG of 19 layers.

    Layers: ``src_embed``, ``enc0`` (bidirectional) .. ``enc7``, ``tgt_embed``, ``dec0``
    (recurrent attention), ``dec1`` .. ``dec7``, ``classifier`` (with the loss). Sequence length
    :data:`GNMT16_SEQ` (50) for source and target, default batch :data:`GNMT16_BATCH` (64).
    277.7M parameters (DAPPLE/PipeDream quote ~291M for GNMT-16). ``seq`` and ``vocab`` change
    the sentence length and the vocabulary (to compare with a measurement of other shapes).
    """
    h = _HIDDEN
    t = seq * batch
    layers: list[Layer] = [_embedding(rl, "src_embed", t, vocab)]
    enc = LayerCost("enc0", rl)
    lstm(enc, steps=seq, batch=batch, fan_in=h, hidden=h, directions=2)
    layers.append(enc.build(output_elements=2 * t * h))
    for i in range(1, 8):
        lc = LayerCost(f"enc{i}", rl)
        fan_in = 2 * h if i == 1 else h
        lc.dropout(t * fan_in)
        lstm(lc, steps=seq, batch=batch, fan_in=fan_in, hidden=h)
        if i >= 2:
            lc.eltwise(t * h, fwd_passes=3, bwd_passes=1)  # residual add
        layers.append(lc.build(output_elements=t * h))
    layers.append(_embedding(rl, "tgt_embed", t, vocab))
    att = LayerCost("dec0", rl)
    lstm(att, steps=seq, batch=batch, fan_in=h, hidden=h)
    _attention(att, batch=batch, tgt=seq, src=seq, hidden=h)
    layers.append(att.build(output_elements=2 * t * h))  # LSTM output and attention context
    for i in range(1, 8):
        lc = LayerCost(f"dec{i}", rl)
        lc.dropout(t * h)
        lc.eltwise(2 * t * h, fwd_passes=2, bwd_passes=2)  # concatenate with the context
        lstm(lc, steps=seq, batch=batch, fan_in=2 * h, hidden=h)
        if i >= 2:
            lc.eltwise(t * h, fwd_passes=3, bwd_passes=1)  # residual add
        layers.append(lc.build(output_elements=t * h))
    cls = LayerCost("classifier", rl)
    cls.gemm(t, vocab, h)
    cls.params += h * vocab + vocab
    cls.save(t * h)
    cls.eltwise(t * vocab, fwd_passes=3, bwd_passes=2, flop_per_element=5)  # log-softmax + loss
    cls.save(t * vocab)
    layers.append(cls.build(output_elements=t))
    # 0 src_embed, 1..8 enc0..enc7, 9 tgt_embed, 10 dec0, 11..17 dec1..dec7, 18 classifier
    edges = [(i, i + 1) for i in range(8)]
    edges += [(8, 10), (9, 10)]
    edges += [(i, i + 1) for i in range(10, 18)]
    edges += [(10, j) for j in range(12, 18)]  # the attention context feeds every decoder layer
    return rl.profile("gnmt16", layers, batch, f"GNMT-16 (8+8 LSTM layers, hidden 1024), seq {seq}",
                      seq_len=seq, edges=edges)
