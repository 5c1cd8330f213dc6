"""TP compute from GEMM shapes (tile and wave quantisation of the split GEMMs), the time-division
fallback, the replayed forward of recomputation under TP and the activation memory of each
recompute mode under TP."""

from __future__ import annotations

import itertools

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.plan_file import plan_from_dict, plan_to_dict
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.compute import ComputeModel, GemmShape
from pipesim.profiles.costmodels.memory import stage_activation_bytes
from pipesim.profiles.costmodels.tensor_parallel import (
    block_tp_time_factors,
    stage_tp_times,
    tp_compute_model,
    tp_exposed_comm_s,
    tp_stage_activations,
    tp_time_factors,
)
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import DTYPE_BYTES, Layer, ModelProfile
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.roofline import Roofline
from pipesim.profiles.models.zoo.shapes import replicated_block_times_s
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.instructions import Compute
from pipesim.simulator.lowering import lower
from tests.tp.tp_ops import op_time_s

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000"
GPT3 = "gpt:layers=96,hidden=12288,heads=96,seq=2048,vocab=51200"


def expected_block_times_s(
    layer: Layer, model: ComputeModel, b: int, t: int, sp: bool, fwd_s: float, bwd_s: float, elem: int
) -> tuple[float, float]:
    """A block's forward and backward under TP, worked out here from Megatron-LM's split of each
    GEMM (Shoeybi et al. 2019, Sec. 3), independently of the code under test."""
    shape = layer.shape
    assert shape is not None
    s, h, a, f = shape.seq, shape.hidden, shape.heads, shape.ffn
    d = h // a
    gemms = [  # (whole, split): Q, K, V by columns; Q K^T, P V by heads; out-proj by rows; MLP
        ((b * s, h, h, 1), (b * s, h // t, h, 1)),
        ((b * s, h, h, 1), (b * s, h // t, h, 1)),
        ((b * s, h, h, 1), (b * s, h // t, h, 1)),
        ((s, s, d, b * a), (s, s, d, b * a // t)),
        ((s, d, s, b * a), (s, d, s, b * a // t)),
        ((b * s, h, h, 1), (b * s, h, h // t, 1)),
        ((b * s, f, h, 1), (b * s, f // t, h, 1)),
        ((b * s, h, f, 1), (b * s, h, f // t, 1)),
    ]

    def op(m: int, n: int, k: int, c: int) -> float:
        moved = elem * (m * k + k * n + m * n) * c
        return model.op_time_s(model.gemm_time_s(GemmShape(m=m, n=n, k=k, count=c), moved))

    def directions(m: int, n: int, k: int, c: int) -> tuple[float, float]:
        return op(m, n, k, c), op(m, k, n, c) + op(k, n, m, c)

    whole = [directions(*g) for g, _ in gemms]
    split = [directions(*g) for _, g in gemms]
    r_f, r_b = replicated_block_times_s(Roofline(model=model), batch=b, seq=s, hidden=h)
    rep = 1 / t if sp else 1.0
    out = []
    for k, (total, r) in enumerate(((fwd_s, r_f), (bwd_s, r_b))):
        g = sum(x[k] for x in whole)
        gt = sum(x[k] for x in split)
        out.append(gt + r * rep + (total - g - r) / t)
    return out[0], out[1]


@pytest.mark.parametrize(("t", "sp"), [(2, False), (4, False), (4, True)])
def test_blocks_are_retimed_from_their_split_gemms(t: int, sp: bool) -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    model = tp_compute_model(profile, cluster.device)
    assert model is not None
    assert model.precision == "float16"
    plan = Plan(stages=(StagePlan(first_layer=0, last_layer=2, tensor_parallel=t, sequence_parallel=sp),
                        StagePlan(first_layer=3, last_layer=5, tensor_parallel=t, sequence_parallel=sp)),
                global_batch_size=8, num_microbatches=4, schedule="1f1b")
    program = lower(plan, profile, cluster, SimOptions(free_links=True))
    f = next(i for i in program.instructions(0) if getattr(i, "op", None) == "F")
    b = 2
    fwd, bwd = profile.fwd_times_s(b), profile.bwd_times_s(b)
    emb = profile.layers[0].shape
    assert emb is not None
    expected = fwd[0] * tp_time_factors(emb, t, sp)[0]
    for i in (1, 2):
        expected += expected_block_times_s(profile.layers[i], model, b, t, sp, fwd[i], bwd[i], 2)[0]
    assert f.duration_s == pytest.approx(expected, rel=1e-12)  # free links: no collective time


def test_small_per_device_gemms_lose_efficiency() -> None:
    """GPT-3 175B on A100 in fp16, one sample: each doubling of t makes the per-device GEMMs
    smaller and less efficient, beyond what the kept layer norms cost (Narayanan et al. 2021
    Fig. 13 see TP's per-GPU throughput fall with t)."""
    profile, cluster = resolve_inputs(GPT3, "dgx-a100-x2", dtype="fp16")
    model = tp_compute_model(profile, cluster.device)
    assert model is not None
    block = profile.layers[1]
    assert block.shape is not None
    f, b = profile.fwd_times_s(1)[1], profile.bwd_times_s(1)[1]
    scaled = []
    for t in (1, 2, 4, 8):
        ff, fb = block_tp_time_factors(block, 1, t, True, model, f, b, 2)
        scaled.append((ff * t, fb * t))  # 1.0 would be perfect scaling
    assert scaled[0] == (1.0, 1.0)
    for before, after in itertools.pairwise(scaled):
        assert after[0] > before[0]
        assert after[1] > before[1]
    assert 1.02 < scaled[-1][0] < 1.3  # with SP the time division alone would give exactly 1.0
    assert tp_time_factors(block.shape, 8, True) == (1 / 8, 1 / 8)


def test_time_division_without_a_device_model() -> None:
    v100 = zoo_model(GPT, dtype="fp16")  # costed on the V100: no model of its kernels on an A100
    assert tp_compute_model(v100, get_device("A100-SXM4-80GB")) is None
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="tf32")  # GEMMs faster than fp32
    model = tp_compute_model(profile, cluster.device)
    assert model is not None
    assert model.precision == "float32"
    block = profile.layers[1]
    assert block.shape is not None
    f, b = profile.fwd_times_s(2)[1], profile.bwd_times_s(2)[1]
    division = tp_time_factors(block.shape, 4, False)
    assert block_tp_time_factors(block, 2, 4, False, model, f, b, 4) == division
    tp = lower(_plan(4, "none"), profile, cluster, SimOptions(free_links=True)).tp
    assert tp is not None
    times = stage_tp_times(profile, 1, 2, 2, 4, False, tp.curves((0, 1, 2, 3)), None)
    fwd = profile.fwd_times_s(2)
    assert times.fwd_tp_s == pytest.approx(sum(fwd[i] * division[0] for i in (1, 2)))


def _plan(t: int, recompute: str) -> Plan:
    return Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=t),), global_batch_size=4,
                num_microbatches=2, schedule="1f1b", recompute=recompute)


def test_recomputation_replays_the_tp_forward_with_its_collectives() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    ops = {}
    for rc in ("none", "full", "selective"):
        program = lower(_plan(4, rc), profile, cluster, SimOptions())
        computes = [i for i in program.instructions(0) if isinstance(i, Compute)]
        ops[rc] = {i.op: i.duration_s for i in computes if i.op in ("F", "B")}
        result = simulate(_plan(4, rc), profile, cluster)
        estimate = estimate_3d(_plan(4, rc), profile, cluster)
        assert result.iteration_time_s == pytest.approx(estimate.iteration_time_s, rel=1e-9)
    # full: the backward starts with the blocks' forward again (the embedding and the head are
    # not checkpointed: memory.full_replays), at the stage's TP ratio, collectives included
    fwd = profile.fwd_times_s(2)
    blocks = sum(fwd[1:-1]) / sum(fwd)
    assert ops["full"]["B"] == pytest.approx(ops["none"]["B"] + ops["none"]["F"] * blocks, rel=1e-12)
    # selective: the attention cores only, split by heads
    fwd = profile.fwd_times_s(2)
    rec = sum(fwd[i] * (profile.layers[i].attention_core_fwd_share or 0.0) for i in range(6))
    assert ops["selective"]["B"] == pytest.approx(ops["none"]["B"] + rec / 4, rel=1e-12)


def _fp16_gpt() -> ModelProfile:
    return zoo_model(GPT, dtype="fp16", batch_size=2)


@pytest.mark.parametrize("recompute", ["none", "full", "selective"])
def test_tp_memory_at_t1_is_the_one_device_model(recompute: str) -> None:
    profile = _fp16_gpt()
    for first, last in ((0, 2), (3, 5), (1, 1)):
        acts = tp_stage_activations(profile, first, last, 2, recompute, 1, False)
        one_device = stage_activation_bytes(profile, first, last, 2, recompute)
        assert (acts.stash_bytes, acts.work_bytes) == one_device


@pytest.mark.parametrize(("t", "sp", "units"), [(8, False, 10 + 24 / 8), (8, True, 34 / 8), (2, True, 17.0)])
def test_selective_recomputation_under_tp_is_korthikantis_row(t: int, sp: bool, units: float) -> None:
    """Korthikanti et al. 2022, Table 2: selective recomputation keeps ``s b h (10 + 24 / t)``
    bytes per block with TP and ``34 s b h / t`` with TP and SP (fp16 activations)."""
    profile = _fp16_gpt()
    block = profile.layers[1]
    assert block.shape is not None
    sbh = 2 * block.shape.seq * block.shape.hidden
    inputs = profile.cuts()[0].crossing_bytes / profile.profile_batch_size * 2  # the stage's input
    one = tp_stage_activations(profile, 1, 1, 2, "selective", 1, False).stash_bytes
    assert one - inputs == pytest.approx(34 * sbh, rel=1e-9)
    stash = tp_stage_activations(profile, 1, 1, 2, "selective", t, sp).stash_bytes
    assert stash - inputs / (t if sp else 1) == pytest.approx(units * sbh, rel=1e-9)
    assert DTYPE_BYTES[profile.dtype] == 2


def test_a_tp_group_across_servers_runs_on_the_nics() -> None:
    """A TP group that spans servers is simulated (its collectives cross the NICs as transfers,
    tests/tp/test_tp_network.py); the 3D estimate costs it on the ring's NIC hops
    (tests/tp/test_cross_server_estimate.py)."""
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")  # 2 servers of 8
    wide = Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=16),), global_batch_size=4,
                num_microbatches=2, schedule="1f1b")
    assert estimate_3d(wide, profile, cluster).iteration_time_s > 0
    straddling = Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=4, devices=(6,)),),
                      global_batch_size=4, num_microbatches=2, schedule="1f1b")
    inside = Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=4, devices=(4,)),),
                  global_batch_size=4, num_microbatches=2, schedule="1f1b")
    assert simulate(wide, profile, cluster).iteration_time_s > 0
    # the same compute; the straddling group's ring crosses the NICs, slower than NVSwitch
    slower = simulate(straddling, profile, cluster).iteration_time_s
    assert slower > simulate(inside, profile, cluster).iteration_time_s


def test_tp_comm_overlap_hides_all_but_one_chunk_behind_the_compute() -> None:
    assert tp_exposed_comm_s(8.0, 100.0, 4, False) == 8.0
    assert tp_exposed_comm_s(8.0, 100.0, 4, True) == 2.0  # one of 4 ring-exchange chunks
    assert tp_exposed_comm_s(8.0, 4.0, 4, True) == 2.0 + 4.0 * 3 / 4  # compute too short to hide it
    assert tp_exposed_comm_s(8.0, 0.0, 1, True) == 8.0
    with pytest.raises(InputError, match="tp_comm_overlap=True: needs sequence_parallel"):
        StagePlan(first_layer=0, last_layer=1, tensor_parallel=2, tp_comm_overlap=True)
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    stages = (StagePlan(first_layer=0, last_layer=5, tensor_parallel=4, sequence_parallel=True),)
    plain = Plan(stages=stages, global_batch_size=4, num_microbatches=2, schedule="1f1b")
    hidden = Plan(stages=(StagePlan(first_layer=0, last_layer=5, tensor_parallel=4, sequence_parallel=True,
                                    tp_comm_overlap=True),), global_batch_size=4, num_microbatches=2,
                  schedule="1f1b")
    tp = lower(plain, profile, cluster, SimOptions()).tp
    assert tp is not None
    ratio_f, _, comm_f, _, _, _ = tp.cost(0, 2, 0)
    fwd = sum(profile.fwd_times_s(2)[0:6]) * ratio_f
    f_plain, f_hidden = (
        next(i for i in lower(p, profile, cluster, SimOptions()).instructions(0) if isinstance(i, Compute))
        for p in (plain, hidden)
    )
    assert f_plain.duration_s == pytest.approx(fwd, rel=1e-12)  # the compute
    # with the overlap the GEMMs beside Transformer Engine's userbuffers kernels lose SMs
    # (tests/profiles/test_userbuffers_sms.py): a longer compute, hiding the collectives
    hidden_tp = lower(hidden, profile, cluster, SimOptions()).tp
    assert hidden_tp is not None
    fwd_hidden = sum(profile.fwd_times_s(2)[0:6]) * hidden_tp.cost(0, 2, 0)[0]
    assert f_hidden.duration_s == pytest.approx(fwd_hidden, rel=1e-12)
    assert fwd < fwd_hidden < fwd * 1.1
    assert op_time_s(f_plain, cluster) == pytest.approx(fwd + comm_f, rel=1e-12)
    exposed = tp_exposed_comm_s(comm_f, fwd_hidden, 4, True)
    assert op_time_s(f_hidden, cluster) == pytest.approx(fwd_hidden + exposed, rel=1e-12)
    assert op_time_s(f_hidden, cluster) < op_time_s(f_plain, cluster)
    for p in (plain, hidden):  # one rank: the estimate is the simulated time
        assert simulate(p, profile, cluster).iteration_time_s == pytest.approx(
            estimate_3d(p, profile, cluster).iteration_time_s, rel=1e-9)
    assert plan_from_dict(plan_to_dict(hidden)) == hidden
    assert "tp_comm_overlap" not in str(plan_to_dict(plain))
