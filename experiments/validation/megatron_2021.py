"""Achieved teraFLOP/s per GPU of GPT models trained with Megatron-LM's tensor, pipeline and data
parallelism on A100 clusters, against pipesim's simulation of the same configuration.

Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
Megatron-LM" (SC'21, arXiv:2104.04473):

* Table 1 (weak scaling, 1.7B to 1T parameters on 32 to 3072 A100s of NVIDIA's Selene, a DGX
  SuperPOD): heads, hidden size, layers, tensor-parallel size t, pipeline-parallel size p, GPUs n,
  batch size B and the achieved teraFLOP/s per GPU; vocabulary 51,200 and sequence 2048 (Sec. 5.1);
* Table 2 (PTD parallelism rows): GPT-3 175B (96 layers, 96 heads, hidden 12288; Sec. 5.3.2) and
  the 530B model of Table 1 on 384 to 2240 GPUs, micro-batch size 1, model-parallel size 96 and 280.

The paper's FLOP count (its Eq. 3, with activation recomputation) is
``F = 96 B s l h^2 (1 + s / (6 h) + V / (16 l h))``; the achieved rate is ``F / (T_iter n)``.
The prediction takes the same ``F`` over pipesim's iteration time: the ``gpt:`` zoo model (fp16,
costed on the A100 by the kernel model), stages of equal block counts (embedding with the first,
head with the last, as Megatron-LM splits them), ``recompute = full``, ``d = n / (t p)``
replicas, ``m = B / (d b)`` micro-batches of ``b`` samples, on the ``dgx-a100-1024`` preset
(Selene's rail fat-tree) with ``servers = n / 8``.

Mapping from the code the paper ran (NVIDIA/Megatron-LM; the authors' scripts for the paper are
``examples/sc21/``, added by commits de7dc40f88 and 6985e58938, 2021-08-10 and 2021-08-18, run in
the ``nvcr.io/nvidia/pytorch:20.12-py3`` container, ``SRUN.sh``):

* Table 1 (``examples/sc21/run_table_1.sh`` at 6985e58938, one case per model): micro-batch
  size 16, 16, 16, 8, 4, 2, 2, 1, 1, 1 (1.7B to 1T); ``--num-layers-per-virtual-pipeline-stage``
  5 for 76B and 145B, 3 for 310B, 1 for 530B, i.e. the interleaved schedule with 60/4/5 = 3,
  80/8/5 = 2, 96/16/3 = 2 and 105/35/1 = 3 chunks per pipeline rank, and the non-interleaved
  1F1B schedule for 39B (p = 2) and 1T (p = 64); ``--DDP-impl torch`` for the four
  ``p = 1`` models and ``local`` for the others; ``--activations-checkpoint-method uniform``
  (``recompute = full``) and ``--fp16`` for all (``CONFIG.sh``).
* ``--DDP-impl local`` (``megatron/training.py`` ``train_step`` at 6985e58938) all-reduces each
  rank's fp16 gradients after its own ``forward_backward_func`` returns (``allreduce_overlap =
  after_backward``, the simulator's default; ``--accumulate-allreduce-grads-in-fp32`` off);
  ``--DDP-impl torch`` is PyTorch's ``DistributedDataParallel`` (25 MiB buckets, all-reduced as
  the backward produces them; ``megatron/schedules.py`` runs all micro-batches but the last under
  ``no_sync``): ``allreduce_overlap = bucketed``, ``bucket_bytes = 25 MiB``.
* Gradient accumulation: neither DDP keeps a separate gradient buffer in these runs. The local
  DDP's ``main_grad`` hook (``megatron/model/distributed.py`` ``_make_param_hook`` at 6985e58938
  and aed2f75e20) is registered only with contiguous buffers (``--use-contiguous-buffers-in-ddp``
  or ``--accumulate-allreduce-grads-in-fp32``, both off by default, not set by ``CONFIG.sh``;
  ``megatron/arguments.py``), so with either DDP PyTorch's ``AccumulateGrad`` keeps the fp16
  ``param.grad``: the optimizer's ``zero_grad`` sets it to None (``set_to_none=True``,
  ``megatron/optimizer/optimizer.py``), the first micro-batch's gradient is taken as is and every
  later one added in place (``variable_grad += new_grad``), 6 bytes per parameter of each rank's
  ``1/t`` share: :func:`~pipesim.profiles.costmodels.grad_accumulation.with_grad_accumulation`
  (``autograd``, ``m - 1`` of ``m`` micro-batches; the last pipeline rank's copy of the tied word
  embeddings too). The weight-gradient GEMM accumulating in place (``--gradient-accumulation-fusion``)
  came with 83b1e42f30 (2022-02-13). About 7 ms per micro-batch on a 1T stage (2 x 10^9 parameters
  per GPU) against about 180 ms of its forward and backward.
* Tensor-parallel collectives synchronous (``tp_dgrad_overlap = False``): at 6985e58938 (and at
  aed2f75e20, April 2021) ``megatron/mpu/mappings.py`` all-reduces the input gradient with a
  blocking ``torch.distributed.all_reduce`` after the linear's whole backward; the overlap with
  the weight-gradient GEMM came with cf7efd4f5a (2021-08-30), after these scripts.
* Pipeline sends: the scatter/gather optimization of Sec. 4.1 is on by default
  (``--no-scatter-gather-tensors-in-pipeline`` turns it off; ``megatron/arguments.py``), as
  pipesim sends every TP rank's ``1/t`` share.
* Table 2's PTD rows have no script: micro-batch size 1 (the table's), model-parallel sizes 96
  and 280 read as ``t = 8`` (Table 1's t for every model over 18B) times ``p = 12`` and
  ``p = 35``, local DDP and synchronous TP as above, and the non-interleaved ``1f1b`` schedule
  (the paper gives no chunk count for them; with the interleaved schedule, 4 chunks as
  ``run_figure_12.sh`` runs the same 175B model on the same t and p, 3 as Table 1's 530B, the
  predictions rise by 2-9%: 153, 152, 149 and 171, 169, 165 teraFLOP/s, all within 10% too).

Table 2's ZeRO-3 rows (no model parallelism, micro-batch 4, 2 or 1, one micro-batch per GPU) are
one stage of ``n`` replicas with ``sharding = zero3`` issued as DeepSpeed's 2021 runtime did
(``zero3_runtime = deepspeed-2021``), predicted by the 3D estimate (the simulator charges the same;
simulating these rows takes seconds to minutes). Plans of more than 16 (virtual) stages (310B,
530B, 1T) are also predicted by the Megatron planner's 3D estimate
(:func:`pipesim.planner.megatron.estimate_3d`, the same per-stage TP times as the simulator;
within 1-2% of the simulation there) to keep the validation fast; the others are simulated.

Not modelled: the 2021 code's pipeline sends block the compute stream (``p2p_communication.py``
waits on its ``batch_isend_irecv`` requests and synchronizes the device); with the scatter/gather
optimization each is ``1/8`` of a micro-batch's activation (13 MB for 1T, about 0.5 ms on a 200
Gb/s NIC against about 50 ms of a stage's forward).
"""

from __future__ import annotations

from functools import cache, partial

from experiments.validation._plans import block_stages
from experiments.validation.record import Record
from pipesim.api import simulate
from pipesim.plan import Plan, Recompute, StagePlan
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.collective import AllReduceOverlap
from pipesim.profiles.costmodels.compute import compute_model
from pipesim.profiles.costmodels.grad_accumulation import (
    GradAccumulation,
    tied_copy_parameters,
    with_grad_accumulation,
)
from pipesim.profiles.costmodels.sharding import Sharding
from pipesim.profiles.costmodels.zero3_runtime import Zero3Runtime
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions

__all__ = ["achieved_tflops_per_gpu", "records"]

_PAPER = (
    'Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM", '
    "SC'21 (arXiv:2104.04473)"
)
_VOCAB, _SEQ = 51200, 2048
_RATE_TOL = 0.10  # the median target for absolute throughputs (its max is 25%)
_SIMULATE_UP_TO_STAGES = 16
_TORCH_DDP_BUCKET_BYTES = 25 * 1024**2  # torch.nn.parallel.DistributedDataParallel's bucket_cap_mb = 25


def _model_flop(hidden: int, layers: int, batch: int) -> float:
    """Eq. 3 of the paper: FLOP per iteration with activation recomputation."""
    h, s, v, ll = hidden, _SEQ, _VOCAB, layers
    return 96 * batch * s * ll * h * h * (1 + s / (6 * h) + v / (16 * ll * h))


@cache
def achieved_tflops_per_gpu(
    heads: int, hidden: int, layers: int, t: int, p: int, gpus: int, batch: int, microbatch: int = 1,
    chunks: int = 1, torch_ddp: bool = False,
) -> float:
    """pipesim's achieved teraFLOP/s per GPU (the paper's Eq. 3 FLOP over the predicted iteration
    time) of a ``gpt:`` model under Megatron-LM's (t, p, d) on ``gpus`` A100s, fp16, full
    recomputation, synchronous TP collectives, ``chunks`` model chunks per pipeline rank
    (``interleaved`` above 1, ``1f1b`` otherwise), micro-batches of ``microbatch`` samples;
    ``torch_ddp``: gradients all-reduced in PyTorch DDP's 25 MiB buckets during the last
    backward (``--DDP-impl torch``), else after each stage's last backward (``local``).

    Raises:
        InputError: a configuration pipesim refuses (t not dividing the heads, too few GPUs).
    """
    spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq={_SEQ},vocab={_VOCAB}"
    profile, cluster = resolve_inputs(spec, "dgx-a100-1024", overrides={"servers": gpus // 8}, dtype="fp16")
    d = gpus // (t * p)
    m = batch // (d * microbatch)
    # autograd's in-place fp16 param.grad accumulation, the last pipeline rank's tied copy too
    tied = tied_copy_parameters(profile) if p > 1 else None
    profile = with_grad_accumulation(profile, compute_model(cluster.device_spec(0), "float16"),
                                     GradAccumulation.AUTOGRAD, microbatches=m, tied_copies=tied)
    virtual = p * chunks
    plan = Plan(
        stages=block_stages([layers // virtual] * virtual, profile.num_layers,
                            StagePlan(first_layer=0, last_layer=0, replicas=d, tensor_parallel=t,
                                      tp_dgrad_overlap=False)),
        global_batch_size=batch,
        num_microbatches=m,
        schedule="interleaved" if chunks > 1 else "1f1b",
        chunks=chunks,
        recompute=Recompute.FULL,
    )
    if virtual > _SIMULATE_UP_TO_STAGES:
        time_s = estimate_3d(plan, profile, cluster).iteration_time_s
    else:
        overlap = AllReduceOverlap.BUCKETED if torch_ddp else AllReduceOverlap.AFTER_BACKWARD
        options = SimOptions(allreduce_overlap=overlap, bucket_bytes=_TORCH_DDP_BUCKET_BYTES,
                             record_trace=False)
        time_s = simulate(plan, profile, cluster, options=options).iteration_time_s
    return _model_flop(hidden, layers, batch) / time_s / gpus / 1e12


# Table 1: (parameters in billions, heads, hidden, layers, t, p, GPUs, batch, achieved TFLOP/s per GPU),
# then examples/sc21/run_table_1.sh's micro-batch size (MBS), model chunks per pipeline rank
# (layers / p / --num-layers-per-virtual-pipeline-stage; 1 without it) and --DDP-impl torch (True)
# or local (False).
_TABLE1 = (
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1, True),
    (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1, True),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1, True),
    (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1, True),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1, False),
    (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3, False),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2, False),
    (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2, False),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3, False),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1, False),
)

# Table 2, PTD parallelism rows: (parameters, heads, hidden, layers, t, p, GPUs, batch, TFLOP/s per GPU),
# then micro-batch 1 (the table's), one chunk and local DDP (no script gives these runs).
_TABLE2 = (
    (174.6, 96, 12288, 96, 8, 12, 384, 1536, 153, 1, 1, False),
    (174.6, 96, 12288, 96, 8, 12, 768, 1536, 149, 1, 1, False),
    (174.6, 96, 12288, 96, 8, 12, 1536, 1536, 141, 1, 1, False),
    (529.6, 128, 20480, 105, 8, 35, 560, 2240, 171, 1, 1, False),
    (529.6, 128, 20480, 105, 8, 35, 1120, 2240, 167, 1, 1, False),
    (529.6, 128, 20480, 105, 8, 35, 2240, 2240, 159, 1, 1, False),
)


def zero3_tflops_per_gpu(
    heads: int, hidden: int, layers: int, gpus: int, batch: int, microbatch: int
) -> float:
    """pipesim's achieved teraFLOP/s per GPU (Eq. 3 FLOP over the predicted iteration time) of a
    ``gpt:`` model trained by ZeRO-3 data parallelism alone on ``gpus`` A100s (fp16, full
    recomputation), from the 3D estimate.

    Raises:
        InputError: a configuration pipesim refuses.
    """
    spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq={_SEQ},vocab={_VOCAB}"
    profile, cluster = resolve_inputs(spec, "dgx-a100-1024", overrides={"servers": gpus // 8}, dtype="fp16")
    last = profile.num_layers - 1
    plan = Plan(
        stages=(StagePlan(first_layer=0, last_layer=last, replicas=gpus, sharding=Sharding.ZERO3),),
        global_batch_size=batch,
        num_microbatches=batch // (gpus * microbatch),
        schedule="1f1b",
        recompute=Recompute.FULL,
        zero3_runtime=Zero3Runtime.DEEPSPEED_2021,
    )
    time_s = estimate_3d(plan, profile, cluster).iteration_time_s
    return _model_flop(hidden, layers, batch) / time_s / gpus / 1e12


# Table 2, ZeRO-3 rows: (parameters, heads, hidden, layers, GPUs, batch, micro-batch, TFLOP/s per GPU).
_TABLE2_ZERO3 = (
    (174.6, 96, 12288, 96, 384, 1536, 4, 144),
    (174.6, 96, 12288, 96, 768, 1536, 2, 88),
    (174.6, 96, 12288, 96, 1536, 1536, 1, 44),
    (529.6, 128, 20480, 105, 640, 2560, 4, 138),
    (529.6, 128, 20480, 105, 1120, 2240, 2, 98),
    (529.6, 128, 20480, 105, 2240, 2240, 1, 48),
)

_ZERO3_GAP = (
    "DeepSpeed's 2021 ZeRO-3 (v0.3.15) as Plan.zero3_runtime = deepspeed-2021 "
    "(profiles/costmodels/zero3_runtime.py): per 175B iteration 1060 per-tensor all-gathers (4 weights per "
    "block above the 1e5-element persistence threshold, 3 of 4 gathered again after the replay: reuse "
    "distance 1e9) and 386 reduce-scatters, each a list of one tensor per rank (2-3 framework ops per rank: "
    "7.7, 15.4, 30.7 ms of host time per gather on 384, 768, 1536 ranks) on a synchronized device, each "
    "prefetched behind one module (not the unit) and paying NCCL 2.8.4's ring latency over all ranks "
    "(1.6-9.4 ms a call), with the device's memory passes around each call (profiles/costmodels/"
    "zero3_exposure.py: the gather's torch.zeros of its buffer, exposed by the torch.cuda.synchronize "
    "after it, and PyTorch's copy out of the flat NCCL buffer; the reduce-scatter's div_ of the whole "
    "gradient and PyTorch's copy in: 1 + 2 and 4 bytes per byte, 1-8 s an iteration). That takes the "
    "175B iterations from 59, 30, 15 s (FSDP-style) to 67, 50, 69 s against the measured 82, 67, 67 s "
    "(the 1536-GPU row holds); 530B, where stage3_max_live_parameters (1e9) also leaves 3 of 4 gathers "
    "per block on demand: 203, 137, 141 s against 256, 180, 184 s (69, 52, 72 and 220, 156, 167 s "
    "before the large calls ran on NCCL's rings across servers, one per NIC, instead of the "
    "hierarchical form's NIC phase then NVSwitch phase: ring_topology.server_rings, issue 14; 207, "
    "143, 151 s before every gather and reduce-scatter ran on them, as NCCL runs them, and the HDR "
    "NIC reached 0.96 of its rate: the per-tensor calls auto had put on the hierarchical form). The "
    "remainder (14-16 s for 175B at "
    "micro-batch 4 and 2, 32-48 s for 530B, with the ZeRO-3 backward's gathers and reduce-scatters "
    "sharing the links on two streams) is still about the time of all the iteration's communication at "
    "the cost model's rates (1.3 TB, 3.9 TB per GPU): as if the gathers and reduce-scatters did not "
    "overlap the compute at all. Read in stage3.py and ruled out as the cause: overlap_comm (true by "
    "default for stage 3: own fetch and reduction streams, though one NCCL stream per process group), "
    "the prefetch bucket (5e7 elements: one tensor ahead), NIC sharing (Selene's 8 x 200 Gb/s HDR per "
    "server, one per GPU, as the preset), fp16 gradients (as modelled), and the gradient path's "
    "synchronisations (v0.3.13-v0.4.0 alike, with contiguous_gradients true and reduce_bucket_size 1e7 "
    "as DeepSpeed's own Megatron ZeRO-3 example config, DeepSpeedExamples bdf8e59a, the configuration "
    "modelled: the hook after each weight's gradient blocks the host on reduction_stream.synchronize() "
    "for the previous reduction and issues the weight's reduce-scatter with no wait_stream on the "
    "compute stream; the next fetch's torch.cuda.synchronize() waits for it: the per-module pairing "
    "modelled; the owned slices' fp16 copy and the step's fp32 copy move 1/n of the model: "
    "negligible). Not modelled: contiguous_gradients false, the version's default in v0.3.13-v0.4.0 "
    "(buffered_reduce_fallback: each weight's gradient flattened, all-reduced in 5e8-element buckets and "
    "copied back, no per-rank issue, twice the reduce-scatter's wire bytes; tried as a prototype before "
    "the memory passes: 71, 54, 58 s and 216, 152, 142 s, no row within 10%); the persistent tensors' own "
    "reduce-scatter calls (_reduce_scatter_gradients takes every tensor of the bucket: 12 calls per "
    "block, not 4) and their per-rank gather loop after each step (770 tensors x n ranks x 4 ops): "
    "at 10 us per framework operator (compute.OP_DISPATCH_S) the 12 calls alone take the 175B "
    "1536-GPU row to 105 s against the measured 67 s, so the flat measurement from 768 to 1536 GPUs "
    "bounds the per-rank host cost of a call to about a third of what the model charges, leaving an "
    "n-independent cost to find; param.norm() per fetch (in a log f-string, about 1% of the iteration). "
    "Found, not modelled: the live bound's counter (total_available_parameter_numel) is decremented for "
    "the persistent tensors at every backward's end (_partition_all_parameters) but incremented for them "
    "only in the first iteration (later _post_step gathers them outside the coordinator), so it drifts "
    "below zero by 28M elements an iteration on the 530B model and the bound stops binding after tens of "
    "iterations; without the on-demand gathers the 530B rows would take 187, 121, 127 s (further from "
    "the measurement: the missing cost is larger than the gaps above)"
)

_ZERO3_HELD = frozenset({(174.6, 1536)})
"""The ZeRO-3 rows the model holds (the others keep :data:`_ZERO3_GAP`)."""


def _zero3_record(row: tuple[float, int, int, int, int, int, int, int], index: int) -> Record:
    params, heads, hidden, layers, gpus, batch, mbs, published = row
    return Record(
        name=f"megatron-2021-t2-zero3-{params:g}b-{gpus}gpu-tflops",
        source=f"{_PAPER}, Table 2 (ZeRO-3 without model parallelism), row {index} "
        f"({params:g}B, n={gpus}, B={batch}, micro-batch {mbs})",
        quantity="achieved teraFLOP/s per GPU (paper's Eq. 3 FLOP / iteration time / GPUs)",
        kind="absolute",
        published=float(published),
        predict=partial(zero3_tflops_per_gpu, heads, hidden, layers, gpus, batch, mbs),
        tolerance=_RATE_TOL,
        note=f"gpt:{layers}x{hidden}, one stage of {gpus} zero3 replicas, fp16, full recompute, 3D estimate",
        known_miss="" if (params, gpus) in _ZERO3_HELD else _ZERO3_GAP,
    )


def _record(table: str, row: tuple[float, int, int, int, int, int, int, int, int, int, int, bool],
            index: int) -> Record:
    params, heads, hidden, layers, t, p, gpus, batch, published, mbs, chunks, torch_ddp = row
    config = (heads, hidden, layers, t, p, gpus, batch, mbs, chunks, torch_ddp)
    schedule = f"interleaved with {chunks} chunks" if chunks > 1 else "1f1b"
    ddp = "torch DDP (25 MiB buckets in the backward)" if torch_ddp else "local DDP (after the backward)"
    return Record(
        name=f"megatron-2021-{table}-{params:g}b-{gpus}gpu-tflops",
        source=f"{_PAPER}, {table.replace('t', 'Table ')}, row {index} "
        f"({params:g}B, t={t}, p={p}, n={gpus}, B={batch})",
        quantity="achieved teraFLOP/s per GPU (paper's Eq. 3 FLOP / iteration time / GPUs)",
        kind="absolute",
        published=float(published),
        predict=partial(achieved_tflops_per_gpu, *config),
        tolerance=_RATE_TOL,
        note=f"gpt:{layers}x{hidden}, {heads} heads, fp16, full recompute, {schedule}, micro-batch {mbs}, "
        f"d={gpus // (t * p)}, synchronous TP all-reduces, {ddp}, fp16 param.grad accumulated in place "
        f"(autograd), dgx-a100-1024 with servers={gpus // 8}",
    )


def records() -> list[Record]:
    """Table 1's ten weak-scaling rows and Table 2's six PTD-parallelism and six ZeRO-3 rows."""
    return (
        [_record("t1", row, i + 1) for i, row in enumerate(_TABLE1)]
        + [_record("t2", row, i + 7) for i, row in enumerate(_TABLE2)]
        + [_zero3_record(row, i + 1) for i, row in enumerate(_TABLE2_ZERO3)]
    )
