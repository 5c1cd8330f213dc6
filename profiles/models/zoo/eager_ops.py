"""The element-wise work of a GPT block as eager (op-by-op) PyTorch runs it: HuggingFace's GPT2Block.

The zoo's default ``gpt:`` block prices its memory-bound work as fused kernels (one per layer norm,
GeLU, softmax and dropout; biases in the GEMM epilogue). Eager PyTorch without a fusing compiler
runs every Python-level tensor operation as its own kernel, and autograd runs each one's backward
formula as kernels of its own. HuggingFace transformers' ``GPT2Block`` (the 2022 module the
mli/transformers-benchmarks notebook times) is written that way; read at
huggingface/transformers ``src/transformers/models/gpt2/modeling_gpt2.py`` @ 0010f602
(``GPT2Attention._attn``, ``_merge_heads``, ``GPT2MLP``, ``GPT2Block.forward``) and
``src/transformers/activations.py`` @ 00e12e7c (``NewGELUActivation``, the ``gelu_new`` of GPT-2's
config):

* attention scores (``b a s^2`` elements): ``attn_weights / torch.full([], sqrt(d))`` (a division
  kernel), ``torch.where(causal_mask, attn_weights, mask_value)`` (the mask is a ``1 x 1 x s x s``
  bool buffer broadcast over batch and heads: its reads are left out), ``softmax``, the
  probabilities' dropout; ``.type(value.dtype)`` is a no-op for a half-precision module;
* ``_merge_heads``: ``permute(0, 2, 1, 3).contiguous()``, a copy of the context;
* the MLP: ``gelu_new`` = ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))``, eight
  kernels over the ``b s 4h`` tensor;
* ``Conv1D`` is ``torch.addmm(bias, x, W)``: the bias add rides in the GEMM, but its backward sums
  the output gradient over the rows for the bias gradient (a reduction kernel);
* residual adds ``attn_output + residual``: a forward add, and autograd's sum of the two
  gradients that meet at the residual's input in the backward;
* layer norms (``nn.LayerNorm``) and dropouts (``nn.Dropout``) are one ATen kernel each way, as in
  the fused block.

Passes are full reads or writes of a tensor of the composite's size, as in
:mod:`~pipesim.profiles.models.zoo.tf1_ops` (whose :class:`OpSequence` these reuse). The backward
lists follow PyTorch's autograd formulas (pytorch/pytorch ``tools/autograd/derivatives.yaml`` and
``torch/csrc/autograd/FunctionsManual.cpp`` @ 002ca671: ``pow_backward``, ``mul_tensor_backward``,
``div_tensor_self_backward``): a product ``x * y`` of two tensors needs ``grad * y``
and ``grad * x`` (two kernels), a product with a Python scalar ``grad * c`` (one), an add with a
scalar passes the gradient through (none); ``tanh_backward(grad, y)`` reads the gradient and the
output (one kernel); ``pow_backward`` computes ``grad * (3 * x.pow(2))`` (three kernels);
``_softmax_backward_data`` reads the gradient and the output; ``where``'s gradient is
``where(mask, grad, 0)``; a division by a tensor that needs no gradient is ``grad / other``; and
where one tensor feeds several ops, autograd adds their gradients (one add per extra use).
The head split's views cost copies too: ``_split_heads`` (``view``, then ``permute(0, 2, 1, 3)``)
has a gradient that ``view``'s backward must copy (:data:`SPLIT_HEADS_GRAD`, three per block),
``c_attn(...).split(...)``'s backward concatenates the three (:data:`SPLIT_CAT`), and with more
than one sample ``torch.matmul`` copies the permuted Q, K, V to batch them and the context's
gradient back (:data:`MATMUL_BATCH_COPY`). Not counted: each kernel's host-side dispatch beyond
the launch cost the compute model already charges. Rules read from the code, not fits.

The second group (:data:`BIAS_ADD_INPLACE` to :data:`EMBEDDING_DENSE`) are PyTorch 1.9's kernels
that DT-FM's model runs (:mod:`~pipesim.profiles.models.zoo.dtfm`); :data:`SCORE_DIVIDE`,
:data:`SOFTMAX`, :data:`MERGE_HEADS`, :data:`RESIDUAL` and :data:`BIAS_GRAD` serve both.
"""

from __future__ import annotations

from pipesim.profiles.models.zoo.tf1_ops import OpSequence

__all__ = [
    "BIAS_ADD_INPLACE",
    "BIAS_GRAD",
    "CAUSAL_WHERE",
    "EMBEDDING_DENSE",
    "GELU_NEW",
    "GELU_NEW_SAVED",
    "GRAD_ACCUMULATE",
    "GRAD_SUM",
    "LAYER_NORM_TORCH19",
    "MATMUL_BATCH_COPY",
    "MERGE_HEADS",
    "RESIDUAL",
    "SCORE_DIVIDE",
    "SOFTMAX",
    "SPLIT_CAT",
    "SPLIT_HEADS_GRAD",
]

SCORE_DIVIDE = OpSequence(name="attn_weights / torch.full([], sqrt(d))", fwd=(2,), bwd=(2,))
"""The score scaling as a division by a 0-dim tensor (HuggingFace) or by a Python float (DT-FM's
``scores / self.scale``): read, write; backward ``grad / other``."""

CAUSAL_WHERE = OpSequence(name="torch.where(causal_mask, attn_weights, mask_value)", fwd=(2,), bwd=(2,))
"""The causal mask: read the scores, write; backward ``where(mask, grad, 0)`` (the mask's reads,
``s^2`` bytes shared by every sample and head, are negligible)."""

SOFTMAX = OpSequence(name="torch.nn.functional.softmax over the last axis", fwd=(2,), bwd=(3,))
"""ATen's softmax: one kernel (read, write); ``_softmax_backward_data`` reads the gradient and the
output and writes the input gradient. Rows wider than 1024 elements (``host_softmax`` in
``aten/src/ATen/native/cuda/SoftMax.cu``: the warp-per-row kernel only for ``dim_size <= 1024``)
run ``cunn_SoftMaxForward``, one block per row, which reads its row three times (max, sum of
exponentials, the write) and ``cunn_SoftMaxBackward`` twice: a block's row (4 KB at 2048 fp16
elements) is re-read within microseconds, from the SM's L1 or the L2, so the device-memory passes
stay 2 and 3; the kernels' time beyond their traffic (three sweeps and two block reductions per
row) is not modelled."""

GELU_NEW = OpSequence(
    name="gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), op by op",
    # pow(x, 3), 0.044715 * ., x + ., sqrt(2/pi) * ., tanh, 1.0 + ., 0.5 * x, the final product
    fwd=(2, 2, 3, 2, 2, 2, 2, 3),
    # final product: grad * (1 + tanh) and grad * (0.5 x) (3, 3); 0.5 * x: (2); 1.0 + .: none;
    # tanh_backward (3); sqrt(2/pi) * .: (2); x + .: none; 0.044715 * .: (2); pow_backward:
    # x.pow(2), 3 * ., grad * . (2, 2, 3); x feeds three ops: two gradient adds (3, 3)
    bwd=(3, 3, 2, 3, 2, 2, 2, 2, 3, 3, 3),
)
"""HuggingFace's ``NewGELUActivation`` in eager PyTorch: 18 passes in 8 kernels forward, 28 in 11
backward, over the ``[tokens, ffn]`` tensor (the fused block: 2 and 3 in one kernel each)."""

GELU_NEW_SAVED = 3
"""Extra ``[tokens, ffn]`` tensors autograd keeps for ``gelu_new`` beyond the fused GeLU's input and
output (Korthikanti et al.'s count): the ``tanh`` output (for ``tanh_backward``) and the two
operands of the final product, ``0.5 x`` and ``1 + tanh``; ``pow`` keeps ``x``, already counted."""

MERGE_HEADS = OpSequence(name="context.permute(0, 2, 1, 3).contiguous()", fwd=(2,), bwd=())
"""``_merge_heads``: a copy forward; ``contiguous``' and ``permute``'s gradients are views."""

BIAS_GRAD = OpSequence(name="addmm bias gradient: grad.sum(0)", fwd=(), bwd=(1,))
"""``Conv1D``'s bias: no forward kernel (``addmm``), a row reduction of the output gradient
backward, over the ``[tokens, fan_out]`` tensor."""

RESIDUAL = OpSequence(name="residual add and its gradient sum", fwd=(3,), bwd=(3,))
"""``attn_output + residual``: an add forward; backward the add passes the gradient through, and
autograd sums it with the layer norm branch's gradient of the residual's input (read two, write
one)."""

# ------------------------------------------------------------------------------------------------
# PyTorch 1.9 kernels (DT-FM's runs: torch==1.9.0+cu111, DS3Lab/Decentralized_FM_alpha README.md
# @ 2086d64), for :mod:`~pipesim.profiles.models.zoo.dtfm`.

BIAS_ADD_INPLACE = OpSequence(name="F.linear on a 3-D input before PyTorch 1.12: matmul, output.add_(bias)",
                              fwd=(2,), bwd=(1,))
"""``torch.nn.functional.linear`` of a 3-D input runs ``matmul`` and then ``output.add_(bias)``
(pytorch/pytorch issue #39661: "F.linear goes down to addmm for 2d tensors and to matmul + add_
for other cases"; the fused ``addmm`` path for contiguous 3-D inputs came with PR #72728, merged
2022-02, after 1.9): forward an in-place add reading and writing the output (the bias row is
negligible); backward the add passes the gradient through and ``sum_to_size`` reduces it over
the rows for the bias gradient (one pass), over the ``[tokens, fan_out]`` tensor."""

LAYER_NORM_TORCH19 = OpSequence(name="nn.LayerNorm in PyTorch 1.9 (two kernels forward, four backward)",
                                fwd=(1, 2), bwd=(2, 0, 3, 2))
"""ATen's layer norm before its vectorised kernel (``aten/src/ATen/native/cuda/layer_norm_kernel.cu``
of the 1.x line with ``THCCeilDiv``): forward ``RowwiseMomentsCUDAKernel`` (reads X) and
``LayerNormForwardCUDAKernel`` (reads X, writes Y); backward ``ComputeInternalGradientsCUDAKernel``
(reads dY and X), ``ComputeGradientFusedParamsCUDAKernel`` (per-row vectors only),
``LayerNormBackwardCUDAKenrel`` (reads dY and X, writes dX) and, for 512 rows or more,
``GammaBetaBackwardCUDAKernel`` (reads dY and X). Over the ``[tokens, hidden]`` tensor."""

SPLIT_CAT = OpSequence(name="split's backward: torch.cat of the gradients of the three parts",
                       fwd=(), bwd=(2,))
"""``c_attn(x).split(h, dim=2)`` (HuggingFace's fused Q, K, V projection): the split is three
views forward; backward ``split_backward`` concatenates the three ``[tokens, hidden]`` gradients
(read, write, over the ``[tokens, 3 hidden]`` tensor)."""

MATMUL_BATCH_COPY = OpSequence(name="torch.matmul of head-major views of several samples: reshape copies",
                               fwd=(2, 2, 2), bwd=(2,))
"""``torch.matmul`` of 4-D operands reshapes them to ``[b a, s, d]`` to batch the GEMMs
(``at::matmul``: ``expand(...).reshape(...)``). A head-major view of a ``[b, s, h]`` projection
(strides ``s h, d, h, 1``, or ``s 3h, d, 3h, 1`` from a split) merges its sample and head
dimensions into a view only with one sample, so with more than one ``reshape`` copies Q, K and V
forward (three copies, read and write each); backward the context's gradient, transposed back from
the merged ``[b, s, h]`` context (head-major strides again), is copied by the product's
``_unsafe_view`` backward ``reshape`` (one copy). Over the ``[tokens, hidden]`` tensor, charged
only with more than one sample: with one, as DT-FM's micro-batches, all are views."""

SPLIT_HEADS_GRAD = OpSequence(name="x.view(b, s, a, d).transpose(1, 2) backward: a copy", fwd=(), bwd=(2,))
"""Splitting a projection into heads with ``view`` and ``transpose(1, 2)`` (DT-FM) or
``permute(0, 2, 1, 3)`` (HuggingFace's ``_split_heads``): views forward (``torch.matmul`` copies
them only with more than one sample, :data:`MATMUL_BATCH_COPY`), but backward the head-major
gradient transposed back is not viewable as ``[b, s, h]`` (its head stride is ``s d``, not ``d``),
so ``view``'s backward ``reshape`` copies it: read, write, over the ``[tokens, hidden]`` tensor."""

GRAD_SUM = OpSequence(name="autograd's sum of one more gradient of a tensor", fwd=(), bwd=(3,))
"""A tensor used by one more op than :data:`RESIDUAL` counts: autograd's input buffer adds the
extra gradient (read two, write one)."""

GRAD_ACCUMULATE = OpSequence(name="AccumulateGrad: param.grad += new_grad", fwd=(), bwd=(3,))
"""A parameter's gradient of one micro-batch added into ``.grad`` of the micro-batches before it
(``AccumulateGrad``: after the first micro-batch of an iteration, whose gradient it keeps,
``variable_grad += new_grad`` with gradient mode off; ``torch/csrc/autograd/functions/accumulate_grad.h``):
one kernel per parameter tensor, over the parameter's elements."""

EMBEDDING_DENSE = OpSequence(name="nn.Embedding lookup and its dense backward (<= 3072 indices)",
                             fwd=(2,), bwd=(2,))
"""``embedding`` forward gathers the rows (read, write, over ``[tokens, hidden]``); backward
``embedding_dense_backward_cuda`` with at most 3072 indices and no frequency scaling
(``aten/src/ATen/native/cuda/Embedding.cu`` of the 1.x line) first fills ``at::zeros({num_weights,
hidden})``, a full table (costed by the caller over the table), then
``embedding_backward_feature_kernel`` reads the gradient and adds it into the rows (read, write)."""
