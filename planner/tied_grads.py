"""The planner's side of tied weight matrices
(:mod:`pipesim.profiles.costmodels.tied_embeddings`): the all-reduce of the two copies' gradients
and when it runs.

As the simulator runs it (:mod:`pipesim.simulator.tied_grads`, after Megatron-LM's
``finalize_model_grads``), the pair all-reduce starts once *both* ranks, the owner's (the
embeddings', the first) and the user's (the output layer's, the last), have run their whole
schedule and finished their own gradient collectives; the other ranks do not hold it. Both
ranks' optimizer steps then wait for it; several tied matrices on one pair of ranks go one after
another. So:

* :func:`with_tied_allreduce` prices each pair's all-reduce (:func:`pair_allreduce_s`) and puts
  it on the owner stage's :class:`~pipesim.planner.cost_tables.StageCosts` (``tied``), apart
  from its gradient all-reduce;
* :func:`tied_finish_s` times the pairs from each rank's *ready* time (its last action plus its
  own gradient collectives) and what it does after them (its optimizer step): every estimate
  (the closed forms, the order evaluation, the link walk, the DAPPLE program and the 3D
  estimate) calls it with its own per-rank times and takes the later of its iteration end and
  this;
* the DAPPLE program (:mod:`pipesim.planner.dapple_dp`) times the pair of its first and last
  stage for the matrices :func:`last_layer_ties` gives, keeping its suffixes Pareto-minimal per
  last stage with :func:`keep_pareto`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from pipesim.plan import Plan
from pipesim.planner.cost_tables import StageCosts
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.tied_embeddings import (
    TiedPair,
    pairs_allreduce_s,
    stage_pairs,
    tied_grad_bytes,
    tied_matrices,
)
from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "keep_pareto",
    "last_layer_ties",
    "pair_allreduce_s",
    "rank_pair_times",
    "rank_pairs",
    "tied_finish_s",
    "with_tied_allreduce",
]


class _AllReduce(Protocol):
    @property
    def profile(self) -> ModelProfile: ...

    def allreduce_s(self, devices: Sequence[int], nbytes: float, algorithm: str | None = None) -> float: ...

    def transfer_s(
        self, src: Sequence[int], dst: Sequence[int], samples: int, bytes_per_sample: float
    ) -> float: ...


def pair_allreduce_s(
    cost: _AllReduce, src: Sequence[int], dst: Sequence[int], nbytes: float, algorithm: str
) -> float:
    """The pair all-reduces of ``nbytes`` per device between the replicas ``src`` of the owner
    stage and ``dst`` of the user stage, seconds: the first devices' all-reduce on
    ``cost.allreduce_s``, and where both stages have as many replicas (more than one), every
    replica's pair at once on the links they share
    (:func:`~pipesim.profiles.costmodels.tied_embeddings.pairs_allreduce_s` with
    ``cost.transfer_s``).

    Raises:
        Nothing of its own.
    """
    alone = cost.allreduce_s((src[0], dst[0]), nbytes, algorithm)
    if len(src) == len(dst) > 1:
        shared = cost.transfer_s(src, dst, len(src), nbytes)
        alone = pairs_allreduce_s(alone, shared, cost.transfer_s(src[:1], dst[:1], 1, nbytes))
    return alone


def with_tied_allreduce(
    cost: _AllReduce,
    plan: Plan,
    costs: list[StageCosts],
    placement: Sequence[Sequence[int]],
    where: Sequence[int],
    grad_reduce_dtype: str | None,
) -> list[StageCosts]:
    """``costs`` with the tied copies' pair all-reduces on their owner stages' ``tied``
    (module docstring): between the replicas of the owner's and the user's rank
    (``placement[where[stage]]``), of
    :func:`~pipesim.profiles.costmodels.tied_embeddings.tied_grad_bytes`, timed by
    :func:`pair_allreduce_s`. ``costs`` itself when the model ties nothing across ranks.

    Raises:
        InputError: a bad ``grad_reduce_dtype``.
    """
    ranges = [(s.first_layer, s.last_layer) for s in plan.stages]
    pairs = stage_pairs(cost.profile, ranges, where)
    if not pairs:
        return costs
    out = list(costs)
    algorithm = str(getattr(plan.allreduce, "value", plan.allreduce))
    for pair in pairs:
        t = plan.stages[pair.user].tensor_parallel
        nbytes = tied_grad_bytes(pair.nbytes, t, cost.profile.dtype, grad_reduce_dtype)
        src, dst = tuple(placement[where[pair.owner]]), tuple(placement[where[pair.user]])
        own = out[pair.owner]
        seconds = pair_allreduce_s(cost, src, dst, nbytes, algorithm)
        out[pair.owner] = dataclasses.replace(own, tied=(*own.tied, (pair.user, seconds)))
    return out


def rank_pairs(costs: Sequence[StageCosts], where: Sequence[int]) -> list[tuple[int, int, float]]:
    """The tied pairs of a plan's stage costs as ``(owner rank, user rank, seconds)``, in stage
    order (``where[stage]``: the stage's rank); empty when nothing is tied across ranks.

    Raises:
        Nothing.
    """
    return [(where[s], where[user], seconds) for s, c in enumerate(costs) for user, seconds in c.tied]


class _PairCosts(Protocol):
    """What :func:`rank_pair_times` reads of :class:`~pipesim.planner.three_d_costs.ThreeDCosts`."""

    def curves(self, members: tuple[int, ...], *, ranks: int = 1) -> AllReduceCurves: ...

    def ranks_share(self, members: tuple[int, ...], ranks: int) -> bool: ...

    def send_terms(
        self, pairs: tuple[tuple[int, int], ...], ranks: int = 1
    ) -> tuple[tuple[float, float], ...]: ...


def rank_pair_times(
    model: _PairCosts, pairs: Sequence[TiedPair], where: Sequence[int], firsts: Sequence[Sequence[int]],
    t: int, grad_bytes: Callable[[float], float], algorithm: str,
) -> list[tuple[int, int, float]]:
    """Per tied pair of stages (``pairs``, stage ``k`` on rank ``where[k]``) its owner's and its
    user's rank and its all-reduce's time as the 3D estimate takes it, seconds: the first TP
    rank's two-device all-reduce of ``grad_bytes(pair bytes)`` on ``model``'s curves (with every
    TP rank's pair: ``t`` ranks), and where the ranks have several replicas (``firsts[r]``: rank
    ``r``'s replicas' first devices) every replica's pair at once on the links they share
    (:func:`~pipesim.profiles.costmodels.tied_embeddings.pairs_allreduce_s`), every TP rank's
    pair too where the TP ranks' pairs share links, each pair's bytes both ways (a two-device
    ring's bytes cross each way: where the TP ranks' pairs leave one NIC each way, the replicas'
    rings meet on it in both directions)."""
    out: list[tuple[int, int, float]] = []
    for pair in pairs:
        replicas = tuple(zip(firsts[where[pair.owner]], firsts[where[pair.user]], strict=True))
        nbytes = grad_bytes(pair.nbytes)
        alone = model.curves(replicas[0], ranks=t).time_s(nbytes, algorithm)  # with every TP rank's pair
        if len(replicas) > 1:  # every replica's pair at once, on the links they share
            ranked = replicas
            if model.ranks_share(replicas[0], t):  # and every TP rank's, where they share links
                ranked = tuple(x for a, b in replicas for r in range(t)
                               for x in ((a + r, b + r), (b + r, a + r)))
            together = max(a + nbytes * b for a, b in model.send_terms(ranked))
            one = ranked[: len(ranked) // len(replicas)]  # the first replica's pairs
            first_pair = max(a + nbytes * b for a, b in model.send_terms(one))
            if len(one) > 1:  # (the curves time the first TP rank's pair, the slowest on the links)
                alone = max(alone, first_pair)
            alone = pairs_allreduce_s(alone, together, first_pair)
        out.append((where[pair.owner], where[pair.user], alone))
    return out


def tied_finish_s(
    pairs: Sequence[tuple[int, int, float]], ready_s: Sequence[float], after_s: Sequence[float]
) -> float:
    """When the last rank of a tied pair has finished its iteration, seconds; ``-inf`` without
    pairs.

    ``pairs``: ``(owner rank, user rank, all-reduce seconds)`` (:func:`rank_pairs`), run in this
    order; ``ready_s[r]``: when rank ``r`` has run its whole schedule and its own gradient
    collectives; ``after_s[r]``: what it does after the pairs (its optimizer step). A pair
    starts when both its ranks are ready and leaves them ready again when it ends; each rank of
    a pair then runs its ``after_s``::

        start = max(ready[o], ready[u]);  ready[o] = ready[u] = start + x
        finish = max over the pairs' ranks r of ready[r] + after[r]

    Raises:
        IndexError: a rank outside ``ready_s`` or ``after_s``.
    """
    if not pairs:
        return -float("inf")
    ready: dict[int, float] = {}
    for owner, user, seconds in pairs:
        a, b = ready.get(owner, ready_s[owner]), ready.get(user, ready_s[user])
        ready[owner] = ready[user] = max(a, b) + seconds
    return max(at + after_s[r] for r, at in ready.items())


def last_layer_ties(profile: ModelProfile) -> tuple[tuple[int, int], ...]:
    """``(owner layer, matrix bytes)`` of the tied matrices used by ``profile``'s last layer (a
    GPT's word embeddings and output layer): the pairs the DAPPLE program times between its first
    and last stage. Matrices used by another layer are left to the estimate the search ranks
    its plans by.

    Raises:
        Nothing.
    """
    last = profile.num_layers - 1
    return tuple((m.owner, m.nbytes) for m in tied_matrices(profile) if m.user == last)


class _Suffix(Protocol):
    @property
    def w(self) -> float: ...

    @property
    def z(self) -> float: ...

    @property
    def k(self) -> int: ...

    @property
    def lead(self) -> float: ...

    @property
    def tail(self) -> tuple[int, int, float]: ...


_S = TypeVar("_S", bound=_Suffix)


def keep_pareto(bucket: list[_S], new: _S) -> None:
    """Add the DAPPLE program's suffix ``new`` to ``bucket`` unless one with its last stage
    (``tail``) is no worse in ``W``, ``Z``, ``k`` and ``lead``; drop those it is no worse than.
    For one last stage the finished plan's time, the pair included, is non-decreasing in the
    four, so Pareto-minimal quadruples keep the program exact.

    Raises:
        Nothing.
    """
    w2, z2, k2, l2, tail = new.w, new.z, new.k, new.lead, new.tail
    dominates = False
    for d in bucket:
        if d.tail == tail and d.w <= w2 and d.z <= z2 and d.k <= k2 and d.lead <= l2:
            return
        if d.tail == tail and w2 <= d.w and z2 <= d.z and k2 <= d.k and l2 <= d.lead:
            dominates = True
    if dominates:
        bucket[:] = [d for d in bucket
                     if not (d.tail == tail and w2 <= d.w and z2 <= d.z and k2 <= d.k and l2 <= d.lead)]
    bucket.append(new)
