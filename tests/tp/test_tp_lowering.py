"""The tensor-parallel / sharding lowering pass: neutral at t = 1, Megatron-LM's collectives, ZeRO traffic."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.profiles.costmodels.tensor_parallel import (
    korthikanti_block_units,
    layer_collectives,
    tp_compute_model,
)
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.shape import LayerShape
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.instructions import Compute
from pipesim.simulator.lowering import lower
from pipesim.simulator.tp_lowering import TpLowering
from tests.simulator.builders import random_plan
from tests.tp.test_tp_compute import expected_block_times_s
from tests.tp.tp_ops import op_time_s

CLUSTER = get_cluster("dapple-2x8-v100")
GPT = "gpt:layers=4,hidden=1024,heads=16,seq=512,vocab=32000"


@st.composite
def cases(draw: st.DrawFn) -> tuple[Plan, ModelProfile, SimOptions]:
    schedule = draw(st.sampled_from(["gpipe", "1f1b", "zb-h1", "interleaved"]))
    plan, profile = random_plan(draw, schedule, max_microbatches=5, min_op_time_s=1e-3)
    options = SimOptions(allreduce_overlap=draw(st.sampled_from(["after_backward", "end", "bucketed"])))
    return plan, profile, options


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_the_pass_at_t1_without_sharding_changes_nothing(case: tuple[Plan, ModelProfile, SimOptions]) -> None:
    plan, profile, options = case
    before = simulate(plan, profile, CLUSTER, options)
    with pytest.MonkeyPatch.context() as m:  # force the pass on: every stage t = 1, no sharding
        m.setattr(TpLowering, "active", property(lambda self: True))
        after = simulate(plan, profile, CLUSTER, options)
        assert lower(plan, profile, CLUSTER, options).tp is not None
    assert after.iteration_time_s == before.iteration_time_s
    assert after.num_events == before.num_events
    for a, b in zip(after.devices, before.devices, strict=True):
        assert (a.device, a.peak_memory_bytes, a.busy_time_s, a.allreduce_time_s) == (
            b.device,
            b.peak_memory_bytes,
            b.busy_time_s,
            b.allreduce_time_s,
        )


def _shape(kind: str) -> LayerShape:
    return LayerShape(kind=kind, hidden=4096, heads=32, seq=2048, ffn=16384, vocab=51200)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_block_collectives_are_megatrons(t: int) -> None:
    b, d = 4, 2
    act = b * 2048 * 4096 * d  # b s h activations
    plain = layer_collectives(_shape("block"), t, False, b, d)
    assert [(c.phase, c.kind) for c in plain] == [("F", "all-reduce")] * 2 + [("B", "all-reduce")] * 2
    assert all(c.nbytes == act for c in plain)
    sp = layer_collectives(_shape("block"), t, True, b, d)
    for phase in "FB":
        kinds = sorted(c.kind for c in sp if c.phase == phase)
        assert kinds == ["all-gather", "all-gather", "reduce-scatter", "reduce-scatter"]
    assert all(c.nbytes == act for c in sp)
    assert layer_collectives(_shape("block"), 1, False, b, d) == ()


def test_embedding_and_head_collectives() -> None:
    emb = layer_collectives(_shape("embedding"), 8, False, 1, 2)
    assert [(c.phase, c.kind) for c in emb] == [("F", "all-reduce")]
    head = layer_collectives(_shape("head"), 8, False, 1, 2)
    assert [(c.phase, c.kind) for c in head] == [("F", "all-reduce")] * 3 + [("B", "all-reduce")]
    assert [c.nbytes for c in head[:3]] == [2048 * 4] * 3  # fp32 max, sum-exp, target logit


def test_korthikanti_table_2() -> None:
    shape = _shape("block")
    attn = 5 * 32 * 2048 / 4096
    assert korthikanti_block_units(shape, 1, False) == 34 + attn
    assert korthikanti_block_units(shape, 8, False) == 10 + 24 / 8 + attn / 8
    assert korthikanti_block_units(shape, 8, True) == (34 + attn) / 8
    # selective recomputation drops the 5as/h term (Table 2, last two rows)
    assert korthikanti_block_units(shape, 8, False, selective=True) == 10 + 24 / 8
    assert korthikanti_block_units(shape, 8, True, selective=True) == 34 / 8


def _gpt_plan(t: int, sp: bool = False, sharding: str = "none", replicas: int = 2) -> Plan:
    stages = (
        StagePlan(first_layer=0, last_layer=2, replicas=replicas, tensor_parallel=t, sequence_parallel=sp,
                  sharding=sharding),
        StagePlan(first_layer=3, last_layer=5, replicas=replicas, tensor_parallel=t, sequence_parallel=sp,
                  sharding=sharding),
    )
    return Plan(stages=stages, global_batch_size=8 * replicas, num_microbatches=4, schedule="1f1b")


def test_tp_compute_split_and_exposed_collectives_with_free_links() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    opts = SimOptions(free_links=True)
    one = lower(_gpt_plan(1), profile, cluster, opts)
    four = lower(_gpt_plan(4), profile, cluster, opts)
    f1 = next(i for i in one.instructions(0) if getattr(i, "op", None) == "F")
    f4 = next(i for i in four.instructions(0) if getattr(i, "op", None) == "F")
    fwd, bwd = profile.fwd_times_s(2), profile.bwd_times_s(2)
    model = tp_compute_model(profile, cluster.device)
    assert model is not None
    emb = profile.layers[0].shape
    assert emb is not None
    r = emb.replicated_fwd_fraction
    expected = fwd[0] * (r + (1 - r) / 4)
    for i in (1, 2):  # blocks: re-timed from their split GEMMs (tests/tp/test_tp_compute.py)
        expected += expected_block_times_s(profile.layers[i], model, 2, 4, False, fwd[i], bwd[i], 4)[0]
    assert f1.duration_s == pytest.approx(sum(fwd[0:3]), rel=1e-12)
    assert f4.duration_s == pytest.approx(expected, rel=1e-12)  # free links: no collective time


def test_tp_collectives_cost_time_on_real_links() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    program = lower(_gpt_plan(4), profile, cluster, SimOptions())
    tp = program.tp
    assert tp is not None
    _, _, comm_f, comm_b, _, _ = tp.cost(0, 2, 0)
    group = tp.groups[0][0]
    assert group == (0, 1, 2, 3)
    colls = tp.collectives(0, 2)
    assert comm_f == pytest.approx(sum(tp.collective_time_s(group, c) for c in colls if c.phase == "F"))
    assert comm_f > 0
    whole_b = sum(tp.collective_time_s(group, c) for c in colls if c.phase == "B")
    assert tp.exposed_comm_s("I", 0, 2, 0) == pytest.approx(whole_b)  # a split I hides nothing
    assert 0 <= comm_b < whole_b  # a full B hides them behind its weight gradients
    # embedding 1 + 2 blocks x 2 all-reduces forward; 2 blocks x 2 backward
    assert sum(c.phase == "F" for c in colls) == 5
    assert sum(c.phase == "B" for c in colls) == 4


def test_sharded_stages_reduce_scatter_tp_shards() -> None:
    # bytes on the wire per sharding: tests/simulator/test_zero_lowering.py
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    base = lower(_gpt_plan(2), profile, cluster, SimOptions())
    program = lower(_gpt_plan(2, sharding="zero1"), profile, cluster, SimOptions())
    scatters = [c for c in program.collectives if c.kind == "reduce-scatter"]
    gathers = [c for c in program.collectives if c.kind == "all-gather"]
    reduces = [c for c in base.collectives if c.shared_with is None]  # (not the tied embeddings' pair)
    for a, b in zip(scatters, reduces, strict=True):
        assert a.nbytes == b.nbytes  # the TP shard's parameter bytes, as the all-reduce's
    assert [g.nbytes for g in gathers] == [a.nbytes for a in scatters]


def test_tp_shards_parameters_and_sharding_the_state() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    static = {
        (t, z): lower(_gpt_plan(t, sharding=z), profile, cluster, SimOptions()).static_memory_bytes[0]
        for t in (1, 2)
        for z in ("none", "zero1", "zero2", "zero3")
    }
    # the first stage: embedding + 2 blocks; t = 2 roughly halves it (replicated parts aside)
    assert 0.5 < static[(2, "none")] / static[(1, "none")] < 0.51
    # Adam, K optimizer-state bytes per parameter byte (6 mixed precision, 2 fp32), d = 2 replicas:
    # none 2 + K, ZeRO-1 2 + K/2, ZeRO-2 1 + (1 + K)/2, ZeRO-3 (2 + K)/2 (ZeRO paper, Fig. 1)
    k = 2 if profile.dtype == "float32" else 6
    for z, per in [("zero1", 2 + k / 2), ("zero2", 1 + (1 + k) / 2), ("zero3", (2 + k) / 2)]:
        assert static[(1, z)] == pytest.approx(static[(1, "none")] * per / (2 + k), rel=1e-12)


def test_sequence_parallel_lowers_activation_memory() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    plain = simulate(_gpt_plan(4), profile, cluster)
    sp = simulate(_gpt_plan(4, sp=True), profile, cluster)
    assert sp.devices[0].peak_memory_bytes < plain.devices[0].peak_memory_bytes


def test_tp_without_shapes_names_the_missing_field() -> None:
    profile = zoo_model("resnet50")
    _, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    n = profile.num_layers
    plan = Plan(stages=(StagePlan(first_layer=0, last_layer=n - 1, tensor_parallel=2),),
                global_batch_size=8, num_microbatches=2)
    with pytest.raises(InputError, match=r"stages\[0\]\.tensor_parallel.*shape"):
        lower(plan, profile, cluster, SimOptions())


def test_tp_degree_must_divide_heads() -> None:
    profile, cluster = resolve_inputs("gpt:layers=2,hidden=768,heads=12,seq=128", "dgx-a100-x2")
    plan = Plan(stages=(StagePlan(first_layer=0, last_layer=3, tensor_parallel=8),),
                global_batch_size=8, num_microbatches=2)
    with pytest.raises(InputError, match="heads"):
        lower(plan, profile, cluster, SimOptions())


def test_tp_collectives_are_on_the_communication_rows() -> None:
    from pipesim.simulator.trace import EventKind

    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2")
    program = lower(_gpt_plan(4), profile, cluster, SimOptions())
    result = simulate(_gpt_plan(4), profile, cluster, SimOptions(record_trace=True))
    tp_events = [e for e in result.events if e.kind is EventKind.TP_COLLECTIVE]
    # every F and B of both stages' 2 replicas and 4 micro-batches
    assert len(tp_events) == 2 * 2 * 2 * 4
    assert all(e.resource.endswith(".comm") and e.nbytes > 0 for e in tp_events)
    instructions = {
        (i.op, i.stage, i.microbatch): i for i in program.instructions(0) if isinstance(i, Compute)
    }
    ops = [e for e in result.events if e.kind.is_compute and e.device == 0]
    for e in (e for e in tp_events if e.device == 0):  # launched before its op's compute ends, ending it
        (op,) = [c for c in ops if (c.stage, c.microbatch) == (e.stage, e.microbatch)
                 and c.start_s <= e.start_s <= c.end_s]
        ins = instructions[(op.kind.value, e.stage, e.microbatch)]
        assert ins.tp is not None
        assert op.duration_s == pytest.approx(ins.duration_s, rel=1e-12)  # the compute
        assert e.start_s == pytest.approx(op.end_s - ins.tp.hidden_s, rel=1e-12)
        assert e.end_s - op.start_s == pytest.approx(op_time_s(ins, cluster), rel=1e-12)
    plain = simulate(_gpt_plan(1), profile, cluster, SimOptions(record_trace=True))
    assert not [e for e in plain.events if e.kind is EventKind.TP_COLLECTIVE]
