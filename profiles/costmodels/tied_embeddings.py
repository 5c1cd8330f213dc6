"""Tied weight matrices across pipeline stages: the copy a stage holds and its gradient all-reduce.

A GPT's output layer uses the word-embedding matrix (Megatron-LM's default: the output layer is
untied only with ``--untie-embeddings-and-output-weights``; DeepSpeed's pipeline engine ties
them with ``TiedLayerSpec``). A profile says so on the output layer (``Layer.tied_to``, the
embedding layer's name, and ``Layer.tied_parameter_bytes``, the shared matrix's bytes; the
matrix is counted once, in the embedding layer's ``parameter_bytes``).

When a pipeline puts the two layers on different devices, the device holding the output layer
holds a copy of the matrix, with its gradients and optimizer state (Megatron-LM:
``setup_embeddings_and_output_layer`` in ``megatron/core/models/common/language_module/
language_module.py`` at the same commit allocates the last stage's output weight and
initialises it from the first stage's by an all-reduce over the embedding group); the copy is
vocabulary-parallel under TP (split ``t`` ways, as the embedding table) and sharded like every
other parameter of its stage by ZeRO
(:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`).

After the backward, the two copies' gradients are summed by one all-reduce per data-parallel
replica and TP rank between the device of the first stage and that of the last (Megatron-LM's
"embedding group": ``_allreduce_word_embedding_grads`` in
``megatron/core/distributed/finalize_model_grads.py``, called by ``finalize_model_grads`` after
the data-parallel gradient reduction has finished (``finish_grad_sync``) and before the
optimizer step; NVIDIA/Megatron-LM at commit d98e8a64). Its bytes are the copy's gradient
bytes: the matrix's bytes over ``t`` times
:func:`~pipesim.profiles.costmodels.grad_dtype.grad_bytes_factor` (Megatron's main gradients
are fp32 buffers, as the data-parallel reduction's).

The copy is an ordinary parameter of its stage: its gradient is part of that stage's
data-parallel reduction and that stage's optimizer step updates it (Megatron-LM: the output
layer's weight stays in the stage's DDP buffers and optimizer); :func:`stage_copies` gives each
stage's copies for that.

The simulator (:mod:`pipesim.simulator.tied_grads`, :mod:`pipesim.simulator.dp_collectives`,
:mod:`pipesim.simulator.optimizer_steps`) and the planner's estimates
(:mod:`pipesim.planner.memory_estimate`, :mod:`pipesim.planner.estimate`,
:mod:`pipesim.planner.three_d`) take the copies from :func:`held_copies` / :func:`stage_copies`
and the all-reduce's bytes from :func:`tied_grad_bytes`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.profiles.costmodels.grad_dtype import grad_bytes_factor
from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "TiedMatrix",
    "TiedPair",
    "held_copies",
    "pairs_allreduce_s",
    "stage_copies",
    "stage_pairs",
    "tied_grad_bytes",
    "tied_matrices",
    "without_ties",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TiedMatrix:
    """One weight matrix two layers share.

    Attributes:
        owner: the index of the layer whose ``parameter_bytes`` count the matrix (the embeddings).
        user: the index of the later layer that uses it too (the output layer).
        nbytes: the matrix's bytes in the profile's dtype.
    """

    owner: int
    user: int
    nbytes: int


_CACHE: dict[int, tuple[ModelProfile, tuple[TiedMatrix, ...]]] = {}


def tied_matrices(profile: ModelProfile) -> tuple[TiedMatrix, ...]:
    """The tied matrices of ``profile`` (from ``Layer.tied_to``), in layer order; empty when none.

    Cached per profile object (planners ask once per candidate plan)."""
    found = _CACHE.get(id(profile))
    if found is not None and found[0] is profile:
        return found[1]
    index = {layer.name: i for i, layer in enumerate(profile.layers)}
    out = tuple(
        TiedMatrix(owner=index[layer.tied_to], user=i, nbytes=layer.tied_parameter_bytes or 0)
        for i, layer in enumerate(profile.layers)
        if layer.tied_to is not None
    )
    if len(_CACHE) >= 64:
        _CACHE.clear()
    _CACHE[id(profile)] = (profile, out)
    return out


def held_copies(profile: ModelProfile, held: Sequence[tuple[int, int]]) -> tuple[int, ...]:
    """Per layer range of ``held`` (the stages one device holds, ``(first, last)`` layer indices),
    the bytes of the tied matrices the device holds a copy of for that stage: those used by a
    layer of the range whose owner is in none of the device's ranges (whole matrices, before
    TP's split; zeros when the model ties nothing or the device holds both ends).

    Raises:
        Nothing; ranges outside the profile hold nothing.
    """
    return tuple(sum(n for _, n in copies) for copies in stage_copies(profile, held, [0] * len(held)))


def stage_copies(
    profile: ModelProfile, ranges: Sequence[tuple[int, int]], ranks: Sequence[int]
) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per stage (``ranges``: its ``(first, last)`` layer indices, ``ranks``: its rank), the
    tied copies it holds as ``(user layer, matrix bytes)`` (whole, before TP's split): those
    :func:`held_copies` gives for the stages of its rank. The copy is an ordinary parameter of
    the stage in Megatron-LM (``setup_embeddings_and_output_layer``): its gradient joins the
    stage's data-parallel gradient reduction and its optimizer step updates it, so the
    simulator and the estimates add these bytes to the stage's parameter bytes there.

    Raises:
        Nothing; empty tuples when the model ties nothing.
    """
    tied = tied_matrices(profile)
    if not tied:
        return ((),) * len(ranges)
    by_rank: dict[int, list[int]] = {}
    for s, r in enumerate(ranks):
        by_rank.setdefault(r, []).append(s)
    out: list[tuple[tuple[int, int], ...]] = [()] * len(ranges)
    for stages in by_rank.values():
        held = [ranges[s] for s in stages]
        for s in stages:
            first, last = ranges[s]
            out[s] = tuple(
                (m.user, m.nbytes) for m in tied
                if first <= m.user <= last and not any(f <= m.owner <= lt for f, lt in held)
            )
    return tuple(out)


def tied_grad_bytes(nbytes: float, tensor_parallel: int, dtype: str, grad_reduce_dtype: str | None) -> float:
    """Bytes each device contributes to the all-reduce of a tied matrix's gradients: the copy's
    ``nbytes`` (profile dtype) over the TP degree (vocabulary-parallel), in the gradient
    reduction dtype (:func:`~pipesim.profiles.costmodels.grad_dtype.grad_bytes_factor`).

    Raises:
        InputError: a bad ``grad_reduce_dtype``.
    """
    return nbytes / tensor_parallel * grad_bytes_factor(dtype, grad_reduce_dtype)


@dataclass(frozen=True, slots=True, kw_only=True)
class TiedPair:
    """The two pipeline stages whose copies of a tied matrix all-reduce their gradients.

    Attributes:
        owner: the stage holding the owner layer (the embeddings).
        user: the stage holding the copy (the output layer's).
        nbytes: the matrix's bytes in the profile's dtype (whole, before TP's split).
    """

    owner: int
    user: int
    nbytes: int


def stage_pairs(
    profile: ModelProfile, ranges: Sequence[tuple[int, int]], ranks: Sequence[int]
) -> tuple[TiedPair, ...]:
    """The stage pairs of a pipeline whose tied copies all-reduce their gradients: for each tied
    matrix, the stage holding its owner and the one holding its user, when they run on
    different ranks (one rank holding both holds no copy). ``ranges`` are the stages'
    ``(first, last)`` layer indices, ``ranks`` the rank of each.

    Raises:
        Nothing; a matrix whose layers no stage holds is left out.
    """
    out = []
    for m in tied_matrices(profile):
        owner = next((s for s, (f, lt) in enumerate(ranges) if f <= m.owner <= lt), None)
        user = next((s for s, (f, lt) in enumerate(ranges) if f <= m.user <= lt), None)
        if owner is not None and user is not None and ranks[owner] != ranks[user]:
            out.append(TiedPair(owner=owner, user=user, nbytes=m.nbytes))
    return tuple(out)


def without_ties(profile: ModelProfile) -> ModelProfile:
    """``profile`` with no tied matrices (every ``tied_to`` and ``tied_parameter_bytes`` cleared;
    the layers' own bytes and times unchanged): the output layer's copy and its all-reduce left
    out, as pipesim modelled every profile before tied matrices (a what-if, and the reference of
    differential tests recorded before them). ``profile`` itself when it ties nothing.

    Raises:
        Nothing.
    """
    if not tied_matrices(profile):
        return profile
    layers = tuple(
        dataclasses.replace(x, tied_to=None, tied_parameter_bytes=None) if x.tied_to is not None else x
        for x in profile.layers
    )
    return dataclasses.replace(profile, layers=layers)


def pairs_allreduce_s(alone_s: float, shared_transfer_s: float, alone_transfer_s: float) -> float:
    """The estimates' time of the replicas' pair all-reduces of a tied matrix, run at once: one
    pair's all-reduce alone (``alone_s``, the collective cost model's) plus what the other pairs'
    traffic adds on the links they share, taken as a transfer of the same bytes (a two-device
    ring moves each device's whole buffer once each way: half in its reduce-scatter step, half
    in its all-gather step): ``shared_transfer_s`` of every pair's transfer at once minus
    ``alone_transfer_s`` of the first pair's alone (never below 0), seconds.

    Raises:
        Nothing.
    """
    return alone_s + max(0.0, shared_transfer_s - alone_transfer_s)
