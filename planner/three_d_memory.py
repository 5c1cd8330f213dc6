"""A 3D configuration's memory per pipeline rank, read by
:func:`pipesim.planner.three_d.prepare_config` before anything else (most configurations of a
large model do not fit): the rank's TP-sharded parameters with the tied matrices' copies it
holds, times the bytes per parameter byte of its sharding
(:func:`~pipesim.profiles.costmodels.sharding.sharded_memory_multiplier`), plus its
activations at their peak as the simulator allocates them
(:func:`~pipesim.planner.memory_estimate.activation_peak_bytes`: stashes, what pending ``W``
passes read, the backward's working set). ZeRO-2/3's gathered units and unreduced gradients
come on top where their per-unit collectives are costed
(:meth:`~pipesim.planner.zero_ops.ZeroOps.held_bytes`)."""

from __future__ import annotations

from typing import Any

from pipesim.planner.memory_estimate import activation_peak_bytes
from pipesim.planner.three_d_costs import ThreeDCosts
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.costmodels.tied_embeddings import held_copies

__all__ = ["rank_memory"]


def rank_memory(
    model: ThreeDCosts, memo: dict[tuple[object, ...], Any], chunks: list[tuple[int, int]],
    stages_of: list[list[int]], schedule: str, m: int, mbs: int, t: int, sp: bool, rc: Recompute, c: int,
    multiplier: float, limit: float,
) -> tuple[list[float], list[float]] | None:
    """Per rank its parameter bytes and its peak memory, bytes (module docstring), for the
    chunks' layer ranges ``chunks`` with rank ``r``'s stages ``stages_of[r]`` under
    ``schedule``, ``m`` micro-batches of ``mbs`` samples per replica, the degrees ``t`` and
    ``c``, sequence parallelism ``sp``, recomputation ``rc`` and ``multiplier`` static bytes per
    parameter byte; ``None`` as soon as a rank's peak exceeds ``limit`` bytes. What
    configurations differing in sharding share is kept in ``memo``."""
    p = len(stages_of)
    v = len(chunks) // p
    chunks_key = tuple(chunks)
    rank_params = memo.get(("params", chunks_key, p, v, schedule, t))
    if rank_params is None:  # per rank its parameter bytes
        rank_params = memo[("params", chunks_key, p, v, schedule, t)] = [
            sum(model.params(*chunks[k], t) for k in ks) for ks in stages_of]
    # per rank the bytes of the tied matrices' copies it holds (the head's stage: the embedding's)
    copies = memo.get(("copies", chunks_key, p, v, schedule, t))
    if copies is None:
        copies = memo[("copies", chunks_key, p, v, schedule, t)] = [
            sum(held_copies(model.profile, [chunks[k] for k in ks])) / t for ks in stages_of]
    act_key = ("acts", chunks_key, p, v, schedule, m, mbs, t, sp, rc, c)
    act_peaks = memo.get(act_key)
    computed: list[float] = []
    peaks: list[float] = []
    for r in range(p):
        if act_peaks is not None:
            act = act_peaks[r]
        else:
            acts = [model.activations(*chunks[k], mbs, t, sp, rc, c) for k in stages_of[r]]
            act = activation_peak_bytes(schedule, r, p, m, acts, chunks=v)
            computed.append(act)
        peak = (rank_params[r] + copies[r]) * multiplier + act
        if peak > limit:
            return None
        peaks.append(peak)
    if act_peaks is None:  # every rank's computed
        memo[act_key] = computed
    return rank_params, peaks
