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
Not counted: the copies ``torch.matmul`` may make of the permuted Q, K, V views to batch them (and
of the permuted context gradient), and each kernel's host-side dispatch beyond the launch cost the
compute model already charges. Rules read from the code, not fits.
"""

from __future__ import annotations

from pipesim.profiles.models.zoo.tf1_ops import OpSequence

__all__ = [
    "BIAS_GRAD",
    "CAUSAL_WHERE",
    "GELU_NEW",
    "GELU_NEW_SAVED",
    "MERGE_HEADS",
    "RESIDUAL",
    "SCORE_DIVIDE",
    "SOFTMAX",
]

SCORE_DIVIDE = OpSequence(name="attn_weights / torch.full([], sqrt(d))", fwd=(2,), bwd=(2,))
"""The score scaling as a division by a 0-dim tensor: read, write; backward ``grad / other``."""

CAUSAL_WHERE = OpSequence(name="torch.where(causal_mask, attn_weights, mask_value)", fwd=(2,), bwd=(2,))
"""The causal mask: read the scores, write; backward ``where(mask, grad, 0)`` (the mask's reads,
``s^2`` bytes shared by every sample and head, are negligible)."""

SOFTMAX = OpSequence(name="torch.nn.functional.softmax over the last axis", fwd=(2,), bwd=(3,))
"""ATen's softmax: one kernel (read, write); ``_softmax_backward_data`` reads the gradient and the
output and writes the input gradient."""

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
