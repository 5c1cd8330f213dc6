"""Kernel-level compute model: GEMMs with tile and wave quantisation, memory-bound kernels, launch cost.

A GPU runs a GEMM ``C[m, n] = A[m, k] @ B[k, n]`` by cutting ``C`` into output tiles of
``tm x tn`` elements, one thread block per tile, and running the blocks in *waves* of one block per
streaming multiprocessor (SM). NVIDIA's "Matrix Multiplication Background User's Guide" (NVIDIA Deep
Learning Performance documentation, docs.nvidia.com/deeplearning/performance) describes the two
losses this causes and this module models:

* **tile quantisation**: a dimension that is not a multiple of the tile is padded up to one
  (``ceil(m / tm)`` tiles), so a 257-row GEMM costs two 128-row tiles;
* **wave quantisation**: ``tiles`` blocks run in ``ceil(tiles / SMs)`` waves, the last one partly
  idle (the guide's example: an A100 has 108 SMs, and a 1792 x 1792 GEMM with 256 x 128 tiles makes
  98 tiles, a single wave that leaves 10 SMs idle).

When a GEMM has too few tiles to fill the SMs (or a last wave that is mostly idle), cuBLAS splits
the reduction (split-K): ``s`` blocks per tile each reduce ``k / s`` and their partial tiles are
summed. We take the fastest ``s`` up to :data:`MAX_SPLIT_K` whose slices are at least
:data:`MIN_SPLIT_K` long; each slice pays the per-tile fixed work, and summing the partial tiles
costs one more.

cuBLAS picks the tile per problem; we take the fastest of :data:`TILES` (for cuDNN's fp32
convolutions, of :data:`CONV_TILES_FP32`, the only tiles its CUDA-core kernels come in). A big
tile reuses each loaded element of A and B for more multiply-adds (``tm x tn / (tm + tn)`` per
k-step), so it runs closer to peak, while a small tile wastes less on padding and fills more
SMs: the relative rate of a tile is ``r(I) = I / (I + TILE_REUSE_HALF)`` with
``I = tm tn / (tm + tn)``, normalised to the largest tile of the set. A tile also pays a fixed
prologue/epilogue (loading the first k-slices, writing C), modelled as :data:`K_OVERHEAD` extra
steps of k: efficiency ``k / (k + K_OVERHEAD)``.
The time of a GEMM is then

    waves x 2 tm tn (k / s + K_OVERHEAD [+ K_OVERHEAD if s > 1])
        / (peak / SMs x eff[arch, precision] x r(tile))

bounded below by its bytes over the memory bandwidth, plus :data:`KERNEL_OVERHEAD_S`; a
framework operator takes at least :data:`OP_DISPATCH_S` (the host's dispatch time).
``efficiency[arch, precision]`` (:data:`GEMM_EFFICIENCY`) is the share of the dense peak that the
largest tile reaches on full waves in training frameworks, per GPU generation and precision,
from published measurements (sources there). Memory-bound kernels take ``bytes / (bandwidth x
memory_efficiency)`` (the catalog's figures) plus the same overhead.

Independent kernel chains on concurrent streams (cuDNN's RNN kernels,
:meth:`ComputeModel.concurrent_time_s`) share the device: together they take the longer of their
longest chain and their summed arithmetic at the large-GEMM rate plus their memory-bound traffic
over the bandwidth. A small GEMM that runs well below that rate alone (a recurrent step's
64-row GEMM) leaves issue slots that co-resident blocks of another stream's kernels fill.

Shapes are data: :class:`GemmShape` lists a layer's GEMMs so that other cost models (tensor
parallelism, re-targeting) can re-cost them, e.g. with ``n`` or ``k`` divided by the TP degree.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from pipesim.errors import check_count, check_nonneg, invalid
from pipesim.profiles.hardware.specs import (
    DEFAULT_COMPUTE_EFFICIENCY,
    STORAGE_DTYPE,
    DeviceSpec,
    parse_precision,
)
from pipesim.units import US

__all__ = [
    "CONV_TILES_FP32",
    "GEMM_EFFICIENCY",
    "KERNEL_OVERHEAD_S",
    "K_OVERHEAD",
    "MAX_SPLIT_K",
    "MIN_SPLIT_K",
    "OP_DISPATCH_S",
    "TILES",
    "TILE_REUSE_HALF",
    "ComputeModel",
    "GemmShape",
    "compute_model",
    "gemm_efficiency",
]

TILES: tuple[tuple[int, int], ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64),
)
"""Output tile sizes (rows x columns) cuBLAS/CUTLASS kernels use, largest first: the sizes NVIDIA's
"Matrix Multiplication Background User's Guide" discusses (256x128 down to 64x64)."""

CONV_TILES_FP32: tuple[tuple[int, int], ...] = ((128, 128), (128, 64), (128, 32))
"""Output tiles (output pixels x output channels) of cuDNN's fp32 implicit-GEMM convolution
kernels, forward and data gradient, on CUDA cores. cuDNN names these kernels by their tile, and
profiler traces of PyTorch, TensorFlow and ONNX Runtime convolutions show 128-pixel tiles only:
``maxwell_scudnn_128x32/128x64/128x128_relu_{small,medium,large}_nn_v1`` (the set cuDNN runs on
Maxwell and Pascal GPUs; e.g. the nvprof listing in github.com/microsoft/onnxruntime/issues/7578),
``volta_scudnn_128x32/128x64/128x128_relu_{small,interior}_nn_v1`` and, for the data gradient,
``volta_scudnn_128x64_stridedB_splitK_interior_nn_v1`` on Volta, and the fused Winograd kernel
``maxwell_scudnn_winograd_128x128``. So a convolution's output pixels (batch x output height x
output width) are padded to 128 rows, not 64 as a cuBLAS GEMM's may be: a batch-1 7 x 7 map (49
pixels) fills 38% of a tile; and a convolution with 32 or fewer output channels takes a 32-wide
tile instead of padding to 64. The filter gradient reduces over the pixels, so it keeps
:data:`TILES`."""

TILE_REUSE_HALF = 32.0
"""Reuse ``tm tn / (tm + tn)`` at which a tile reaches half its asymptotic rate. With 32 a 64 x 64
tile (reuse 32) runs at 0.69 of a 256 x 128 tile (reuse 85): a modelling assumption, of the order
of the 1.3-1.5x gap between small- and large-tile kernels in the guide's tile-size figure."""

K_OVERHEAD = 32.0
"""Per-tile fixed work (loading the first k-slices, writing C), in equivalent steps of k. A GEMM
with k = 64 (attention's ``Q K^T`` with 64-wide heads) then runs at 2/3 of one with a long k,
a modelling assumption consistent with the guide's note that small-k GEMMs are inefficient."""

MAX_SPLIT_K = 8
"""Most slices the model splits k into (split-K) to fill the SMs or balance the waves."""

MIN_SPLIT_K = 128
"""Shortest k-slice of a split-K GEMM, elements."""

KERNEL_OVERHEAD_S = 2 * US
"""GPU-side gap between two dependent kernels, seconds: launch latency of a kernel queued behind
another (a few microseconds on CUDA; the modelling assumption is 2 us on every device)."""

OP_DISPATCH_S = 10 * US
"""Host time to dispatch one framework operator, seconds. The host queues kernels ahead of the
GPU, so an operator costs ``max(GPU time, dispatch)``: long kernels hide it, a stream of tiny
ones (batch 1, narrow layers) runs at the host's pace. He, "Making Deep Learning Go Brrrr From
First Principles" (2022), puts PyTorch eager overhead at about 10 us per operator; kernels a
library launches internally (cuDNN's per-step LSTM kernels, Winograd transforms) pay only
:data:`KERNEL_OVERHEAD_S`.

Per operator, not cumulative: a host queue that runs ahead (the host issues one call per
``OP_DISPATCH_S``, each kernel starts at the later of its issue and the previous kernel's end)
banks the host's slack during long kernels, so short kernels after a long one cost only their GPU
time, where the per-operator floor charges each of them the dispatch time. The two differ only
where kernels shorter than the dispatch time follow long ones. Checked on the zero-bubble
records (Qi et al. 2024, Table 6; Megatron-LM's GPT layer at sail-sg/zero-bubble-pipeline-
parallelism tag zero-bubble-v0.1.0, 93af65c6): ``ParallelTransformerLayer.forward`` there (TP 1,
fused layer norm, causal softmax, bias-GeLU and bias-dropout-add, no flash attention) makes about
50 framework calls (16 kernels, 8 Python autograd Functions), ~0.5-0.7 ms of host time against
3.6-7.2 ms of modelled GPU time per block forward at those micro-batches (1-6 samples of 1024
tokens, hidden 2304-6144): the floor binds on no forward kernel and adds 0-3 us to a block's
backward, and the cumulative queue gives the same pass times within one dispatch (10 us) a block.
Neither moves those records; the host's time shows only after a host synchronisation (the lead-in
to the next kernel), ``experiments/validation/zero_bubble_2024.py``'s ``_ILV_GAP``."""

# (architecture, precision) -> share of the dense peak that large, full-wave GEMMs reach in training.
GEMM_EFFICIENCY: dict[tuple[str, str], float] = {
    # CUDA-core fp32 (Pascal to Blackwell): cuBLAS SGEMM on large square matrices runs at 85-90% of
    # the fp32 peak (e.g. ~14 of 15.7 TFLOP/s on a V100); frameworks' transposed and bias-fused
    # calls reach somewhat less: 0.8 for the best tile on full waves. Cross-checks: NVIDIA
    # DeepLearningExamples ResNet-50 v1.5 fp32 on one V100 16GB (367 img/s, ~24.6 GFLOP per image:
    # 0.58 of peak for the whole network, memory-bound batch norms included) and a BERT-large
    # layer in fp32 (the DAPPLE authors' bert-24-pbs-6 profile: 8.07 ms fwd for 61.6 GFLOP).
    # Pascal fp32 cross-check: DeepBench's large SGEMMs (the 27 with A not transposed and >= 5e10
    # multiply-adds; github.com/baidu-research/DeepBench at da81ba7, results/train/; CUDA 8.0.88 on Pascal)
    # run 1.094x faster than this model on a P100 SXM2 (median 8.9 TFLOP/s), as on the V100 sheet
    # (1.096x), and 1.092x on a Titan Xp at its rated 1582 MHz boost (GP102, the P40's chip).
    ("pascal", "float32"): 0.8,
    ("pascal", "float16"): 0.8,  # P100 fp16 runs on the same CUDA cores at twice the rate
    ("volta", "float32"): 0.8,
    ("turing", "float32"): 0.8,
    # Volta tensor cores, from kernel benchmarks (docstring below): PyTorch's fp16 matmul of 8192^3
    # runs at 95 of the V100's 125 TFLOP/s where the same script gives 230 of the A100's 312
    # (github.com/mli/transformers-benchmarks, README at 3370b2b): a V100's large GEMMs reach at
    # least the A100's share of peak, so the A100's share (0.70, model/benchmark 0.943 at 8192^3)
    # carries over scaled by the two benchmark shares: 0.70 x (95/125) / (230/312) = 0.72.
    ("volta", "float16"): 0.72,
    # Turing fp16: no kernel benchmark read; the Volta figure of before (0.5, from Shoeybi et al.
    # 2019's 39 TFLOP/s whole-step rate on one V100) is kept.
    ("turing", "float16"): 0.5,
    # Ampere/Ada/Hopper/Blackwell tensor cores: Narayanan et al., "Efficient Large-Scale Language
    # Model Training on GPU Clusters Using Megatron-LM" (SC'21), Table 1: 44-52% of the A100's
    # 312 TFLOP/s per GPU for whole training steps (communication and memory-bound kernels
    # included), so the large GEMMs themselves run at ~0.7 (Hopper fp16/bf16: below).
    ("ampere", "float32"): 0.8,
    ("ampere", "tfloat32"): 0.6,
    ("ampere", "float16"): 0.7,
    ("ampere", "bfloat16"): 0.7,
    ("ada", "float32"): 0.8,
    ("ada", "tfloat32"): 0.6,
    ("ada", "float16"): 0.7,
    ("ada", "bfloat16"): 0.7,
    ("ada", "float8"): 0.6,
    ("hopper", "float32"): 0.8,
    ("hopper", "tfloat32"): 0.6,
    # Hopper fp16/bf16: the A100's share scaled by the two GPUs' shares of peak in one sustained
    # benchmark (cuBLASLt bf16 8192^3 for 60 s on every GPU of a server, huggingface/gpu-fryer README
    # at f9d564b: ~730 TFLOP/s on an H100 SXM5, ~270 on an A100 SXM4 80GB): 0.7 x (730 / 989) /
    # (270 / 312) = 0.597. An H100 holds less of its short-run rate under sustained load than an A100
    # (docstring below).
    ("hopper", "float16"): 0.6,
    ("hopper", "bfloat16"): 0.6,
    # FP8: its doubled peak at 0.6 (scaling and casts around the GEMMs); the hopper bf16 rule on
    # gpu-fryer's FP8 figure (~1530 of 1979) gives 0.626.
    ("hopper", "float8"): 0.6,
    ("blackwell", "float32"): 0.8,
    ("blackwell", "tfloat32"): 0.6,
    ("blackwell", "float16"): 0.7,
    ("blackwell", "bfloat16"): 0.7,
    ("blackwell", "float8"): 0.6,
    # AMD CDNA: hipBLASLt reaches about half of the MI300X's dense BF16 peak on large GEMMs
    # (public MI300X vs H100 GEMM benchmarks, 2024); the same assumed for CDNA2.
    ("cdna2", "float32"): 0.5,
    ("cdna2", "float16"): 0.5,
    ("cdna2", "bfloat16"): 0.5,
    ("cdna3", "float32"): 0.5,
    ("cdna3", "tfloat32"): 0.5,
    ("cdna3", "float16"): 0.5,
    ("cdna3", "bfloat16"): 0.5,
    ("cdna3", "float8"): 0.5,
}
"""Share of the dense peak reached by large full-wave GEMMs, per (architecture, precision).

These shares sit below the kernels' own rates: they absorb per-pass costs the model does not have
yet. PyTorch matmuls of 8192^3 (github.com/mli/transformers-benchmarks, README at 3370b2b, 'MatMul
FP32 / FP16') run at 230 TFLOP/s fp16 and 116 'FP32' (TF32: above the 19.5 fp32 peak) on an A100
80GB, 95 fp16 and 14 fp32 on a V100 16GB, where this model gives 217, 93, 88 and 12.3; the
zero-bubble paper's weight-gradient passes (Qi et al. 2024, Table 6, records zb-2024-t6-*-w-pass),
which run only GEMMs, imply 239-253 TFLOP/s on A100 fp16 against the model's 204-213. Raising the
A100 fp16/bf16 share to the benchmark's (0.742) alone takes Korthikanti et al. 2022's 1T iterations
from +11.3/+8.4% to +5.6/+2.7% (its 22B present-method row from -7.2% to -10.5%), the zero-bubble
14.6B throughputs from +7% to +12% (1F1B-I +22%), Megatron-LM 2021's 76B row to +10.9% and BLOOM's
batch-2048 row to -13%: those runs pay a per-pass cost (about 1 ms per pass in the zero-bubble runs:
their Table 4 against the paper's own calculation from Table 6) that must be modelled with it.
At He's 258 TFLOP/s for cuBLAS fp16 8192^3 on an A100 (docstring below; 0.832 with this model's
0.994 at that shape) the four zero-bubble W passes land within 2.5% (-0.6, +0.4, -1.5, -2.5%,
tile model unchanged: no shape dependence beyond the tile/wave model is called for; those GEMMs run
at 0.93-0.98 of the share's rate in it), but the F passes fall to -15.5..-21.1% and the B passes
to -8.1..-12.1%: a Megatron-LM block then lacks 0.7-1.3 ms of forward and 0.45-0.65 ms of backward
time that is neither GEMM nor host dispatch (:data:`OP_DISPATCH_S`), larger with the attention
score tensor, and 67 records cross their tolerance (eight of Megatron-LM 2021's ten Table 1 rows
+11..+18%, Korthikanti's 22B-530B rows -10..-17%, BLOOM batch 2048 -13%). Not one per-block term
either: Korthikanti et al.'s 22B layer (their Table 4, TP 8) moves +6.8 -> -2.5% forward and -2.6 ->
-14.5% backward at 0.832, its missing time in the backward where the zero-bubble layers' (TP 1) is
mostly in the forward. The 0.7 stays until that per-block time is traced (records
zb-2024-t6-*-w-pass and -1.5b-m32-f-pass carry the numbers).

**Volta fp16 (0.72).** Kernel benchmarks put a V100's fp16 GEMMs at or above the A100's share of
peak: mli/transformers-benchmarks (README at 04df81d, one notebook on both GPUs) 95 of 125 TFLOP/s
(0.76) on a V100 16GB against 230 of 312 (0.737) on an A100 80GB for an 8192^3 matmul, and its
BERT layer forward + backward 67 (0.54 of peak) against 136 (0.44); Markidis et al., "NVIDIA
Tensor Core Programmability, Performance & Precision" (IPDPSW 2018, abstract) up to 83 TFLOP/s
(0.66) with cuBLAS of CUDA 9. The share is the A100's scaled by the two benchmark shares,
0.70 x 0.76 / 0.737 = 0.72, so that the model sits at the same fraction of the benchmark on both
(8192^3: 88 of 95 on the V100, 217 of 230 on the A100). It was 0.5, from Shoeybi et al. 2019's
39 TFLOP/s for a whole 1.2B step (a step's rate, not a GEMM's: 61 TFLOP/s at 8192^3, 0.64 of the
benchmark). Moves (``python -m experiments.validation``, 0.5 -> 0.72; nothing else moves):
megatron-readme-2020-dgx2-v100-{1b,2b,4b,8b}-iteration +43.5/+38.1/+28.4/+21.0% -> +7.4/+3.6/
-2.3/-6.1% (were named), -{2b,4b,8b}-scaling +4.1/+12.0/+18.8% -> +3.8/+10.3/+14.5%, zoo-resnet50-
v100-amp -13.2% -> +1.5%; DT-FM's eager PyTorch fp16 runs (V100, unfused blocks, model.half())
come out faster: dtfm-gpt3xl-fp16-per-block-slope +1.6% -> -23.9% (now named: the block costs
20.4 ms per micro-batch there against pipesim's 15.5), -per-microbatch-slope -17.5% -> -38.2%, the
gpipe rows on fast links -19..-29% -> -26..-42% (named), on 1 Gb/s within a point.

**Hopper bf16/fp16 (0.6, from a sustained benchmark).** The H100 SXM's 989 TFLOP/s are computed
at 1830 MHz (528 tensor cores x 1024 FLOP per clock), below its 1980 MHz boost clock
(stas00/ml-engineering, compute/accelerator/README.md at 744d01e, "Clock speed" note 12), and
its GEMMs are limited by the 700 W board power rather than by that clock: He, "Strangely, Matrix
Multiplications on GPUs Run Faster When Given 'Predictable' Data" (thonking.ai, 2024; "matmuls on
the H100 are primarily not compute or bandwidth limited, they are power limited"; an A100's
cuBLAS fp16 8192^3 at 257-258 TFLOP/s on normal inputs, 295 on zeros); deepseek-ai/DeepGEMM issue
#120 (2025-06-25: Hopper GEMMs overlapped with communication push the board past its power limit,
the SM clock falls from 1980 to 1575 MHz). Short benchmarks run before the clock settles:
cuBLAS bf16 on an H100 SXM at 8192^3 797.8 TFLOP/s (pranjalssh/fast.cu README at a1bb7b2, kernel
0, normal(0, 1) inputs; 822.8 at 12288^3 in its logs.txt at a3d3dba), 797.5 from torch.matmul
(zzc0721/torch-performance-test-data issue #79, torch 2.7.0+cu128; 788.7 at 4096^3, 676.6 at
2048^3), the best of ml-engineering's shape search ("Maximum Achievable Matmul FLOPS", mean of 100
runs after 50 warm-ups) 794.5 (80.3%) against the A100 SXM's 271.2 (86.9%); its PR #59 (2024-08):
without warm-up an H100 gives 813 on its first matmuls, "not sustainable". Held for 60 s on
every GPU of a server (huggingface/gpu-fryer, cuBLASLt bf16 8192^3 on random inputs, README
reference table from v1.1.0, commits c12f710 and 59ad16a, unchanged at f9d564b), the same GEMM
gives ~730 on an H100 SXM5 (0.738 of peak, 0.915 of the short runs' 798) and ~270 on an A100
SXM4 80GB (0.865 of peak, its short-run rate: MAMF 271.2). Training holds the load for hours, so
the sustained rate is the one a share of peak should follow; the share is the A100's scaled by the
two sustained shares, the rule that gave Volta's 0.72: 0.7 x 0.738 / 0.865 = 0.597, rounded to
0.6. The model then gives 574 TFLOP/s at 8192^3, 0.79 of gpu-fryer's H100 rate as 217 is 0.80 of
its A100 rate. Cross-check: the same rule on gpu-fryer's FP8 figure (~1530 of 1979) gives 0.626
for the hopper FP8 share, which stays 0.6. Before (0.7) the H100 sat at 0.84 of the short runs'
rate as the A100 at 0.84 of He's 258; that kept short-run against short-run and left the small-DP
Megatron-Core rows 20-28% fast (the sustained clock was named as the candidate). Moves
(``python -m experiments.validation``, nothing but the H100 rows moves): megatron-h100-2024
1.7B +25.9% -> +11.9%, 7.1B +19.7 -> +7.5%, 16B -1.6 -> -9.8%, 32B -21.0 -> -26.0%, 70B +19.5 ->
+8.9%, 119B +35.8 -> +18.1%, 177B +33.9 -> +16.2%, 314B +24.1 -> +7.4%, 462B +24.9 -> +8.0%, the
177B MFU on 96 GPUs +30.2 -> +12.5%, on 4608 +33.4 -> +16.3%, their ratio +2.5 -> +3.4%. Not
modelled: a sustained rate per shape (gpu-fryer measures 8192^3 only), the clock under
communication overlap (DeepGEMM #120), the H100 PCIe's and H200's own sustained rates (they take
the same hopper share)."""


def gemm_efficiency(device: DeviceSpec, precision: str) -> float:
    """The large-GEMM share of peak of ``device`` in ``precision``.

    :data:`GEMM_EFFICIENCY` for its architecture, scaled by the device's ``compute_efficiency``
    relative to the catalog default (so ``--set device_compute_efficiency=0.5`` makes GEMMs 1.25x
    faster than the catalog's 0.4; at most 1.0 of peak); a device without architecture (a custom
    one) uses its ``compute_efficiency`` as it is.

    Raises:
        InputError: ``precision`` is unknown, or the device has no rate for it.
    """
    precision = parse_precision(precision)
    device.peak_for(precision)  # raises when the device cannot run the precision
    if device.architecture is not None:
        found = GEMM_EFFICIENCY.get((device.architecture, precision))
        if found is not None:
            return min(1.0, found * device.compute_efficiency / DEFAULT_COMPUTE_EFFICIENCY)
    return device.compute_efficiency


@dataclass(frozen=True, slots=True, kw_only=True)
class GemmShape:
    """``count`` independent GEMMs ``C[m, n] = A[m, k] @ B[k, n]`` run as one batched kernel.

    Attributes:
        m: rows of A and C (tokens, or batch x output pixels of a convolution).
        n: columns of B and C (output features).
        k: the reduction dimension (input features).
        count: GEMMs in the batch (attention: batch x heads), >= 1.

    Raises:
        InputError: a dimension or the count is not an integer >= 1.
    """

    m: int
    n: int
    k: int
    count: int = 1

    def __post_init__(self) -> None:
        for name in ("m", "n", "k", "count"):
            check_count(f"gemm.{name}", getattr(self, name))

    @property
    def flop(self) -> float:
        """FLOP of the batch: 2 m n k per GEMM."""
        return 2.0 * self.m * self.n * self.k * self.count


@dataclass(frozen=True, slots=True, kw_only=True)
class ComputeModel:
    """Achievable rates of one device in one precision, and kernel times from them.

    Attributes:
        device: catalog name of the device.
        precision: compute precision (one of :data:`pipesim.profiles.hardware.specs.PRECISIONS`).
        storage_dtype: dtype of activations and working weights in this precision.
        peak_flop_per_s: dense peak FLOP/s in ``precision``.
        efficiency: large-GEMM share of the peak (:func:`gemm_efficiency`).
        sm_count: SMs (compute units), or ``None`` to skip tile and wave quantisation.
        memory_bytes_per_s: achievable memory bandwidth, bytes/s.
        kernel_overhead_s: GPU-side gap per kernel, seconds.
        op_dispatch_s: host dispatch time per framework operator, seconds.
        architecture: the device's GPU generation (``"volta"``), ``None`` for a custom device;
            for kernel-library rules measured on one generation.
    """

    device: str
    precision: str
    storage_dtype: str
    peak_flop_per_s: float
    efficiency: float
    sm_count: int | None
    memory_bytes_per_s: float
    kernel_overhead_s: float = KERNEL_OVERHEAD_S
    op_dispatch_s: float = OP_DISPATCH_S
    architecture: str | None = None

    def op_time_s(self, kernel_s: float) -> float:
        """Time of a framework operator whose kernel takes ``kernel_s`` on the GPU (launch gap
        included): ``max(kernel_s, op_dispatch_s)``, seconds."""
        return max(kernel_s, self.op_dispatch_s)

    def on_sms(self, sm_count: int) -> ComputeModel:
        """This model with only ``sm_count`` of the device's SMs free for its kernels (the others
        held by a concurrent kernel, e.g. a communication kernel): the same rate per SM, so the
        peak scales by ``sm_count / self.sm_count``, and the tile and wave quantisation of
        :meth:`gemm_compute_s` runs its waves over ``sm_count`` SMs. Memory bandwidth, launch and
        dispatch costs are unchanged. ``self`` when ``sm_count`` is all of them.

        Raises:
            InputError: the model has no SM count, or ``sm_count`` is not in ``1..self.sm_count``.
        """
        if self.sm_count is None:
            raise invalid("sm_count", sm_count, f"{self.device} has no SM count to take SMs from")
        check_count("sm_count", sm_count, maximum=self.sm_count)
        if sm_count == self.sm_count:
            return self
        peak = self.peak_flop_per_s * sm_count / self.sm_count
        return replace(self, sm_count=sm_count, peak_flop_per_s=peak)

    def memory_time_s(self, bytes_moved: float) -> float:
        """Time of a memory-bound kernel moving ``bytes_moved`` bytes, launch cost included, seconds."""
        check_nonneg("bytes_moved", bytes_moved)
        return bytes_moved / self.memory_bytes_per_s + self.kernel_overhead_s

    def gemm_compute_s(self, shape: GemmShape, *, tiles: tuple[tuple[int, int], ...] = TILES,
                       max_split_k: int = MAX_SPLIT_K) -> float:
        """Arithmetic time of ``shape`` with tile and wave quantisation, no launch cost, seconds.

        ``tiles`` are the output tiles the library may pick from (default :data:`TILES`, cuBLAS's;
        :data:`CONV_TILES_FP32` for cuDNN's fp32 convolutions), largest first: the largest
        runs at the large-GEMM efficiency, the others at their reuse relative to it.
        ``max_split_k`` caps the split-K slices (1: a kernel family without split-K)."""
        return _gemm_compute_s(self.peak_flop_per_s * self.efficiency, self.sm_count,
                               shape.m, shape.n, shape.k, shape.count, tiles, max_split_k)

    def gemm_time_s(self, shape: GemmShape, bytes_moved: float = 0.0, *, speedup: float = 1.0,
                    tiles: tuple[tuple[int, int], ...] = TILES, max_split_k: int = MAX_SPLIT_K) -> float:
        """Time of the GEMM kernel ``shape``: ``max(arithmetic / speedup, bytes / bandwidth)`` plus
        the launch cost, seconds. ``speedup`` divides the arithmetic (e.g. fewer multiplications
        of a fast convolution algorithm); ``tiles`` and ``max_split_k`` as for
        :meth:`gemm_compute_s`."""
        compute = self.gemm_compute_s(shape, tiles=tiles, max_split_k=max_split_k) / speedup
        return max(compute, bytes_moved / self.memory_bytes_per_s) + self.kernel_overhead_s

    def concurrent_time_s(self, chains_s: Sequence[float], *, flop: float, memory_bytes: float) -> float:
        """Time of independent kernel chains run on concurrent streams, seconds.

        ``chains_s`` are the chains' times run alone (each a sum of its kernels' times, launch
        gaps included); ``flop`` is the arithmetic of all their kernels and ``memory_bytes`` the
        traffic of their memory-bound kernels. The chains overlap as far as the device allows:
        ``max(longest chain, flop / (peak x efficiency) + memory_bytes / bandwidth)``, the
        longest chain being the dependency bound and the second term the throughput bound
        (every FLOP at the large-GEMM rate, every memory-bound byte at the achievable
        bandwidth). Appleyard, Kocisky & Blunsom, "Optimizing Performance of Recurrent Neural
        Networks on GPUs" (arXiv:1604.01946, 2016), describe the cuDNN RNN kernels this is for:
        a layer's input GEMMs run on a stream beside its recurrent GEMMs, whose small
        per-step shapes do not fill the GPU on their own.

        Raises:
            InputError: ``chains_s`` is empty, or a time, ``flop`` or ``memory_bytes`` is
                negative.
        """
        if not chains_s:
            raise invalid("chains_s", list(chains_s), "needs at least one chain")
        for i, chain_s in enumerate(chains_s):
            check_nonneg(f"chains_s[{i}]", chain_s)
        check_nonneg("flop", flop)
        check_nonneg("memory_bytes", memory_bytes)
        arithmetic_s = flop / (self.peak_flop_per_s * self.efficiency)
        throughput_s = arithmetic_s + memory_bytes / self.memory_bytes_per_s
        return max(max(chains_s), throughput_s)

    def gemm_flop_per_s(self, shape: GemmShape) -> float:
        """The rate ``shape`` runs at, FLOP/s (launch cost and memory bound excluded)."""
        return shape.flop / self.gemm_compute_s(shape)


def _tile_rate(tm: int, tn: int, largest: tuple[int, int]) -> float:
    reuse = tm * tn / (tm + tn)
    best = largest[0] * largest[1] / (largest[0] + largest[1])
    return (reuse / (reuse + TILE_REUSE_HALF)) / (best / (best + TILE_REUSE_HALF))


@lru_cache(maxsize=65536)
def _gemm_compute_s(rate: float, sm_count: int | None, m: int, n: int, k: int, count: int,
                    tile_set: tuple[tuple[int, int], ...] = TILES, max_split_k: int = MAX_SPLIT_K) -> float:
    if sm_count is None:
        return 2.0 * m * n * k * count / (rate * k / (k + K_OVERHEAD))
    per_sm = rate / sm_count
    best = math.inf
    for tm, tn in tile_set:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * count
        tile_rate = per_sm * _tile_rate(tm, tn, tile_set[0])
        for split in range(1, max_split_k + 1):
            if split > 1 and k / split < MIN_SPLIT_K:
                break  # never split k into slivers
            ks = math.ceil(k / split)
            waves = math.ceil(tiles * split / sm_count)
            # each slice pays the per-tile fixed work; summing the partial tiles is one more
            # tile-sized pass per extra slice, counted as K_OVERHEAD steps of k
            work = ks + K_OVERHEAD + (K_OVERHEAD if split > 1 else 0.0)
            best = min(best, waves * 2.0 * tm * tn * work / tile_rate)
    return best


def compute_model(device: DeviceSpec, precision: str) -> ComputeModel:
    """The compute model of ``device`` in ``precision`` (``fp32``, ``tf32``, ``bf16``, ... or the
    long names).

    Raises:
        InputError: an unknown precision, or one the device cannot run; the message names the
            dtype, the device and what it supports (bf16 on a V100, fp8 before Hopper/Ada).
    """
    precision = parse_precision(precision)
    if not device.supports(precision):
        supported = ", ".join(device.peak_flop_per_s)
        raise invalid("dtype", precision, f"{device.name} cannot train in it; it supports {supported}")
    return ComputeModel(
        device=device.name,
        precision=precision,
        storage_dtype=STORAGE_DTYPE[precision],
        peak_flop_per_s=device.peak_for(precision),
        efficiency=gemm_efficiency(device, precision),
        sm_count=device.sm_count,
        memory_bytes_per_s=device.achievable_memory_bandwidth_bytes_per_s,
        architecture=device.architecture,
    )
