"""The simulator's side of tied weight matrices (:mod:`pipesim.profiles.costmodels.tied_embeddings`):
the copy's static memory and the all-reduce of the two copies' gradients.

* :func:`tied_copy_static` adds, on every device holding a tied matrix's user (a GPT's output
  layer) but not its owner (the word embeddings), the copy's weights, gradients and optimizer
  state: the matrix's bytes over the stage's TP degree times the stage's static bytes per
  parameter byte (sharded by its ZeRO sharding as the stage's other parameters).
* :func:`tied_collectives` gives one all-reduce per data-parallel replica between the device of
  the owner's stage and that of the user's stage, of the copy's gradient bytes. It is not
  posted: it starts once every compute stream has drained and the owner stage's last
  data-parallel gradient collective has ended (Megatron-LM's ``finalize_model_grads`` runs the
  data-parallel reduction, then the embedding group's all-reduce, after the pipeline's last
  backward), and both stages' optimizer steps wait for it (``Collective.shared_with``, the path
  DualPipe's copies use). With TP, each of the ``t`` TP ranks' pairs all-reduces its ``1/t``
  of the matrix: the stream devices' pair (each TP group's first) stands for the others where
  every pair has links of its own, and where the pairs' routes share a link (fewer NICs than
  GPUs per server) the other ranks' pairs run beside it (``Collective.rings``,
  :meth:`~pipesim.simulator.tp_lowering.TpLowering.shared_rings`).
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
    ``first_index`` on; ``before`` are the program's other collectives (the owner stage's last
    gradient collective goes first); ``tp`` the TP pass (the other TP ranks' pairs where they
    share links), ``None`` without TP. Empty when the model ties nothing or no device holds a copy.

    Raises:
        InputError: a bad ``grad_reduce_dtype``.
    """
    tied = tied_matrices(profile)
    if not tied:
        return []
    by_layer = {m.user: m for m in tied}
    held = _held(stages)
    out: list[Collective] = []
    for user_stage in stages:
        for m in (by_layer[i] for i in user_stage.layers if i in by_layer):
            owner_stage = next(st for st in stages if m.owner in st.layers)
            last = max(
                (c.index for c in before
                 if c.stage == owner_stage.index and not c.after_step
                 and c.kind != CollectiveKind.ALL_GATHER.value),
                default=None,
            )
            t = plan.stages[user_stage.index].tensor_parallel
            nbytes = tied_grad_bytes(m.nbytes, t, profile.dtype, plan.grad_reduce_dtype)
            same_t = plan.stages[owner_stage.index].tensor_parallel == t
            for a, b in zip(owner_stage.devices, user_stage.devices, strict=False):
                if a == b or any(m.owner in st.layers for st in held[b]):
                    continue  # the device holds both ends: no copy
                out.append(
                    Collective(
                        index=first_index + len(out),
                        stage=owner_stage.index,
                        bucket=0,
                        nbytes=nbytes,
                        members=(a, b),
                        algorithm=str(getattr(plan.allreduce, "value", plan.allreduce)),
                        after=last,
                        after_drain=True,
                        posted=False,
                        shared_with=user_stage.index,
                        rings=tp.shared_rings([(a + r, b + r) for r in range(t)])
                        if tp is not None and same_t and t > 1 else (),
                    )
                )
    return out
