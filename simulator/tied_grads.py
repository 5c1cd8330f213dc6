"""The simulator's side of tied weight matrices (:mod:`pipesim.profiles.costmodels.tied_embeddings`):
the copy's static memory and the all-reduce of the two copies' gradients.

* :func:`tied_copy_static` adds, on every device holding a tied matrix's user (a GPT's output
  layer) but not its owner (the word embeddings), the copy's weights, gradients and optimizer
  state: the matrix's bytes over the stage's TP degree times the stage's static bytes per
  parameter byte (sharded by its ZeRO sharding as the stage's other parameters).
* :func:`tied_collectives` gives one all-reduce per data-parallel replica between the device of
  the owner's stage and that of the user's stage, of the copy's gradient bytes. It is not
  posted: it starts once both devices have run their whole schedule and every gradient
  collective of the stages they hold has ended (Megatron-LM: each rank calls
  ``finalize_model_grads`` when its own pipeline schedule returns, which finishes the rank's
  data-parallel gradient sync, then all-reduces the layer-norm gradients over the TP group
  with sequence parallelism, then the embedding group's gradients; ``finalize_model_grads``
  in ``megatron/core/distributed/finalize_model_grads.py`` and its calls at the end of each
  schedule in ``megatron/core/pipeline_parallel/schedules.py``, NVIDIA/Megatron-LM d98e8a64).
  The other ranks' drain does not hold it (a zero-bubble or V-shaped order whose first and
  last ranks finish apart from the middle ones). Several tied matrices on one device pair go
  one after another. Both stages' optimizer steps wait for it (``Collective.shared_with``, the
  path DualPipe's copies use). With TP, each of the ``t`` TP ranks' pairs all-reduces its
  ``1/t`` of the matrix: the stream devices' pair (each TP group's first) stands for the
  others where every pair has links of its own, and where the pairs' routes share a link
  (fewer NICs than GPUs per server) the other ranks' pairs run beside it (``Collective.rings``,
  :meth:`~pipesim.simulator.tp_lowering.TpLowering.shared_rings`). The layer-norm all-reduce
  of sequence parallelism is not modelled (its bytes are a few hidden-size vectors per layer).
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.plan import Plan
from pipesim.profiles.costmodels.memory import static_memory_multiplier
from pipesim.profiles.costmodels.sharding import CollectiveKind
from pipesim.profiles.costmodels.tied_embeddings import held_copies, tied_grad_bytes, tied_matrices
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator.dp_collectives import Collective
from pipesim.simulator.stage_costs import StageFacts
from pipesim.simulator.tp_lowering import TpLowering

__all__ = ["tied_collectives", "tied_copy_static"]


def _held(stages: Sequence[StageFacts]) -> dict[int, list[StageFacts]]:
    """device -> the stages it holds, in stage order."""
    out: dict[int, list[StageFacts]] = {}
    for st in stages:
        for device in st.devices:
            out.setdefault(device, []).append(st)
    return out


def tied_copy_static(
    plan: Plan, profile: ModelProfile, stages: Sequence[StageFacts], tp: TpLowering | None
) -> dict[int, float]:
    """Static bytes of the tied copies per device (module docstring); empty when the model ties
    nothing or no device holds a copy.

    Raises:
        UnknownNameError: unknown optimizer.
        InputError: a bad ``grad_reduce_dtype``.
    """
    if not tied_matrices(profile):
        return {}
    out: dict[int, float] = {}
    plain = None
    for device, mine in _held(stages).items():
        copies = held_copies(profile, [(st.layers.start, st.layers.stop - 1) for st in mine])
        for st, nbytes in zip(mine, copies, strict=True):
            if nbytes == 0:
                continue
            if tp is not None:
                multiplier = tp.memory_multiplier(st.index)
            else:
                if plain is None:
                    plain = static_memory_multiplier(profile.dtype, plan.optimizer, plan.grad_reduce_dtype)
                multiplier = plain
            t = plan.stages[st.index].tensor_parallel
            out[device] = out.get(device, 0.0) + nbytes / t * multiplier
    return out


def tied_collectives(
    plan: Plan,
    profile: ModelProfile,
    stages: Sequence[StageFacts],
    first_index: int,
    before: Sequence[Collective],
    tp: TpLowering | None = None,
) -> list[Collective]:
    """The all-reduces of the tied copies' gradients (module docstring), indexed from
    ``first_index`` on; ``before`` are the program's other collectives (the gradient
    collectives of the stages both devices hold go first); ``tp`` the TP pass (the other TP
    ranks' pairs where they share links), ``None`` without TP. Empty when the model ties
    nothing or no device holds a copy.

    Raises:
        InputError: a bad ``grad_reduce_dtype``.
    """
    tied = tied_matrices(profile)
    if not tied:
        return []
    by_layer = {m.user: m for m in tied}
    held = _held(stages)
    # per device, its stages' gradient collectives (what finish_grad_sync waits for): not the
    # parameter all-gathers (ZeRO-3's before compute, those after the optimizer step)
    synced: dict[int, list[int]] = {}
    by_index = {st.index: st for st in stages}
    for c in before:
        if c.after_step or c.kind == CollectiveKind.ALL_GATHER.value:
            continue
        for st in (by_index[c.stage], *((by_index[c.shared_with],) if c.shared_with is not None else ())):
            for device in st.devices:
                synced.setdefault(device, []).append(c.index)
    out: list[Collective] = []
    pairs_of: dict[int, list[int]] = {}  # device -> its earlier pair all-reduces (one after another)
    for user_stage in stages:
        for m in (by_layer[i] for i in user_stage.layers if i in by_layer):
            owner_stage = next(st for st in stages if m.owner in st.layers)
            t = plan.stages[user_stage.index].tensor_parallel
            nbytes = tied_grad_bytes(m.nbytes, t, profile.dtype, plan.grad_reduce_dtype)
            same_t = plan.stages[owner_stage.index].tensor_parallel == t
            for a, b in zip(owner_stage.devices, user_stage.devices, strict=False):
                if a == b or any(m.owner in st.layers for st in held[b]):
                    continue  # the device holds both ends: no copy
                index = first_index + len(out)
                waits = sorted({*synced.get(a, ()), *synced.get(b, ()),
                                *pairs_of.get(a, ()), *pairs_of.get(b, ())})
                out.append(
                    Collective(
                        index=index,
                        stage=owner_stage.index,
                        bucket=0,
                        nbytes=nbytes,
                        members=(a, b),
                        algorithm=str(getattr(plan.allreduce, "value", plan.allreduce)),
                        after=None,
                        after_drain=False,
                        posted=False,
                        shared_with=user_stage.index,
                        rings=tp.shared_rings([(a + r, b + r) for r in range(t)])
                        if tp is not None and same_t and t > 1 else (),
                        after_devices=(a, b),
                        after_more=tuple(waits),
                    )
                )
                pairs_of.setdefault(a, []).append(index)
                pairs_of.setdefault(b, []).append(index)
    return out
