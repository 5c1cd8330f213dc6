"""DeepSpeed's (2021) per-tensor prefetch and NCCL 2.8.4's per-call ring latency
(profiles/costmodels/zero3_exposure.py: ring_call_latency_s, unit_exposure_s)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.zero3_exposure import ring_call_latency_s, unit_exposure_s
from pipesim.profiles.costmodels.zero3_runtime import UnitCalls, unit_calls
from pipesim.profiles.inputs import resolve_inputs

US = 1e-6


def test_ring_latency_is_nccl_284s_tuner() -> None:
    """tuning.cc at v2.8.4-1: 8.4 us + 3.4 us per NVLink step + 9.6 us per network step; an
    all-gather among 384 ranks on 48 servers has 383 steps of which 47 cross servers."""
    assert ring_call_latency_s(384, 48) == pytest.approx((8.4 + 3.4 * 336 + 9.6 * 47) * US)
    assert ring_call_latency_s(8, 1) == pytest.approx((8.4 + 3.4 * 7) * US)
    assert ring_call_latency_s(1, 1) == 0.0
    with pytest.raises(InputError):
        ring_call_latency_s(4, 5)
    with pytest.raises(InputError):
        ring_call_latency_s(0, 1)


def _linear(seconds_per_byte: float, latency: float = 0.0) -> Callable[[float], float]:
    return lambda nbytes: latency + nbytes * seconds_per_byte


def _two(a: float, b: float) -> UnitCalls:
    """A unit of two prefetched tensors of ``a`` and ``b`` elements, kept after a replay."""
    return UnitCalls(calls=2, regathers=0, regather_elements=0.0, tensors=(a, b), again=(False, False),
                     late_forward=(False, False), late_backward=(False, False), late_replay=(False, False),
                     late_regather=(False, False))


def test_forward_exposure_closed_form() -> None:
    """Tensors of 1 and 3 elements (1 byte each), compute 4 s split 1 : 3, a gather 1 s per byte
    plus the call latency L = 0.5 s in place of the cost model's 0.1 s: tensor 0's module hides
    the gather of tensor 1 (3.5 s) behind 1 s, tensor 1's the next unit's tensor 0 (1.5 s)
    behind 3 s. Overhang 2.5 s; the unit's gating already charged max(0, 4.1 - 4) = 0.1 s."""
    gather = _linear(1.0, 0.1)
    got = unit_exposure_s("deepspeed-2021", "F", _two(1, 3), 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False)
    assert got == pytest.approx(2.5 - 0.1)
    assert unit_exposure_s("fsdp", "F", _two(1, 3), 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False) == 0.0
    for op in ("I", "W"):
        assert unit_exposure_s("deepspeed-2021", op, _two(1, 3), 4.0, 1.0, gather, 0.5, 1, 1.0,
                               replayed=False) == 0.0


def test_backward_exposure_closed_form() -> None:
    """Backward without a replay, same unit, backward compute 8 s (2 : 6): tensor 1 runs first and
    hides tensor 0's gather (1.5 s) and the previous unit's tensor 0 reduce-scatter (1.5 s) behind
    6 s; tensor 0 hides the next unit's tensor 1 gather (3.5 s) and tensor 1's reduce-scatter
    (3.5 s) behind 2 s: overhang 5 s; the gating charged max(0, 4.1 + 4.1 - 8) = 0.2 s. With a
    reduce-scatter issued 4 s after the module starts, tensor 0's pair becomes max(3.5, 4) + 3.5
    (0.5 s more) and tensor 1's max(1.5, 4) + 1.5, still within its 6 s; the gating's charge is
    max(8.2, 2 x 4) - 8 = 0.2 s."""
    gather = _linear(1.0, 0.1)
    got = unit_exposure_s("deepspeed-2021", "B", _two(1, 3), 0.0, 8.0, gather, 0.5, 1, 1.0, replayed=False)
    assert got == pytest.approx(5.0 - 0.2)
    late = unit_exposure_s("deepspeed-2021", "B", _two(1, 3), 0.0, 8.0, gather, 0.5, 1, 1.0, replayed=False,
                           scatter_issue_s=4.0)
    assert late == pytest.approx(5.5 - 0.2)


def test_compute_bound_units_expose_nothing() -> None:
    gather = _linear(1e-3, 1e-4)
    calls = _two(1, 3)
    for op, fwd, bwd in (("F", 4.0, 0.0), ("B", 4.0, 8.0)):
        got = unit_exposure_s("deepspeed-2021", op, calls, fwd, bwd, gather, 1e-3, 1, 1.0, replayed=True)
        assert got == 0.0


def test_unit_calls_list_the_gathered_tensors_in_forward_order() -> None:
    """A GPT-3-wide block: QKV, projection and the two MLP weights, three of them gathered again
    after a replay (the second MLP weight is kept); the embedding is one prefetched tensor."""
    h = 12288
    profile, _ = resolve_inputs(f"gpt:layers=2,hidden={h},heads=96,seq=2048,vocab=51200", "dgx-a100-x2",
                                dtype="fp16")
    block = unit_calls([profile.layers[1]], 2)
    assert block.tensors == (3 * h * h, h * h, 4 * h * h, 4 * h * h)
    assert block.again == (True, True, True, False)
    assert not any(block.late_forward)
    both = unit_calls(profile.layers[:2], 2)
    assert both.tensors[0] == (51200 + 2048) * h  # the word and position embeddings, one gather
    assert both.tensors[1:] == block.tensors
    assert both.again == (False, *block.again)


def test_bad_inputs_are_refused() -> None:
    gather = _linear(1.0)
    with pytest.raises(InputError):
        unit_exposure_s("deepspeed-2021", "X", _two(1, 3), 1.0, 0.0, gather, 0.0, 1, 1.0, replayed=False)
    with pytest.raises(InputError):
        unit_exposure_s("deepspeed-2021", "F", _two(1, 3), -1.0, 0.0, gather, 0.0, 1, 1.0, replayed=False)
    with pytest.raises(InputError):
        unit_exposure_s("deepspeed-2021", "B", _two(1, 3), 1.0, 1.0, gather, 0.0, 1, 1.0, replayed=False,
                        scatter_issue_s=-1.0)
    with pytest.raises(InputError):
        unit_exposure_s("deepspeed-2021", "F", _two(1, 3), 1.0, 0.0, gather, 0.0, 0, 1.0, replayed=False)
