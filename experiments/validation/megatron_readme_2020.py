"""Iteration times of GPT-2 models under Megatron-LM's tensor (intra-layer) model parallelism on one
DGX-2 (V100) and one DGX A100, and with 128-way data parallelism on 128 DGX A100s, against
pipesim's simulation of the same configurations.

The records and their mapping were chosen and written down before pipesim's predictions were
looked at; nothing here is fitted to them.

Source: NVIDIA/Megatron-LM, ``README.md`` at commit 5281919420 (2020-09-11, "Update scaling numbers
in README and other small tweaks"), section before the contents, and the three tables it shows as
images at that commit (``images/cases.png``, ``images/scaling-mp.png``, ``images/scaling-dp.png``):

* the text: GPT-2 models, "All models use a vocabulary size of 51,200 and a sequence length of
  1024"; the model-parallel table is "weak scaling from 1 to 8 GPUs of our model parallelism code
  in both a DGX-2 and a DGX-A100", batch size 8 on the DGX-2 and 16 on the DGX-A100; the
  data-parallel table uses "128-way data parallelism and the scaling numbers are relative to a
  single A100 (Case 1B with a 1076ms iteration time)";
* ``cases.png``: case, hidden size, attention heads, layers, parameters (billions), model-parallel
  partitions: 1B 1920/15/24/1.16/1, 2B 2304/18/30/2.03/2, 4B 3072/24/36/4.24/4, 8B 4096/32/42/8.67/8;
* ``scaling-mp.png``: per case and GPU count (1, 2, 4, 8), the iteration time (ms), the scaling and
  the teraFLOP/s per GPU, on "DGX-2 (V100) batch size 8" and "DGX-A100 batch size 16";
* ``scaling-dp.png``: "DGX-A100 batch size 2048", 128, 256, 512, 1024 GPUs: iteration time (ms),
  scaling, teraFLOP/s per GPU.

Two derived columns were checked against the times, which are the measurements: the teraFLOP/s
per GPU is the Megatron-LM count with activation recomputation,
``96 B s l h^2 (1 + s/(6h) + V/(16 l h)) / T / n`` (1B on one V100: 8.06e13 FLOP / 1.121 s =
71.9); the "scaling" is ``(P_case / t_case) / P_1B x T_1B / T_case`` with the table's parameter
counts P and model-parallel partitions t (8B on eight A100s: 8.67 / 8 / 1.16 x 1076 / 1343 =
74.7%; 1B with 128-way data parallelism: 1076 / 1153 = 93.3%). The scaling records are
the ratio form (kind ``ratio``), the times the absolute one.

Mapping (Megatron-LM at that commit): ``--batch-size`` is "Batch size per model instance" (no
gradient accumulation then: ``megatron/training.py`` and ``megatron/arguments.py`` have no
micro-batch loop or option), so one micro-batch of 8 (DGX-2), 16 (DGX-A100) and 2048 / 128 = 16
(data-parallel table) per model instance, and no gradient accumulation pass
(``profiles/costmodels/grad_accumulation.py``); the model-parallel partitions are tensor-parallel
ranks (``--model-parallel-size``, Shoeybi et al. 2019's intra-layer split; no pipeline);
fp16 with activation checkpointing, as the repository's ``examples/pretrain_gpt2_distributed.sh``
runs (``--checkpoint-activations --fp16``) and as the teraFLOP/s column's recomputation factor
says: ``recompute = full``, which replays the transformer layers only, as
``ParallelTransformer._checkpointed_forward`` does (``megatron/model/transformer.py``: the
embedding, final layer norm, logits and loss run once; ``memory.full_replays``); the default
``--DDP-impl local`` all-reduces the fp16 gradients after
the backward (``megatron/training.py`` ``backward_step``): ``allreduce_overlap = end``; the
tensor-parallel all-reduces are all synchronous (``megatron/mpu/mappings.py``:
``_CopyToModelParallelRegion.backward`` all-reduces the input gradient with a blocking
``torch.distributed.all_reduce`` after the linear's backward, input and weight gradients, has
run; the overlap with the weight-gradient GEMM came with commit cf7efd4f5a, 2021-08-30):
``tp_dgrad_overlap = False``. The
``gpt:`` zoo model with the case's shape (tied output embedding, unfused attention: 2020's
Megatron-LM had no fused attention). Hardware: the DGX-2 as 8 of its 16 V100 32 GB on NVSwitch
(``dgx-a100-x2`` with ``device = V100-SXM2-32GB``, ``intra_link = NVLink2-x6``: the DGX-2's V100
is the SXM3 part, listed with the SXM2 one at 125 TFLOP/s fp16 tensor, 300 W / 350 W, in
AnandTech's A100 80GB announcement table, anandtech.com/show/16250, SC20); the DGX A100 of
September 2020 as the 40 GB one (the same AnandTech article announces the 80 GB A100 at SC20,
November 2020, after the README): one server of ``dgx-a100-x2`` with ``device = A100-40GB``;
the data-parallel table on ``dgx-a100-1024`` (Selene's rail fat-tree of DGX A100s with 8 HDR
NICs each) with ``device = A100-40GB`` and ``servers = n / 8``.
"""

from __future__ import annotations

from functools import cache, partial

from experiments.validation.record import Record
from pipesim.api import simulate
from pipesim.plan import Plan, Recompute, StagePlan
from pipesim.profiles.costmodels.collective import AllReduceOverlap
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions

__all__ = ["iteration_time_s", "records"]

_SOURCE = (
    "NVIDIA/Megatron-LM README.md at commit 5281919420 (2020-09-11), the GPT-2 scaling tables "
    "(images/cases.png, images/scaling-mp.png, images/scaling-dp.png at that commit)"
)
_VOCAB, _SEQ = 51200, 1024
_ABS_TOL = 0.10  # the median target for absolute iteration times (its max is 25%)
_RATIO_TOL = 0.10  # the largest accepted error for ratio metrics

# cases.png: case -> (hidden, heads, layers, parameters in billions, model-parallel partitions)
_CASES: dict[str, tuple[int, int, int, float, int]] = {
    "1b": (1920, 15, 24, 1.16, 1),
    "2b": (2304, 18, 30, 2.03, 2),
    "4b": (3072, 24, 36, 4.24, 4),
    "8b": (4096, 32, 42, 8.67, 8),
}

# system -> (cluster preset, overrides, batch per model instance)
_SYSTEMS: dict[str, tuple[str, dict[str, object], int]] = {
    "dgx2-v100": ("dgx-a100-x2", {"servers": 1, "device": "V100-SXM2-32GB", "intra_link": "NVLink2-x6"}, 8),
    "dgx-a100": ("dgx-a100-x2", {"servers": 1, "device": "A100-40GB"}, 16),
    "dgx-a100-dp128": ("dgx-a100-1024", {"device": "A100-40GB"}, 16),
}

# scaling-mp.png and scaling-dp.png: (system, case) -> (GPUs, iteration time ms, scaling)
_TABLE: dict[tuple[str, str], tuple[int, float, float]] = {
    ("dgx2-v100", "1b"): (1, 1121, 1.000),
    ("dgx2-v100", "2b"): (2, 1093, 0.896),
    ("dgx2-v100", "4b"): (4, 1238, 0.825),
    ("dgx2-v100", "8b"): (8, 1407, 0.743),
    ("dgx-a100", "1b"): (1, 1076, 1.000),
    ("dgx-a100", "2b"): (2, 1026, 0.917),
    ("dgx-a100", "4b"): (4, 1162, 0.845),
    ("dgx-a100", "8b"): (8, 1343, 0.747),
    ("dgx-a100-dp128", "1b"): (128, 1153, 0.933),
    ("dgx-a100-dp128", "2b"): (256, 1101, 0.855),
    ("dgx-a100-dp128", "4b"): (512, 1242, 0.790),
    ("dgx-a100-dp128", "8b"): (1024, 1380, 0.727),
}
_MISSES: dict[tuple[str, str, str], str] = {}
"""Records pipesim misses today, and why (the text each record's ``known_miss`` carries): none.

Since full recomputation replays the transformer blocks alone (Megatron-LM's checkpointing:
``memory.full_replays``), not the 51,200-entry LM head's logits GEMM and fp32 loss nor the
embedding, the single-GPU 1B runs lost 41 ms (DGX-2) and 41 ms (DGX A100) of replay and the
8B runs 10 ms (the head is split 8 ways there): dgx2-v100-1b-iteration +11.2% -> +7.6% and
dgx2-v100-8b-scaling +11.5% -> +8.6% (both named before), dgx-a100-dp128-8b-iteration +10.1% ->
+9.4% (named before); the model-parallel table's other scaling records 1.3-3.1 points lower, the
data-parallel table's 0.1-2.9 (its 8B row -3.6% -> -6.5%).

What is left is the same pattern, smaller: every weak-scaling figure of the model-parallel table
comes out high (DGX-2 +2.6, +7.0, +8.6%; DGX A100 +2.5, +3.4, +5.5% for 2B, 4B, 8B), so what
tensor parallelism costs grows too little with ``t``. That cost (the run minus the same run on
free links) is 60, 144, 264 ms for 2B, 4B, 8B on the DGX A100 against 83, 178, 326 ms measured
(the published time minus pipesim's free-link time scaled by the 1B ratio 1076/1098), 54, 129,
236 ms on the DGX-2 against 76, 198, 329 ms (scaled by 1121/1206): 0.72-0.81 and 0.65-0.72 of
it. The collectives are modelled as the 2020 code runs them: two all-reduces of the ``b s h``
fp16 activations per block forward, two more in the recomputed forward and two in the backward,
each blocking (``megatron/mpu/mappings.py``: ``torch.distributed.all_reduce`` with no overlap,
``tp_dgrad_overlap = False``), the vocabulary-parallel embedding's forward all-reduce, the
head's backward all-reduce and the cross-entropy's three ``b s`` fp32 all-reduces (max, target
logit, sum of exponentials: ``megatron/mpu/cross_entropy.py``): 255 all-reduces of 134 MB a
DGX A100 8B iteration (6 a block, the embedding's twice: pipesim's replay carries the stage's
forward collectives, the head's once) at a 221-226 GB/s bus bandwidth for 75-134 MB on 2-8
GPUs (pipesim's NVLink3 ring), and of 67 MB a DGX-2 8B iteration at 123-126 GB/s for 38-67 MB
(``NVLink2-x6``: the DGX-1's 0.90 NVLink2 efficiency of 150 GB/s). Matching the measured cost
would take about 180 GB/s and 90 GB/s at those sizes from the NCCL of mid-2020 (2.7, NGC
PyTorch 20.0x containers); no all-reduce measurement of that NCCL on a DGX-2's NVSwitch or on
a DGX A100 at 38-134 MB was found (not traced).

Read in the 2020 code and costed as prototypes, not modelled (each makes every run slower, the
1B runs most, so each moves the scaling figures the wrong way or not at all and takes the DGX-2
1B run past 10%):

* the fp16 optimizer (``megatron/fp16/fp16.py`` and ``loss_scaler.py``, ``mpu/grads.py`` at
  5281919420): before Apex's ``FusedAdam`` step (28 bytes a parameter, what
  ``optimizer.py`` charges) it checks every fp16 gradient for overflow one tensor at a time
  (``float(x.float().sum())``: a cast, a sum and a host synchronisation per tensor, 10 bytes a
  parameter), copies the fp16 gradients to the fp32 master gradients (6 bytes,
  ``multi_tensor_scale``), unscales them (8 bytes), takes the clipping norm one tensor at a time
  (``p.grad.data.norm(2)`` and ``.item()``, 4 bytes and a synchronisation per tensor) and copies
  the master weights back tensor by tensor (``model.data.copy_(master.data)``, 6 bytes): about
  34 bytes a parameter more, 55 ms (DGX-2) and 32 ms (DGX A100) for the 1B run; prototype (the
  bytes alone, without the per-tensor synchronisations):
  dgx2-v100-1b-iteration +12.5%, -8b +2.9%, scaling +2.9/+7.6/+9.5%; dgx-a100 1B +5.0%, 8B
  -0.8%, scaling +2.6/+3.8/+6.1%;
* the bias adds: PyTorch's ``F.linear`` of 2020 fuses the bias only for 2-D inputs (``addmm``),
  so on Megatron-LM's ``[b, s, h]`` activations each column-parallel linear adds its bias in a
  kernel of its own (``output += bias``) and each row-parallel one after its all-reduce
  (``output_ + self.bias``, ``megatron/mpu/layers.py``), with a reduction per bias gradient,
  while the zoo folds biases into the GEMM epilogue: prototype (2 passes forward, 1 backward,
  of each linear's output): dgx2-v100-1b-iteration +11.9%, -8b +0.8%, scaling +3.4/+8.8/+11.2%;
  dgx-a100 1B +7.2%, 8B -1.1%, scaling +3.4/+5.6/+8.6%.

So the 1B runs, with no tensor parallelism, already take pipesim a little longer than measured
(DGX-2 +7.6%, DGX A100 +2.1%: 71.9 and 149.8 teraFLOP/s of model work per GPU published, 0.575
of a V100's 125 and 0.48 of an A100's 312, with recomputation counted): with the costs above
added, the V100's GEMMs would have to run well above ``compute.GEMM_EFFICIENCY``'s Volta share
(0.72) to hold the 1B time. A candidate not traced: the DGX-2H, the DGX-2 with higher-power
V100s (up to 12 kW a system against 10 kW: training.continuumlabs.ai's DGX-2 page), on which
Shoeybi et al. 2019 (Sec. 5) ran the first Megatron-LM experiments; the README does not say
which DGX-2 it timed, and no GEMM rate of the DGX-2H's V100s was read.

The data-parallel table's 8B row (+7.7% with the HDR NIC at 0.96 of its rate, links.toml;
+9.4% at 0.85, where pipesim ran it 207 ms longer than the single-server 8B run): the published
times differ by 37 ms, less than the ~180 ms a 128-way ring all-reduce of each rank's 2.17 GB of
fp16 gradients needs on its own 200 Gb/s HDR NIC (``2 (127/128) 2.17 GB / 24 GB/s``), so the
published runs hid most of it (torch DDP's bucketed all-reduce during the backward is the
candidate; the README does not give ``--DDP-impl``)."""

_BASELINE = {"dgx2-v100": "dgx2-v100", "dgx-a100": "dgx-a100", "dgx-a100-dp128": "dgx-a100"}
"""The single-GPU 1B run each system's scaling is relative to (the README's text)."""


@cache
def iteration_time_s(system: str, case: str) -> float:
    """pipesim's simulated iteration time, seconds, of a case of the README's tables on ``system``
    (``"dgx2-v100"``, ``"dgx-a100"``, ``"dgx-a100-dp128"``): one micro-batch per model instance,
    ``t`` = the case's partitions, fp16, full recomputation, gradients all-reduced after the backward.

    Raises:
        KeyError: an unknown system or case.
    """
    hidden, heads, layers, _, t = _CASES[case]
    preset, overrides, batch = _SYSTEMS[system]
    gpus = _TABLE[(system, case)][0]
    replicas = gpus // t
    spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq={_SEQ},vocab={_VOCAB}"
    servers = {"servers": max(1, gpus // 8)} if system == "dgx-a100-dp128" else {}
    profile, cluster = resolve_inputs(spec, preset, overrides={**overrides, **servers}, dtype="fp16")
    plan = Plan(
        stages=(StagePlan(first_layer=0, last_layer=profile.num_layers - 1, replicas=replicas,
                          tensor_parallel=t, tp_dgrad_overlap=False),),
        global_batch_size=batch * replicas,
        num_microbatches=1,
        schedule="1f1b",
        recompute=Recompute.FULL,
    )
    options = SimOptions(allreduce_overlap=AllReduceOverlap.END, record_trace=False)
    return simulate(plan, profile, cluster, options=options).iteration_time_s


def _iteration_ms(system: str, case: str) -> float:
    return iteration_time_s(system, case) * 1e3


def scaling(system: str, case: str) -> float:
    """The README's weak-scaling figure from pipesim's times: parameters per model-parallel GPU
    relative to the single-GPU 1B case, times that case's iteration time over this one's."""
    params, t = _CASES[case][3], _CASES[case][4]
    base = _BASELINE[system]
    return params / t / _CASES["1b"][3] * iteration_time_s(base, "1b") / iteration_time_s(system, case)


_SYSTEM_TEXT = {
    "dgx2-v100": "scaling-mp.png, DGX-2 (V100) batch size 8",
    "dgx-a100": "scaling-mp.png, DGX-A100 batch size 16",
    "dgx-a100-dp128": "scaling-dp.png, DGX-A100 batch size 2048 (128-way data parallel)",
}


def _records_of(system: str, case: str) -> list[Record]:
    gpus, time_ms, published_scaling = _TABLE[(system, case)]
    hidden, heads, layers, params, t = _CASES[case]
    row = f"{_SOURCE}, {_SYSTEM_TEXT[system]}, case {case.upper()} ({params} B parameters, {gpus} GPUs)"
    note = (f"gpt:{layers}x{hidden}, {heads} heads, fp16, full recompute, t={t}, {gpus // t} replica(s), "
            f"one micro-batch of {_SYSTEMS[system][2]} per replica")
    out = [
        Record(
            name=f"megatron-readme-2020-{system}-{case}-iteration",
            source=row,
            quantity="iteration time (ms)",
            kind="absolute",
            published=time_ms,
            predict=partial(_iteration_ms, system, case),
            tolerance=_ABS_TOL,
            note=note,
            known_miss=_MISSES.get((system, case, "iteration"), ""),
        )
    ]
    if (system, case) != (_BASELINE[system], "1b"):
        out.append(
            Record(
                name=f"megatron-readme-2020-{system}-{case}-scaling",
                source=row,
                quantity="weak-scaling efficiency relative to 1B on one GPU "
                         "(parameters per GPU x time ratio)",
                kind="ratio",
                published=published_scaling,
                predict=partial(scaling, system, case),
                tolerance=_RATIO_TOL,
                note=note,
                known_miss=_MISSES.get((system, case, "scaling"), ""),
            )
        )
    return out


def records() -> list[Record]:
    """The twelve iteration times of the README's model- and data-parallel tables and the ten
    scaling figures relative to the single-GPU runs."""
    return [r for system, case in _TABLE for r in _records_of(system, case)]
