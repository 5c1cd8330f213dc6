"""Pipeline iteration times of GPT-3 XL and GPT-3 Small over shaped networks (10 Gb/s down to
1 Gb/s, 0.1 to 50 ms delay), against pipesim's simulation of the same pipeline.

Source: DS3Lab's benchmark logs for "Decentralized Training of Foundation Models in Heterogeneous
Environments" (Yuan et al., NeurIPS 2022), repository github.com/DS3Lab/Decentralized_FM_alpha:

* ``results/gpt3_xl.md``, "Gpipe based pipeline parallel" table (2022/02/14, fp32): 12 AWS
  p3.2xlarge instances (one V100-SXM2-16GB each), GPT-3 XL (24 layers, model dim 2048, 16 heads,
  sequence 2048), 2 layers per instance, batch 64 in micro-batches of 1 (16 MB activation each);
* ``results/gpt3_xl_fp16.md``, "Result of 2022/04/20", "Single Pipeline" column (fp16): 8
  p3.2xlarge, 3 layers per instance, batch 96 in micro-batches of 1 (8 MB activation each);
* ``results/gpt3_small.md``, GPT-3 Small (12 layers, model dim 768, 12 heads, sequence 2048) on 3
  p3.2xlarge, 4 layers each, batch 64 in micro-batches of 1 (6 MB activation in fp32): the GPipe
  "TC run" tables in fp32 and fp16 and the 1F1B table (fp32, micro-batch 1 column; four rows).

Two slopes of the same XL fp16 pipeline, from ``results/gpt3_xl_fp16.md``'s "Result of 2022/04/23"
(default network, fp32 master weights offloaded to the host, which touches only the once-per-
iteration update): the time one more block per stage adds at batch 64 ("Scale with number of
layers": 3, 4, 5 layers per node) and the time one more micro-batch adds at 3 blocks per stage
("Check the largest batch size": batch 32 and 96). They separate the blocks' compute from what a
micro-batch costs besides it (the fp16 rows' named gap).

Each table has five network settings (the 1F1B one the first four) made with ``tc netem`` on
every instance's NIC: "default (about 0.1ms; up to 10Gbps)", "delay 1ms bandwidth 5Gbps", "delay
5ms bandwidth 2Gbps", "delay 10ms bandwidth 1Gbps", "delay 50ms bandwidth 1Gbps" (the rate and
delay as DT-FM's ``scripts/tc_scripts/both_delay_bandwidth.sh`` sets them: ``netem delay D rate
R``, one way).

Mapping: the ``gpt:`` zoo model in DT-FM's own form, ``eager=dtfm``
(:mod:`pipesim.profiles.models.zoo.dtfm`): its ``GPTTransformerLayer`` op by op as PyTorch 1.9
(``torch==1.9.0+cu111``, README.md @ 2086d64; the same block and PyTorch in the February fp32 and
April fp16 runs) runs it, its embedding with the tokenizer's 28,996-row table, and its GLUE QQP
head (a pooler and a 2-way linear layer of its own, not tied to the word embeddings: no tied copy
and no pair all-reduce between the first and last stage), which the log calls "very
light-weighted"; the optimizer is ``optim.SGD`` (``pipeline_parallel/dist_gpipe_pipeline_async.py``);
DT-FM's transformer layers
checkpoint their attention and MLP (``modules/gpt_modules.py``, ``use_checkpoint=True``), so
``recompute = full``. One stage per instance, the embedding with the first and the head with the
last, schedule ``gpipe`` (``1f1b`` for the 1F1B table). The cluster is one GPU per server on the
one input path (:func:`pipesim.profiles.inputs.resolve_inputs` with ``--set``-style overrides of the NIC): the
NIC's rate is the tc rate (10 Gb/s for the default), its latency the one-way delay (0.1 ms for the
default), and its achievable fraction 0.99, what DT-FM's own NCCL point-to-point benchmark between
two p3.2xlarge reached under the same shaping (``results/network_benchmarks.md``: 64 MB in 541 ms
at 1 Gbps, 270 ms at 2 Gbps, 109 ms at 5 Gbps; 0.98-0.99 of the rate). Nothing here is fitted to a
record. The data-parallel columns (DT-FM's parameter-server gradient exchange) have no record:
pipesim models all-reduce, not parameter servers. The 1F1B table's micro-batch 2 and 4 columns
are not records yet.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, partial

from experiments.validation.record import Record
from pipesim.api import simulate
from pipesim.plan import Plan, Recompute, StagePlan
from pipesim.profiles.inputs import resolve_inputs

__all__ = [
    "TABLES", "Table", "pipeline_iteration_time_s", "records", "table_iteration_time_s", "xl_fp16_slope_s",
]

_REPO = "DS3Lab/Decentralized_FM_alpha (github.com/DS3Lab/Decentralized_FM_alpha)"
_TOL = 0.15  # the target for iteration times over shaped networks
_ACHIEVABLE = 0.99  # DT-FM's NCCL p2p benchmark under tc shaping (results/network_benchmarks.md)
# DT-FM's token table: its tokenizer's vocabulary, --vocab-file bert-large-cased-vocab.txt
# (utils/dist_args_utils.py @ 2086d64), the 28,996 WordPiece entries of Google's BERT-Large, Cased
_VOCAB = 28996

# (network label, one-way delay in ms, rate in Gb/s), in the logs' row order
_NETWORKS = (
    ("default (about 0.1ms; up to 10Gbps)", 0.1, 10.0),
    ("delay 1ms bandwidth 5Gbps", 1.0, 5.0),
    ("delay 5ms bandwidth 2Gbps", 5.0, 2.0),
    ("delay 10ms bandwidth 1Gbps", 10.0, 1.0),
    ("delay 50ms bandwidth 1Gbps", 50.0, 1.0),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Table:
    """One logged table: a pipeline of single-V100 instances and its times per network row.

    Attributes:
        key: short id used in record names, e.g. ``"gpt3xl-fp16-gpipe"``.
        where: the log file and table.
        layers, hidden, heads: the GPT shape (sequence 2048, 2-class head).
        dtype: ``"fp32"`` or ``"fp16"``.
        stages: instances, one stage each (``layers / stages`` blocks per stage).
        batch: micro-batches of 1 per iteration.
        schedule: ``"gpipe"`` or ``"1f1b"``.
        seconds: iteration times (s) in :data:`_NETWORKS` order (fewer where the log has fewer).
    """

    key: str
    where: str
    layers: int
    hidden: int
    heads: int
    dtype: str
    stages: int
    batch: int
    schedule: str
    seconds: tuple[float, ...]

    @property
    def model(self) -> str:
        """The ``gpt:`` zoo spec of this table's model: DT-FM's own, op by op (``eager=dtfm``)."""
        return (f"gpt:layers={self.layers},hidden={self.hidden},heads={self.heads},seq=2048,"
                f"vocab={_VOCAB},eager=dtfm")


_XL = {"layers": 24, "hidden": 2048, "heads": 16}
_SMALL = {"layers": 12, "hidden": 768, "heads": 12}
TABLES = (
    Table(key="gpt3xl-fp32-gpipe", where="results/gpt3_xl.md, 'Gpipe based pipeline parallel' (2022/02/14)",
          **_XL, dtype="fp32", stages=12, batch=64, schedule="gpipe",
          seconds=(15.16, 15.49, 16.80, 22.90, 29.08)),
    Table(key="gpt3xl-fp16-gpipe",
          where="results/gpt3_xl_fp16.md, 'Result of 2022/04/20', 'Single Pipeline' column",
          **_XL, dtype="fp16", stages=8, batch=96, schedule="gpipe",
          seconds=(8.14, 8.79, 10.69, 15.64, 16.23)),
    Table(key="gpt3small-fp32-gpipe",
          where="results/gpt3_small.md, 'Gpipe based pipeline parallel', TC run, 'Full precision'",
          **_SMALL, dtype="fp32", stages=3, batch=64, schedule="gpipe",
          seconds=(5.91, 6.01, 6.07, 7.90, 8.77)),
    Table(key="gpt3small-fp16-gpipe",
          where="results/gpt3_small.md, 'Gpipe based pipeline parallel', TC run, 'fp16'",
          **_SMALL, dtype="fp16", stages=3, batch=64, schedule="gpipe",
          seconds=(2.25, 2.26, 2.55, 4.01, 4.78)),
    Table(key="gpt3small-fp32-1f1b",
          where="results/gpt3_small.md, '1F1B based pipeline parallel', 'Micro batch size: 1' column",
          **_SMALL, dtype="fp32", stages=3, batch=64, schedule="1f1b",
          seconds=(6.54, 6.86, 8.42, 11.21)),
)
"""The logged tables: GPT-3 XL and GPT-3 Small (12 layers, hidden 768, 12 heads) on single-V100
AWS p3.2xlarge instances, batch 64 (96 for XL fp16) in micro-batches of 1."""

_COMPUTE_GAP = (
    "two costs DT-FM's fp16 runs pay and pipesim does not, though it now costs DT-FM's own model op by "
    "op as PyTorch 1.9 runs it (gpt:...,eager=dtfm, profiles/models/zoo/dtfm.py: the in-place bias "
    "add after each 3-D nn.Linear, PyTorch 1.9's layer-norm kernels, the head split's copies, the "
    "merge copy, the score division and softmax, ReLU, every parameter's .grad accumulation, the "
    "embedding's full-table zero fill; 16.5 ms per XL block, forward + replay + backward, against "
    "15.5 fused): their blocks run slower, and a cost per micro-batch besides. The 2022/04/23 runs of "
    "the same XL pipeline (results/gpt3_xl_fp16.md) give both slopes: one more block per stage adds "
    "1.445 s at batch 64 where pipesim adds 1.172 (dtfm-gpt3xl-fp16-per-block-slope, -18.9%: 20.4 "
    "against 16.5 ms per block and micro-batch over the 71 pipeline slots; those runs offloaded the "
    "fp32 master weights to the host, about 0.2 s an iteration for the first stage's 214M parameters "
    "by the 04/20 run without it, 8.14 against 8.34 s at batch 96, so about 0.05 s of the slope), "
    "one more micro-batch adds 75.5 ms at 3 blocks per stage where pipesim adds 50.4: 3 x 3.9 ms of "
    "the blocks and about 13 ms per micro-batch that does not grow with them. "
    "(1) The blocks. Their GEMMs are 11.9 of the 16.5 ms and already run 17% slower in pipesim than "
    "the V100's cuBLAS in Baidu DeepBench (results/train/DeepBench_NV_V100.xlsx, sheet 'Results - FP16 "
    "ip, Mixed math', DGX-1, CUDA 10.1: median model/measured time 1.17, 0.83-1.29, over its 76 shapes "
    "with every dimension >= 512; 98.0 TFLOP/s at 2048 x 7000 x 2048 against the model's 83 at "
    "compute.GEMM_EFFICIENCY[volta, float16] = 0.72): to hold the 3.9 ms they would run 36% below "
    "DeepBench's rates. The memory-bound kernels are 4.6 ms "
    "(9.0 in fp32): only if every one of them took its fp32 time, gaining nothing from the halved "
    "bytes, would the block gain 4.4 ms (Small's 2.4, 9.6 of its 11.3 ms per slot). PyTorch 1.9's "
    "kernels that are not vectorised or not grid-filling (read in aten/src/ATen/native/cuda of the 1.x "
    "line) are too small for it alone: layer norm (one element per load; the gamma/beta gradient on "
    "N/32 = 64 blocks of 512 threads for XL, 24 for Small, on 80 SMs) is 0.35 ms of the block, 0.65 at "
    "its fp32 time; the bias add_ (a broadcast operand: the unrolled, not the vectorised, element-wise "
    "kernel) 0.56, 1.09; softmax over 2048-wide rows (SoftMax.cu host_softmax: block per row, 128 "
    "threads, ILP = sizeof(float4) / 2 = 8 elements a thread per pass, 32768 rows) 1.3, 2.6. "
    "(2) The per-micro-batch cost. With the blocks at the per-block slope (x 1.236 on every fp16 block "
    "time: that slope 1.448 s) the rows are still -20.3/-24.9/-18.9/-7.5% (XL at 10/5/2/1 Gb/s) and "
    "-17.8/-17.6/-11.9/-14.5% (Small), the micro-batch slope 62.1 against 75.5 ms: 16.0/21.3/19.6/11.4 ms "
    "per pipeline slot (XL) and 6.1/6.0/4.6/8.8 (Small) are left, 17-35% of a slot's compute (61, "
    "27.5 ms), not in proportion to a transfer (2.3 of them per slot at 10 Gb/s, 0.4-0.6 at 2), "
    "and they stay at 1 Gb/s, where pipesim's slot is its two transfers (2 x 67.8 ms "
    "XL, 2 x 25.4 Small) and compute hides behind them: a cost in series with the transfers (5.7 and "
    "4.4 ms a message there). The fp32 rows at 1 Gb/s hold (+0.1% each), but their backward "
    "phases are compute-bound in pipesim (2 x 70 ms XL, 4 x 16.5 Small, against 135.6 and 50.8 ms "
    "transfers), where such a cost would hide. "
    "Ruled out: NCCL running one communicator's operations in issue order whatever their streams "
    "(NVIDIA/nccl src/enqueue.cc, ncclBarrierEnqueue at v2.11.4-1 and v2.12.12-1: a launch on a new "
    "stream waits for the previous launch's doneEvent), with DT-FM's sends and receives on one cupy "
    "NcclCommunicator (comm/comm_utils.py, comm/nccl_backend.py at 8f88607): a middle stage's receive "
    "of the next micro-batch would wait for its send of the last, two transfers per micro-batch and "
    "phase: +27.6 ms per XL fp16 micro-batch at 10 Gb/s, but recv, compute and send in series would "
    "also take the XL 1 Gb/s row to about 33 s (15.64 measured) and the held fp32 Small rows to +21%; the "
    "p3.2xlarge's 'up to 10 Gigabit' NIC falling to a baseline when its burst credits run out "
    "(instances of 16 vCPUs or fewer burst 'for a limited time, typically from 5 to 60 minutes', "
    "repost.aws/questions/QUNu9j1U8YQ_-wyNj26drusQ): at, say, 2.5 Gb/s on the 10 and 5 Gb/s rows the XL fp16 "
    "default row goes to -14.7% but the fp32 1F1B one to +17.9% (-2.6%), and the 2 Gb/s rows, below "
    "it, keep -27.5/-22.1%; allocator retries: results/Memory_PP.txt (4b0cec7, 2022-04-21, "
    "scripts/local_scripts/gpt3_xl_pp3_debug_DRAM.sh: 3 XL blocks per p3.2xlarge in fp16) reports "
    "'cudaMalloc retries: 0' at batch 64 and 96 (peak 8.9 and 12.5 GB allocated), and the 04/23 "
    "batch sweep is linear (76.9, 74.1, 80.0 ms per micro-batch from batch 32 to 64, 96, 108). "
    "Ruled out in the fp16 code path (8f88607): fp16 is model.half() with fp16 receive buffers "
    "(GpipeAsync's dtype; no casts, no apex, no dropout); the optimizer (optimizer/optimizer.py, "
    "grad_scalar.py) runs once per iteration: each fp16 gradient .float() into an fp32 master, "
    "torch._amp_foreach_non_finite_check_and_unscale_ and one found_inf.item() host sync, SGD, the "
    "copy back, about 32 bytes per parameter, 7 GB and 10 ms on the first stage (0.1% of 8.14 s); "
    "the scaler is the constant one (--loss-scale defaults to 64, utils/dist_args_utils.py), so no "
    "per-micro-batch inf/nan check, and backward_stage never multiplies the loss by it; no host "
    "sync per micro-batch (CUDA events between the compute and the cupy NCCL streams; the default "
    "--profiling tidy_profiling adds one torch.cuda.synchronize per phase, as in the fp32 runs, "
    "dist_runner.py at cc19e88 and 8f88607). Per pipeline slot the default-network runs exceed "
    "pipesim by 27.7 ms (XL fp16), 9.2 (XL fp32, held at -4.6%), 11.3 (Small fp16) and -0.8 (Small "
    "fp32). Not traced: the blocks' 3.9 ms (not the GEMMs' clock alone: a sustained clock under the "
    "300 W limit would have to sit 36% below DeepBench's, about 980 MHz if it ran at the 1530 MHz the "
    "125 TFLOP/s are rated at; not host dispatch: the block's ~110 eager ops, forward, replay and "
    "backward, would each take ~180 us on the host; not the eager element-wise kernels as a whole: "
    "in HuggingFace's GPT-2 block they are 36.7 of the modelled 70.7 ms on a V100 in fp16 (batch 64, "
    "sequence 512) and mli-2022-gpt2-layer-v100-fwdbwd-tflops holds at +2.5% with the 2022 notebook's "
    "PyTorch; left: PyTorch 1.9's own kernels that record does not run, layer norm, the 2048-wide "
    "softmax and the broadcast bias add_, 2.1 ms more at their fp32 times, unmeasured) and the cost "
    "in series with the transfers (the February fp32 and "
    "April fp16 runs had the same documented set-up: README.md at "
    "cc19e88 and 2086d64: AWS Deep Learning Base AMI, torch 1.9.0+cu111, cupy-cuda110 8.6.0; the same "
    "scripts/tc_scripts/both_delay_bandwidth.sh, d771cb1)"
)
_PER_MESSAGE_GAP = (
    "DT-FM's 2022-02-14 fp32 GPT-3 XL run paid the one-way delay once per message: from 10 to 50 ms "
    "it gained 6.18 s, about 64 activations and 64 gradients per link x 40 ms + the fill, as if "
    "each send waited for the previous one's arrival; its later runs (fp16 XL 2022-04-20, Small "
    "fp32 and fp16) gained 0.59, 0.87 and 0.77 s, one delay per pipeline hop, as a pipelined "
    "stream does. pipesim's point-to-point stream is pipelined (a send's latency overlaps the "
    "bytes of the send ahead of it: NCCL's send kernel completes once its data is handed to the "
    "transport, docs/communication.md), which matches the later runs within 10%; the older "
    "code's per-message wait is not modelled"
)
_GAPS = {
    ("gpt3xl-fp32-gpipe", 50.0): _PER_MESSAGE_GAP,
    ("gpt3xl-fp16-gpipe", 0.1): _COMPUTE_GAP,
    ("gpt3xl-fp16-gpipe", 1.0): _COMPUTE_GAP,
    ("gpt3xl-fp16-gpipe", 5.0): _COMPUTE_GAP,
    ("gpt3small-fp16-gpipe", 0.1): _COMPUTE_GAP,
    ("gpt3small-fp16-gpipe", 1.0): _COMPUTE_GAP,
    ("gpt3small-fp16-gpipe", 5.0): _COMPUTE_GAP,
    ("gpt3small-fp16-gpipe", 50.0): _COMPUTE_GAP,
}


@cache
def pipeline_iteration_time_s(key: str, delay_ms: float, rate_gbit_per_s: float) -> float:
    """pipesim's iteration time (s) of the logged pipeline ``key`` (a :data:`TABLES` key; micro-
    batches of 1, full recompute) over single-V100 servers whose NIC runs at ``rate_gbit_per_s``
    with ``delay_ms`` one-way latency.

    Raises:
        KeyError: no table has that key.
        InputError: a rate or delay pipesim refuses (not finite, not positive).
    """
    return table_iteration_time_s({t.key: t for t in TABLES}[key], delay_ms, rate_gbit_per_s)


@cache
def table_iteration_time_s(table: Table, delay_ms: float, rate_gbit_per_s: float) -> float:
    """pipesim's iteration time (s) of the pipeline ``table`` describes (any :class:`Table`, e.g. a
    logged one with other ``layers`` or ``batch``), as :func:`pipeline_iteration_time_s`.

    Raises:
        InputError: a rate or delay pipesim refuses, or ``layers`` not a multiple of ``stages``
            that leaves every stage a block.
    """
    overrides = {
        "servers": table.stages,
        "gpus_per_server": 1,
        "device": "V100-SXM2-16GB",
        "nic": "10GbE",
        "nic_bandwidth_gbit_per_s": rate_gbit_per_s,
        "nic_latency_us": delay_ms * 1000.0,
        "nic_achievable_fraction": _ACHIEVABLE,
    }
    profile, cluster = resolve_inputs(table.model, "pcie-4x4-v100-10gbe", overrides=overrides,
                                      dtype=table.dtype)
    per_stage = table.layers // table.stages
    last = profile.num_layers - 1
    ranges = [
        (0 if k == 0 else 1 + k * per_stage, last if k == table.stages - 1 else (k + 1) * per_stage)
        for k in range(table.stages)
    ]
    plan = Plan(
        stages=tuple(StagePlan(first_layer=a, last_layer=b, replicas=1) for a, b in ranges),
        global_batch_size=table.batch,
        num_microbatches=table.batch,
        schedule=table.schedule,
        recompute=Recompute.FULL,
        optimizer="sgd",  # optim.SGD(lr) (pipeline_parallel/dist_gpipe_pipeline_async.py @ 2086d64)
    )
    return simulate(plan, profile, cluster).iteration_time_s


# results/gpt3_xl_fp16.md, "Result of 2022/04/23" (default network, 8 p3.2xlarge, fp32 master
# weights offloaded to the host): iteration seconds by batch at 3 blocks per stage, and by blocks
# per stage at batch 64.
_XL_FP16_BY_BATCH = {32: 3.51, 64: 5.97, 96: 8.34, 108: 9.30}
_XL_FP16_BY_BLOCKS = {3: 5.97, 4: 7.30, 5: 8.86}


def xl_fp16_slope_s(what: str) -> float:
    """pipesim's slope of the GPT-3 XL fp16 GPipe iteration on the default network, seconds:
    ``"block"``, the time one more block per stage adds at batch 64 (``(T(5) - T(3)) / 2``);
    ``"microbatch"``, the time one more micro-batch adds at 3 blocks per stage
    (``(T(96) - T(32)) / 64``).

    Raises:
        ValueError: ``what`` is neither.
    """
    table = {t.key: t for t in TABLES}["gpt3xl-fp16-gpipe"]
    if what == "block":
        five = table_iteration_time_s(replace(table, layers=5 * table.stages, batch=64), 0.1, 10.0)
        three = table_iteration_time_s(replace(table, batch=64), 0.1, 10.0)
        return (five - three) / 2
    if what == "microbatch":
        big = table_iteration_time_s(replace(table, batch=96), 0.1, 10.0)
        small = table_iteration_time_s(replace(table, batch=32), 0.1, 10.0)
        return (big - small) / 64
    raise ValueError(f"unknown slope {what!r}: 'block' or 'microbatch'")


def _slope_records() -> list[Record]:
    where = f"{_REPO}, results/gpt3_xl_fp16.md, 'Result of 2022/04/23', default network row"
    by_blocks = (_XL_FP16_BY_BLOCKS[5] - _XL_FP16_BY_BLOCKS[3]) / 2
    by_batch = (_XL_FP16_BY_BATCH[96] - _XL_FP16_BY_BATCH[32]) / 64
    return [
        Record(
            name="dtfm-gpt3xl-fp16-per-block-slope",
            source=f"{where}, 'Scale with number of layers' (batch 64): 3, 4, 5 layers "
            f"{_XL_FP16_BY_BLOCKS[3]}, {_XL_FP16_BY_BLOCKS[4]}, {_XL_FP16_BY_BLOCKS[5]} s; (T(5) - T(3)) / 2",
            quantity="seconds one more block per stage adds to the fp16 GPipe iteration (batch 64)",
            kind="absolute",
            published=by_blocks,
            predict=partial(xl_fp16_slope_s, "block"),
            tolerance=_TOL,
            note="8 x V100 stages, micro-batches of 1, recompute full; the blocks' V100 fp16 compute",
            known_miss=_COMPUTE_GAP,
        ),
        Record(
            name="dtfm-gpt3xl-fp16-per-microbatch-slope",
            source=f"{where}, 'Check the largest batch size' (3 layers per node): batch 32 "
            f"{_XL_FP16_BY_BATCH[32]} s, 96 {_XL_FP16_BY_BATCH[96]} s; (T(96) - T(32)) / 64",
            quantity="seconds one more micro-batch adds to the fp16 GPipe iteration (3 blocks per stage)",
            kind="absolute",
            published=by_batch,
            predict=partial(xl_fp16_slope_s, "microbatch"),
            tolerance=_TOL,
            note="8 x V100 stages, micro-batches of 1, recompute full",
            known_miss=_COMPUTE_GAP,
        ),
    ]


def records() -> list[Record]:
    """Every row of every logged table (:data:`TABLES`)."""
    out = []
    for table in TABLES:
        for (label, delay_ms, rate), value in zip(_NETWORKS, table.seconds, strict=False):
            out.append(
                Record(
                    name=f"dtfm-{table.key}-d{delay_ms:g}ms-{rate:g}gbps",
                    source=f"{_REPO}, {table.where}, row '{label}': {value} s",
                    quantity=f"{table.schedule} iteration time (s)",
                    kind="absolute",
                    published=value,
                    predict=partial(pipeline_iteration_time_s, table.key, delay_ms, rate),
                    tolerance=_TOL,
                    note=(
                        f"{table.model}, {table.dtype}, {table.stages} x 1 V100-SXM2-16GB servers, "
                        f"NIC {rate:g} Gb/s x {_ACHIEVABLE}, {delay_ms:g} ms one way; {table.schedule}, "
                        f"{table.batch} micro-batches of 1, recompute full"
                    ),
                    known_miss=_GAPS.get((table.key, delay_ms), ""),
                )
            )
    return out + _slope_records()
