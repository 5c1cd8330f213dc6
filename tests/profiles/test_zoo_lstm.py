"""The zoo's LSTM layer as cuDNN runs it: the input GEMM (input gradient) beside the recurrence,
the two directions of a bidirectional layer beside each other (ComputeModel.concurrent_time_s)."""

from __future__ import annotations

import pytest

from pipesim.profiles.costmodels.compute import GemmShape
from pipesim.profiles.models.zoo.gnmt import lstm
from pipesim.profiles.models.zoo.roofline import LayerCost, Roofline, roofline_for

_RL = roofline_for("float32")


def _layer(*, steps: int = 35, batch: int = 64, fan_in: int = 1024, hidden: int = 1024,
           directions: int = 1, rl: Roofline = _RL) -> LayerCost:
    lc = LayerCost("lstm", rl)
    lstm(lc, steps=steps, batch=batch, fan_in=fan_in, hidden=hidden, directions=directions)
    return lc


def _gemm_s(shape: GemmShape, rl: Roofline = _RL) -> float:
    d = rl.elem_bytes
    return rl.model.gemm_time_s(shape, d * (shape.m * shape.k + shape.k * shape.n + shape.m * shape.n))


def _forward_parts(steps: int, batch: int, fan_in: int, hidden: int) -> tuple[float, float, float, float]:
    """(chain_s, input GEMM s, GEMM FLOP, gate bytes) of one direction's forward, by hand."""
    d = _RL.elem_bytes
    step = GemmShape(m=batch, n=4 * hidden, k=hidden)
    project = GemmShape(m=steps * batch, n=4 * hidden, k=fan_in)
    gate_bytes = d * batch * hidden * 8
    chain = steps * (_gemm_s(step) + _RL.memory_kernel_s(10.0 * batch * hidden, gate_bytes))
    return chain, _gemm_s(project), steps * step.flop + project.flop, steps * gate_bytes


def test_forward_is_the_throughput_bound_for_gnmts_layer_by_hand() -> None:
    # LSTM(1024, 1024) over 35 steps of 64 sentences (the DAPPLE GNMT-16 profile's shape): the
    # recurrence's 64-row GEMMs leave room for the input GEMM, so the device's throughput binds.
    chain, project, flop, gate_bytes = _forward_parts(35, 64, 1024, 1024)
    model = _RL.model
    throughput = flop / (model.peak_flop_per_s * model.efficiency) + gate_bytes / model.memory_bytes_per_s
    assert throughput > max(chain, project)
    assert _layer().fwd.time_s == pytest.approx(throughput, rel=1e-12)


def test_overlap_saves_time_against_running_the_kernels_in_turn() -> None:
    # Fails if the rule is removed (kernels summed): the overlap takes >= 20% off the forward.
    chain, project, _, _ = _forward_parts(35, 64, 1024, 1024)
    assert _layer().fwd.time_s < 0.8 * (chain + project)


def test_a_long_thin_recurrence_is_bound_by_its_chain() -> None:
    # Batch 1 over 200 steps: the per-step kernels are the critical path, nothing hides them.
    chain, project, _, _ = _forward_parts(200, 1, 256, 256)
    assert chain > project
    assert _layer(steps=200, batch=1, fan_in=256, hidden=256).fwd.time_s == pytest.approx(chain, rel=1e-12)


def test_the_two_directions_of_a_bidirectional_layer_overlap() -> None:
    # Batch 8: each direction's chain is far from filling the GPU, so the two run in the time of
    # one (both chains are equally long); summed they would take twice as long.
    one = _layer(batch=8).fwd.time_s
    assert _layer(batch=8, directions=2).fwd.time_s == pytest.approx(one, rel=1e-12)
    # Batch 64: the throughput bound, twice the GEMM work of one direction, binds instead.
    _, _, flop, gate_bytes = _forward_parts(35, 64, 1024, 1024)
    model = _RL.model
    both = 2 * (flop / (model.peak_flop_per_s * model.efficiency) + gate_bytes / model.memory_bytes_per_s)
    assert _layer(directions=2).fwd.time_s == pytest.approx(both, rel=1e-12)


def test_weight_gradients_run_after_the_recurrence_in_turn() -> None:
    # cudnnRNNBackwardWeights: one GEMM per weight matrix over all 2240 tokens, not overlapped.
    lc = _layer(fan_in=2048)
    weights = _gemm_s(GemmShape(m=2048, n=4096, k=2240)) + _gemm_s(GemmShape(m=1024, n=4096, k=2240))
    assert lc.bwd.wgrad_time_s == pytest.approx(weights, rel=1e-12)
    assert lc.bwd.time_s > weights


def test_gnmt_lstm_layers_against_the_measured_profile() -> None:
    # DAPPLE gnmt-16-pbs-64.txt (github.com/AlibabaPAI/DAPPLE, profiling_results/): an
    # LSTM(1024, 1024) over 35 steps of 64 takes 3.44 ms forward and 6.5 backward, an
    # LSTM(2048, 1024) 4.61 and 8.48. Summing the kernels gave 4.33 + 7.76 and 6.00 + 11.05.
    for fan_in, fwd_ms, bwd_ms in ((1024, 3.44, 6.5), (2048, 4.61, 8.48)):
        lc = _layer(fan_in=fan_in)
        assert lc.fwd.time_s * 1e3 == pytest.approx(fwd_ms, rel=0.15)
        assert lc.bwd.time_s * 1e3 == pytest.approx(bwd_ms, rel=0.2)
