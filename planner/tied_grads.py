"""The pipeline estimate's side of tied weight matrices
(:mod:`pipesim.profiles.costmodels.tied_embeddings`): the all-reduce of the two copies' gradients.

As the simulator runs it (:mod:`pipesim.simulator.tied_grads`), the all-reduce starts after the
owner stage's (the embeddings', the first) own gradient all-reduce, and both stages' optimizer
steps wait for it. The estimate's schedules (1F1B and its kin) end with the first stage's last
backward, so :func:`with_tied_allreduce` adds the pair's all-reduce to the owner stage's
all-reduce and times the owner's optimizer step as the longer of the two stages' (the user
stage's step follows the same all-reduce).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol

from pipesim.plan import Plan
from pipesim.planner.cost_tables import StageCosts
from pipesim.profiles.costmodels.tied_embeddings import pairs_allreduce_s, stage_pairs, tied_grad_bytes
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["with_tied_allreduce"]


class _AllReduce(Protocol):
    @property
    def profile(self) -> ModelProfile: ...

    def allreduce_s(self, devices: Sequence[int], nbytes: float, algorithm: str | None = None) -> float: ...

    def transfer_s(
        self, src: Sequence[int], dst: Sequence[int], samples: int, bytes_per_sample: float
    ) -> float: ...


def with_tied_allreduce(
    cost: _AllReduce,
    plan: Plan,
    costs: list[StageCosts],
    placement: Sequence[Sequence[int]],
    where: Sequence[int],
    grad_reduce_dtype: str | None,
) -> list[StageCosts]:
    """``costs`` with the tied copies' gradient all-reduces (module docstring): one between the
    first devices of the owner's and the user's rank (``placement[where[stage]]``; every replica's
    pair at once: :func:`~pipesim.profiles.costmodels.tied_embeddings.pairs_allreduce_s` with
    ``cost.transfer_s``), of
    :func:`~pipesim.profiles.costmodels.tied_embeddings.tied_grad_bytes`, on
    ``cost.allreduce_s``. ``costs`` itself when the model ties nothing across ranks.

    Raises:
        InputError: a bad ``grad_reduce_dtype``.
    """
    ranges = [(s.first_layer, s.last_layer) for s in plan.stages]
    pairs = stage_pairs(cost.profile, ranges, where)
    if not pairs:
        return costs
    out = list(costs)
    for pair in pairs:
        t = plan.stages[pair.user].tensor_parallel
        nbytes = tied_grad_bytes(pair.nbytes, t, cost.profile.dtype, grad_reduce_dtype)
        src, dst = tuple(placement[where[pair.owner]]), tuple(placement[where[pair.user]])
        algorithm = str(getattr(plan.allreduce, "value", plan.allreduce))
        extra = cost.allreduce_s((src[0], dst[0]), nbytes, algorithm)
        if len(src) == len(dst) > 1:  # every replica's pair at once, on the links they share
            shared = cost.transfer_s(src, dst, len(src), nbytes)
            extra = pairs_allreduce_s(extra, shared, cost.transfer_s(src[:1], dst[:1], 1, nbytes))
        own = out[pair.owner]
        out[pair.owner] = dataclasses.replace(
            own, allreduce_s=own.allreduce_s + extra,
            optimizer_s=max(own.optimizer_s, out[pair.user].optimizer_s),
        )
    return out
