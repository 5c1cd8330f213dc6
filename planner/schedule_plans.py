"""A fair plan for every schedule: the split, chunks and micro-batch count each schedule needs.

A plan found for one schedule (DAPPLE's split, one stage per rank) is not a fair plan for
another: interleaved and V-shape schedules run ``v`` chunks per rank and are as fast as their
slowest *device* (the sum of its chunks), looped schedules with ``v > 1`` need a micro-batch
count their rounds divide, and each schedule holds its own number of micro-batches in flight.
:func:`schedule_plans` re-plans a set of rank shapes (replicas and devices per pipeline rank, as
the DAPPLE search finds them) for one schedule:

* **split**: the model is cut into ``v p`` contiguous stages so that the largest per-device load
  ``max_r sum_{s on r} (F_s + B_s)`` (each stage timed at its rank's share of a micro-batch) is
  small: the exact min-max split of the stages (:func:`pipesim.plan.balanced_split`, the one a
  one-chunk plan uses), then a local search moving one cut by one layer at a time while it lowers
  ``(largest device load, largest stage)`` (:func:`device_balanced_split`). The placement is the
  schedule's (``looped``: stage ``s`` on rank ``s % p``; ``v``: the V of
  :mod:`pipesim.schedules.placement`).
* **micro-batches**: every count the schedule's generator accepts
  (:func:`~pipesim.planner.schedule_time.valid_microbatches`) that divides the global batch and
  splits over the replicas, or the ones nearest a given count (``near``).
* **memory**: a plan is kept only when every device fits (the estimate's peak, with the
  schedule's in-flight counts of :func:`~pipesim.profiles.costmodels.memory.in_flight_microbatches`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

from pipesim.plan import Plan, StagePlan, balanced_split
from pipesim.planner.baselines import candidate_microbatch_counts
from pipesim.planner.cost_tables import largest_microbatch
from pipesim.planner.estimate import CostModel
from pipesim.planner.schedule_time import evaluated_as_is, valid_microbatches
from pipesim.profiles.costmodels.grad_dtype import grad_bytes_factor
from pipesim.schedules.pairs import pair_time
from pipesim.schedules.placement import chain_length, stage_ranks
from pipesim.schedules.registry import lookup, options_for, placement_of, schedule_info

__all__ = [
    "default_chunks",
    "device_balanced_split",
    "iteration_floor_s",
    "schedule_plans",
    "schedule_variant",
    "suitable_counts",
    "weighed_plans",
]

WHOLE_BACKWARD: frozenset[str] = frozenset(
    {"gpipe", "dapple", "1f1b", "interleaved", "looped-bfs", "chimera"}
)
"""Planned schedules whose orders run each backward whole (``B``: no separate weight gradient,
so a micro-batch's input gradient at a stage is its whole backward); checked against the
generated orders in ``tests/planner/test_schedule_floor.py``."""

_FLOOR_SLACK = 1e-9
"""Relative margin on :func:`iteration_floor_s` before a count is skipped (the bound and the
estimate add the same terms in different orders)."""

_MAX_MOVES = 10_000
"""Most single-layer cut moves of the local search (a bound; it stops far earlier in practice)."""


def default_chunks(schedule: str) -> int:
    """Stages per rank a schedule runs by default (2 for interleaved, looped BFS, interleaved ZB and
    the V shapes; 1 otherwise)."""
    return schedule_info(schedule).default_chunks if schedule != "memory-aware" else 1


def device_balanced_split(layer_times_s: Sequence[Sequence[float]], ranks: Sequence[int]) -> list[int]:
    """Stage sizes (layers) of a contiguous split into ``len(ranks)`` stages, balanced per device.

    Args:
        layer_times_s: ``layer_times_s[r][l]``: time of layer ``l`` (forward + backward) on rank
            ``r`` (at its share of a micro-batch), seconds.
        ranks: ``ranks[s]``: the rank of stage ``s`` (the schedule's placement).

    Returns:
        The number of layers of each stage: the min-max stage split (by rank 0's layer times),
        improved by moving single cuts while ``(largest device load, largest stage time)`` drops.

    Raises:
        Infeasible: more stages than layers.
    """
    num = len(ranks)
    n = len(layer_times_s[0])
    prefix = []
    for row in layer_times_s:
        acc = [0.0]
        for t in row:
            acc.append(acc[-1] + t)
        prefix.append(acc)
    sizes = balanced_split(layer_times_s[0], num)
    cuts = [0]
    for size in sizes:
        cuts.append(cuts[-1] + size)

    def score(c: Sequence[int]) -> tuple[float, float]:
        load: dict[int, float] = {}
        worst = 0.0
        for s in range(num):
            r = ranks[s]
            t = prefix[r][c[s + 1]] - prefix[r][c[s]]
            worst = max(worst, t)
            load[r] = load.get(r, 0.0) + t
        return max(load.values()), worst

    best = score(cuts)
    for _ in range(_MAX_MOVES):
        improved = False
        for b in range(1, num):
            for step in (-1, 1):
                moved = cuts[b] + step
                if not cuts[b - 1] < moved < cuts[b + 1]:
                    continue
                trial = [*cuts[:b], moved, *cuts[b + 1 :]]
                value = score(trial)
                if value < best:
                    best, cuts, improved = value, trial, True
        if not improved:
            break
    assert cuts[-1] == n
    return [cuts[s + 1] - cuts[s] for s in range(num)]


def suitable_counts(
    schedule: str, num_ranks: int, chunks: int, global_batch_size: int, replicas: int
) -> list[int]:
    """Micro-batch counts a plan of ``schedule`` may take: divisors of the global batch whose
    micro-batch splits over ``replicas`` and that the schedule's generator accepts, increasing."""
    return [
        m
        for m in candidate_microbatch_counts(global_batch_size)
        if global_batch_size // m >= replicas and valid_microbatches(schedule, num_ranks, m, chunks)
    ]


def _nearest(counts: Sequence[int], m: int) -> list[int]:
    """The counts nearest ``m``: ``m`` itself when present, else the nearest below and above."""
    if m in counts:
        return [m]
    below = [c for c in counts if c < m]
    above = [c for c in counts if c > m]
    return ([below[-1]] if below else []) + ([above[0]] if above else [])


def schedule_variant(
    cost: CostModel,
    base: Plan,
    schedule: str,
    *,
    chunks: int | None = None,
    num_microbatches: int | None = None,
    placement: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Plan:
    """``base``'s ranks (replicas, devices, tensor parallelism kept) re-cut for ``schedule``:
    ``chunks`` stages per rank (default :func:`default_chunks`) balanced per device
    (:func:`device_balanced_split`) and placed as the schedule places them, with
    ``num_microbatches`` (default ``base``'s). No estimate. ``placement`` overrides the
    schedule's (an explicit order, ``custom``, carries its own). The plan's schedule options are
    ``base``'s when it runs the same schedule (none otherwise), updated with the part of
    ``options`` the schedule takes (:func:`~pipesim.schedules.registry.options_for`: e.g.
    ``fb_overlap`` reaches ``dualpipe`` and ``dualpipev`` only).

    ``dualpipe``, ``chimera`` and a bidirectional order (``custom`` with ``placement="dual"``,
    named ``file-dual`` in the plan): ``p`` model stages split by time, stage ``p + j`` a copy
    of stage ``j`` on rank ``p - 1 - j``.

    Raises:
        Infeasible: the model has fewer layers than ``ranks x chunks`` (``ranks`` for ``dualpipe``).
        UnknownNameError: an unknown schedule.
    """
    name = lookup(schedule).value
    v = chunks if chunks is not None else default_chunks(name)
    ranks = base.stages[: base.num_ranks]
    m = num_microbatches if num_microbatches is not None else base.num_microbatches
    samples = base.global_batch_size // m if base.microbatch_sizes is None else max(base.microbatch_sizes)
    p = len(ranks)
    placed = placement or placement_of(name) or "looped"
    if name == "custom" and placed == "dual":  # a bidirectional order file: DualPipe's plan shape
        name = "file-dual"
    where = stage_ranks(placed, p * v, p)
    dual = placed == "dual"  # dualpipe: p model stages, each run twice (stage p + j copies j)
    if v == 1 and base.chunks == 1:  # one stage per rank: keep the base split (the search optimised it)
        sizes = [st.last_layer - st.first_layer + 1 for st in base.stages]
    else:
        shares = tuple(-(-samples // stage.replicas) for stage in ranks)
        sizes = _split(cost, shares, where, dual or v == 1)
    stages_list: list[StagePlan] = []
    first = 0
    for s, size in enumerate(sizes):
        stages_list.append(replace(ranks[where[s]], first_layer=first, last_layer=first + size - 1))
        first += size
    if dual:
        for s in range(p, 2 * p):
            copy = stages_list[s - p]
            stages_list.append(
                replace(ranks[where[s]], first_layer=copy.first_layer, last_layer=copy.last_layer)
            )
    stages = tuple(stages_list)
    kept = dict(base.schedule_options) if name == base.schedule else {}
    if options:
        kept.update(options_for(name, options))
    return replace(
        base,
        stages=stages,
        schedule=lookup(name),
        chunks=v,
        num_microbatches=m,
        microbatch_sizes=base.microbatch_sizes if m == base.num_microbatches else None,
        schedule_options=kept,
        estimate=None,
    )


def _split(cost: CostModel, shares: tuple[int, ...], where: Sequence[int], by_time: bool) -> list[int]:
    """Stage sizes for ranks whose replicas take ``shares[r]`` samples of a micro-batch each:
    ``by_time``, the min-max split into ``len(shares)`` stages by rank 0's layer times
    (:func:`~pipesim.plan.balanced_split`); otherwise :func:`device_balanced_split` over the
    placement ``where``. Kept in ``cost.memo``: schedules of one placement (interleaved, looped
    BFS and interleaved ZB; the V shapes; DualPipe and Chimera) and successive plans share them."""
    key = ("split", shares[:1] if by_time else shares, len(shares) if by_time else tuple(where))
    found = cost.memo.get(key)
    if found is None:
        rows = []
        for share in shares[:1] if by_time else shares:
            table = cost.share_table(share)
            rows.append(
                [
                    table.fwd[i + 1] - table.fwd[i] + table.bwd[i + 1] - table.bwd[i]
                    for i in range(cost.profile.num_layers)
                ]
            )
        sizes = balanced_split(rows[0], len(shares)) if by_time else device_balanced_split(rows, where)
        found = cost.memo[key] = tuple(sizes)
    return list(cast(tuple[int, ...], found))


def schedule_plans(
    cost: CostModel,
    shapes: Sequence[Plan],
    schedule: str,
    memory_limit_bytes: float,
    *,
    chunks: int | None = None,
    counts: str = "all",
    allowed: Sequence[int] | None = None,
    options: Mapping[str, Any] | None = None,
) -> list[Plan]:
    """Plans of ``schedule`` on each rank shape of ``shapes`` that fit memory, fastest first.

    Each shape gives its best plan over the micro-batch counts (``counts="all"``: every suitable
    count, :func:`suitable_counts`; ``"near"``: the shape's own count, or the suitable counts
    nearest it; only counts in ``allowed`` when given), each with its estimate. ``options``:
    schedule options, given to the schedule when it takes them (:func:`schedule_variant`).
    Counts are estimated best first by :func:`iteration_floor_s`; a count whose floor exceeds
    the shape's best estimate is not estimated (it cannot win: the result is the exhaustive one).

    Raises:
        UnknownNameError: an unknown schedule.
    """
    return weighed_plans(
        cost, shapes, (schedule,), memory_limit_bytes, chunks=chunks, counts=counts, allowed=allowed,
        options=options,
    )[0]


def weighed_plans(
    cost: CostModel,
    shapes: Sequence[Plan],
    schedules: Sequence[str],
    memory_limit_bytes: float,
    *,
    chunks: int | None = None,
    counts: str = "all",
    allowed: Sequence[int] | None = None,
    options: Mapping[str, Any] | None = None,
    keep: int | None = None,
) -> list[list[Plan]]:
    """:func:`schedule_plans` of each of ``schedules``, one list each, weighed together.

    Every (schedule, shape, count) is given its :func:`iteration_floor_s` and estimated in
    increasing floor order; a count is skipped when its floor exceeds its shape's best estimate
    so far (it cannot be the shape's pick) and, with ``keep``, the weighing stops once a floor
    exceeds the ``keep``-th fastest of the distinct plans found so far (the estimated
    ``shapes`` included: ``plan()``'s shortlist). With ``keep`` the plans at least as fast as
    the ``keep``-th distinct plan of all the lists and of ``shapes`` are exactly those of
    :func:`schedule_plans` (a slower plan may be missing, or be its shape's best among the
    counts estimated); without it every list is exactly :func:`schedule_plans`'.

    Raises:
        UnknownNameError: an unknown schedule.
    """
    groups: list[tuple[int, tuple[object, ...]]] = []  # (schedule index, distinctness key)
    # a heap of (floor, order, group, count, base, variant): a count first enters with the
    # coarse floor of its shares (no split needed), then with its variant's floor
    heap: list[tuple[float, int, int, int, Plan, Plan | None]] = []
    names: list[tuple[str, int]] = []
    for k, schedule in enumerate(schedules):
        name = lookup(schedule).value
        v = chunks if chunks is not None else default_chunks(name)
        names.append((name, v))
        dual = placement_of(name) == "dual"
        seen: set[tuple[object, ...]] = set()
        for base in shapes:
            p = base.num_ranks
            model_stages = p if dual else p * v
            if model_stages > cost.profile.num_layers:
                continue
            widest = max(st.replicas for st in base.stages)
            suitable = suitable_counts(name, p, v, base.global_batch_size, widest)
            if allowed is not None:
                suitable = [m for m in suitable if m in allowed]
            tried = suitable if counts == "all" else _nearest(suitable, base.num_microbatches)
            shape = tuple(
                (st.replicas, st.devices, st.tensor_parallel, st.last_layer if v == 1 else 0)
                for st in base.stages[:p]
            )
            group = len(groups)
            kept = dict(base.schedule_options) if name == base.schedule else {}
            overlap = {**kept, **options_for(name, options or {})}.get("fb_overlap", 0)
            for m in tried:
                key = (shape, m)
                if key in seen:
                    continue
                seen.add(key)
                if len(groups) == group:
                    where = tuple(frozenset(d) for d in base.placement(cost.cluster.num_devices))
                    groups.append((k, (name, v, 2 * p if dual else p * v, where)))
                floor_s = _coarse_floor_s(cost, base, m, dual, overlap)
                heap.append((floor_s, len(heap), group, m, base, None))
    heapq.heapify(heap)
    order = len(heap)
    best: list[Plan | None] = [None] * len(groups)
    fastest: dict[tuple[object, ...], float] = {}  # per distinct plan key, its best time
    if keep is not None:
        for base in shapes:
            if base.estimate is not None:
                distinct = _distinct(cost, base)
                fastest[distinct] = min(fastest.get(distinct, math.inf), base.estimate.iteration_time_s)
    cutoff = _cutoff(fastest, keep)
    while heap:
        floor_s, _, group, m, base, variant = heapq.heappop(heap)
        margin = floor_s * (1 - _FLOOR_SLACK)
        if margin > cutoff:
            break
        held = best[group]
        if held is not None and margin > _key(held)[0]:
            continue
        if variant is None:
            name, v = names[groups[group][0]]
            variant = schedule_variant(cost, base, name, chunks=v, num_microbatches=m, options=options)
            heapq.heappush(heap, (iteration_floor_s(cost, variant), order, group, m, base, variant))
            order += 1
            continue
        est = cost.estimate(variant)
        if est.peak_memory_bytes > memory_limit_bytes:
            continue
        found = replace(variant, estimate=est)
        if held is None or _key(found) < _key(held):
            best[group] = found
            if keep is not None:
                distinct = groups[group][1]
                if est.iteration_time_s < fastest.get(distinct, math.inf):
                    fastest[distinct] = est.iteration_time_s
                    cutoff = _cutoff(fastest, keep)
    out: list[list[Plan]] = [[] for _ in schedules]
    for (k, _), plan in zip(groups, best, strict=True):
        if plan is not None:
            out[k].append(plan)
    for plans in out:
        plans.sort(key=_key)
    return out


def _distinct(cost: CostModel, plan: Plan) -> tuple[object, ...]:
    """A key equal for two plans that ``plan_identity`` may call one plan (schedule, chunks,
    stages and each rank's set of devices: coarser than the identity, so distinct keys are
    distinct plans)."""
    placement = plan.placement(cost.cluster.num_devices)
    return (plan.schedule.value, plan.chunks, plan.num_stages, tuple(frozenset(d) for d in placement))


def _coarse_floor_s(cost: CostModel, base: Plan, m: int, dual: bool, overlap: float) -> float:
    """A lower bound on :func:`iteration_floor_s` of ``base``'s ranks at ``m`` micro-batches,
    whatever the split, seconds: every layer at the cheapest of the ranks' shares, the busiest
    of ``p`` devices doing at least the average work (times ``1 - fb_overlap / 2``, the most an
    overlapped pair hides), and without overlap one micro-batch's path (forwards and input
    gradients) through every layer."""
    m_base = base.num_microbatches
    samples = max(base.microbatch_sizes) if base.microbatch_sizes is not None and m == m_base else (
        base.global_batch_size // m
    )
    p = base.num_ranks
    shares = tuple(sorted({-(-samples // st.replicas) for st in base.stages[:p]}))
    key = ("coarse-floor", shares)
    sums = cast(tuple[float, float] | None, cost.memo.get(key))
    if sums is None:
        tables = [cost.share_table(share) for share in shares]
        work = path = 0.0
        for i in range(cost.profile.num_layers):
            t_min = i_min = math.inf
            for t in tables:
                f = t.fwd[i + 1] - t.fwd[i]
                b = t.bwd[i + 1] - t.bwd[i]
                w = min(t.wgrad[i + 1] - t.wgrad[i], b)
                t_min = min(t_min, f + b)
                i_min = min(i_min, f + b - w)
            work += t_min
            path += i_min
        sums = cost.memo[key] = (work, path)
    work, path = sums
    runs = m / 2 if dual else m
    average = runs * work / p
    if overlap:
        return average * (1 - float(overlap) / 2)
    return max(average, path)


def _cutoff(fastest: Mapping[tuple[object, ...], float], keep: int | None) -> float:
    """The ``keep``-th smallest time of ``fastest`` (infinite without ``keep`` or with fewer)."""
    if keep is None or len(fastest) < keep:
        return math.inf
    return heapq.nsmallest(keep, fastest.values())[-1]


def iteration_floor_s(cost: CostModel, plan: Plan) -> float:
    """A lower bound on ``cost.estimate(plan).iteration_time_s`` from the stages' compute and
    gradient all-reduces alone, seconds.

    Every estimate is at least its schedule's makespan over the stage costs (the closed forms
    and the evaluated orders of :mod:`pipesim.planner.iteration_time` take a maximum with it),
    and that makespan, with transfers of any length >= 0, is at least

    * for each rank ``r``, its work ``n_r P(F_r, B_r)``: ``F_r``, ``B_r`` the forward and full
      backward of its stages per micro-batch, ``P`` the overlapped pair's time
      (:func:`~pipesim.schedules.pairs.pair_time`, ``F + B`` without ``fb_overlap``; pairs
      hide at most ``fb_overlap min`` of the summed sides), ``n_r = m`` (``m / 2`` for the
      ``dual`` placement, where each micro-batch runs one of the two chains), plus, without
      overlap, the forwards of micro-batch 0 in its chain before the rank's first stage (the
      rank cannot start earlier);
    * without overlap, one micro-batch's path: the forwards and input gradients ``I`` (backward
      less weight gradient; the whole backward for the orders of :data:`WHOLE_BACKWARD`) of
      every stage of a chain;
    * without overlap and outside the ``dual`` placement, for each rank: a micro-batch's last
      action on it before its weight gradients is its input gradient at the rank's first stage
      ``s_r`` (forwards go up the chain and input gradients down), so the rank's last such
      action ends no sooner than its head plus ``m (F_r + I_r)``, and that micro-batch's input
      gradients at the stages below ``s_r`` follow it.

    A rank's all-reduces and optimizer step start after its last action: outside the ``dual``
    placement, where that action's time is the closed form's or the order's own (GPipe and the
    1F1B family; an order evaluated as is, :func:`~pipesim.planner.schedule_time.evaluated_as_is`),
    the rank's bound above plus its all-reduces alone and its optimizer step is one too.

    The per-stage costs are :meth:`~pipesim.planner.estimate.CostModel.stage_costs`' compute,
    all-reduce and optimizer terms (the same tables and curves), without transfers or order
    evaluation. :func:`schedule_plans` skips the micro-batch counts whose bound exceeds the
    best estimate (``tests/planner/test_schedule_floor.py`` holds it under the estimate).
    """
    samples = largest_microbatch(plan)
    placed = placement_of(plan.schedule) or "looped"
    num, p, m = plan.num_stages, plan.num_ranks, plan.num_microbatches
    where = stage_ranks(placed, num, p)
    overlap = dict(plan.schedule_options).get("fb_overlap", 0)
    chain = chain_length(placed, num)
    runs = m / 2 if placed == "dual" else m
    closed = plan.chunks == 1 and plan.schedule in ("dapple", "1f1b", "gpipe")
    reduce = placed != "dual" and (closed or evaluated_as_is(plan.schedule, p, m, plan.chunks))
    placement = plan.placement(cost.cluster.num_devices) if reduce else ()
    grad = cost.grad_bytes
    if plan.grad_reduce_dtype is not None:
        grad = grad_bytes_factor(cost.profile.dtype, plan.grad_reduce_dtype)
    whole = plan.schedule in WHOLE_BACKWARD
    fsum = [0.0] * p
    bsum = [0.0] * p
    isum = [0.0] * p
    tail = [0.0] * p
    head = [math.inf] * p
    below = [math.inf] * p  # input gradients of a micro-batch below the rank's first stage
    ahead = 0.0  # forwards of a micro-batch before stage s in its chain
    path = 0.0  # the same with the input gradients of those stages
    grads = 0.0
    floor = 0.0
    for s, stage in enumerate(plan.stages):
        table = cost.share_table(-(-samples // stage.replicas))
        first, last = stage.first_layer, stage.last_layer
        f = table.fwd[last + 1] - table.fwd[first]
        b = table.bwd[last + 1] - table.bwd[first]
        i = b if whole else b - min(table.wgrad[last + 1] - table.wgrad[first], b)
        if s % chain == 0:
            ahead = path = grads = 0.0
        r = where[s]
        fsum[r] += f
        bsum[r] += b
        isum[r] += i
        head[r] = min(head[r], ahead)
        below[r] = min(below[r], grads)
        ahead += f
        grads += i
        path += f + i
        floor = max(floor, path)
        if reduce:
            params = cost.parameter_bytes(first, last)
            tail[r] += cost.allreduce_s(placement[r], params * grad, plan.allreduce)
            tail[r] += cost.optimizer_step_s(params)
    works = [runs * float(pair_time(fsum[r], bsum[r], overlap)) for r in range(p)]
    if overlap:
        return max(work + t for work, t in zip(works, tail, strict=True))
    floor = max(floor, *(h + work + t for h, work, t in zip(head, works, tail, strict=True)))
    if placed == "dual":
        return floor
    return max(floor, *(head[r] + runs * (fsum[r] + isum[r]) + below[r] for r in range(p)))


def _key(plan: Plan) -> tuple[float, int, int]:
    assert plan.estimate is not None
    return (plan.estimate.iteration_time_s, plan.num_devices, plan.num_microbatches)
