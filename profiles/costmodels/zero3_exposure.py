"""DeepSpeed's (2021) ZeRO-3 calls one tensor at a time: NCCL 2.8.4's ring latency per call, the
memory passes around each call, and what the per-tensor prefetch exposes beyond the unit-level
gating (:func:`unit_exposure_s`).

The runtime's behaviour, with its sources, is described in
:mod:`pipesim.profiles.costmodels.zero3_runtime` ("per-tensor prefetch", "memory passes around
each call"); this module holds its timing, shared by the simulator
(:mod:`pipesim.simulator.zero_lowering`) and the 3D estimate (:mod:`pipesim.planner.zero_ops`).
Split out of :mod:`~pipesim.profiles.costmodels.zero3_runtime`, which keeps the call counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from pipesim.errors import check_count, check_nonneg, invalid
from pipesim.profiles.costmodels.zero3_runtime import UnitCalls, Zero3Runtime

__all__ = [
    "GATHER_FILL_BYTES_PER_BYTE",
    "GATHER_PASS_BYTES_PER_BYTE",
    "NCCL_2021_RING_BASE_S",
    "NCCL_2021_RING_NET_STEP_S",
    "NCCL_2021_RING_NVLINK_STEP_S",
    "SCATTER_PASS_BYTES_PER_BYTE",
    "call_pass_s",
    "ring_call_latency_s",
    "unit_exposure_s",
]

GATHER_FILL_BYTES_PER_BYTE = 1
"""Bytes the device writes, exposed, per gathered byte before a DeepSpeed (2021) all-gather:
``_allgather_param`` zeroes the flat buffer (``torch.zeros``) and synchronizes the device
(``partition_parameters.py``, v0.3.13 to v0.4.0)."""

GATHER_PASS_BYTES_PER_BYTE = 2
"""Bytes moved per gathered byte after the all-gather on its stream: PyTorch's copy out of the
flat NCCL buffer into the per-rank views (``ProcessGroupNCCL::allgather``, one read, one write)."""

SCATTER_PASS_BYTES_PER_BYTE = 4
"""Bytes moved per gradient byte before a reduce-scatter on its stream: DeepSpeed's
``tensor.div_(world_size)`` (``average_tensor`` in ``stage3.py``, v0.3.13 to v0.4.0) and
PyTorch's copy of the per-rank views into the flat NCCL buffer (``ProcessGroupNCCL::reduce_scatter``),
a read and a write each."""


def call_pass_s(nbytes: float, bytes_per_byte: float, memory_bytes_per_s: float = math.inf) -> float:
    """Seconds the device spends moving ``bytes_per_byte`` bytes per byte of a ``nbytes`` call
    around a DeepSpeed (2021) collective (module docstring, "memory passes"): ``nbytes x
    bytes_per_byte / memory_bytes_per_s``; 0 at the default, an unbounded bandwidth.

    Raises:
        InputError: a negative ``nbytes`` or ``bytes_per_byte``; a bandwidth not above 0.
    """
    check_nonneg("nbytes", nbytes)
    check_nonneg("bytes_per_byte", bytes_per_byte)
    if not memory_bytes_per_s > 0:
        raise invalid("memory_bytes_per_s", memory_bytes_per_s, "must be above 0")
    return nbytes * bytes_per_byte / memory_bytes_per_s


NCCL_2021_RING_BASE_S = 8.4e-6
"""NCCL 2.8.4's base latency of a ring call with the Simple protocol, seconds (``baseLat``,
``src/graph/tuning.cc`` at tag v2.8.4-1, commit 911d61f214d4; the NCCL of spring 2021)."""

NCCL_2021_RING_NVLINK_STEP_S = 3.4e-6
"""NCCL 2.8.4's per-step latency of a Simple ring step inside a server (``hwLat`` NVLink ring
Simple, same file), seconds."""

NCCL_2021_RING_NET_STEP_S = 9.6e-6
"""NCCL 2.8.4's per-step latency of a Simple ring step between servers (``hwLat`` NET ring
Simple, same file), seconds."""


def ring_call_latency_s(members: int, servers: int) -> float:
    """NCCL 2.8.4's latency of one ring all-gather or reduce-scatter among ``members`` ranks on
    ``servers`` servers, seconds: its tuner's ``baseLat + (nsteps - nInterSteps) x intraLat +
    nInterSteps x interLat`` with ``nsteps = members - 1`` and ``nInterSteps = servers - 1``
    (``ncclTopoTuneModel``; 0 for one member).

    Raises:
        InputError: ``members`` or ``servers`` below 1, or more servers than members.
    """
    n = check_count("members", members)
    k = check_count("servers", servers)
    if k > n:
        raise invalid("servers", servers, f"must be at most the {n} members")
    if n == 1:
        return 0.0
    inter = k - 1
    intra = n - 1 - inter
    return NCCL_2021_RING_BASE_S + intra * NCCL_2021_RING_NVLINK_STEP_S + inter * NCCL_2021_RING_NET_STEP_S


def _overhang(pairs: Iterable[tuple[float, float]]) -> float:
    """Sum over ``(compute, comm)`` pairs of what the comm outlasts its compute, seconds."""
    return sum(max(0.0, comm - compute) for compute, comm in pairs)


def unit_exposure_s(
    runtime: Zero3Runtime | str,
    op: str,
    calls: UnitCalls,
    forward_s: float,
    backward_s: float,
    gather_s: Callable[[float], float],
    latency_s: float,
    elem_bytes: int,
    grad: float,
    *,
    replayed: bool,
    scatter_issue_s: float = 0.0,
    memory_bytes_per_s: float = math.inf,
) -> float:
    """What DeepSpeed's (2021) per-tensor prefetching exposes in one unit beyond the unit-level
    gating that pipesim charges (one prefetched gather per unit, the unit's compute hiding it),
    seconds (module docstring, "per-tensor prefetch").

    Each gathered tensor's call is prefetched at the start of the module before it (the device
    being synchronized at every fetch) and waited for at its own module, so it hides behind that
    one module's compute only; in a backward the module's gradient reduce-scatter, issued when
    the module before it in the backward ends, follows the prefetched gather on the process
    group's one NCCL stream (PyTorch's ``ProcessGroupNCCL`` runs a group's collectives on one
    stream per device) behind the same compute. A call takes ``gather_s`` of its bytes with the
    cost model's per-call latency ``gather_s(0)`` replaced by ``latency_s`` (NCCL's ring over
    all ranks, :func:`ring_call_latency_s`). A unit's compute is split over its tensors by their
    elements (the GEMMs' share). The result is the per-tensor overhang less what the unit's
    gating already charges (``max(0, unit comm - unit compute)``), at least 0; ``fsdp``, the split
    ops ``I`` and ``W`` and units without gathered tensors spend nothing. Each gather's copy out
    of NCCL's buffer and each reduce-scatter's division and copy in (:func:`call_pass_s`) run on
    the call's stream and lengthen it; an on-demand gather's copy is waited for; every gather's
    fill of its buffer (:data:`GATHER_FILL_BYTES_PER_BYTE`) is exposed whole, on top.

    Args:
        runtime: the :class:`Zero3Runtime`.
        op: ``F``, ``B``, ``I`` or ``W``.
        calls: the unit's calls (:func:`unit_calls`).
        forward_s: the unit's forward compute in this op (a forward's, or a backward's replay), s.
        backward_s: the unit's backward compute (0 in a forward), s.
        gather_s: seconds of one all-gather of that many bytes per member (the DP group's cost).
        latency_s: one call's latency, seconds.
        elem_bytes: bytes per element.
        grad: gradient bytes per parameter byte.
        replayed: the backward replays the forward (full recomputation).
        scatter_issue_s: the host time to issue one reduce-scatter (:func:`call_issue_s`), which
            the unit-level charge counts as ``max(0, calls x issue - compute)``
            (:func:`unit_issue_s`); per tensor it delays its reduce-scatter behind one module.
        memory_bytes_per_s: the device's achievable memory bandwidth, bytes/s: each call's memory
            passes (:func:`call_pass_s`) lengthen it, and the gathers' exposed fills add to the
            result (default unbounded: none).

    Raises:
        UnknownNameError: an unknown runtime.
        InputError: an unknown op; ``elem_bytes`` below 1; a negative time, ``grad`` or issue.
    """
    mode = Zero3Runtime.parse(runtime)
    if op not in ("F", "B", "I", "W"):
        raise invalid("op", op, "must be F, B, I or W")
    elem = check_count("elem_bytes", elem_bytes)
    fwd, bwd = check_nonneg("forward_s", forward_s), check_nonneg("backward_s", backward_s)
    lat, g = check_nonneg("latency_s", latency_s), check_nonneg("grad", grad)
    e = calls.tensors
    total = sum(e)
    if mode is Zero3Runtime.FSDP or op in ("I", "W") or total <= 0:
        return 0.0
    base = gather_s(0.0)
    bw = memory_bytes_per_s
    if not bw > 0:
        raise invalid("memory_bytes_per_s", bw, "must be above 0")

    def call(elements: float) -> float:  # a gather: its bytes, NCCL's ring latency, the copy out
        if elements <= 0:
            return 0.0
        nbytes = elements * elem
        return gather_s(nbytes) - base + lat + call_pass_s(nbytes, GATHER_PASS_BYTES_PER_BYTE, bw)

    def scatter(elements: float) -> float:  # a reduce-scatter: the division and copy in, then the call
        if elements * g <= 0:
            return 0.0
        nbytes = elements * g * elem
        return gather_s(nbytes) - base + lat + call_pass_s(nbytes, SCATTER_PASS_BYTES_PER_BYTE, bw)

    def passes(late: Sequence[bool]) -> float:  # on-demand gathers' copies out, waited for
        waited = sum(x for x, f in zip(e, late, strict=True) if f)
        return call_pass_s(waited * elem, GATHER_PASS_BYTES_PER_BYTE, bw)

    n = len(e)
    share = [x / total for x in e]
    # forward order: tensor j's module hides the gather of tensor j + 1 (the next unit's first
    # tensor after the last: blocks are alike); a tensor gathered on demand hides behind nothing
    def forward_pairs(time_s: float, late: Sequence[bool]) -> list[tuple[float, float]]:
        return [(time_s * share[j], 0.0 if late[(j + 1) % n] else call(e[(j + 1) % n])) for j in range(n)]

    def late_latency(late: int) -> float:  # on-demand calls beyond the unit's one, all waited for
        return max(0, late - 1) * max(0.0, lat - base)

    if op == "F":
        prefetched = sum(x for x, f in zip(e, calls.late_forward, strict=True) if not f)
        over = _overhang(forward_pairs(fwd, calls.late_forward)) + late_latency(sum(calls.late_forward))
        over += passes(calls.late_forward)
        unit_comm = gather_s(prefetched * elem) if prefetched > 0 else 0.0
        fill = call_pass_s(total * elem, GATHER_FILL_BYTES_PER_BYTE, bw)
        return max(0.0, over - max(0.0, unit_comm - fwd)) + fill
    over = _overhang(forward_pairs(fwd, calls.late_replay)) if replayed else 0.0
    wanted = [a and not r for a, r in zip(calls.again, calls.late_regather, strict=True)] if replayed else [
        not f for f in calls.late_backward]
    late = sum(calls.late_replay) + sum(calls.late_regather) if replayed else sum(calls.late_backward)
    over += late_latency(late)
    if replayed:
        over += passes(calls.late_replay) + passes(calls.late_regather)
    else:
        over += passes(calls.late_backward)
    # backward order: module k hides the gather of module k - 1 and the reduce-scatter of k + 1,
    # which starts once the host has issued it (scatter_issue_s, from the hook during module k)
    r = check_nonneg("scatter_issue_s", scatter_issue_s)
    pairs = [(bwd * share[k], max(call(e[k - 1]) if wanted[k - 1] else 0.0, r) + scatter(e[(k + 1) % n]))
             for k in range(n - 1, -1, -1)]
    over += _overhang(pairs)
    gathered = sum(x for x, w in zip(e, wanted, strict=True) if w)
    if replayed:
        gathered += sum(x for x, f in zip(e, calls.late_replay, strict=True) if not f)
    unit_comm = (gather_s(gathered * elem) if gathered > 0 else 0.0) + gather_s(total * elem * g)
    # the unit-level charge: issue beyond the compute (unit_issue_s) and the gating's comm
    charged = max(unit_comm, r * calls.calls) - fwd - bwd
    # every gather's fill: the replay's (or the backward's) and the re-gathers
    filled = total + (sum(x for x, a in zip(e, calls.again, strict=True) if a) if replayed else 0.0)
    return max(0.0, over - max(0.0, charged)) + call_pass_s(filled * elem, GATHER_FILL_BYTES_PER_BYTE, bw)
