"""Transformer Engine's userbuffers kernels take SMs from the GEMMs they overlap (Megatron-LM's
``--tp-comm-overlap``): the compute model on fewer SMs, the fluid hold, and the block times."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.collective import AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.compute import K_OVERHEAD, ComputeModel, GemmShape
from pipesim.profiles.costmodels.nccl_protocol import link_classes
from pipesim.profiles.costmodels.tensor_parallel import (
    block_tp_time_factors,
    collective_time_s,
    stage_tp_times,
    tp_compute_model,
    tp_time_factors,
)
from pipesim.profiles.costmodels.tp_comm import (
    UB_COMM_SMS,
    UB_PIPELINE_SPLITS,
    TpCollective,
    comm_held_gemm_s,
)
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.shape import LayerKind

H, HEADS, SEQ, FFN = 4096, 32, 2048, 4 * 4096
GPT = f"gpt:layers=2,hidden={H},heads={HEADS},seq={SEQ},vocab=32768,flash=1"


def _model(sm_count: int | None = 132) -> ComputeModel:
    return ComputeModel(device="x", precision="bfloat16", storage_dtype="bfloat16", peak_flop_per_s=132e12,
                        efficiency=0.5, sm_count=sm_count, memory_bytes_per_s=3e12)


def test_a_gemm_on_fewer_sms_keeps_the_rate_per_sm_and_waves_over_them() -> None:
    # 12 x 11 = 132 tiles of 128 x 128: one wave on 132 SMs, two on 116
    shape = GemmShape(m=128 * 12, n=128 * 11, k=1024)
    one = ((128, 128),)
    full, few = _model(), _model().on_sms(116)
    per_sm = 132e12 * 0.5 / 132
    assert full.gemm_compute_s(shape, tiles=one, max_split_k=1) == pytest.approx(
        2 * 128 * 128 * (1024 + K_OVERHEAD) / per_sm, rel=1e-12)
    assert few.gemm_compute_s(shape, tiles=one, max_split_k=1) == pytest.approx(
        2 * 2 * 128 * 128 * (1024 + K_OVERHEAD) / per_sm, rel=1e-12)
    assert few.sm_count == 116
    assert few.peak_flop_per_s == pytest.approx(116e12)
    assert few == dataclasses.replace(full, sm_count=116, peak_flop_per_s=132e12 * 116 / 132)
    assert full.on_sms(132) is full


@pytest.mark.parametrize("sms", [0, 133])
def test_on_sms_refuses_counts_outside_the_device(sms: int) -> None:
    with pytest.raises(InputError):
        _model().on_sms(sms)


def test_on_sms_needs_an_sm_count() -> None:
    with pytest.raises(InputError):
        _model(None).on_sms(100)


def test_the_hold_is_fluid_between_full_and_reduced() -> None:
    assert comm_held_gemm_s(1.0, 1.2, 0.0) == 1.0
    assert comm_held_gemm_s(1.0, 1.2, 0.6) == pytest.approx(0.6 + 0.5 * 1.0)
    assert comm_held_gemm_s(1.0, 1.2, 1.2) == 1.2
    assert comm_held_gemm_s(1.0, 1.2, 5.0) == 1.2


def _inputs(t: int) -> tuple[ModelProfile, ComputeModel, AllReduceCurves]:
    profile, cluster = resolve_inputs(GPT, "dgx-h100-1024", overrides={"servers": 1}, dtype="bf16")
    compute = tp_compute_model(profile, cluster.device)
    assert compute is not None
    assert compute.sm_count == 132
    links = cluster.links
    bw, lat, cls = links.bandwidths_bytes_per_s(), links.latencies_s(), link_classes(links)
    curves = allreduce_curves(tuple(range(t)), cluster.route, bw.__getitem__, lat.__getitem__,
                              link_class=cls.__getitem__)
    return profile, compute, curves


def _op_s(model: ComputeModel, g: GemmShape) -> float:
    return model.op_time_s(model.gemm_time_s(g, 2.0 * (g.m * g.k + g.k * g.n + g.m * g.n) * g.count))


def _ops(model: ComputeModel, shapes: list[GemmShape]) -> float:
    return sum(_op_s(model, g) for g in shapes)


def _held(full: ComputeModel, few: ComputeModel, shapes: list[GemmShape], held_s: float) -> float:
    return comm_held_gemm_s(_ops(full, shapes), _ops(few, shapes), held_s) - _ops(full, shapes)


@pytest.mark.parametrize("t", [2, 8])
def test_the_overlapped_gemms_run_on_116_sms_while_the_kernels_hold_them(t: int) -> None:
    profile, compute, curves = _inputs(t)
    block = next(i for i, layer in enumerate(profile.layers) if layer.attention_core_saved_bytes == 0
                 and layer.shape is not None and layer.shape.kind is LayerKind.BLOCK)
    off = stage_tp_times(profile, block, block, 1, t, True, curves, compute, False)
    on = stage_tp_times(profile, block, block, 1, t, True, curves, compute, True)
    few = compute.on_sms(132 - UB_COMM_SMS)
    comm_s = collective_time_s(curves, TpCollective("F", "reduce-scatter", SEQ * H * 2.0))
    s, h, f = SEQ, H, FFN
    # forward: the projection and FC2 GEMMs (row-parallel) beside the pipeline reduce-scatters
    pipeline_s = comm_s * (UB_PIPELINE_SPLITS - 1) / UB_PIPELINE_SPLITS
    fwd = (_held(compute, few, [GemmShape(m=s, n=h, k=h // t)], pipeline_s)
           + _held(compute, few, [GemmShape(m=s, n=h, k=f // t)], pipeline_s))
    # backward: QKV and FC1 input gradients beside the bulk all-gathers, weight gradients beside
    # the bulk reduce-scatters
    bwd = (_held(compute, few, [GemmShape(m=s, n=h, k=h // t)] * 3, comm_s)
           + _held(compute, few, [GemmShape(m=h, n=h // t, k=s)] * 3, comm_s)
           + _held(compute, few, [GemmShape(m=s, n=h, k=f // t)], comm_s)
           + _held(compute, few, [GemmShape(m=h, n=f // t, k=s)], comm_s))
    assert fwd > 0
    assert bwd > 0
    assert on.fwd_tp_s - off.fwd_tp_s == pytest.approx(fwd, rel=1e-9)
    assert on.bwd_tp_s - off.bwd_tp_s == pytest.approx(bwd, rel=1e-9)
    assert (on.fwd_s, on.bwd_s) == (off.fwd_s, off.bwd_s)


def test_without_the_overlap_the_block_times_are_the_plain_split() -> None:
    t = 4
    profile, compute, curves = _inputs(t)
    f_all, b_all = profile.fwd_times_s(1), profile.bwd_times_s(1)
    off = stage_tp_times(profile, 0, profile.num_layers - 1, 1, t, True, curves, compute, False)
    f1 = b1 = 0.0
    for i, layer in enumerate(profile.layers):
        assert layer.shape is not None
        if layer.shape.kind is LayerKind.BLOCK:
            ff, fb = block_tp_time_factors(layer, 1, t, True, compute, f_all[i], b_all[i], 2)
        else:
            ff, fb = tp_time_factors(layer.shape, t, True)
        f1, b1 = f1 + f_all[i] * ff, b1 + b_all[i] * fb
    assert (off.fwd_tp_s, off.bwd_tp_s) == (f1, b1)  # bit-identical: no userbuffers term


def test_one_device_and_no_sequence_parallelism_take_no_sms() -> None:
    profile, compute, curves = _inputs(2)
    last = profile.num_layers - 1
    assert stage_tp_times(profile, 0, last, 1, 1, False, curves, compute, True) == \
        stage_tp_times(profile, 0, last, 1, 1, False, curves, compute, False)
    # the overlap needs sequence parallelism (Plan refuses it without); no SMs taken without it
    on = stage_tp_times(profile, 0, last, 1, 2, False, curves, compute, True)
    off = stage_tp_times(profile, 0, last, 1, 2, False, curves, compute, False)
    assert (on.fwd_tp_s, on.bwd_tp_s) == (off.fwd_tp_s, off.bwd_tp_s)
