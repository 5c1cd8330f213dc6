"""The DAPPLE planner (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large
Models", PPoPP 2021): an exact dynamic program over stage cuts, replica counts and placement.

For one micro-batch count ``M`` and one placement policy, the program extends pipeline
*suffixes* one stage at a time towards the first layer. A suffix is summarised by ``(W, Z, k)``:
``Z`` its latency under DAPPLE's cost model, ``W`` the auxiliary maximum that
:func:`pipesim.planner.estimate.prepend` needs, ``k`` its number of stages (which sets how many
micro-batches a stage put in front keeps in flight). Prepending a stage (and the transfer
pseudo-stage in front of the suffix) is monotone in all three, so keeping, per state
``(first layer of the suffix, devices used, replicas of the suffix's first stage)``, only the
Pareto-minimal triples is exact. Triples whose ``Z`` (or a lower bound on the finished plan)
reaches the best complete plan are dropped. The derivation is in ``docs/planner.md``.
"""

from __future__ import annotations

import bisect
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan, resplit, split_samples
from pipesim.planner.baselines import candidate_microbatch_counts
from pipesim.planner.cost_tables import FloorTable, ShareTable, block_floors, canonical_groups, floor_table
from pipesim.planner.estimate import NEG_INF, CostModel, eval_lines
from pipesim.planner.placement import Placement, device_order, placement_grid, placement_unit, stage_start
from pipesim.planner.search_space import cut_positions, device_unit, even_split, replica_candidates
from pipesim.profiles.costmodels.collective import AllReduceCurves, Lines
from pipesim.profiles.costmodels.memory import Recompute

__all__ = ["SearchResult", "dapple_search", "to_plan"]

log = logging.getLogger(__name__)

_BlockFloors = tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]
"""What :func:`~pipesim.planner.cost_tables.block_floors` returns."""


class _Entry(NamedTuple):
    """A suffix of the DP: its ``(W, Z, k)``, the suffix it extends and its first stage."""

    w: float
    z: float
    k: int
    parent: _Entry | None
    first: int
    last: int
    replicas: int
    start: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchResult:
    """The best plan of one (micro-batch count, placement policy) pair.

    Attributes:
        time_s: its latency under the DP's cost model, seconds.
        stages: ``(first, last, devices)`` per stage, in pipeline order.
        num_microbatches: ``M``.
        placement: the policy.
    """

    time_s: float
    stages: tuple[tuple[int, int, tuple[int, ...]], ...]
    num_microbatches: int
    placement: Placement


def _insert(bucket: list[_Entry], entry: _Entry) -> None:
    """Add ``entry`` (which no entry of ``bucket`` dominates), dropping the entries it dominates."""
    w, z, k = entry.w, entry.z, entry.k
    bucket[:] = [e for e in bucket if not (w <= e.w and z <= e.z and k <= e.k)]
    bucket.append(entry)


def _uneven_lines(
    model: CostModel, src: tuple[int, ...], dst: tuple[int, ...], samples: int
) -> tuple[Lines, Lines]:
    """:meth:`CostModel.transfer_s` of a micro-batch of ``samples`` split unevenly, forward (``src``
    to ``dst``) and back, as lines of the bytes per sample (the same pieces: the time is linear
    in every piece's bytes). Cached in ``model.memo`` per placement up to renumbering the servers."""
    cache: dict[tuple[object, ...], tuple[Lines, Lines]]
    cache = model.memo.setdefault(("dapple-uneven",), {})  # type: ignore[assignment]
    cluster = model.cluster
    groups = canonical_groups(src, dst, g=placement_unit(cluster), renumber=cluster.servers_interchangeable)
    key = (groups, samples)
    found = cache.get(key)
    if found is None:
        route = model.cluster.route
        fwd = resplit(split_samples(samples, len(src)), split_samples(samples, len(dst)))
        bwd = resplit(split_samples(samples, len(dst)), split_samples(samples, len(src)))
        found = cache[key] = (
            model._piece_lines([(route(src[i], dst[k]), float(n)) for i, k, n in fwd if src[i] != dst[k]]),
            model._piece_lines([(route(dst[i], src[k]), float(n)) for i, k, n in bwd if dst[i] != src[k]]),
        )
    return found


def _shifted(
    entries: Sequence[_Entry], t_f: float, t_b: float, m: int
) -> list[tuple[float, float, int, _Entry]]:
    """``(W, Z, k, entry)`` of each suffix with the transfer pseudo-stage (``t_f`` forward, ``t_b``
    backward, seconds) put in front; it does not depend on the new stage's first layer."""
    head_t = t_f + (m - 1) * (t_f + t_b) + t_b
    return [
        (max(head_t, t_f + t_b + e.w), max(head_t, t_f + max(e.z, t_b + e.w)), min(e.k + 1, m), e)
        for e in entries
    ]


def _search_one(
    model: CostModel,
    global_batch_size: int,
    m: int,
    policy: Placement,
    memory_limit_bytes: float,
    threshold: float,
    positions: Sequence[int],
    unit: int,
    full_space: bool = True,
    *,
    start_bound: float = math.inf,
) -> SearchResult | None:
    """Exact DP for one micro-batch count and policy; ``None`` when nothing beats ``threshold``.

    ``positions``: the layers where a stage may start (:func:`cut_positions`); ``unit``: the
    replica granularity (:func:`device_unit`); ``start_bound``: a cost the pair's optimum is
    known to be below (a plan of its space), where the search starts pruning when it is below
    ``threshold``.
    """
    cluster = model.cluster
    n = model.profile.num_layers
    num_dev = cluster.num_devices
    g = placement_unit(cluster)
    grid = placement_grid(cluster)
    b = global_batch_size // m
    order = device_order(cluster, policy)
    cands = replica_candidates(b, num_dev, g, unit, full=full_space)
    if not cands:
        return None
    # the estimate times every replica at the largest share of an uneven split
    tables = {r: model.share_table(-(-b // r)) for r in cands}
    # Lower bounds for the unplaced prefix: the time its layers need on the devices left, and
    # its work floor at each stage start (`m * floor_work[pj] / left >= bound` prunes); per
    # device count, the least sums of its stages' forward and forward-plus-backward times
    floors: dict[tuple[int, tuple[int, ...]], tuple[FloorTable | ShareTable, list[float], _BlockFloors]]
    floors = model.memo.setdefault(("dapple-floor", tuple(positions)), {})  # type: ignore[assignment]
    floor_key = (b, tuple(cands))
    found_floor = floors.get(floor_key)
    if found_floor is None:
        floor = model.share_table(b) if model.linear else floor_table(tables, b)
        found_floor = floors[floor_key] = (
            floor,
            [floor.fwd[e] + floor.bwd[e] for e in positions],
            block_floors(tables, positions, num_dev),
        )
    full, floor_work, sums_left = found_floor
    full_fwd = full.fwd
    if m * floor_work[-1] / num_dev >= threshold:
        return None  # some stage is at least that slow (the bound of the loop below, at the root)
    held_mode = model.recompute is Recompute.FULL  # the stage's saved bytes re-materialised at once
    cut = model.cut_bytes_per_sample
    params = model._params
    mult = model._multiplier
    algo = model.allreduce
    # caches shared by every run on this model (they do not depend on the micro-batch count)
    xfer: dict[tuple[int, int, int, int], tuple[Lines, Lines]]
    xfer = model.memo.setdefault(("dapple-xfer", policy), {})  # type: ignore[assignment]
    uneven: dict[tuple[int, int, int, int, int], tuple[Lines, Lines]]
    uneven = model.memo.setdefault(("dapple-xfer-uneven", policy), {})  # type: ignore[assignment]
    devs_cache: dict[tuple[int, int], tuple[int, ...]]
    devs_cache = model.memo.setdefault(("dapple-devices", policy), {})  # type: ignore[assignment]
    ar_cache: dict[tuple[int, int], AllReduceCurves | None]
    ar_cache = model.memo.setdefault(("dapple-allreduce", policy), {})  # type: ignore[assignment]
    # all-reduce and optimizer-step seconds of a stage (layers first..i-1 on the devices at
    # (start, r)): no `m` in them
    ar_times: dict[tuple[int, int, int, int], float]
    ar_times = model.memo.setdefault(("dapple-allreduce-step-s", policy), {})  # type: ignore[assignment]
    # the largest per-layer working set over layers lo..i-1 at a share, bytes, per (share, lo, i)
    act_max: dict[tuple[int, int, int], float]
    act_max = model.memo.setdefault(("dapple-act-max",), {})  # type: ignore[assignment]

    def devices(start: int, r: int) -> tuple[int, ...]:
        key = (start, r)
        found = devs_cache.get(key)
        if found is None:
            found = devs_cache[key] = order[num_dev - start - r : num_dev - start]
        return found

    def transfer(start: int, r: int, q: int, rf: int, i: int) -> tuple[float, float]:
        """Forward and backward transfer times across the cut before layer ``i``, seconds, from a
        stage of ``r`` replicas at ``start`` to the suffix's first stage (``rf`` replicas)."""
        if b % r == 0 and b % rf == 0:
            key = (start, r, q - rf, rf)
            lines = xfer.get(key)
            if lines is None:
                new_devs = devices(start, r)
                old = devices(q - rf, rf)
                lines = xfer[key] = (model.transfer_lines(new_devs, old), model.transfer_lines(old, new_devs))
            nbytes = b * cut[i - 1]
            return eval_lines(lines[0], nbytes), eval_lines(lines[1], nbytes)
        # uneven shares: the estimate's own pieces (its transfer_s), as lines of bytes per sample
        ukey = (start, r, q - rf, rf, b)
        ulines = uneven.get(ukey)
        if ulines is None:
            ulines = uneven[ukey] = _uneven_lines(model, devices(start, r), devices(q - rf, rf), b)
        return eval_lines(ulines[0], cut[i - 1]), eval_lines(ulines[1], cut[i - 1])

    best: _Entry | None = None
    bound = min(threshold, start_bound)
    mm1 = m - 1
    buckets: dict[int, dict[tuple[int, int], list[_Entry]]] = {p: {} for p in positions}
    empty = _Entry(NEG_INF, NEG_INF, 0, None, n, n, 0, 0)
    buckets[n][(0, 0)] = [empty]
    ends = list(positions)
    for pi in range(len(ends) - 1, 0, -1):
        i = ends[pi]
        for (q, rf), entries in sorted(buckets[i].items()):
            if not entries:
                continue
            start = stage_start(q, policy, grid)
            min_k = min(e.k for e in entries)
            k_min = min(min_k + 1, m)
            for r in cands:
                if start + r > num_dev:
                    break
                tab = tables[r]
                share = -(-b // r)
                akey = (start, r)
                if akey in ar_cache:
                    curves = ar_cache[akey]
                else:
                    curves = ar_cache[akey] = model.allreduce_curves(devices(start, r)) if r > 1 else None
                shifted: list[tuple[float, float, int, _Entry]] | None = None
                if i == n:
                    shifted = [(e.w, e.z, min(e.k + 1, m), e) for e in entries]
                q2 = start + r
                left = num_dev - q2
                tab_fwd, tab_bwd, tab_stashed, tab_held = tab.fwd, tab.bwd, tab.stashed, tab.held
                fwd_i, bwd_i, st_i, held_i = tab_fwd[i], tab_bwd[i], tab_stashed[i], tab_held[i]
                acts = tab.acts
                sum_fwd, sum_fb = sums_left[max(left, 0)]
                # Stage starts the loop below would skip at once: with no device left only layer
                # 0 can start the stage; otherwise every start whose prefix cannot be fast enough
                # on the devices left (`floor_work` grows with the start, the bound only falls).
                if left <= 0:
                    top_pj = 0
                else:
                    top_pj = min(pi - 1, bisect.bisect_left(floor_work, bound * left / m))
                    while top_pj > 0 and m * floor_work[top_pj] / left >= bound:
                        top_pj -= 1
                    while top_pj < pi - 1 and m * floor_work[top_pj + 1] / left < bound:
                        top_pj += 1
                # the stage's largest per-layer working set over layers first..i-1
                mkey = (share, ends[top_pj], i)
                max_act = act_max.get(mkey, -1.0)
                if max_act < 0.0:
                    max_act = act_max[mkey] = max(acts[ends[top_pj] : i], default=0.0)
                prev = ends[top_pj]
                for pj in range(top_pj, -1, -1):
                    first = ends[pj]
                    for layer in range(first, prev):
                        if acts[layer] > max_act:
                            max_act = acts[layer]
                    prev = first
                    fwd = fwd_i - tab_fwd[first]
                    bwd = bwd_i - tab_bwd[first]
                    pbytes = params[i] - params[first]
                    static = pbytes * mult
                    kept = st_i - tab_stashed[first]  # per recompute mode (stage_activations)
                    inputs = cut[first - 1] * share if first > 0 else 0.0
                    held = held_i - tab_held[first] if held_mode else 0.0
                    stash, work = inputs + kept, held + max_act
                    if static + k_min * kept + work > memory_limit_bytes:
                        break  # a longer stage only needs more memory
                    lb_extra = fb_extra = 0.0
                    if first > 0:
                        # the prefix's stages run their forwards (backwards) one after another
                        # for the first (last) micro-batch: Z grows by the sum of their forwards,
                        # W by the sum of their forward-plus-backward times
                        lb_extra = full_fwd[first] / left
                        if sum_fwd[pj] > lb_extra:
                            lb_extra = sum_fwd[pj]
                        fb_extra = floor_work[pj] / left
                        if sum_fb[pj] > fb_extra:
                            fb_extra = sum_fb[pj]
                        if m * floor_work[pj] / left >= bound:
                            continue  # the layers left cannot be fast enough on the devices left
                    buckets_first = buckets[first]
                    bucket = None
                    tkey = (start, r, first, i)
                    ar = ar_times.get(tkey, -1.0)
                    if ar < 0.0:
                        # the all-reduce, then the update after it (the estimate's tail)
                        ar = 0.0 if curves is None else curves.time_s(pbytes * model.grad_bytes, algo)
                        ar = ar_times[tkey] = ar + model.optimizer_step_s(pbytes)
                    head = fwd + mm1 * (fwd + bwd) + bwd
                    if head >= bound:
                        break  # as `not any_alive` below would: longer stages are slower still
                    if head + fb_extra >= bound:
                        continue  # every entry's W is at least `head`, and Z at least the final W
                    head_ar = head + ar
                    fb = fwd + bwd
                    bar = bwd + ar
                    if shifted is None:
                        # the transfer pseudo-stage is built only for a stage that may be fast
                        # enough: with free transfers every entry is no slower, a lower bound
                        lb = min(max(head_ar, fwd + max(e.z, bar + e.w)) for e in entries)
                        if lb >= bound:
                            break  # as `not any_alive` below would
                        shifted = _shifted(entries, *transfer(start, r, q, rf, i), m)
                    any_alive = False
                    for w1, z1, k2, e in shifted:
                        z2 = fwd + (z1 if z1 > bar + w1 else bar + w1)
                        if head_ar > z2:
                            z2 = head_ar
                        if z2 >= bound:
                            continue
                        any_alive = True
                        if z2 + lb_extra >= bound or static + k2 * stash + work > memory_limit_bytes:
                            continue
                        w2 = fb + w1
                        if head > w2:
                            w2 = head
                        if first == 0:
                            best = _Entry(w2, z2, k2, e, first, i - 1, r, start)
                            bound = z2
                            continue
                        if w2 + fb_extra >= bound:
                            continue  # the layers left run forward and backward before W's path
                        if bucket is None:
                            bucket = buckets_first.setdefault((q2, r), [])
                        for d in bucket:
                            if d.w <= w2 and d.z <= z2 and d.k <= k2:
                                break  # an entry no worse in all three is kept already
                        else:
                            _insert(bucket, _Entry(w2, z2, k2, e, first, i - 1, r, start))
                    if not any_alive:
                        break  # longer stages are slower still
        buckets[i] = {}
    if best is None or best.z >= threshold:
        return None
    stages = []
    node: _Entry | None = best
    while node is not None and node.replicas:
        stages.append((node.first, node.last, devices(node.start, node.replicas)))
        node = node.parent
    return SearchResult(time_s=best.z, stages=tuple(stages), num_microbatches=m, placement=policy)


def _placed(
    cluster_devices: int,
    gpus_per_server: int | tuple[int, ...],
    order: Sequence[int],
    policy: Placement,
    replicas: Sequence[int],
) -> list[tuple[int, ...]] | None:
    """The devices the DP's placement rule gives stages of ``replicas`` (placed from the last stage);
    ``None`` when they do not fit."""
    used = 0
    out: list[tuple[int, ...]] = []
    for r in reversed(replicas):
        start = stage_start(used, policy, gpus_per_server)
        if start + r > cluster_devices:
            return None
        out.append(tuple(order[cluster_devices - start - r : cluster_devices - start]))
        used = start + r
    return out[::-1]


def _uniform_bound(
    model: CostModel,
    global_batch_size: int,
    m: int,
    memory_limit_bytes: float,
    positions: Sequence[int],
    unit: int,
    policies: Sequence[Placement],
    full_space: bool = True,
) -> tuple[float, float]:
    """The DP's cost of the best *uniform* plan for ``m`` (an upper bound on the DP optimum), and
    the same over the uniform plans that fit in memory with a margin (:data:`_MARGIN`).

    Uniform: ``S`` stages of about equal time (cut at ``positions``), each on ``N / S`` devices
    placed by each of the searched ``policies`` (so the plan is in the searched space), for every
    ``S`` that gives an allowed replica count; ``inf`` if none fits. The second figure bounds the
    DP's optimum even where the DP's memory sum rounds differently from the estimate's.
    """
    cluster = model.cluster
    num_dev = cluster.num_devices
    b = global_batch_size // m
    cands = set(replica_candidates(b, num_dev, placement_unit(cluster), unit, full=full_space))
    layer_times = [lay.fwd_time_s + lay.bwd_time_s for lay in model.profile.layers]
    block_times = [sum(layer_times[positions[k] : positions[k + 1]]) for k in range(len(positions) - 1)]
    best = safe = math.inf
    for r in sorted(cands, reverse=True):
        stages = num_dev // r
        if stages > len(block_times) or stages * r != num_dev:
            continue
        bounds = even_split(block_times, stages)
        for policy in policies:
            devs = _placed(
                num_dev, placement_grid(cluster), device_order(cluster, policy), policy, [r] * stages
            )
            if devs is None:
                continue
            plan = Plan(
                stages=tuple(
                    StagePlan(
                        first_layer=positions[bounds[k]],
                        last_layer=positions[bounds[k + 1]] - 1,
                        replicas=r,
                        devices=devs[k],
                    )
                    for k in range(stages)
                ),
                global_batch_size=global_batch_size,
                num_microbatches=m,
            )
            est = model.estimate(plan, decomposable=True)
            if est.peak_memory_bytes <= memory_limit_bytes:
                best = min(best, est.iteration_time_s)
                if est.peak_memory_bytes <= memory_limit_bytes * (1.0 - _MARGIN):
                    safe = min(safe, est.iteration_time_s)
    return best, safe


_MARGIN = 1e-6
"""Relative margin for a uniform plan's cost to bound the DP's optimum of its own micro-batch
count and policy (the DP and the estimate sum the same terms in different orders)."""


def _shape_bound(
    model: CostModel,
    global_batch_size: int,
    m: int,
    policy: Placement,
    shape: SearchResult,
    memory_limit_bytes: float,
    unit: int,
    full_space: bool,
) -> float:
    """The cost of ``shape``'s stages (layer ranges and replica counts) placed by ``policy`` at
    ``m`` micro-batches, when it is a plan of that pair's search space that fits in memory with
    the margin (:data:`_MARGIN`): like :func:`_uniform_bound`'s second figure, an upper bound on
    the pair's optimum (``inf`` otherwise), seconds."""
    cluster = model.cluster
    num_dev = cluster.num_devices
    b = global_batch_size // m
    cands = replica_candidates(b, num_dev, placement_unit(cluster), unit, full=full_space)
    replicas = [len(devs) for _, _, devs in shape.stages]
    if any(r not in cands for r in replicas):
        return math.inf
    devs = _placed(num_dev, placement_grid(cluster), device_order(cluster, policy), policy, replicas)
    if devs is None:
        return math.inf
    plan = Plan(
        stages=tuple(
            StagePlan(first_layer=first, last_layer=last, replicas=len(d), devices=d)
            for (first, last, _), d in zip(shape.stages, devs, strict=True)
        ),
        global_batch_size=global_batch_size,
        num_microbatches=m,
    )
    est = model.estimate(plan, decomposable=True)
    if est.peak_memory_bytes > memory_limit_bytes * (1.0 - _MARGIN):
        return math.inf
    return est.iteration_time_s * (1.0 + _MARGIN)


def _distinct_policies(
    policies: Iterable[Placement], unit: int, gpus_per_server: int | tuple[int, ...]
) -> list[Placement]:
    """The policies, less append-first when whole-server units make it the same as fresh-first."""
    out = list(dict.fromkeys(policies))
    if (
        isinstance(gpus_per_server, int)
        and unit % gpus_per_server == 0
        and Placement.FRESH_FIRST in out
        and Placement.APPEND_FIRST in out
    ):
        out.remove(Placement.APPEND_FIRST)
    return out


def dapple_search(
    model: CostModel,
    global_batch_size: int,
    *,
    placements: Iterable[Placement] = tuple(Placement),
    microbatch_counts: Sequence[int] | None = None,
    memory_limit_bytes: float | None = None,
    top: int = 5,
    slack: float = 0.1,
    full_replica_space: bool = True,
) -> list[SearchResult]:
    """The best plans for (micro-batch count, placement) pairs, best first: ``top`` and each policy's best.

    The micro-batch counts are searched in order of the cost of their best uniform plan
    (balanced stages of equal width; an upper bound on their optimum), starting with the
    threshold ``(1 + slack)`` times the best such bound, so every search prunes from its first
    state on. A second pass then finds the best plan of every policy that the first pruned (its
    own uniform bound seeds it), so the results hold each policy's best
    (the full estimate, which ranks them later, can order the policies differently). The best
    result is exact for the search space: replica counts from
    :func:`replica_candidates` (at :func:`device_unit` granularity), stage starts from
    :func:`cut_positions`.

    Args:
        model: the cost model (profile, cluster, optimizer, all-reduce algorithm).
        global_batch_size: samples per iteration.
        placements: policies to try (default all three).
        microbatch_counts: ``M`` values to try (default: every divisor of the global batch).
        memory_limit_bytes: per-device limit (default: the device's memory).
        top: how many results to keep.
        slack: also prune whatever is more than ``slack`` (relative) slower than the best plan
            found so far (or than the best uniform plan), even when fewer than ``top`` results
            are kept (the best, and each policy's best, stay exact).
        full_replica_space: every replica count (DAPPLE's space, uneven shares included), or
            the structured counts only (see :func:`replica_candidates`).

    Returns:
        The ``top`` fastest results, plus the best of any policy not among them, fastest first
        (ties: fewer micro-batches, then policy order).

    Raises:
        Infeasible: no plan fits in memory.
    """
    limit = float(memory_limit_bytes if memory_limit_bytes is not None else model.cluster.device.memory_bytes)
    ms = (
        list(microbatch_counts)
        if microbatch_counts is not None
        else candidate_microbatch_counts(global_batch_size)
    )
    ms = [m for m in dict.fromkeys(ms) if global_batch_size % m == 0]
    cluster = model.cluster
    unit = device_unit(cluster.num_devices, placement_unit(cluster))
    positions = cut_positions(model.profile)
    policies = _distinct_policies(placements, unit, placement_grid(cluster))
    # the DP's cost can favour one policy whose plans the full estimate (NIC sharing) ranks far
    # lower (gnmt16 on 1024 GPUs: scatter-first), so every policy keeps its best
    bounds = {
        (m, policy): _uniform_bound(
            model, global_batch_size, m, limit, positions, unit, [policy], full_replica_space
        )
        for m in ms
        for policy in policies
    }
    uniform = {key: found for key, (found, _) in bounds.items()}
    # each pair's own uniform plan bounds its optimum: its search starts there (the pair's best,
    # no slower, is still found; a narrower band of suffixes stays alive)
    own_bound = {key: safe * (1.0 + _MARGIN) for key, (_, safe) in bounds.items()}
    rank = {m: k for k, m in enumerate(ms)}
    ms.sort(key=lambda m: (min((uniform[m, p] for p in policies), default=math.inf), rank[m]))
    found_by: dict[Placement, list[SearchResult]] = {p: [] for p in policies}
    seed = min(uniform.values(), default=math.inf) * (1.0 + slack)
    everything: list[SearchResult] = []
    own = {p: min((uniform[m, p] for m in ms), default=math.inf) * (1.0 + slack) for p in policies}
    # What each pair's search has told: its best (exact) when one was below the threshold it was
    # searched at, else None, and that threshold. A later ask below a threshold no higher is
    # answered from it; the first pass searches below the highest threshold the second can ask
    # (its policy's own bound, or its best so far), so a pair is searched once, not twice.
    told: dict[tuple[int, Placement], tuple[SearchResult | None, float]] = {}

    def search(m: int, policy: Placement, threshold: float, upto: float) -> SearchResult | None:
        """The pair's best when below ``threshold`` (searched below ``max(threshold, upto)``)."""
        known = told.get((m, policy))
        if known is None or (known[0] is None and known[1] < threshold):
            limit_s = max(threshold, upto)
            start = own_bound[m, policy]
            # the best shape so far and the best at this micro-batch count, placed for this pair:
            # often a far lower start than its uniform plan
            shapes = {min(everything, key=lambda r: r.time_s)} if everything else set()
            same_m = [r for p in policies for r in found_by[p] if r.num_microbatches == m]
            if same_m:
                shapes.add(min(same_m, key=lambda r: r.time_s))
            for shape in shapes:
                gbs, full = global_batch_size, full_replica_space
                start = min(start, _shape_bound(model, gbs, m, policy, shape, limit, unit, full))
            result = _search_one(
                model,
                global_batch_size,
                m,
                policy,
                limit,
                limit_s,
                positions,
                unit,
                full_replica_space,
                start_bound=start,
            )
            known = told[m, policy] = (result, limit_s)
        best = known[0]
        return best if best is not None and best.time_s < threshold else None

    for m in ms:  # the results within `slack` of the best, over all policies
        for policy in policies:
            threshold = seed
            if everything:
                threshold = min(threshold, min(r.time_s for r in everything) * (1.0 + slack))
            if len(everything) >= top:
                threshold = min(threshold, sorted(r.time_s for r in everything)[top - 1])
            mine = found_by[policy]
            found = search(m, policy, threshold, min([own[policy], *(r.time_s for r in mine)]))
            if found is not None:
                everything.append(found)
                mine.append(found)
    for policy in policies:  # then each policy's own best, which the pass above may have pruned
        mine = found_by[policy]
        for m in ms:
            if any(r.num_microbatches == m for r in mine):
                continue  # this pair's best is already exact
            found = search(m, policy, min([own[policy], *(r.time_s for r in mine)]), NEG_INF)
            if found is not None:
                mine.append(found)
    results = [r for p in policies for r in found_by[p]]
    if not results:
        raise Infeasible(
            f"no DAPPLE plan for global batch {global_batch_size} fits in {limit / 2**30:.3g} GiB per device"
        )
    order = {p: i for i, p in enumerate(Placement)}

    def sort_key(r: SearchResult) -> tuple[float, int, int]:
        return (r.time_s, r.num_microbatches, order[r.placement])

    results.sort(key=sort_key)
    unique: list[SearchResult] = []
    seen: set[tuple[object, ...]] = set()
    for r in results:  # two policies may give the same plan
        key = (r.stages, r.num_microbatches)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    # the first `top`, plus the best of each policy when it is not among them
    kept = unique[:top]
    for policy in policies:
        if found_by[policy] and not any(r.placement is policy for r in kept):
            best_of = next((r for r in unique if r.placement is policy), None)
            if best_of is not None:
                kept.append(best_of)
    kept.sort(key=sort_key)
    return kept


def to_plan(
    result: SearchResult,
    global_batch_size: int,
    *,
    optimizer: str,
    allreduce: str,
    recompute: Recompute | str | bool = Recompute.NONE,
) -> Plan:
    """Turn a search result into a :class:`Plan` (schedule ``dapple``, planner ``dapple``)."""
    return Plan(
        stages=tuple(
            StagePlan(first_layer=f, last_layer=last, replicas=len(d), devices=d)
            for f, last, d in result.stages
        ),
        global_batch_size=global_batch_size,
        num_microbatches=result.num_microbatches,
        schedule="dapple",
        optimizer=optimizer,
        allreduce=allreduce,
        recompute=recompute,
        schedule_options={},
        planner="dapple",
    )
