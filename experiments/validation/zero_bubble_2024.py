"""Throughput of 1F1B, ZB-1p and ZB-2p pipelines of GPT models on A100s, against pipesim's
simulation of ``1f1b`` and of the zero-bubble automatic schedule (``zb-auto``).

Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024, arXiv:2401.10241), Sec. 5.1-5.2:

* Table 3: 1.5B (22 layers, 24 heads, hidden 2304; 8 GPUs, micro-batch 6), 6.2B (30, 32, 4096;
  8 GPUs, micro-batch 3), 14.6B (46, 40, 5120; 16 GPUs, micro-batch 1), 28.3B (62, 48, 6144; 32
  GPUs, micro-batch 1); sequence 1024; pipeline parallelism only (one GPU per stage); 24/32/64,
  24/32/64, 48/64/128 and 96/128/256 micro-batches; the first and last stages hold one
  transformer layer fewer than the others (for the embedding and the loss);
* Table 4: samples per GPU per second of ZB-2p (activation memory limit ``2p`` micro-batches),
  ZB-1p (limit ``p``) and 1F1B, on up to 32 A100 SXM 80GB in 4 nodes over RoCE.

Mapping: the zoo's ``gpt:`` model (fp16, vocabulary 32,000: the paper does not give it, Table 3's
parameter counts bound it: next paragraph) on ``dgx-a100-x2`` with ``servers = max(1, GPUs / 8)``
(8 x 200 Gb/s NICs per node; the paper's RoCE is taken as that); the paper's split (embedding with the first
stage, head with the last); ``1f1b``, and ``zb-auto`` with ``memory_limit = p`` (ZB-1p) or ``2p``
(ZB-2p) (the authors' heuristic of the paper's Sec. 4.1, as their released scheduler runs it: its
ILP is switched off there), fed, as the paper feeds its scheduler, with the profiled T_F, T_B + T_W
and T_W of a middle stage, T_comm of one activation over the first hop, and the share of a
micro-batch's activations the scheduler counts as held from B to W (:func:`wgrad_memory_fraction`).
Throughput is ``batch / iteration time / GPUs``.

1F1B-I (Table 4's fourth row): Megatron-LM's interleaved 1F1B with "each transformer layer [as]
a chunk" (Sec. 5.1), as the authors' scripts run it at tag zero-bubble-v0.1.0 (commit 93af65c6):
``examples/pretrain_zero_bubble.sh`` passes ``--num-layers-per-virtual-pipeline-stage 1`` and
``--allow-padding-num-layers``, which pads the layer count up to a multiple of ``p`` (22 -> 24,
30 -> 32, 46 -> 48, 62 -> 64: always two padding layers here; ``megatron/arguments.py``) and
takes one layer off the first and the last chunk (``ParallelTransformer.get_offset`` in
``megatron/model/transformer.py``): rank 0's first chunk holds only the embedding, rank
``p - 1``'s last chunk only the final norm, head and loss, every other chunk one layer; so
``v = (layers + 2) / p`` chunks per rank (3, 4, 3, 2). pipesim: ``interleaved`` with
``chunks = v`` over the zoo profile's ``layers + 2`` entries (embedding, blocks, head), one per
stage, whose order is Megatron's (``(v - 1) p + 2 (p - 1 - r)`` warm-up forwards on rank ``r``,
``forward_backward_pipelining_with_interleaving`` in ``megatron/core/pipeline_parallel/
schedules.py``; every ``m`` here is a multiple of ``p``, as that function requires).

Vocabulary (bounded by the counts, applied): Table 3's parameter counts bound it. With
Megatron-LM's 12h^2 + 13h per block, tied input/output embeddings, a final layer norm and the
script's ``--max-position-embeddings 2048``, the four rounded counts (1.5, 6.2, 14.6, 28.3 B) hold
only for 24,465 to 32,440 tokens (the 6.2B and 14.6B rows bound it); 50,257 (padded to 50,304 by
``--make-vocab-size-divisible-by 128``) gives 6.26, 14.74 and 28.41 B. 32,000, the usual
SentencePiece vocabulary that the script's ``GPTSentencePieceTokenizer`` loads, fits all four and
is taken. The 1.5B last stage (two blocks and the head: the head's GEMM is V / 12h = 1.16 blocks'
worth at 32,000, 1.82 at 50,257) is the slowest stage either way once the loss is costed as the
tag's code runs it (fp32 kernels over the logits, :meth:`pipesim.profiles.models.zoo.roofline.
LayerCost.cross_entropy`). Moves when that loss costing came in (``python -m
experiments.validation``): with 50,257 the thirteen 1.5B throughput rows went from -9.5..+1.5% to
-20.7..-10.8% (all out), with 32,000 to -4.8..+6.4%; the larger models' rows end within a point
of where they were. Before it (a fused bf16-style loss of 3 + 2 passes) 32,000 alone had taken the
1.5B rows to +3.4..+15.7%: the 50,257 head had stood in for the loss's cost.

Known gap (14.6B): the paper's 1F1B-I runs 17% slower than the paper's own bubble calculation
(Table 5's 1F1B-I cost from Table 6's profiled times) at every ``m`` (48, 64, 128), where its
1F1B runs 8.4% slower than its calculation; pipesim executes the interleaved order as that
calculation does (zb-2024-t5-*-1f1b-i-bubble within 4.2%), so it over-predicts 1F1B-I by its
1F1B error (+6.5-6.8%) plus that extra ~8%. See :data:`_ILV_GAP`. Ruled out with a model of the
tag's code (per-pair NCCL streams in issue order, sends completing once their receive is posted,
the compute stream waiting on the handles; Table 6's times): the interleaved schedule's
overlapped point-to-point (+2% over the free-link cost), its blocking non-interleaved
counterpart (``batch_p2p_comm`` with ``torch.cuda.synchronize()``: 1F1B within 0.2% of Table 5's
cost), the per-micro-batch host synchronisations on the first and last rank (``get_batch``'s
``broadcast_data`` copies sizes to the host; ``loss_func`` checks ``loss.isnan()``: under 1%),
cross-node hops (they would need 2.6 GB/s), the host's dispatch (about 50 framework calls a
layer forward, 0.07-0.2 of its GPU time: the host runs ahead; :data:`_ILV_GAP`), and
``SimOptions.rendezvous`` (-2.5 to -3.9 points on
the 14.6B rows, and on for every row it moves zb-2024-t4-28.3b-m96-zb2p-vs-1f1b from -9.5% to
-10.5%).
"""

from __future__ import annotations

from functools import cache, partial

from experiments.validation.record import Record
from pipesim.api import make_plan, simulate
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator.trace import SimulationResult

__all__ = [
    "MODELS", "interleaved_split", "megatron_chunk_layers", "middle_stage_pass_times_s", "records",
    "samples_per_gpu_per_s", "simulated", "wgrad_memory_fraction",
]

_SOURCE = 'Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024 (arXiv:2401.10241), Table 4'
_ABS_TOL = 0.10  # the median target for absolute throughputs (its max is 25%)
_RATIO_TOL = 0.10  # the largest accepted error for ratio metrics

_VOCAB = 32000  # bounded by Table 3's parameter counts (module doc, "Vocabulary")

# Table 3: model -> (layers, heads, hidden, GPUs = stages, micro-batch size)
MODELS: dict[str, tuple[int, int, int, int, int]] = {
    "1.5b": (22, 24, 2304, 8, 6),
    "6.2b": (30, 32, 4096, 8, 3),
    "14.6b": (46, 40, 5120, 16, 1),
    "28.3b": (62, 48, 6144, 32, 1),
}

# Table 4: (model, micro-batches, ZB-2p, ZB-1p, 1F1B, 1F1B-I samples per GPU per second)
_TABLE4 = (
    ("1.5b", 24, 14.5, 12.9, 11.8, 13.1),
    ("1.5b", 32, 14.8, 13.4, 12.5, 13.4),
    ("1.5b", 64, 14.9, 14.2, 13.6, 13.9),
    ("6.2b", 24, 4.32, 3.88, 3.50, 4.01),
    ("6.2b", 32, 4.35, 4.00, 3.70, 4.08),
    ("6.2b", 64, 4.39, 4.20, 4.03, 4.19),
    ("14.6b", 48, 1.81, 1.61, 1.40, 1.54),
    ("14.6b", 64, 1.83, 1.67, 1.49, 1.59),
    ("14.6b", 128, 1.85, 1.76, 1.64, 1.66),
    ("28.3b", 96, 0.99, 0.87, 0.76, 0.82),
    ("28.3b", 128, 1.00, 0.90, 0.80, 0.85),
    ("28.3b", 256, 1.00, 0.96, 0.88, 0.90),
)

_ILV_GAP = (
    "per-pass overhead not modelled: against the paper's own calculation (Table 5's cost "
    "m (T_F+T_B+T_W) / (1 - bubble rate) from Table 6's profiled times) the paper's measured "
    "iterations (Table 4) run 8.2-8.5% slower for 1F1B and 17.0-17.5% for 1F1B-I on 14.6B, "
    "the same at m = 48, 64 and 128, so per pass, not bubble; a fit over all four models and "
    "four schedules (1F1B 2 passes per micro-batch, ZB-1p/2p 3, 1F1B-I 2v) gives 0.55-0.84 ms "
    "per pass plus 2-5% (residuals within 2.8% of the cost), and one layer per chunk multiplies "
    "the passes by v = 3. pipesim runs 1F1B-I's order as that calculation does "
    "(zb-2024-t5-*-1f1b-i-bubble within 4.2%), so it over-predicts by its 1F1B error "
    "(+6.5-6.8%) plus that ~8%. Not the point-to-point traffic: at this tag Megatron-LM's "
    "interleaved schedule overlaps it (overlap_p2p_comm is on by default: arguments.py's "
    "--no-overlap-p2p-communication is store_false; so batch_p2p_comm is off and "
    "p2p_communication._p2p_ops issues single isend/irecv whose handles are waited before the "
    "next forward or backward), and a model of exactly that (one NCCL stream per rank pair in "
    "issue order, a send completing once its receive is posted, the compute stream waiting on "
    "the handles) with Table 6's T_comm per hop gives Table 5's cost within 2%; cross-node hops "
    "would need about 4 ms per 10.5 MB activation (2.6 GB/s) to close the gap, and the one-node "
    "1.5B and 6.2B runs show the same per-pass excess. Not the host's dispatch either: "
    "ParallelTransformerLayer.forward at the tag (TP 1, Megatron's fused layer norm, softmax, "
    "bias-GeLU and bias-dropout-add, no flash attention) makes about 50 framework calls (16 of "
    "them kernels, 8 Python autograd Functions), ~0.5-0.7 ms at compute.OP_DISPATCH_S (10 us, He "
    "2022) per call, against 3.6 ms of modelled GPU time per 14.6B block forward (0.07-0.2 of it on "
    "the four models; the backward's C++ autograd and the W pass's four closures issue fewer calls "
    "per GPU second). The interleaved schedule does not synchronise the host per pass on a middle "
    "rank (it waits on its isend/irecv handles, a stream wait; batch_p2p_comm and its "
    "torch.cuda.synchronize() are off), so its host runs ahead; the non-interleaved one does "
    "(arguments.py turns overlap_p2p_comm off without virtual stages, so batch_p2p_sync's "
    "synchronize follows every exchange), and there the GPU waits for the lead-in to the next "
    "pass's first kernel (one call's time: Table 6's drained-queue timings include it). "
    "pipesim's per-operator max(GPU time, OP_DISPATCH_S) binds on none of a block's forward "
    "kernels and adds 0-3 us to a block's backward at these sizes; a cumulative host queue gives "
    "the same pass times within 10 us a block, so neither model of the host moves these records. "
    "A cost added to every pipeline pass would push passing records out "
    "(zb-2024-t4-1.5b-m24-zb2p is at -4.8%, the 1.5B 1F1B-I rows at +5.4 to +6.4%)"
)
_MISSES: dict[str, str] = {f"zb-2024-t4-14.6b-m{m}-1f1b-i": _ILV_GAP for m in (48, 64, 128)}


def samples_per_gpu_per_s(model: str, microbatches: int, schedule: str) -> float:
    """pipesim's samples per GPU per second of a Table 3 model with ``microbatches`` micro-batches
    under ``schedule`` (``"1f1b"``, ``"zb1p"``, ``"zb2p"`` or ``"1f1b-i"``).

    Raises:
        KeyError: an unknown model or schedule name.
    """
    p, mbs = MODELS[model][3], MODELS[model][4]
    return mbs * microbatches / simulated(model, microbatches, schedule).iteration_time_s / p


def megatron_chunk_layers(layers: int, ranks: int) -> list[int]:
    """Transformer layers per model chunk, in pipeline order (chunk ``c`` on rank ``c % ranks``), of
    the authors' interleaved runs: ``--num-layers-per-virtual-pipeline-stage 1`` with
    ``--allow-padding-num-layers`` at zero-bubble-v0.1.0. ``megatron/arguments.py`` pads the layer
    count up to a multiple of ``ranks``; ``ParallelTransformer.get_offset``
    (``megatron/model/transformer.py``) gives every chunk one layer and takes one off each of the
    chunks ``-1, 0, 1, ...`` (as many as the padding layers), which then run a no-op layer.

    Raises:
        ValueError: ``layers`` or ``ranks`` below 1.
    """
    if layers < 1 or ranks < 1:
        raise ValueError(f"layers ({layers}) and ranks ({ranks}) must be at least 1")
    padding = -layers % ranks
    sizes = [1] * (layers + padding)
    for index in range(-1, padding - 1):
        sizes[index] -= 1
    return sizes


def interleaved_split(layers: int, ranks: int) -> list[int]:
    """The zoo ``gpt:`` profile's entries (embedding, ``layers`` blocks, head) per chunk of
    :func:`megatron_chunk_layers`: the embedding joins the first chunk, the head the last.

    Raises:
        ValueError: a chunk that would hold nothing (more than two padding layers: its no-op layer
            has no profile entry).
    """
    split = megatron_chunk_layers(layers, ranks)
    split[0] += 1
    split[-1] += 1
    if min(split) < 1:
        raise ValueError(f"{layers} layers on {ranks} ranks leave a chunk with only a no-op layer")
    return split


def wgrad_memory_fraction(model: str) -> float:
    """The share of a micro-batch's activations the authors' scheduler counts as held from its
    ``B`` to its ``W`` on ``model``: ``32h / (34h + 5as)`` (``s = 1024``), from the per-token
    approximations ``f_mem_approx = 34h + 5as`` and ``w_mem_approx = -32h`` it is fed
    (``get_zero_bubble_forward_backward_func`` in ``megatron/core/pipeline_parallel/zb_schedules.py``
    of github.com/sail-sg/zero-bubble-pipeline-parallelism, zero-bubble-v0.1.0 / 93af65c6: the
    34h + 5as of Korthikanti et al. 2022, of which the 32h of the linear layers' inputs stay for
    ``W``). 1.5B: 0.366; 6.2B, 14.6B, 28.3B: 0.432.

    Raises:
        KeyError: an unknown model.
    """
    _, heads, hidden, _, _ = MODELS[model]
    return 32 * hidden / (34 * hidden + 5 * heads * 1024)


@cache
def middle_stage_pass_times_s(
    model: str, micro_batch: int | None = None
) -> tuple[float, float, float, float]:
    """pipesim's ``(T_F, T_B, T_W, T_comm)`` of a middle stage of a Table 3 model, seconds, as the
    paper profiles them (its Table 6) and feeds them to its scheduler: the forward, the input
    gradient and the weight gradient of the stage's ``(layers + 2) / p`` blocks at Table 3's
    micro-batch size (or ``micro_batch`` samples), and one fp16 activation over the first hop.

    Raises:
        KeyError: an unknown model.
    """
    layers, heads, hidden, p, mbs = MODELS[model]
    mbs = mbs if micro_batch is None else micro_batch
    spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq=1024,vocab={_VOCAB}"
    servers = {"servers": max(1, p // 8)}
    profile, cluster = resolve_inputs(spec, "dgx-a100-x2", overrides=servers, dtype="fp16")
    inner = (layers + 2) // p
    middle = range(inner, 2 * inner)
    fwd, bwd = profile.fwd_times_s(mbs), profile.bwd_times_s(mbs)
    t_w = sum(bwd[i] * profile.layers[i].weight_grad_fraction for i in middle)
    act_bytes = mbs * 1024 * hidden * 2
    t_comm = cluster.route_latency_s(0, 1) + act_bytes / cluster.route_bandwidth_bytes_per_s(0, 1)
    return sum(fwd[i] for i in middle), sum(bwd[i] for i in middle) - t_w, t_w, t_comm


@cache
def simulated(
    model: str, microbatches: int, schedule: str, micro_batch: int | None = None
) -> SimulationResult:
    """pipesim's simulation of a Table 3 model with ``microbatches`` micro-batches under
    ``schedule`` (``"1f1b"``, ``"zb1p"``, ``"zb2p"``, or ``"1f1b-i"``: Megatron-LM's interleaved
    1F1B with one layer per chunk), the paper's split and inputs (module doc), at Table 3's
    micro-batch size or ``micro_batch`` samples (its Appendix F doubles it).

    Raises:
        KeyError: an unknown model or schedule name.
    """
    layers, heads, hidden, p, mbs = MODELS[model]
    mbs = mbs if micro_batch is None else micro_batch
    spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq=1024,vocab={_VOCAB}"
    servers = {"servers": max(1, p // 8)}
    profile, cluster = resolve_inputs(spec, "dgx-a100-x2", overrides=servers, dtype="fp16")
    if schedule == "1f1b-i":
        split = interleaved_split(layers, p)
        plan = make_plan(profile, cluster, global_batch_size=mbs * microbatches,
                         num_microbatches=microbatches, split=split, schedule="interleaved",
                         chunks=len(split) // p)
        return simulate(plan, profile, cluster)
    inner = (layers + 2) // p  # a middle stage's blocks; the first and last: one fewer + embedding/head
    split = [inner] * p
    # The paper profiles T_F, T_B, T_W and T_comm and feeds them to its scheduler: so does this,
    # from a middle stage's layers at the micro-batch size and one activation over the first hop.
    t_f, t_b, t_w, t_comm = middle_stage_pass_times_s(model, micro_batch)
    costs = {
        "fwd_time_s": t_f,
        "bwd_time_s": t_b + t_w,  # zb-auto takes the full backward T_B + T_W
        "wgrad_time_s": t_w,
        "comm_time_s": t_comm,
    }
    share = wgrad_memory_fraction(model)  # what the authors' scheduler counts as held until W
    name, options = {
        "1f1b": ("1f1b", {}),
        "zb1p": ("zb-auto", {**costs, "memory_limit": p, "wgrad_memory_fraction": share}),
        "zb2p": ("zb-auto", {**costs, "memory_limit": 2 * p, "wgrad_memory_fraction": share}),
    }[schedule]
    plan = make_plan(profile, cluster, global_batch_size=mbs * microbatches, num_microbatches=microbatches,
                     split=split, schedule=name, schedule_options=options)
    return simulate(plan, profile, cluster)


def _ratio(model: str, microbatches: int, schedule: str) -> float:
    baseline = samples_per_gpu_per_s(model, microbatches, "1f1b")
    return samples_per_gpu_per_s(model, microbatches, schedule) / baseline


def records() -> list[Record]:
    """Table 4's throughputs (ZB-2p, ZB-1p, 1F1B, 1F1B-I) and their ratios to 1F1B's."""
    out: list[Record] = []
    for model, m, zb2p, zb1p, f1b, f1bi in _TABLE4:
        layers, heads, hidden, p, mbs = MODELS[model]
        setting = f"{model.upper()}, {p} GPUs, {m} micro-batches of {mbs}"
        note = (f"gpt:{layers}x{hidden}, {heads} heads, seq 1024, vocab {_VOCAB}, fp16, dgx-a100-x2, "
                f"servers={max(1, p // 8)}")
        chunks = len(megatron_chunk_layers(layers, p)) // p
        interleaved = f"; 1F1B-I: interleaved, {chunks} one-layer chunks per GPU (embedding and head alone)"
        rows = (("zb2p", zb2p, "ZB-2p"), ("zb1p", zb1p, "ZB-1p"), ("1f1b", f1b, "1F1B"),
                ("1f1b-i", f1bi, "1F1B-I"))
        for schedule, published, label in rows:
            name = f"zb-2024-t4-{model}-m{m}-{schedule}"
            out.append(Record(
                name=name,
                source=f"{_SOURCE}, {label} row, {setting}",
                quantity="samples per GPU per second",
                kind="absolute",
                published=published,
                predict=partial(samples_per_gpu_per_s, model, m, schedule),
                tolerance=_ABS_TOL,
                note=note + (interleaved if schedule == "1f1b-i" else ""),
                known_miss=_MISSES.get(name, ""),
            ))
        for schedule, published, label in rows[:2] + rows[3:]:
            name = f"zb-2024-t4-{model}-m{m}-{schedule}-vs-1f1b"
            out.append(Record(
                name=name,
                source=f"{_SOURCE}, {label} and 1F1B rows, {setting}",
                quantity=f"throughput {label} / 1F1B",
                kind="ratio",
                published=published / f1b,
                predict=partial(_ratio, model, m, schedule),
                tolerance=_RATIO_TOL,
                note=note + (interleaved if schedule == "1f1b-i" else ""),
                known_miss=_MISSES.get(name, ""),
            ))
    return out
