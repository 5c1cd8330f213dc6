"""Stage-to-rank placement: which pipeline rank runs each (virtual) stage.

Two placements cover the schedules pipesim generates (torch 2.13's
``torch.distributed.pipelining._utils.generate_stage_to_rank_mapping`` names the same two styles):

- ``"looped"``: stage ``s`` on rank ``s % p`` (GPipe, 1F1B, Megatron's interleaved 1F1B, looped
  BFS, interleaved zero bubble). With ``v`` stages per rank a micro-batch loops ``v`` times from
  rank 0 to rank ``p - 1``.
- ``"v"``: the zig-zag of the V-shape schedules (ZB-V, V-Half, V-Min, DualPipeV): chunk
  ``c = s // p`` runs down the ranks when ``c`` is even and back up when it is odd, so with
  ``v = 2`` stage ``s < p`` is on rank ``s`` and stage ``s >= p`` on rank ``2p - 1 - s``. Stages
  ``p - 1`` and ``p`` then share rank ``p - 1``, and the last stage (the loss) is on rank 0 with
  the first.

Two stages on one rank exchange activations and gradients in memory: the lowering derives no
send or receive between them, and the evaluator charges no transfer time.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping

from pipesim.errors import invalid

__all__ = ["PLACEMENTS", "check_placement", "infer_placement", "stage_rank", "stage_ranks"]

PLACEMENTS: tuple[str, ...] = ("looped", "v")
"""The placement names, in order."""


def check_placement(placement: object) -> str:
    """``placement`` if it is one of :data:`PLACEMENTS`.

    Raises:
        InputError: any other value.
    """
    if placement not in PLACEMENTS:
        raise invalid("placement", placement, f"must be one of {', '.join(PLACEMENTS)}")
    assert isinstance(placement, str)
    return placement


def stage_rank(placement: str, stage: int, num_ranks: int) -> int:
    """The rank that runs ``stage`` with ``num_ranks`` ranks under ``placement``.

    Raises:
        InputError: an unknown placement.
    """
    if placement == "looped":
        return stage % num_ranks
    check_placement(placement)
    chunk, position = divmod(stage, num_ranks)
    return position if chunk % 2 == 0 else num_ranks - 1 - position


@functools.lru_cache(maxsize=256)
def stage_ranks(placement: str, num_stages: int, num_ranks: int) -> tuple[int, ...]:
    """``stage_ranks(...)[s]`` is the rank of stage ``s`` (see :func:`stage_rank`).

    Raises:
        InputError: an unknown placement.
    """
    return tuple(stage_rank(placement, s, num_ranks) for s in range(num_stages))


def infer_placement(found: Mapping[int, int], *, num_stages: int, num_ranks: int) -> str:
    """The placement under which every stage of ``found`` (stage -> the rank it was seen on) is
    on its rank: ``"looped"`` when both fit.

    Raises:
        InputError: no placement fits (the message names the first stage that does not).
    """
    for placement in PLACEMENTS:
        ranks = stage_ranks(placement, num_stages, num_ranks)
        if all(0 <= s < num_stages and ranks[s] == r for s, r in found.items()):
            return placement
    looped = stage_ranks("looped", num_stages, num_ranks)
    s, r = next((s, r) for s, r in sorted(found.items()) if not 0 <= s < num_stages or looped[s] != r)
    rule = (
        f"stage {s} is on rank {r}: every stage must be on the rank a looped (s % p) or a V-shape "
        f"placement gives it, with p={num_ranks} ranks and {num_stages} stages"
    )
    raise invalid("placement", dict(sorted(found.items())), rule)
