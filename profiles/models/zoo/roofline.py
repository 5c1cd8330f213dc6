"""Roofline costing of the zoo's kernels: FLOP and bytes per kernel turned into V100 seconds.

Every layer of a zoo model is a short list of kernels (GEMMs, convolutions, element-wise
passes), each with its FLOP and the bytes it moves to and from device memory. A kernel takes

    time = max(flop / (peak[dtype] x efficiency[dtype]), bytes / (bandwidth x memory_efficiency))
           + KERNEL_OVERHEAD_S

and a layer's forward (backward) time is the sum over its forward (backward) kernels: kernels of
one layer run one after another on the GPU, so a memory-bound layer norm next to a compute-bound
GEMM costs its own time rather than hiding under the GEMM's. The layer's ``fwd_flop`` and
``fwd_memory_bytes`` are the sums, for re-targeting the profile to other devices.

Peak FLOP/s, memory bandwidth and memory efficiency come from the hardware catalog
(:func:`pipesim.profiles.hardware.catalog.get_device`). The achievable fraction of peak FLOP/s is the
zoo's own calibration (:data:`ZOO_COMPUTE_EFFICIENCY`, sources there), because the catalog's
generic 0.4 is well below what cuBLAS/cuDNN reach in fp32 on a V100 in the measurements below.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.errors import invalid
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer
from pipesim.units import US

__all__ = [
    "KERNEL_OVERHEAD_S",
    "REFERENCE_DEVICE",
    "WINOGRAD_SPEEDUP",
    "ZOO_COMPUTE_EFFICIENCY",
    "LayerCost",
    "Roofline",
    "roofline_for",
]

REFERENCE_DEVICE = "V100-SXM2-16GB"
"""The catalog device every zoo profile is costed on."""

ZOO_COMPUTE_EFFICIENCY: dict[str, float] = {"float32": 0.60, "float16": 0.35}
"""Achievable share of the catalog's peak FLOP/s for GEMM and convolution kernels, per dtype.

float32 (share of the 15.7 TFLOP/s CUDA-core peak): 0.60. Source: the DAPPLE authors' TorchGraph
profiles measured on V100: a BERT-large encoder layer at batch 6, sequence 384 takes 8.07 ms
forward / 13.4 ms backward for 61.6 / 123.2 GFLOP, i.e. 7.6 / 9.2 TFLOP/s including its
memory-bound kernels; the GEMMs alone then run at about 0.55 (forward) and 0.65 (backward) of
peak. Cross-check: NVIDIA DeepLearningExamples ResNet-50 v1.5 (PyTorch, pytorch-21.03 NGC,
1 x V100 16GB) trains at 367 img/s in FP32, about 9 TFLOP/s (0.58 of peak) at ~24.6 GFLOP per
image for forward and backward.

float16 (share of the 125 TFLOP/s tensor-core peak): 0.35. Source: Shoeybi et al., "Megatron-LM"
(arXiv:1909.08053, 2019): a 1.2B-parameter GPT-2 model on one V100 sustains 39 TFLOP/s, 30% of
peak, for the whole step; with 0.35 for the GEMMs the zoo's ``gpt:layers=40,hidden=1536,heads=16,
seq=1024,vocab=51200`` at batch 8 runs at 38.0 TFLOP/s. Cross-check: NVIDIA's table gives ResNet-50
1200 img/s with mixed precision; the zoo gives 967 img/s (its unfused fp16 batch norms and ReLUs
are memory-bound).
"""

WINOGRAD_SPEEDUP: dict[str, float] = {"float32": 2.25, "float16": 1.0}
"""Speed-up of 3x3 stride-1 convolutions over their direct-convolution FLOP count, per dtype.

cuDNN runs fp32 3x3 convolutions with Winograd transforms (Lavin & Gray, "Fast Algorithms for
Convolutional Neural Networks", CVPR 2016: F(2x2, 3x3) needs 2.25x fewer multiplications). Without
it the DAPPLE authors' VGG-19 profile (V100, batch 32) would exceed the fp32 peak: its conv1_2
does 118 GFLOP in 7.2 ms (16.4 TFLOP/s). Tensor-core fp16 convolutions use implicit GEMM, so 1.0.
Profiles keep the direct-convolution FLOP in ``fwd_flop``/``bwd_flop``; only time is reduced.
"""

KERNEL_OVERHEAD_S = 2 * US
"""Fixed cost added to every kernel, seconds: the gap between back-to-back kernels of an eager
framework on a V100. A modelling assumption of the order of CUDA's few-microsecond launch latency;
it only matters for very small batches."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Roofline:
    """Achievable rates of the reference device in one training dtype.

    Attributes:
        device: catalog name of the device.
        dtype: training dtype (activations and GEMM inputs in this dtype).
        matmul_flop_per_s: achievable FLOP/s of GEMMs and convolutions.
        memory_bytes_per_s: achievable device-memory bandwidth, bytes/s.
        winograd_speedup: time divisor for 3x3 stride-1 convolutions (see :data:`WINOGRAD_SPEEDUP`).
        kernel_overhead_s: fixed cost per kernel, seconds.
    """

    device: str
    dtype: str
    matmul_flop_per_s: float
    memory_bytes_per_s: float
    winograd_speedup: float
    kernel_overhead_s: float

    @property
    def elem_bytes(self) -> int:
        """Bytes per activation element in this dtype."""
        return DTYPE_BYTES[self.dtype]

    def kernel_time_s(self, flop: float, bytes_moved: float, *, speedup: float = 1.0) -> float:
        """Roofline time of one kernel, seconds (compute time divided by ``speedup``)."""
        compute = flop / (self.matmul_flop_per_s * speedup)
        memory = bytes_moved / self.memory_bytes_per_s
        return max(compute, memory) + self.kernel_overhead_s


def roofline_for(dtype: str) -> Roofline:
    """The zoo's roofline for ``dtype`` on :data:`REFERENCE_DEVICE`.

    Raises:
        InputError: ``dtype`` is not ``"float32"`` or ``"float16"`` (the V100 has no bfloat16).
    """
    if dtype not in ZOO_COMPUTE_EFFICIENCY:
        raise invalid("dtype", dtype, f"must be one of {', '.join(ZOO_COMPUTE_EFFICIENCY)} for the zoo")
    device = get_device(REFERENCE_DEVICE)
    return Roofline(
        device=device.name,
        dtype=dtype,
        matmul_flop_per_s=device.peak_for(dtype) * ZOO_COMPUTE_EFFICIENCY[dtype],
        memory_bytes_per_s=device.achievable_memory_bandwidth_bytes_per_s,
        winograd_speedup=WINOGRAD_SPEEDUP[dtype],
        kernel_overhead_s=KERNEL_OVERHEAD_S,
    )


class _Direction:
    """Running totals of one direction (forward or backward) of a layer."""

    __slots__ = ("bytes_moved", "flop", "time_s", "wgrad_time_s")

    def __init__(self) -> None:
        self.flop = 0.0
        self.bytes_moved = 0.0
        self.time_s = 0.0
        self.wgrad_time_s = 0.0

    def add(self, rl: Roofline, flop: float, bytes_moved: float, *, speedup: float = 1.0,
            wgrad: bool = False) -> None:
        t = rl.kernel_time_s(flop, bytes_moved, speedup=speedup)
        self.flop += flop
        self.bytes_moved += bytes_moved
        self.time_s += t
        if wgrad:
            self.wgrad_time_s += t


class LayerCost:
    """Accumulates the kernels of one layer, then builds its :class:`Layer`.

    All element counts are for the whole profile batch; bytes are elements times the roofline's
    dtype size unless a method says otherwise. ``params`` counts parameters (elements), stored
    as ``parameter_bytes`` in the training dtype.
    """

    def __init__(self, name: str, rl: Roofline) -> None:
        self.name = name
        self.rl = rl
        self.fwd = _Direction()
        self.bwd = _Direction()
        self.params = 0
        self.saved_bytes = 0.0

    # -- building blocks -------------------------------------------------------------------
    def gemm(self, m: int, n: int, k: int, *, count: int = 1, weight: bool = True,
             speedup: float = 1.0) -> None:
        """``count`` GEMMs ``C[m,n] = A[m,k] @ B[k,n]`` as one batched kernel; ``B`` is a weight when
        ``weight``.

        Forward: 2mnk FLOP, reads A and B, writes C. Backward: the input gradient (2mnk) and the
        gradient of B (2mnk), which is a weight gradient when ``weight`` (else a second input
        gradient, as for attention's batched matmuls). Parameters are not added here.
        """
        d = self.rl.elem_bytes
        # ``count`` GEMMs of one shape run as one batched kernel (cuBLAS ``gemmStridedBatched``,
        # as frameworks do for attention): one launch overhead, not ``count``.
        flop = 2.0 * m * n * k * count
        moved = d * (m * k + k * n + m * n) * count
        self.fwd.add(self.rl, flop, moved, speedup=speedup)
        self.bwd.add(self.rl, flop, moved, speedup=speedup)
        self.bwd.add(self.rl, flop, moved, speedup=speedup, wgrad=weight)

    def conv(self, batch: int, cin: int, cout: int, kh: int, kw: int, hout: int, wout: int,
             hin: int, win: int, *, stride: int = 1, groups: int = 1) -> None:
        """A 2-D convolution (no bias) and its two backward convolutions; adds its weights.

        FLOP = 2 x batch x cout x hout x wout x (cin / groups) x kh x kw per direction part;
        bytes = input + weights + output. 3x3 stride-1 convolutions get the Winograd speed-up.
        """
        d = self.rl.elem_bytes
        w = cout * (cin // groups) * kh * kw
        flop = 2.0 * batch * cout * hout * wout * (cin // groups) * kh * kw
        moved = d * (batch * cin * hin * win + w + batch * cout * hout * wout)
        speedup = self.rl.winograd_speedup if (kh == kw == 3 and stride == 1) else 1.0
        self.fwd.add(self.rl, flop, moved, speedup=speedup)
        self.bwd.add(self.rl, flop, moved, speedup=speedup)
        self.bwd.add(self.rl, flop, moved, speedup=speedup, wgrad=True)
        self.params += w

    def eltwise(self, elements: float, *, fwd_passes: float, bwd_passes: float,
                flop_per_element: float = 1.0, wgrad_params: bool = False) -> None:
        """One memory-bound kernel per direction over ``elements`` elements.

        ``fwd_passes``/``bwd_passes`` count full reads or writes of a tensor of that size (an
        add reads two and writes one: 3). ``bwd_passes=0`` means no backward kernel.
        ``wgrad_params`` marks the backward as deferrable weight-gradient work (an embedding's
        scatter-add into its table).
        """
        d = self.rl.elem_bytes
        flop = flop_per_element * elements
        self.fwd.add(self.rl, flop, d * elements * fwd_passes)
        if bwd_passes > 0:
            self.bwd.add(self.rl, flop, d * elements * bwd_passes, wgrad=wgrad_params)

    def save(self, elements: float, *, elem_bytes: int | None = None) -> None:
        """Count a tensor the backward needs (``elem_bytes`` per element, default the dtype's)."""
        self.saved_bytes += elements * (self.rl.elem_bytes if elem_bytes is None else elem_bytes)

    # -- composite helpers ----------------------------------------------------------------
    def linear(self, tokens: int, fan_in: int, fan_out: int, *, bias: bool = True) -> None:
        """A dense layer over ``tokens`` rows: one GEMM plus its bias add (fused: no extra kernel)."""
        self.gemm(tokens, fan_out, fan_in)
        self.params += fan_in * fan_out + (fan_out if bias else 0)

    def layernorm(self, elements: int, width: int) -> None:
        """A layer norm over ``elements`` (rows of ``width``): read+write fwd, 3 reads+1 write bwd.

        Its scale/shift gradients come from the same reductions the input gradient needs, so its
        backward counts as input-gradient work (not deferrable weight-gradient work).
        """
        self.eltwise(elements, fwd_passes=2, bwd_passes=4, flop_per_element=5)
        self.params += 2 * width

    def batchnorm(self, elements: int, channels: int) -> None:
        """A training-mode batch norm: statistics + normalise passes fwd, reduce + dx passes bwd.

        As for :meth:`layernorm`, its backward counts as input-gradient work.
        """
        self.eltwise(elements, fwd_passes=3, bwd_passes=5, flop_per_element=4)
        self.params += 2 * channels

    def relu(self, elements: int) -> None:
        """A ReLU: read+write fwd; read grad and output, write grad bwd."""
        self.eltwise(elements, fwd_passes=2, bwd_passes=3)

    def dropout(self, elements: int) -> None:
        """A dropout: read, write output and a 1-byte mask fwd; read grad and mask, write grad bwd."""
        d = self.rl.elem_bytes
        mask = 1.0 / d  # a bool mask pass, in units of dtype-sized passes
        self.eltwise(elements, fwd_passes=2 + mask, bwd_passes=2 + mask)
        self.save(elements, elem_bytes=1)

    # -- result ---------------------------------------------------------------------------
    def build(self, *, output_elements: float) -> Layer:
        """The finished :class:`Layer`; ``output_elements`` is the size of the output tensor(s)."""
        d = self.rl.elem_bytes
        bwd = self.bwd.time_s
        wgrad = self.bwd.wgrad_time_s / bwd if bwd > 0 else 0.0
        return Layer(
            name=self.name,
            fwd_time_s=self.fwd.time_s,
            bwd_time_s=bwd,
            activation_bytes=round(output_elements * d),
            parameter_bytes=self.params * d,
            saved_activation_bytes=round(self.saved_bytes),
            fwd_flop=self.fwd.flop,
            bwd_flop=self.bwd.flop,
            fwd_memory_bytes=self.fwd.bytes_moved,
            bwd_memory_bytes=self.bwd.bytes_moved,
            wgrad_fraction=min(1.0, wgrad),
        )
