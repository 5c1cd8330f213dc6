"""DeepSpeed's (2021) memory passes around each ZeRO-3 call: the gather's exposed buffer fill and
copy out of NCCL's buffer, the reduce-scatter's division and copy in
(profiles/costmodels/zero3_exposure.py: call_pass_s, unit_exposure_s)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from pipesim.errors import InputError
from pipesim.profiles.costmodels.zero3_exposure import (
    GATHER_FILL_BYTES_PER_BYTE,
    GATHER_PASS_BYTES_PER_BYTE,
    SCATTER_PASS_BYTES_PER_BYTE,
    call_pass_s,
    unit_exposure_s,
)
from pipesim.profiles.costmodels.zero3_runtime import UnitCalls


def _linear(seconds_per_byte: float, latency: float = 0.0) -> Callable[[float], float]:
    return lambda nbytes: latency + nbytes * seconds_per_byte


def _two(a: float, b: float, late_forward: tuple[bool, bool] = (False, False)) -> UnitCalls:
    """A unit of two tensors of ``a`` and ``b`` elements, kept after a replay."""
    return UnitCalls(calls=2, regathers=0, regather_elements=0.0, tensors=(a, b), again=(False, False),
                     late_forward=late_forward, late_backward=(False, False), late_replay=(False, False),
                     late_regather=(False, False))


def test_the_bytes_per_byte_are_the_traced_passes() -> None:
    """torch.zeros of the gather's buffer (one write); PyTorch's copy out of the flat NCCL buffer
    (a read and a write); DeepSpeed's div_ and PyTorch's copy in (a read and a write each)."""
    assert (GATHER_FILL_BYTES_PER_BYTE, GATHER_PASS_BYTES_PER_BYTE, SCATTER_PASS_BYTES_PER_BYTE) == (1, 2, 4)
    # a GPT-3 MLP weight (4 x 12288^2 fp16 elements) at 1.6 TB/s: 0.755 ms to fill, 1.51 to copy
    nbytes = 4 * 12288**2 * 2
    assert call_pass_s(nbytes, 1, 1.6e12) == pytest.approx(nbytes / 1.6e12)
    assert call_pass_s(nbytes, 2, 1.6e12) == pytest.approx(2 * 0.75497e-3, rel=1e-4)
    assert call_pass_s(nbytes, 4) == 0.0  # unbounded bandwidth: none
    with pytest.raises(InputError):
        call_pass_s(-1.0, 2, 1e12)
    with pytest.raises(InputError):
        call_pass_s(1.0, -2, 1e12)
    with pytest.raises(InputError):
        call_pass_s(1.0, 2, 0.0)


def test_forward_passes_closed_form() -> None:
    """Tensors of 1 and 3 one-byte elements, forward compute 4 s split 1 : 3, a gather 1 s per byte
    with the latency 0.5 s for the cost model's 0.1 s, memory 2 B/s: a call of x bytes takes
    x + 0.5 + 2x / 2 = 2x + 0.5 s. Tensor 0's module hides tensor 1's gather (6.5 s) behind 1 s,
    tensor 1's the next unit's tensor 0 (2.5 s) behind 3 s: overhang 5.5 s, less the gating's
    0.1 s; the fills, 4 bytes written at 2 B/s, add 2 s: 7.4 s (2.4 s without the passes)."""
    gather = _linear(1.0, 0.1)
    got = unit_exposure_s("deepspeed-2021", "F", _two(1, 3), 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False,
                          memory_bytes_per_s=2.0)
    assert got == pytest.approx(7.4)
    none = unit_exposure_s("deepspeed-2021", "F", _two(1, 3), 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False)
    assert none == pytest.approx(2.4)


def test_backward_passes_closed_form() -> None:
    """The same unit's backward without a replay, 8 s of compute (2 : 6), memory 2 B/s: a gather
    of x bytes 2x + 0.5 s, a reduce-scatter x + 0.5 + 4x / 2 = 3x + 0.5 s. Tensor 1 runs first,
    hiding tensor 0's gather (2.5 s) and the previous unit's tensor 0 reduce-scatter (3.5 s)
    behind 6 s; tensor 0 the next unit's tensor 1 gather (6.5 s) and tensor 1's reduce-scatter
    (9.5 s) behind 2 s: 14 s over, less the gating's 8.2 - 8 = 0.2 s, plus the fills' 2 s."""
    gather = _linear(1.0, 0.1)
    got = unit_exposure_s("deepspeed-2021", "B", _two(1, 3), 0.0, 8.0, gather, 0.5, 1, 1.0, replayed=False,
                          memory_bytes_per_s=2.0)
    assert got == pytest.approx(15.8)


def test_on_demand_gathers_wait_for_their_copy() -> None:
    """Tensor 1 gathered on demand in the forward: its pair hides nothing, tensor 1's module hides
    tensor 0's next gather (2.5 s) behind 3 s; the on-demand call's copy out (3 bytes x 2 / 2 B/s
    = 3 s) is waited for, and the fills add 2 s: 5 s (none without the passes)."""
    gather = _linear(1.0, 0.1)
    calls = _two(1, 3, late_forward=(False, True))
    got = unit_exposure_s("deepspeed-2021", "F", calls, 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False,
                          memory_bytes_per_s=2.0)
    assert got == pytest.approx(5.0)
    assert unit_exposure_s("deepspeed-2021", "F", calls, 4.0, 0.0, gather, 0.5, 1, 1.0,
                           replayed=False) == pytest.approx(0.0)


def test_fsdp_and_the_split_ops_spend_nothing() -> None:
    gather = _linear(1.0, 0.1)
    for runtime, op in (("fsdp", "F"), ("fsdp", "B"), ("deepspeed-2021", "I"), ("deepspeed-2021", "W")):
        assert unit_exposure_s(runtime, op, _two(1, 3), 4.0, 8.0, gather, 0.5, 1, 1.0, replayed=True,
                               memory_bytes_per_s=1e-3) == 0.0
    with pytest.raises(InputError):
        unit_exposure_s("deepspeed-2021", "F", _two(1, 3), 4.0, 0.0, gather, 0.5, 1, 1.0, replayed=False,
                        memory_bytes_per_s=0.0)
