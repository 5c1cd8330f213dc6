"""The DAPPLE planner (Fan et al., "DAPPLE: A Pipelined Data Parallel Approach for Training Large
Models", PPoPP 2021): an exact dynamic program over stage cuts, replica counts and placement.

For one micro-batch count ``M`` and one placement policy, the program extends pipeline
*suffixes* one stage at a time towards the first layer. A suffix is summarised by ``(W, Z, k)``:
``Z`` its latency under DAPPLE's cost model, ``W`` the auxiliary maximum that
:func:`pipesim.planner.costs.prepend` needs, ``k`` its number of stages (which sets how many
micro-batches a stage put in front keeps in flight). Prepending a stage (and the transfer
pseudo-stage in front of the suffix) is monotone in all three, so keeping, per state
``(first layer of the suffix, devices used, replicas of the suffix's first stage)``, only the
Pareto-minimal triples is exact. Triples whose ``Z`` (or a lower bound on the finished plan)
reaches the best complete plan are dropped. The derivation is in ``docs/planner.md``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pipesim.errors import Infeasible
from pipesim.plan import Plan, StagePlan
from pipesim.planner.costs import NEG_INF, CostModel, eval_lines
from pipesim.planner.placement import Placement, device_order, stage_start

__all__ = ["SearchResult", "dapple_search", "replica_candidates"]

log = logging.getLogger(__name__)


def replica_candidates(microbatch_size: int, num_devices: int, gpus_per_server: int) -> list[int]:
    """Replica counts the search tries for a micro-batch of ``microbatch_size`` samples.

    Every ``r <= num_devices`` that divides the micro-batch (so the replicas get equal shares)
    and is a power of two or a multiple of the server size.
    """
    out = []
    for r in range(1, min(microbatch_size, num_devices) + 1):
        if microbatch_size % r == 0 and (r & (r - 1) == 0 or r % gpus_per_server == 0):
            out.append(r)
    return out


@dataclass(frozen=True, slots=True)
class _Entry:
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


def _insert(bucket: list[_Entry], entry: _Entry) -> bool:
    for e in bucket:
        if e.w <= entry.w and e.z <= entry.z and e.k <= entry.k:
            return False
    bucket[:] = [e for e in bucket if not (entry.w <= e.w and entry.z <= e.z and entry.k <= e.k)]
    bucket.append(entry)
    return True


def _search_one(
    model: CostModel,
    global_batch_size: int,
    m: int,
    policy: Placement,
    memory_limit_bytes: float,
    threshold: float,
) -> SearchResult | None:
    """Exact DP for one micro-batch count and policy; ``None`` when nothing beats ``threshold``."""
    cluster = model.cluster
    n = model.profile.num_layers
    num_dev = cluster.num_devices
    g = cluster.gpus_per_server
    b = global_batch_size // m
    order = device_order(cluster, policy)
    cands = replica_candidates(b, num_dev, g)
    if not cands:
        return None
    tables = {r: model.share_table(b // r) for r in cands}
    recompute = model.recompute
    cut = model.cut_bytes_per_sample
    params = model._params
    mult = model._multiplier
    # Lower bounds for the unplaced prefix (exact scaling needs a linear profile).
    full = model.share_table(b) if model.linear else None
    # caches shared by every run on this model (they do not depend on the micro-batch count)
    xfer: dict[tuple[int, int, int, int], tuple[tuple[tuple[float, float], ...], ...]]
    xfer = model.memo.setdefault(("dapple-xfer", policy), {})  # type: ignore[assignment]
    devs_cache: dict[tuple[int, int], tuple[int, ...]]
    devs_cache = model.memo.setdefault(("dapple-devices", policy), {})  # type: ignore[assignment]

    def devices(start: int, r: int) -> tuple[int, ...]:
        key = (start, r)
        found = devs_cache.get(key)
        if found is None:
            found = devs_cache[key] = order[num_dev - start - r : num_dev - start]
        return found

    best: _Entry | None = None
    bound = threshold
    mm1 = m - 1
    buckets: list[dict[tuple[int, int], list[_Entry]]] = [{} for _ in range(n + 1)]
    empty = _Entry(NEG_INF, NEG_INF, 0, None, n, n, 0, 0)
    buckets[n][(0, 0)] = [empty]
    for i in range(n, 0, -1):
        for (q, rf), entries in sorted(buckets[i].items()):
            if not entries:
                continue
            start = stage_start(q, policy, g)
            min_k = min(e.k for e in entries)
            for r in cands:
                if start + r > num_dev:
                    break
                tab = tables[r]
                share = b // r
                new_devs = devices(start, r)
                if i < n:
                    key = (start, r, q - rf, rf)
                    lines = xfer.get(key)
                    if lines is None:
                        old = devices(q - rf, rf)
                        lines = xfer[key] = (
                            model.transfer_lines(new_devs, old),
                            model.transfer_lines(old, new_devs),
                        )
                    nbytes = b * cut[i - 1]
                    t_f = eval_lines(lines[0], nbytes)
                    t_b = eval_lines(lines[1], nbytes)
                else:
                    t_f = t_b = 0.0
                q2 = start + r
                left = num_dev - q2
                # the transfer pseudo-stage in front of the suffix does not depend on the new stage's
                # first layer: apply it once
                head_t = t_f + mm1 * (t_f + t_b) + t_b
                shifted = [
                    (
                        max(head_t, t_f + t_b + e.w),
                        max(head_t, t_f + max(e.z, t_b + e.w)),
                        min(e.k + 1, m),
                        e,
                    )
                    if i < n
                    else (e.w, e.z, min(e.k + 1, m), e)
                    for e in entries
                ]
                max_act = 0.0
                fwd_i, bwd_i, st_i = tab.fwd[i], tab.bwd[i], tab.stashed[i]
                for first in range(i - 1, -1, -1):
                    if first > 0 and left <= 0:
                        continue
                    fwd = fwd_i - tab.fwd[first]
                    bwd = bwd_i - tab.bwd[first]
                    pbytes = params[i] - params[first]
                    static = pbytes * mult
                    saved = st_i - tab.stashed[first]
                    act = tab.acts[first]
                    if act > max_act:
                        max_act = act
                    inputs = cut[first - 1] * share if first > 0 else 0.0
                    if recompute:
                        stash, work = inputs, saved
                    else:
                        stash, work = inputs + saved, max_act
                    k_min = min(min_k + 1, m)
                    if static + k_min * (saved if not recompute else 0.0) + work > memory_limit_bytes:
                        break  # a longer stage only needs more memory
                    lb_extra = 0.0
                    if first > 0 and full is not None:
                        lb_extra = full.fwd[first] / left
                        if m * (full.fwd[first] + full.bwd[first]) / left >= bound:
                            continue  # the layers left cannot be fast enough on the devices left
                    ar = model.allreduce_s(new_devs, pbytes) if r > 1 else 0.0
                    head = fwd + mm1 * (fwd + bwd) + bwd
                    head_ar = head + ar
                    fb = fwd + bwd
                    bar = bwd + ar
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
                        entry = _Entry(w2, z2, k2, e, first, i - 1, r, start)
                        if first == 0:
                            best = entry
                            bound = z2
                        else:
                            _insert(buckets[first].setdefault((q2, r), []), entry)
                    if not any_alive:
                        break  # longer stages are slower still
        buckets[i] = {}
    if best is None:
        return None
    stages = []
    node: _Entry | None = best
    while node is not None and node.replicas:
        stages.append((node.first, node.last, devices(node.start, node.replicas)))
        node = node.parent
    return SearchResult(time_s=best.z, stages=tuple(stages), num_microbatches=m, placement=policy)


def dapple_search(
    model: CostModel,
    global_batch_size: int,
    *,
    placements: Iterable[Placement] = tuple(Placement),
    microbatch_counts: Sequence[int] | None = None,
    memory_limit_bytes: float | None = None,
    top: int = 5,
    slack: float = 0.1,
) -> list[SearchResult]:
    """The best plan for each (micro-batch count, placement) pair, best first, at most ``top``.

    Args:
        model: the cost model (profile, cluster, optimizer, all-reduce algorithm).
        global_batch_size: samples per iteration.
        placements: policies to try (default all three).
        microbatch_counts: ``M`` values to try (default: every divisor of the global batch).
        memory_limit_bytes: per-device limit (default: the device's memory).
        top: how many results to keep.
        slack: also prune whatever is more than ``slack`` (relative) slower than the best plan
            found so far, even when fewer than ``top`` results are kept (the best stays exact).

    Returns:
        Up to ``top`` results, fastest first (ties: fewer micro-batches, then policy order).

    Raises:
        Infeasible: no plan fits in memory.
    """
    limit = float(memory_limit_bytes if memory_limit_bytes is not None else model.cluster.device.memory_bytes)
    ms = (
        list(microbatch_counts)
        if microbatch_counts is not None
        else [m for m in range(1, global_batch_size + 1) if global_batch_size % m == 0]
    )
    results: list[SearchResult] = []
    for m in ms:
        if global_batch_size % m:
            continue
        for policy in placements:
            threshold = math.inf
            if results:
                threshold = min(r.time_s for r in results) * (1.0 + slack)
            if len(results) >= top:
                threshold = min(threshold, sorted(r.time_s for r in results)[top - 1])
            found = _search_one(model, global_batch_size, m, policy, limit, threshold)
            if found is not None:
                results.append(found)
    if not results:
        raise Infeasible(
            f"no DAPPLE plan for global batch {global_batch_size} fits in {limit / 2**30:.3g} GiB per device"
        )
    order = {p: i for i, p in enumerate(Placement)}
    results.sort(key=lambda r: (r.time_s, r.num_microbatches, order[r.placement]))
    unique: list[SearchResult] = []
    seen: set[tuple[object, ...]] = set()
    for r in results:  # two policies may give the same plan
        key = (r.stages, r.num_microbatches)
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique[:top]


def to_plan(result: SearchResult, global_batch_size: int, *, optimizer: str, allreduce: str) -> Plan:
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
        schedule_options={},
        planner="dapple",
    )
