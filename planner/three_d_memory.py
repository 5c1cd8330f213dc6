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
    model: ThreeDCosts, memo: dict[tuple[object, ...], Any], name: tuple[int, str],
    chunks: list[tuple[int, int]], stages_of: list[list[int]], schedule: str, m: int, mbs: int, t: int,
    sp: bool, rc: Recompute, c: int, multiplier: float, limit: float,
) -> tuple[list[float], list[float]] | None:
    """Per rank its parameter bytes and its peak memory, bytes (module docstring), for the
    chunks' layer ranges ``chunks`` with rank ``r``'s stages ``stages_of[r]`` under
    ``schedule``, ``m`` micro-batches of ``mbs`` samples per replica, the degrees ``t`` and
    ``c``, sequence parallelism ``sp``, recomputation ``rc`` and ``multiplier`` static bytes per
    parameter byte; ``None`` as soon as a rank's peak exceeds ``limit`` bytes. What
    configurations differing in sharding share is kept in ``memo``, under ``name``: the chunks'
    number and the schedule's placement (which ranks hold which chunks), as the caller keys
    them (:func:`~pipesim.planner.three_d.prepare_config`)."""
    p = len(stages_of)
    v = len(chunks) // p
    params_key = ("params", *name, p, v, t)
    rank_params = memo.get(params_key)
    if rank_params is None:  # per rank its parameter bytes
        rank_params = memo[params_key] = [sum(model.params(*chunks[k], t) for k in ks) for ks in stages_of]
    # per rank the bytes of the tied matrices' copies it holds (the head's stage: the embedding's)
    copies_key = ("copies", *name, p, v, t)
    copies = memo.get(copies_key)
    if copies is None:
        copies = memo[copies_key] = [
            sum(held_copies(model.profile, [chunks[k] for k in ks])) / t for ks in stages_of]
    act_key = ("acts", *name, schedule, p, v, m, mbs, t, sp, rc, c)
    act_peaks: list[float] | None = memo.get(act_key)
    if act_peaks is None:  # filled rank by rank as far as the configurations asked
        act_peaks = memo[act_key] = []
    peaks: list[float] = []
    for r in range(p):
        if r == len(act_peaks):
            acts = [model.activations(*chunks[k], mbs, t, sp, rc, c) for k in stages_of[r]]
            act_peaks.append(activation_peak_bytes(schedule, r, p, m, acts, chunks=v))
        peak = (rank_params[r] + copies[r]) * multiplier + act_peaks[r]
        if peak > limit:
            return None
        peaks.append(peak)
    return rank_params, peaks
