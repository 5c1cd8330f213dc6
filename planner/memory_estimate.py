"""The planner's peak memory per device: ``static + the in-flight micro-batches' activations``
with the one memory model (:mod:`pipesim.profiles.costmodels.memory`). Part of
:class:`~pipesim.planner.estimate.CostModel`'s estimate, and the 3D estimate's activations
(:func:`activation_peak_bytes`).

A rank's activations at its peak (:func:`activation_peak_bytes`):

* one stage per rank under the 1F1B family, GPipe, ZB-H1, ZB-H2 and PipeDream's orders: the
  closed forms of :func:`~pipesim.profiles.costmodels.memory.in_flight_microbatches` and, for the
  zero-bubble pair, :func:`~pipesim.profiles.costmodels.memory.held_until_w` /
  :func:`~pipesim.profiles.costmodels.memory.held_until_w_fewest`;
* every other order (``v > 1`` chunks, the V shapes, the bidirectional ones, ZB-auto's greedy
  order) walked as the simulator's lowering allocates: ``F`` (and an overlapped pair's ``FB``)
  the stash at its start; ``B`` and ``I`` the working set at their start, then ``B`` frees both,
  ``I`` all but what ``W`` reads, ``W`` that. The walk depends on the order only, so it is
  done once per order and kept as the few count vectors that can be the peak (how many
  stashes, held ``W`` inputs and which working set, per chunk of the rank); a plan's peak is then
  the largest of their dot products with its chunks' bytes. Orders of more micro-batches than
  the time estimate evaluates directly are walked at the same count it evaluates (same count
  modulo the order's period, :mod:`pipesim.planner.schedule_time`): exact for every fixed order
  here (their in-flight state repeats with the period; checked to ``13 p`` micro-batches in
  ``tests/planner/test_walked_memory_estimate.py``) except looped BFS, which holds every
  forward and is walked at its own ``m``. ZB-auto's greedy order may shift its pending ``W`` passes
  with ``m`` past that count (unequal costs, ``p >= 6``): there the peak is that of the order
  the time estimate evaluates.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pipesim.errors import invalid
from pipesim.plan import Plan
from pipesim.planner.cost_tables import largest_microbatch
from pipesim.planner.iteration_time import CLOSED_FORM_SCHEDULES, rank_of
from pipesim.planner.schedule_time import EXACT_MICROBATCHES_PER_RANK, schedule_order
from pipesim.profiles.costmodels.memory import (
    StageActivations,
    held_until_w,
    held_until_w_fewest,
    in_flight_microbatches,
    weight_versions,
)
from pipesim.profiles.costmodels.tied_embeddings import held_copies
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules.action import Op
from pipesim.schedules.registry import make_schedule, schedule_info

__all__ = ["MemoryCosts", "activation_peak_bytes", "device_peak_bytes"]

_CLOSED_FORMS: frozenset[str] = frozenset(
    {"gpipe", "dapple", "1f1b", "zb-h1", "zb-h2", "pipedream-async", "pipedream-2bw"}
)
"""One-chunk schedules whose peak the in-flight counts give exactly (not walked)."""



class MemoryCosts(Protocol):
    """What the memory estimate asks of the cost model
    (:class:`~pipesim.planner.estimate.CostModel` answers it)."""

    @property
    def cluster(self) -> Cluster: ...

    @property
    def profile(self) -> ModelProfile: ...

    def parameter_bytes(self, first: int, last: int) -> float: ...

    def static_bytes(self, first: int, last: int) -> float: ...

    def copy_static_bytes(self, nbytes: float) -> float: ...

    def activations(self, first: int, last: int, samples: float) -> StageActivations: ...


def device_peak_bytes(cost: MemoryCosts, plan: Plan) -> dict[int, float]:
    """Peak bytes per device of ``plan`` under ``cost``'s model: static (with PipeDream's extra
    weight versions and the copies of tied matrices,
    :func:`~pipesim.profiles.costmodels.tied_embeddings.held_copies`) + the rank's activations
    at their peak (:func:`activation_peak_bytes`).

    Raises:
        InputError: a plan that does not fit the model or cluster.
    """
    placement = plan.placement(cost.cluster.num_devices)
    samples = largest_microbatch(plan)
    p, v, m = plan.num_ranks, plan.chunks, plan.num_microbatches
    where = rank_of(plan)
    options = dict(plan.schedule_options)
    peak: dict[int, float] = {}
    for r in range(p):
        stages = [st for st, rank in zip(plan.stages, where, strict=True) if rank == r]
        share = -(-samples // stages[0].replicas)
        acts = [cost.activations(st.first_layer, st.last_layer, share) for st in stages]
        static = sum(cost.static_bytes(st.first_layer, st.last_layer) for st in stages)
        copies = held_copies(cost.profile, [(st.first_layer, st.last_layer) for st in stages])
        static += sum(cost.copy_static_bytes(c / st.tensor_parallel)
                      for c, st in zip(copies, stages, strict=True) if c)
        if v == 1:  # PipeDream's weight versions beyond the first (1 for flushed schedules)
            extra = weight_versions(plan.schedule, r, p, m) - 1
            static += extra * cost.parameter_bytes(stages[0].first_layer, stages[0].last_layer)
        top = activation_peak_bytes(plan.schedule, r, p, m, acts, chunks=v, options=options)
        for d in placement[r]:
            peak[d] = static + top
    return peak


def activation_peak_bytes(
    schedule: str,
    rank: int,
    num_ranks: int,
    num_microbatches: int,
    acts: Sequence[StageActivations],
    *,
    chunks: int = 1,
    options: Mapping[str, Any] | None = None,
) -> float:
    """Activation bytes rank ``rank`` (0-based, of ``p``) holds at its peak under ``schedule`` with
    ``m`` micro-batches: stashes, what pending ``W`` passes hold and a backward's working set, as the
    simulator's lowering allocates them (module docstring); ``acts`` are the rank's stages'
    :class:`~pipesim.profiles.costmodels.memory.StageActivations`, in stage order; ``options``
    the schedule's (``warmup``, ``memory_limit``, ZB-auto's costs).

    Raises:
        InputError: an unknown schedule, options or a count its generator refuses, a rank
            outside ``0..p-1``, or ``acts`` not one per stage of the rank.
    """
    opts = dict(options) if options else {}
    p, m = num_ranks, num_microbatches
    if not 0 <= rank < p:
        raise invalid("rank", rank, f"must be in 0..{p - 1}")
    if chunks == 1 and schedule in _CLOSED_FORMS:
        if len(acts) != 1:
            raise invalid("acts", len(acts), f"{schedule} runs one stage per rank: one StageActivations")
        (a,) = acts
        warmup = opts.get("warmup", "default")
        k = in_flight_microbatches(schedule, rank, p, m, warmup=warmup)
        stash = k * a.stash_bytes
        if schedule in ("zb-h1", "zb-h2"):  # between I and W a micro-batch holds what W reads
            delta = a.held_bytes - a.stash_bytes
            if delta >= 0:
                stash += held_until_w(schedule, rank, k) * delta
            else:
                stash += held_until_w_fewest(schedule, rank, p, m) * delta
        return stash + a.work_bytes
    key = tuple(sorted((k, tuple(x) if isinstance(x, list) else x) for k, x in opts.items())) if opts else ()
    walked = _walked_microbatches(schedule, p, m, chunks)
    stages, rows = _walked_terms(schedule, p, walked, chunks, key)[rank]
    if len(acts) != stages:
        rule = f"rank {rank} of {schedule} runs {stages} stages: one StageActivations each"
        raise invalid("acts", len(acts), rule)
    values = np.array(
        [a.stash_bytes for a in acts] + [a.held_bytes for a in acts] + [a.work_bytes for a in acts]
    )
    return float((rows @ values).max()) if len(rows) else 0.0


@functools.lru_cache(maxsize=4096)
def _walked_microbatches(schedule: str, p: int, m: int, chunks: int) -> int:
    """The micro-batch count whose order is walked for ``m``: ``m`` itself up to the count the
    time estimate evaluates directly, else the count it evaluates with the same residue modulo
    the period (:func:`~pipesim.planner.schedule_time.order_time_s`); looped BFS always ``m``."""
    if schedule == "looped-bfs":
        return m
    looped_rounds = schedule_info(schedule).chunks == "free" and chunks > 1
    period = p if looped_rounds else math.lcm(p, 4)
    bound = max(EXACT_MICROBATCHES_PER_RANK * p, 3 * period)
    if m <= bound or (looped_rounds and m % p):
        return m
    return bound - (bound - m) % period


@functools.lru_cache(maxsize=1024)
def _walked_terms(
    schedule: str, p: int, m: int, chunks: int, options: tuple[tuple[str, Any], ...]
) -> tuple[tuple[int, npt.NDArray[np.float64]], ...]:
    """Per rank, its number of stages ``v`` and the count vectors of its order's walk that no
    other vector dominates (the only candidates for the peak whatever the bytes, all ``>= 0``),
    as the rows of a matrix over the rank's ``3 v`` values: its chunks' stash bytes, then their
    held bytes, then their working sets (a row has at most one working set)."""
    if schedule in CLOSED_FORM_SCHEDULES:  # no time estimate evaluates it: not kept
        free = schedule_info(schedule).chunks == "free"
        order = make_schedule(schedule, num_ranks=p, num_microbatches=m, chunks=chunks if free else None,
                              **dict(options))
    else:  # the order the time estimate evaluates, from its cache
        order = schedule_order(schedule, p, m, chunks, options)
    out = []
    for rank_actions in order.ranks:
        actions = [a for a in rank_actions if a.op in (Op.F, Op.FB, Op.B, Op.I, Op.W)]
        stages = sorted({a.stage for a in actions if a.op in (Op.F, Op.FB)})
        local = {s: i for i, s in enumerate(stages)}
        v = len(stages)
        stash, held = [0] * v, [0] * v
        seen: set[tuple[tuple[int, ...], tuple[int, ...], int]] = set()
        for n, action in enumerate(actions):
            op = action.op
            if op is Op.F or op is Op.FB:
                c = local[action.stage]
                stash[c] += 1
                # a candidate only where memory falls next: another F holds more, and a B or an
                # I holds the same and its working set
                if n + 1 == len(actions) or actions[n + 1].op is Op.W:
                    seen.add((tuple(stash), tuple(held), -1))
            elif op is Op.B or op is Op.I:
                c = local[action.stage]
                seen.add((tuple(stash), tuple(held), c))
                stash[c] -= 1
                if op is Op.I:
                    held[c] += 1
            elif op is Op.W:
                held[local[action.stage]] -= 1
        kept = _undominated(seen)
        rows = np.zeros((len(kept), 3 * v))
        for row, (st, hd, work) in zip(rows, kept, strict=True):
            row[: 2 * v] = st + hd
            if work >= 0:
                row[2 * v + work] = 1.0
        rows.flags.writeable = False  # cached: shared by every call
        out.append((v, rows))
    return tuple(out)


def _undominated(
    seen: set[tuple[tuple[int, ...], tuple[int, ...], int]],
) -> list[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """The vectors of ``seen`` that no other one covers (every count at least as large, and the
    same working set or this one none), in a fixed order."""
    ordered = sorted(seen, key=lambda x: (-sum(x[0]) - sum(x[1]) - (x[2] >= 0), x))
    kept: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []
    counts: list[tuple[tuple[int, ...], int]] = []  # the kept ones' stash and held counts, work
    for x in ordered:
        mine = x[0] + x[1]
        covered = any(
            (x[2] < 0 or x[2] == work) and all(map(operator.le, mine, theirs)) for theirs, work in counts
        )
        if not covered:
            kept.append(x)
            counts.append((mine, x[2]))
    return kept
