"""The DAPPLE planner's dynamic program for one (micro-batch count, placement policy) pair
(:func:`search_pair`), exact under DAPPLE's decomposable cost model; :mod:`pipesim.planner.dapple`
drives it over the pairs.

The program extends pipeline *suffixes* one stage at a time towards the first layer. A suffix is
summarised by ``(W, Z, k)``: ``Z`` its latency under DAPPLE's cost model, ``W`` the auxiliary
maximum that :func:`pipesim.planner.estimate.prepend` needs, ``k`` its number of stages (which
sets how many micro-batches a stage put in front keeps in flight). Prepending a stage (and the
transfer pseudo-stage in front of the suffix) is monotone in all three, so keeping, per state
``(first layer of the suffix, devices used, replicas of the suffix's first stage)``, only the
Pareto-minimal triples is exact. Triples whose ``Z`` (or a lower bound on the finished plan)
reaches the best complete plan are dropped. The derivation is in ``docs/planner.md``.

**Why the pruning is sound.** Write the finished plan as a *prefix* (the stages not placed yet,
layers ``[0, first)``) in front of a kept suffix. Prepending a stage ``(F, B, AR)`` gives
``W' = max(M (F + B), F + B + W)`` and ``Z' >= max(W' , F + Z)`` (``F + (M - 1)(F + B) + B =
M (F + B)``), and a transfer pseudo-stage only adds non-negative terms, so the finished plan has

* ``Z_final >= Z + sum of the prefix's forwards`` and ``Z_final >= W + sum of the prefix's
  forward-plus-backward times`` (both sums bounded below per device count by
  :func:`~pipesim.planner.cost_tables.block_floors` and the work floor);
* ``Z_final >= M (F_s + B_s)`` for every stage ``s`` of the prefix. Its stages fit in the
  devices the suffix left (placement only starts a stage at or after the devices used, so their
  replica counts sum to at most that), use the searched replica counts, and each must fit in
  memory with at least one micro-batch in flight: the least over such cuts of the slowest
  stage (:func:`~pipesim.planner.dapple_bounds.bottleneck_floors`), and the work floor
  ``work / devices left``, bound ``max_s (F_s + B_s)``.

A state whose bound reaches the best plan found so far (or the threshold) cannot lead to a plan
below it, and the bound only falls, so dropping it changes neither the optimum nor which plan of
equal cost is found first (the iteration order is fixed). The floors are scaled down by a margin
far above the rounding of the sums they bound.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from pipesim.planner.cost_tables import ShareTable
from pipesim.planner.dapple_bounds import neck_floors, prefix_floors
from pipesim.planner.dapple_sends import TransferClasses, transfer_classes, uneven_lines
from pipesim.planner.estimate import NEG_INF, CostModel, eval_lines
from pipesim.planner.placement import Placement, device_order, placement_grid, placement_unit, stage_start
from pipesim.planner.search_space import replica_candidates
from pipesim.planner.tied_grads import keep_pareto, last_layer_ties, pair_allreduce_s
from pipesim.profiles.costmodels.collective import AllReduceCurves
from pipesim.profiles.costmodels.lines import Lines
from pipesim.profiles.costmodels.memory import Recompute, received_checkpoint_bytes
from pipesim.profiles.costmodels.tied_embeddings import tied_grad_bytes

__all__ = ["SearchResult", "search_pair"]


class _Entry(NamedTuple):
    """A suffix of the DP: its ``(W, Z, k)``, the suffix it extends and its first stage; for a
    model with a tied matrix (:func:`~pipesim.planner.tied_grads.last_layer_ties`), ``lead``:
    when the suffix's last stage has run its last backward and its all-reduce, from the
    suffix's start, and ``tail``: that stage's ``(start, replicas, optimizer step seconds)``."""

    w: float
    z: float
    k: int
    parent: _Entry | None
    first: int
    last: int
    replicas: int
    start: int
    lead: float = 0.0
    tail: tuple[int, int, float] = (0, 0, 0.0)


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


def _shifted(
    entries: Sequence[_Entry], t_f: float, t_b: float, m: int
) -> list[tuple[float, float, int, _Entry]]:
    """``(W, Z, k, entry)`` of each suffix with the transfer pseudo-stage (``t_f`` forward, ``t_b``
    backward, seconds) put in front; it does not depend on the new stage's first layer."""
    head_t = t_f + (m - 1) * (t_f + t_b) + t_b
    t_fb = t_f + t_b
    out = []
    for e in entries:
        ew, ez, ek = e[0], e[1], e[2]
        w = t_fb + ew
        bw = t_b + ew
        z = t_f + (ez if ez >= bw else bw)
        k = ek + 1
        out.append((w if w >= head_t else head_t, z if z >= head_t else head_t, k if k <= m else m, e))
    return out


_RowT = tuple[int, float, float, float, float, float, float, float, float, float, float, float, float, float]
"""A candidate stage (layers ``first..i-1`` on ``r`` replicas at one start) and what the DP
checks of it before looking at the suffixes it would extend, seconds and bytes: ``first``; the
weights, gradients and optimizer state; the layers' bytes kept per in-flight micro-batch; those
plus the stage's input (once where a full recomputation's first block checkpoints it); the
working set (a full recomputation's block with its re-materialised bytes, plus the unshaped
layers' re-materialised at once); ``F``; ``F + B``; ``B``;
the all-reduce and optimizer step; ``B`` plus them; the floors of the prefix's forwards and of
its ``F + B``; the all-reduce alone and the step alone. None of it depends on the micro-batch
count: a row serves every search of its micro-batch size and policy (kept in its
:class:`~pipesim.planner.dapple_bounds.Floors`),
and the search adds ``head = M (F + B)`` as :func:`~pipesim.planner.estimate.prepend` computes
it. A plain tuple: the DP's inner loop unpacks it."""


_SlotT = tuple[int, int, ShareTable, int, tuple[int, int]]
"""A *slot*: the candidate stages of one replica count at one device start (whatever their
layers): ``r``, the devices left after them, the share table at their share, that share
(samples) and the key of the bucket their suffixes go to. It depends only on the micro-batch size
and the start: kept per start in the search's :class:`~pipesim.planner.dapple_bounds.Floors`."""

_ALIVE = 1 << 62
"""A slot's ``dead`` mark while no suffix has ended it at its first row."""


def _suffix_max(acts: Sequence[float], i: int) -> list[float]:
    """``[max(acts[first:i]) for first in range(i)]`` in one pass (exact: a maximum of floats)."""
    out = [0.0] * i
    best = -math.inf
    for layer in range(i - 1, -1, -1):
        if acts[layer] > best:
            best = acts[layer]
        out[layer] = best
    return out


def search_pair(
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

    ``positions``: the layers where a stage may start
    (:func:`~pipesim.planner.search_space.cut_positions`); ``unit``: the replica granularity
    (:func:`~pipesim.planner.search_space.device_unit`); ``start_bound``: a cost the pair's
    optimum is known to be below (a plan of its space), where the search starts pruning when it
    is below ``threshold``; seconds. ``memory_limit_bytes``: per device. Raises nothing of its
    own (a pair with no plan gives ``None``).
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
    floors = prefix_floors(model, b, cands, positions, memory_limit_bytes)
    tables = floors.tables
    full_fwd, floor_work, sums_left = floors.full.fwd, floors.work, floors.sums
    if m * floor_work[-1] / num_dev >= threshold:
        return None  # some stage is at least that slow (the bound of the loop below, at the root)
    stage_floor = neck_floors(model, floors, positions, memory_limit_bytes)
    if m * stage_floor[num_dev][-1] >= threshold:
        return None  # the least slowest stage of any cut is that slow
    held_mode = model.recompute is Recompute.FULL  # the unshaped layers' saved bytes re-materialised at once
    cut = model.cut_bytes_per_sample
    params = model._params
    mult = model._multiplier
    algo = model.allreduce
    # caches shared by every run on this model (they do not depend on the micro-batch count)
    xfer: dict[tuple[int, int, int, int], tuple[Lines, Lines]]
    xfer = model.memo.setdefault(("dapple-xfer", policy), {})  # type: ignore[assignment]
    uneven: dict[tuple[int, int, int, int, int], tuple[Lines, Lines]]
    uneven = model.memo.setdefault(("dapple-xfer-uneven", policy), {})  # type: ignore[assignment]
    uneven_classes: dict[tuple[int, int, int, int], TransferClasses]  # per placement (start, r, q, rf)
    uneven_classes = model.memo.setdefault(("dapple-xfer-classes", policy), {})  # type: ignore[assignment]
    devs_cache: dict[tuple[int, int], tuple[int, ...]]
    devs_cache = model.memo.setdefault(("dapple-devices", policy), {})  # type: ignore[assignment]
    ar_cache: dict[tuple[int, int], AllReduceCurves | None]
    ar_cache = model.memo.setdefault(("dapple-allreduce", policy), {})  # type: ignore[assignment]
    # all-reduce and optimizer-step seconds of a stage (layers first..i-1 on the devices at
    # (start, r)): no `m` in them
    ar_times: dict[int, float]
    ar_times = model.memo.setdefault(("dapple-allreduce-step-s", policy), {})  # type: ignore[assignment]
    # the largest per-layer working set over layers lo..i-1 at a share, bytes, per (share, i), by lo
    act_max: dict[tuple[int, int], list[float]]
    act_max = model.memo.setdefault(("dapple-act-max",), {})  # type: ignore[assignment]
    # stage rows and transfer seconds, shared by the searches of this micro-batch size and policy
    row_cache: dict[int, _RowT] = floors.rows.setdefault(policy, {})
    sends: dict[int, tuple[float, float]] = floors.sends.setdefault(policy, {})
    span = num_dev + 1

    def devices(start: int, r: int) -> tuple[int, ...]:
        key = (start, r)
        found = devs_cache.get(key)
        if found is None:
            found = devs_cache[key] = order[num_dev - start - r : num_dev - start]
        return found

    # `sends` keys: (stage start, r, the suffix's first stage's start and replicas, the cut) as
    # one integer, `(start * span + r) * send_stride + ((q - rf) * span + rf) * (n + 1) + i`
    send_stride = span * span * (n + 1)

    def send_times(start: int, r: int, q: int, rf: int, i: int) -> tuple[float, float]:
        """Forward and backward transfer times across the cut before layer ``i``, seconds, from a
        stage of ``r`` replicas at ``start`` to the suffix's first stage (``rf`` replicas), which
        ends the suffix's ``q`` devices."""
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
            ckey = (start, r, q - rf, rf)
            classes = uneven_classes.get(ckey)
            if classes is None:
                classes = transfer_classes(model, devices(start, r), devices(q - rf, rf))
                uneven_classes[ckey] = classes
            ulines = uneven[ukey] = uneven_lines(model, classes, b)
        return eval_lines(ulines[0], cut[i - 1]), eval_lines(ulines[1], cut[i - 1])

    # a tied matrix of the first and the last stage: its pair all-reduce once both have drained
    # and reduced (planner/tied_grads.py), seen here at the first stage; a suffix keeps its last
    # stage's `lead` and `tail`, and one is dropped for another only with the same tail
    tied = last_layer_ties(model.profile) if n > 1 else ()
    pair_cache: dict[tuple[int, int, int, int, int], float]
    pair_cache = model.memo.setdefault(("dapple-tied-pair", policy), {})  # type: ignore[assignment]

    def copies_of(first: int) -> int:
        """Bytes of the tied copies a last stage from layer ``first`` holds (owners before it)."""
        return sum(nbytes for owner, nbytes in tied if owner < first)

    def tied_s(start: int, r: int, i: int, tail: tuple[int, int, float]) -> float:
        """The pair all-reduces of a first stage (layers ``0..i-1`` at ``(start, r)``) with the
        last stage at ``tail``: one per tied matrix whose owner it holds, one after another, s."""
        key = (start, r, tail[0], tail[1], i)
        found = pair_cache.get(key)
        if found is None:
            src, dst = devices(start, r), devices(tail[0], tail[1])
            dtype, grad = model.profile.dtype, model.grad_reduce_dtype
            found = pair_cache[key] = sum(
                pair_allreduce_s(model, src, dst, tied_grad_bytes(nbytes, 1, dtype, grad), algo)
                for owner, nbytes in tied if owner < i)
        return found

    best: _Entry | None = None
    bound = min(threshold, start_bound)
    mm1 = m - 1
    buckets: dict[int, dict[tuple[int, int], list[_Entry]]] = {p: {} for p in positions}
    empty = _Entry(NEG_INF, NEG_INF, 0, None, n, n, 0, 0)
    buckets[n][(0, 0)] = [empty]
    ends = list(positions)
    # Per device start, its slots (one per replica count; their rows, one per stage start index
    # `pj` at the current end `i`, in `row_cache`, computed as far as some suffix state asked:
    # the suffix states of one start share them); per device start at the current end and
    # `version`, each slot's `dead` mark: the least `k_min` at which its first row (at the
    # highest `pj` the floors allow) ends it, 0 for every `k_min`.
    starts: dict[int, tuple[_SlotT, ...]] = floors.starts
    deads_of: dict[int, list[int]] = {}
    version = 0  # counts the changes of `bound`: the dead marks are reset after one

    ar_span = (n + 1) * (n + 1)  # `ar_times` keys: ((start, r), first, i) as one integer

    def extend(start: int, r: int, left: int, tab: ShareTable, share: int, i: int, pj: int) -> _RowT:
        """The row of the stage of layers ``ends[pj]..i-1`` on ``r`` replicas at ``start`` (``left``
        devices left after it, at ``share`` samples of table ``tab``)."""
        first = ends[pj]
        mkey = (share, i)
        suffix = act_max.get(mkey)
        if suffix is None:
            suffix = act_max[mkey] = _suffix_max(tab.acts, i)
        max_act = suffix[first]  # the stage's largest per-layer working set over layers first..i-1
        fwd = tab.fwd[i] - tab.fwd[first]
        bwd = tab.bwd[i] - tab.bwd[first]
        pbytes = params[i] - params[first]
        kept = tab.stashed[i] - tab.stashed[first]  # per recompute mode (stage_activations)
        held = tab.held[i] - tab.held[first] if held_mode else 0.0
        if first > 0:
            inputs = cut[first - 1] * share
            # the prefix's stages run their forwards (backwards) one after another for the first
            # (last) micro-batch: Z grows by the sum of their forwards, W by the sum of their
            # forward-plus-backward times
            sums = sums_left[left]
            lb_extra = full_fwd[first] / left
            if sums[0][pj] > lb_extra:
                lb_extra = sums[0][pj]
            fb_extra = floor_work[pj] / left
            if sums[1][pj] > fb_extra:
                fb_extra = sums[1][pj]
        else:
            inputs = lb_extra = fb_extra = 0.0
        stash = inputs + kept - received_checkpoint_bytes(
            model.profile, first, model.recompute, inputs, tab.stashed[first + 1] - tab.stashed[first]
        )
        tkey = (start * (num_dev + 1) + r) * ar_span + first * (n + 1) + i
        ar = ar_times.get(tkey, -1.0)
        if ar < 0.0:
            akey = (start, r)
            if akey in ar_cache:
                curves = ar_cache[akey]
            else:
                curves = ar_cache[akey] = model.allreduce_curves(devices(start, r)) if r > 1 else None
            # the all-reduce, then the update after it (the estimate's tail), of the stage's
            # parameters and, on the last stage, its tied copies (an ordinary parameter there)
            own = pbytes + (copies_of(first) if i == n else 0)
            ar = 0.0 if curves is None else curves.time_s(own * model.grad_bytes, algo)
            ar = ar_times[tkey] = ar + model.optimizer_step_s(own)
        step = model.optimizer_step_s(pbytes + (copies_of(first) if i == n else 0)) if tied else 0.0
        return (
            first, pbytes * mult, kept, stash, held + max_act, fwd, fwd + bwd, bwd, ar, bwd + ar,
            lb_extra, fb_extra, ar - step, step,
        )  # fmt: skip

    def top_cap(left: int) -> int:
        """The highest stage start index the prefix floors allow (``-1``: none) under ``bound``,
        for a stage with ``left`` devices left after it, whatever its end: a stage ending at
        ``ends[pi]`` starts at most at ``min(pi - 1, top_cap(left))`` (or at 0 when
        ``left <= 0``)."""
        # the work floor grows with the start (and is 0 at the first): the last start below the
        # bound by a binary search, then the exact test
        top = min(len(floor_work) - 1, bisect.bisect_left(floor_work, bound * left / m))
        while top > 0 and m * floor_work[top] / left >= bound:
            top -= 1
        while top < len(floor_work) - 1 and m * floor_work[top + 1] / left < bound:
            top += 1
        neck = bisect.bisect_left(stage_floor[left], bound / m) - 1  # the slowest stage's floor
        return neck if neck < top else top

    caps: dict[int, int] = {}  # top_cap per devices left, at `caps_version`
    caps_version = version
    row_get = row_cache.get
    for pi in range(len(ends) - 1, 0, -1):
        i = ends[pi]
        deads_of.clear()
        deads_version = version
        for (q, rf), entries in sorted(buckets[i].items()):
            if not entries:
                continue
            start = stage_start(q, policy, grid)
            k_min = (entries[0].k if len(entries) == 1 else min([e.k for e in entries])) + 1
            if k_min > m:
                k_min = m
            send_cut = ((q - rf) * span + rf) * (n + 1) + i
            slots = starts.get(start)
            if slots is None:
                slots = starts[start] = tuple(
                    (r, num_dev - start - r, tables[r], -(-b // r), (start + r, r))
                    for r in cands
                    if start + r <= num_dev
                )
            if deads_version != version:
                # marks made under a higher bound are dropped here (those the later slots of a
                # state whose row lowered the bound still read hold: a lower bound ends no less)
                deads_of.clear()
                deads_version = version
            deads = deads_of.get(start)
            if deads is None:
                deads = deads_of[start] = [_ALIVE] * len(slots)
            ibase = (i * span + start) * span
            last: list[tuple[float, float, int, _Entry]] | None = None
            if i == n:
                last = [(e.w, e.z, min(e.k + 1, m), e) for e in entries]
            for idx, (r, left, tab, share, bucket_key) in enumerate(slots):
                if k_min >= deads[idx]:
                    continue  # its first row ends it at this `k_min` (or one below), as before
                shifted = last
                # Stage starts the prefix floors rule out are skipped (the bound only falls)
                if left <= 0:
                    top_pj = 0  # with no device left only layer 0 can start the stage
                else:
                    if caps_version != version:
                        caps.clear()
                        caps_version = version
                    top_pj = caps.get(left, -2)
                    if top_pj == -2:
                        top_pj = caps[left] = top_cap(left)
                    if top_pj >= pi:
                        top_pj = pi - 1
                    if top_pj < 0:
                        deads[idx] = 0
                        continue
                base = (ibase + r) * n
                for pj in range(top_pj, -1, -1):
                    row = row_get(base + pj)
                    if row is None:
                        row = row_cache[base + pj] = extend(start, r, left, tab, share, i, pj)
                    (first, static, kept, stash, work, fwd, fb, bwd, ar, bar, lb_extra, fb_extra, dp_s,
                     step_s) = row  # fmt: skip
                    if static + k_min * kept + work > memory_limit_bytes:
                        if pj == top_pj and kept >= 0.0:
                            deads[idx] = k_min  # more in flight needs no less memory
                        break  # a longer stage only needs more memory
                    head = fwd + mm1 * fb + bwd  # M (F + B), as prepend computes it
                    if head >= bound:
                        if pj == top_pj:
                            deads[idx] = 0  # whatever the suffix, until the bound moves
                        break  # as `not any_alive` below would: longer stages are slower still
                    if head + fb_extra >= bound:
                        continue  # every entry's W is at least `head`, and Z at least the final W
                    head_ar = head + ar
                    if shifted is None:
                        # the transfer pseudo-stage is built only for a stage that may be fast
                        # enough: with free transfers every entry is no slower, a lower bound
                        # (`max(head_ar, .)` of the least, as the least of `max(head_ar, .)`)
                        lb = math.inf
                        for e in entries:
                            x = bar + e.w
                            if e.z > x:
                                x = e.z
                            x = fwd + x
                            if x < lb:
                                lb = x
                        if head_ar > lb:
                            lb = head_ar
                        if lb >= bound:
                            break  # as `not any_alive` below would
                        skey = (start * span + r) * send_stride + send_cut
                        sent = sends.get(skey)
                        if sent is None:
                            sent = sends[skey] = send_times(start, r, q, rf, i)
                        t_fb = sent
                        shifted = _shifted(entries, *t_fb, m)
                    bucket = None
                    any_alive = False
                    t_f = t_fb[0] if i < n else 0.0
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
                        if tied:  # the last stage's sync: its own if it is this one
                            if e.replicas:
                                lead, tail = fwd + t_f + e.lead, e.tail
                            else:
                                lead, tail = head + dp_s, (start, r, step_s)
                        if first == 0:
                            if tied and e.replicas:  # the pair all-reduce, then both steps
                                ready = w2 + dp_s if w2 + dp_s > lead else lead
                                done = ready + tied_s(start, r, i, tail) + max(step_s, tail[2])
                                if done > z2:
                                    z2 = done
                                    if z2 >= bound:
                                        continue
                            best = _Entry(w2, z2, k2, e, first, i - 1, r, start)
                            bound = z2
                            version += 1
                            continue
                        if w2 + fb_extra >= bound:
                            continue  # the layers left run forward and backward before W's path
                        if bucket is None:
                            bucket = buckets[first].setdefault(bucket_key, [])
                        if tied:  # (W, Z, k, lead) among the suffixes ending at the same last stage
                            keep_pareto(bucket, _Entry(w2, z2, k2, e, first, i - 1, r, start, lead, tail))
                            continue
                        dominates = False
                        for d in bucket:
                            dw, dz, dk = d[0], d[1], d[2]  # w, z, k (indexing: the hottest loop)
                            if dw <= w2 and dz <= z2 and dk <= k2:
                                break  # an entry no worse in all three is kept already
                            if w2 <= dw and z2 <= dz and k2 <= dk:
                                dominates = True
                        else:
                            if dominates:  # drop the entries the new one is no worse than
                                bucket[:] = [d for d in bucket if not (w2 <= d.w and z2 <= d.z and k2 <= d.k)]
                            bucket.append(_Entry(w2, z2, k2, e, first, i - 1, r, start))
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
