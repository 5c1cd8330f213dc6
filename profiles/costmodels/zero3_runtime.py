"""How the runtime issues ZeRO-3's per-unit collectives: FSDP's flat calls or DeepSpeed's (2021).

pipesim lowers ZeRO-3 as a parameter all-gather per unit of layers before each forward and
backward and a gradient reduce-scatter after each backward
(:mod:`pipesim.simulator.zero_lowering`); this module adds what the runtime spends issuing them,
which at hundreds of data-parallel ranks dominates. Two runtimes (:class:`Zero3Runtime`,
``Plan.zero3_runtime``):

* ``fsdp`` (default): one collective per unit on a flat buffer (PyTorch FSDP's
  ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` on a ``FlatParameter``), issued from
  a separate stream without synchronizing the device: no cost besides the transfers.
* ``deepspeed-2021``: DeepSpeed's ZeRO-3 as released in spring 2021 (v0.3.13 to v0.3.16, the
  versions of Narayanan et al.'s SC'21 comparison, arXiv of 2021-04-09; files
  ``deepspeed/runtime/zero/stage3.py``, ``partition_parameters.py`` and ``constants.py`` at tag
  v0.3.15, 2021-04-19):

  - **one call per parameter tensor**: a submodule's pre-forward and pre-backward hooks fetch its
    own parameters (``named_parameters(recurse=False)``), and ``_all_gather`` issues one
    ``_allgather_param`` per tensor; the gradients are reduce-scattered per tensor as well
    (``_reduce_scatter_gradients`` loops ``_reduce_scatter_gradient`` over a bucket's
    parameters). Tensors under ``stage3_param_persistence_threshold`` elements (default 1e5,
    :data:`PERSISTENCE_THRESHOLD_ELEMENTS`) are never partitioned, so a GPT block costs four
    calls each way (the QKV, projection and two MLP weights; biases and layer norms persist);
  - **a list of one tensor per rank**: each call builds ``world_size`` views in a Python loop
    and passes them as a list to ``torch.distributed.all_gather`` (``reduce_scatter``), which
    PyTorch's NCCL process group copies one by one out of (into) its flat NCCL buffer
    (``ProcessGroupNCCL::allgather``: ``outputTensors[i][j].copy_(outputFlattened[i][j])`` per
    rank ``j``; ``reduce_scatter``: ``inputFlattened[i][j].copy_(inputTensors[i][j])``):
    :data:`GATHER_OPS_PER_MEMBER` (2) and :data:`SCATTER_OPS_PER_MEMBER` (3) framework operators
    per rank and call, each :data:`~pipesim.profiles.costmodels.compute.OP_DISPATCH_S` (10 us)
    of host time: a gather costs 31 ms of host time on 1536 ranks, the bytes of a GPT-3 MLP
    weight (1.2 GB) at NCCL's ~200 GB/s about 6 ms;
  - **a synchronized device**: ``_allgather_param`` calls ``torch.cuda.synchronize()`` before
    each gather and ``fetch_sub_module`` waits for the comm stream and the device
    (``_synchronize_communication``), so the host cannot run ahead of the GPU: the GPU idles
    while the host issues a unit's gathers. A reduce-scatter is issued from the gradient hook
    while the unit's backward kernels, already queued, run: it is exposed only by what it
    outlasts them;
  - **re-gathers after a replay**: with activation recomputation a block's tensors are gathered
    for the replayed forward, and each is released after it unless its backward comes within
    ``stage3_max_reuse_distance`` elements of other parameters (default 1e9,
    :data:`MAX_REUSE_DISTANCE_ELEMENTS`; ``_keep_for_later``): in a GPT-3-wide block only the
    second MLP weight is kept, the QKV, projection and first MLP weights (``8 h^2``) are gathered
    again for the backward (:class:`UnitCalls`).

  - **gathers on demand**: the prefetch (``stage3_prefetch_bucket_size`` = 5e7 elements,
    issued only when no gather is in flight) reaches one weight tensor ahead on GPT-3-sized
    blocks, pipesim's default depth of one unit, but a hook prefetches only while fewer than
    ``stage3_max_live_parameters`` elements are gathered (default 1e9,
    :data:`MAX_LIVE_PARAMETERS_ELEMENTS`): behind a larger tensor the next one is gathered when
    its module is reached, and waited for (the 530B model's QKV and MLP weights, so three of its
    four gathers per block; :class:`UnitCalls`). A unit's on-demand bytes are a second gather,
    issued when the unit is reached after its prefetched part (:func:`unit_gathers`).
    Caveat (read, not modelled): the counter behind the bound (``total_available_parameter_numel``)
    is decremented for the persistent tensors at every backward's end
    (``_partition_all_parameters``) but incremented for them only in the first iteration (later
    ``_post_step`` gathers them outside the coordinator), so in v0.3.13 to v0.4.0 it drifts
    below zero by their elements every iteration and the bound stops binding after tens of
    iterations (28M elements an iteration on the 530B model).

  - **per-tensor prefetch** (:func:`unit_exposure_s`): each gather is prefetched at the start
    of the module before its own (the fetch having synchronized the device) and waited for at
    its module, so it hides behind that one module's compute, not behind the unit's: a GPT
    block's first MLP weight (``4 h^2``) behind the projection's GEMM (``h^2``); in a backward
    the module's reduce-scatter (issued from the gradient hook during the next module, after
    its host issue) follows the prefetched gather on the process group's one NCCL stream
    (PyTorch's ``ProcessGroupNCCL`` runs all of a group's collectives on one stream per device,
    whatever stream DeepSpeed issues them from). Each call pays **NCCL's ring latency over all
    ``n`` ranks** (:func:`ring_call_latency_s`: NCCL 2.8.4's tuner, ``8.4 + 3.4 (n - k) +
    9.6 (k - 1)`` us on ``k`` servers, 1.6 to 9.4 ms per call at 384 to 2240 GPUs), in place of
    the one latency the unit's collective carries; on-demand calls pay it too, all waited for.
    The unit keeps its gating and bytes: what the per-tensor pairs expose beyond the unit-level
    charge is added to the unit's op like the issue time.

  Read and not modelled (stage3.py, v0.3.15): ``overlap_comm`` defaults to true for stage 3
  (``ZERO3_OPTIMIZATION_OVERLAP_COMM_DEFAULT``), so the fetches and the reductions run on their
  own streams (as modelled); ``contiguous_gradients`` defaults to false for stage 3, where
  ``reduce_ipg_grads`` would all-reduce flattened buckets of ``reduce_bucket_size`` (5e8)
  elements (``buffered_reduce_fallback``) instead of the per-tensor reduce-scatters modelled
  here (DeepSpeed's own Megatron ZeRO-3 example, DeepSpeedExamples ``bdf8e59a``
  ``Megatron-LM-v1.1.5-ZeRO3/examples/ds_zero_stage_3_config.json``, sets it to true; the paper
  does not give its configuration). Nor charged: the persistent tensors' own reduce-scatter
  calls (``_reduce_scatter_gradients`` loops over every tensor of the bucket, the biases and
  layer norms too: 12 calls per GPT block, not 4), their gather after each step
  (``_post_step``: ``_allgather_params``, a Python loop of 4 operators per tensor and rank,
  770 tensors for GPT-3), and the ``torch.zeros`` and ``param.norm()`` of every fetch (the
  latter evaluated in a log f-string). At :data:`~pipesim.profiles.costmodels.compute.OP_DISPATCH_S`
  per operator the first two grow with ``n`` far beyond what Narayanan et al. measured (the
  same iteration time on 768 and 1536 GPUs): the per-rank host cost of a call is likely lower
  than this module's operator counts at 10 us each.

Per unit of ``g`` gather and ``r`` reduce-scatter calls among ``n`` ranks, with ``G = g n x 2 x
OP_DISPATCH_S``, ``R = r n x 3 x OP_DISPATCH_S`` and ``t`` the unit's compute in the op
(forward, or replay + backward), the op spends (:func:`unit_issue_s`): forward ``G``; backward
``G + max(0, R - t)`` (its gathers, then its reduce-scatters' issue beyond the compute it
overlaps); a split backward's ``I`` ``G`` and ``W`` ``max(0, R - t)``; ``F`` and ``B`` also the
per-tensor prefetch's exposure (:func:`unit_exposure_s`; the split ops keep the unit model). The
3D estimate (:func:`pipesim.planner.megatron.estimate_3d`) and the simulator charge it the same
way, on the data-parallel group's collective curves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import Enum

from pipesim.errors import check_count, check_nonneg, invalid, parse_name
from pipesim.profiles.costmodels.compute import OP_DISPATCH_S
from pipesim.profiles.models.profile import Layer
from pipesim.profiles.models.shape import LayerKind

__all__ = [
    "GATHER_OPS_PER_MEMBER",
    "MAX_LIVE_PARAMETERS_ELEMENTS",
    "MAX_REUSE_DISTANCE_ELEMENTS",
    "NCCL_2021_RING_BASE_S",
    "NCCL_2021_RING_NET_STEP_S",
    "NCCL_2021_RING_NVLINK_STEP_S",
    "PERSISTENCE_THRESHOLD_ELEMENTS",
    "SCATTER_OPS_PER_MEMBER",
    "ZERO3_RUNTIMES",
    "UnitCalls",
    "UnitGathers",
    "Zero3Runtime",
    "call_issue_s",
    "ring_call_latency_s",
    "unit_calls",
    "unit_exposure_s",
    "unit_gathers",
    "unit_issue_s",
    "weight_tensor_elements",
]

PERSISTENCE_THRESHOLD_ELEMENTS = 100_000
"""Tensors with fewer elements stay whole on every rank: DeepSpeed's
``stage3_param_persistence_threshold`` default, 1e5 (``deepspeed/runtime/zero/constants.py``,
``ZERO_OPTIMIZATION_PARAM_PERSISTENCE_THRESHOLD_DEFAULT``, v0.3.15)."""

MAX_REUSE_DISTANCE_ELEMENTS = 1_000_000_000
"""A gathered tensor whose next use is at least this many elements of other modules' parameters
away is released and gathered again: DeepSpeed's ``stage3_max_reuse_distance`` default, 1e9
(``ZERO_OPTIMIZATION_MAX_REUSE_DISTANCE_DEFAULT``, v0.3.15; ``PartitionedParameterCoordinator
._keep_for_later``)."""

MAX_LIVE_PARAMETERS_ELEMENTS = 1_000_000_000
"""A submodule's hook prefetches only while fewer elements than this are gathered (its own and
the ones kept): DeepSpeed's ``stage3_max_live_parameters`` default, 1e9
(``ZERO_OPTIMIZATION_MAX_LIVE_PARAMETERS_DEFAULT``, v0.3.15; ``prefetch_next_sub_modules``)."""

GATHER_OPS_PER_MEMBER = 2
"""Framework operators the host dispatches per rank of one DeepSpeed (2021) ZeRO-3 all-gather:
DeepSpeed's view of the rank's slice of the gathered tensor (``flat_tensor.narrow`` in
``_allgather_param``) and PyTorch's copy of it out of the flat NCCL buffer (module docstring)."""

SCATTER_OPS_PER_MEMBER = 3
"""Likewise per rank of one gradient reduce-scatter: DeepSpeed's ``param.grad.view(-1).narrow(...)``
in ``_reduce_scatter_gradient`` (two operators) and PyTorch's copy of that slice into the flat
NCCL buffer (``ProcessGroupNCCL::reduce_scatter``: ``inputFlattened[i][j].copy_(inputTensors[i][j])``)."""


class Zero3Runtime(str, Enum):
    """How ZeRO-3's collectives are issued (see the module docstring)."""

    FSDP = "fsdp"
    DEEPSPEED_2021 = "deepspeed-2021"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> Zero3Runtime:
        """The runtime called ``name`` (case-insensitive; ``_`` reads as ``-``).

        Raises:
            UnknownNameError: not ``fsdp`` or ``deepspeed-2021``; the message lists the names.
        """
        if isinstance(name, str) and not isinstance(name, cls):
            try:
                return cls(name.strip().lower().replace("_", "-"))
            except ValueError:
                pass
        return parse_name("zero3_runtime", cls, name)


ZERO3_RUNTIMES: tuple[str, ...] = tuple(r.value for r in Zero3Runtime)
"""Runtime names, in :class:`Zero3Runtime` order."""


def weight_tensor_elements(layer: Layer, elem_bytes: int, t: int = 1) -> tuple[float, ...]:
    """Elements of each parameter tensor of ``layer`` on one device of a ``t``-way TP group.

    A shaped block holds Megatron-LM's GPT tensors: QKV weight ``3 h^2`` and bias ``3 h``,
    projection ``h^2``, first MLP ``ffn h`` and bias ``ffn`` (all split by ``t``), second MLP
    ``ffn h`` (split), and the replicated ones (two layer norms, two row-parallel biases: ``h``
    each, whole); an embedding its vocabulary table ``vocab h`` (split) and its replicated
    parameters as one tensor; any other layer (an LM head, an unshaped layer) one tensor of all
    its parameters, the replicated ones whole.

    Raises:
        InputError: ``elem_bytes`` or ``t`` below 1.
    """
    elem = check_count("elem_bytes", elem_bytes)
    tp = check_count("t", t)
    total = layer.parameter_bytes / elem
    shape = layer.shape
    if shape is None:
        return (total,) if total > 0 else ()
    h, f = float(shape.hidden), float(shape.ffn)
    if shape.kind is LayerKind.BLOCK:
        split = (3 * h * h, 3 * h, h * h, f * h, f, f * h)
        kept = shape.replicated_params
        tensors = [x / tp for x in split] + [h] * (kept // shape.hidden)
        if kept % shape.hidden:
            tensors.append(float(kept % shape.hidden))
        return tuple(tensors)
    if shape.kind is LayerKind.EMBEDDING:
        table = max(0.0, total - shape.replicated_params)
        return tuple(x for x in (table / tp, float(shape.replicated_params)) if x > 0)
    whole = min(total, float(shape.replicated_params))
    return tuple(x for x in ((total - whole) / tp + whole,) if x > 0)


def _block_calls(
    tensors: Sequence[float], threshold: float, reuse_distance: float, live: float
) -> tuple[list[float], list[bool], float, float, float]:
    """One block's gathered tensors (forward order), which of them are gathered again after the
    replay, and its on-demand elements in a forward, a backward and a replayed backward.

    Re-gathered: between a tensor's replay and its backward the trace runs the block's later
    modules forward and back, ``2 x`` their elements, at least ``reuse_distance``. On demand: the
    module whose hook ran before the tensor's fetch held at least ``live`` elements, so that hook
    did not prefetch it (the previous block being alike: a forward's first tensor follows the
    last; a backward ends on the first tensor, and a replayed block's backward starts from its
    last tensor, still gathered).
    """
    gathered, again, late = _block_tensors(tensors, threshold, reuse_distance, live)
    if not gathered:
        return gathered, again, 0.0, 0.0, 0.0
    forward = sum(x for x, f in zip(gathered, late[0], strict=True) if f)
    backward = sum(x for x, f in zip(gathered, late[1], strict=True) if f)
    replay = sum(x for x, f in zip(gathered, late[2], strict=True) if f)
    regather = sum(x for x, f in zip(gathered, late[3], strict=True) if f)
    return gathered, again, forward, backward, replay + regather


def _block_tensors(
    tensors: Sequence[float], threshold: float, reuse_distance: float, live: float
) -> tuple[list[float], list[bool], tuple[list[bool], list[bool], list[bool], list[bool]]]:
    """A block's gathered tensors (forward order), which are gathered again after a replay, and
    per tensor whether it is gathered on demand in a forward, a backward, a replay and as a
    re-gather (:func:`_block_calls`)."""
    gathered = [x for x in tensors if x >= threshold]
    again = [2.0 * sum(tensors[i + 1 :]) >= reuse_distance for i, x in enumerate(tensors) if x >= threshold]
    n = len(gathered)
    forward = [gathered[i - 1] >= live for i in range(n)]
    backward = [gathered[(i + 1) % n] >= live for i in range(n)]
    replay = [gathered[max(0, i - 1)] >= live for i in range(n)]
    regather = [again[i] and gathered[min(n - 1, i + 1)] >= live for i in range(n)]
    return gathered, again, (forward, backward, replay, regather)


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitCalls:
    """DeepSpeed's (2021) ZeRO-3 calls of one unit of layers (module docstring); elements are on
    one device.

    Attributes:
        calls: all-gathers per forward (and per backward), reduce-scatters per backward: the
            unit's tensors of at least the persistence threshold.
        regathers: extra all-gathers of a backward that replays the forward (full
            recomputation): the blocks' tensors released between their replay and their
            backward (reuse distance of at least ``stage3_max_reuse_distance``).
        regather_elements: their elements.
        on_demand_forward: elements a forward gathers on demand, not prefetched (a tensor whose
            module's hook follows one holding ``stage3_max_live_parameters`` or more).
        on_demand_backward: likewise in a backward without a replay.
        on_demand_replayed: likewise in a backward that replays the forward, re-gathers included.
        tensors: the unit's gathered tensors' elements in forward order (the blocks' tensors of
            at least the persistence threshold; a layer without a block shape counts as one
            tensor, prefetched), for :func:`unit_exposure_s`.
        again: per tensor, whether it is gathered again after a replay.
        late_forward, late_backward, late_replay, late_regather: per tensor, whether it is
            gathered on demand in a forward, a backward without a replay, a replay, and as a
            re-gather after the replay.
    """

    calls: int
    regathers: int
    regather_elements: float
    on_demand_forward: float = 0.0
    on_demand_backward: float = 0.0
    on_demand_replayed: float = 0.0
    tensors: tuple[float, ...] = ()
    again: tuple[bool, ...] = ()
    late_forward: tuple[bool, ...] = ()
    late_backward: tuple[bool, ...] = ()
    late_replay: tuple[bool, ...] = ()
    late_regather: tuple[bool, ...] = ()


def unit_calls(
    layers: Sequence[Layer],
    elem_bytes: int,
    t: int = 1,
    *,
    threshold: int = PERSISTENCE_THRESHOLD_ELEMENTS,
    reuse_distance: int = MAX_REUSE_DISTANCE_ELEMENTS,
    max_live: int = MAX_LIVE_PARAMETERS_ELEMENTS,
) -> UnitCalls:
    """DeepSpeed's ZeRO-3 calls for a unit of ``layers`` (:class:`UnitCalls`), from their tensors
    (:func:`weight_tensor_elements`); only blocks are replayed, re-gathered and gathered on
    demand tensor by tensor.

    Raises:
        InputError: ``elem_bytes`` or ``t`` below 1; a negative ``threshold``, ``reuse_distance``
            or ``max_live``.
    """
    limit = check_nonneg("threshold", threshold)
    reuse = check_nonneg("reuse_distance", reuse_distance)
    live = check_nonneg("max_live", max_live)
    calls = regathers = 0
    elements = forward = backward = replayed = 0.0
    seq: list[float] = []
    flags: tuple[list[bool], ...] = ([], [], [], [], [])
    for layer in layers:
        tensors = weight_tensor_elements(layer, elem_bytes, t)
        calls += sum(1 for x in tensors if x >= limit)
        if layer.shape is not None and layer.shape.kind is LayerKind.BLOCK:
            gathered, again, fwd, bwd, rep = _block_calls(tensors, limit, reuse, live)
            regathers += sum(again)
            elements += sum(x for x, a in zip(gathered, again, strict=True) if a)
            forward, backward, replayed = forward + fwd, backward + bwd, replayed + rep
            late = _block_tensors(tensors, limit, reuse, live)[2]
            seq += gathered
            for out, bits in zip(flags, (again, *late), strict=True):
                out += bits
        else:
            big = [x for x in tensors if x >= limit]
            if big:  # one prefetched gather of the layer's tensors, not replayed (module docstring)
                seq.append(sum(big))
                for out in flags:
                    out.append(False)
    return UnitCalls(calls=calls, regathers=regathers, regather_elements=elements, on_demand_forward=forward,
                     on_demand_backward=backward, on_demand_replayed=replayed, tensors=tuple(seq),
                     again=tuple(flags[0]), late_forward=tuple(flags[1]), late_backward=tuple(flags[2]),
                     late_replay=tuple(flags[3]), late_regather=tuple(flags[4]))


@dataclass(frozen=True, slots=True, kw_only=True)
class UnitGathers:
    """A ZeRO-3 unit's gathers and calls per op under a runtime (:func:`unit_gathers`); bytes per
    member.

    Attributes:
        forward: bytes of the forward's prefetched gather.
        forward_on_demand: bytes the forward gathers when it reaches the unit.
        backward: bytes of the backward's prefetched gather (re-gathers included).
        backward_on_demand: bytes the backward gathers when it reaches the unit.
        forward_calls: the forward's all-gather calls.
        backward_calls: the backward's all-gather calls.
        scatter_calls: the backward's reduce-scatter calls.
    """

    forward: float
    forward_on_demand: float
    backward: float
    backward_on_demand: float
    forward_calls: int
    backward_calls: int
    scatter_calls: int


def unit_gathers(
    runtime: Zero3Runtime | str, replayed: bool, unit_bytes: float, calls: UnitCalls, elem_bytes: int
) -> UnitGathers:
    """What a unit of ``unit_bytes`` parameter bytes per device gathers per op: ``fsdp`` the unit,
    prefetched; ``deepspeed-2021`` also the re-gathers of a backward that replays the forward
    (``replayed``: full recomputation), with the on-demand parts of ``calls`` split off.

    Raises:
        UnknownNameError: an unknown runtime.
        InputError: ``elem_bytes`` below 1.
    """
    elem = check_count("elem_bytes", elem_bytes)
    if Zero3Runtime.parse(runtime) is Zero3Runtime.FSDP:
        return UnitGathers(forward=unit_bytes, forward_on_demand=0.0, backward=unit_bytes,
                           backward_on_demand=0.0, forward_calls=calls.calls, backward_calls=calls.calls,
                           scatter_calls=calls.calls)
    late_f = calls.on_demand_forward * elem
    late_b = (calls.on_demand_replayed if replayed else calls.on_demand_backward) * elem
    again = calls.regather_elements * elem if replayed else 0.0
    return UnitGathers(
        forward=unit_bytes - late_f,
        forward_on_demand=late_f,
        backward=unit_bytes + again - late_b,
        backward_on_demand=late_b,
        forward_calls=calls.calls,
        backward_calls=calls.calls + (calls.regathers if replayed else 0),
        scatter_calls=calls.calls,
    )


def call_issue_s(members: int, ops_per_member: int = GATHER_OPS_PER_MEMBER) -> float:
    """Host time to issue one DeepSpeed (2021) ZeRO-3 collective call among ``members`` ranks,
    seconds: ``members x ops_per_member x OP_DISPATCH_S`` (:data:`GATHER_OPS_PER_MEMBER` for an
    all-gather, :data:`SCATTER_OPS_PER_MEMBER` for a reduce-scatter).

    Raises:
        InputError: ``members`` or ``ops_per_member`` below 1.
    """
    return check_count("members", members) * check_count("ops_per_member", ops_per_member) * OP_DISPATCH_S


def unit_issue_s(
    runtime: Zero3Runtime | str,
    op: str,
    gathers: Sequence[int],
    scatters: Sequence[int],
    compute_s: Sequence[float],
    members: int,
) -> list[float]:
    """What a ZeRO-3 op spends per unit issuing its collectives, seconds (module docstring):
    ``F`` and ``I`` their gathers' issue, ``B`` that plus the reduce-scatters' issue beyond the
    unit's compute, ``W`` the latter.

    Args:
        runtime: the :class:`Zero3Runtime` (``fsdp`` spends nothing).
        op: ``F``, ``B``, ``I`` or ``W``.
        gathers: all-gather calls per unit in this op.
        scatters: reduce-scatter calls per unit in this op (same order).
        compute_s: each unit's compute in this op (same order), seconds.
        members: ranks in the data-parallel group.

    Raises:
        UnknownNameError: an unknown runtime.
        InputError: ``members`` below 1, an unknown op.
    """
    mode = Zero3Runtime.parse(runtime)
    if op not in ("F", "B", "I", "W"):
        raise invalid("op", op, "must be F, B, I or W")
    n = len(compute_s)
    if mode is Zero3Runtime.FSDP or members <= 1:
        return [0.0] * n
    one_gather = call_issue_s(members, GATHER_OPS_PER_MEMBER)
    one_scatter = call_issue_s(members, SCATTER_OPS_PER_MEMBER)
    gather = [k * one_gather if op in ("F", "B", "I") else 0.0 for k in gathers]
    scatter = [k * one_scatter if op in ("B", "W") else 0.0 for k in scatters]
    return [g + max(0.0, r - t) for g, r, t in zip(gather, scatter, compute_s, strict=True)]


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
    ops ``I`` and ``W`` and units without gathered tensors spend nothing.

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

    def call(elements: float) -> float:
        return gather_s(elements * elem) - base + lat if elements > 0 else 0.0

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
        unit_comm = gather_s(prefetched * elem) if prefetched > 0 else 0.0
        return max(0.0, over - max(0.0, unit_comm - fwd))
    over = _overhang(forward_pairs(fwd, calls.late_replay)) if replayed else 0.0
    wanted = [a and not r for a, r in zip(calls.again, calls.late_regather, strict=True)] if replayed else [
        not f for f in calls.late_backward]
    late = sum(calls.late_replay) + sum(calls.late_regather) if replayed else sum(calls.late_backward)
    over += late_latency(late)
    # backward order: module k hides the gather of module k - 1 and the reduce-scatter of k + 1,
    # which starts once the host has issued it (scatter_issue_s, from the hook during module k)
    r = check_nonneg("scatter_issue_s", scatter_issue_s)
    pairs = [(bwd * share[k], max(call(e[k - 1]) if wanted[k - 1] else 0.0, r) + call(e[(k + 1) % n] * g))
             for k in range(n - 1, -1, -1)]
    over += _overhang(pairs)
    gathered = sum(x for x, w in zip(e, wanted, strict=True) if w)
    if replayed:
        gathered += sum(x for x, f in zip(e, calls.late_replay, strict=True) if not f)
    unit_comm = (gather_s(gathered * elem) if gathered > 0 else 0.0) + gather_s(total * elem * g)
    # the unit-level charge: issue beyond the compute (unit_issue_s) and the gating's comm
    charged = max(unit_comm, r * calls.calls) - fwd - bwd
    return max(0.0, over - max(0.0, charged))
