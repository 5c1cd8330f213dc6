"""A plan's order walked with its point-to-point pieces queued on the links they share.

The estimate's closed forms (:mod:`pipesim.planner.latency`) and the order evaluation
(:mod:`pipesim.planner.schedule_time`) time every transfer alone; the link bound
(:meth:`~pipesim.planner.estimate.CostModel.link_bound_s`) only sums a link's bytes over the
iteration. Neither sees what slows a pipeline whose transfers of *different* stage boundaries,
in *both* directions, meet on one link (a server's NIC or PCIe uplink on a 10 GbE cluster):
each transfer waits for the bytes queued ahead of it, and the rank that needs it waits with
it, round after round of the 1F1B loop. :func:`shared_walk_time_s` times that with one
discrete-event walk of the plan's own order (the generator's, as the simulator runs it):

* **Compute**: each pipeline rank (its replicas in lock step, each timed at the largest share,
  as the rest of the estimate) runs its actions in order (``F``, ``B``, or ``I`` then ``W``),
  each when its rank is free and its input has arrived.
* **Transfers**: one :func:`~pipesim.plan.resplit` of the micro-batch per stage boundary, its
  pieces issued when the producing action ends. A piece goes on its device pair's stream after
  the stream's previous piece (FIFO, one stream per ordered device pair, as the simulator's
  point-to-point streams; route latency pipelined as in :func:`pipesim.schedules.evaluate`) and
  on every finite link of its route after the bytes queued there before it (each link a
  work-conserving FIFO server: the link carries what max-min sharing would, in issue order);
  it arrives when its last link has carried it. A transfer arrives with its last piece.
* **Gradient all-reduces**: each replicated stage's starts when its last action ends and shares
  its NIC links with the pieces still crossing them and the other stages' all-reduces
  (:func:`~pipesim.planner.latency.nic_sharing_end_s`, the closed form the rest of the
  estimate uses), then the optimizer step.

With every stream on links of its own (no sharing) the walk is the order evaluation the
estimate already takes, so :func:`shared_walk_time_s` answers ``None`` there and keeps the
closed forms exact. The cost is ``O(m x stages x pieces x route links)`` (``m`` micro-batches):
a few ms for the plans of ``experiments/planner_speedup.py``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

from pipesim.plan import Plan, resplit, split_samples
from pipesim.planner.cost_tables import StageCosts, largest_microbatch
from pipesim.planner.iteration_time import CostModelLike, rank_of
from pipesim.planner.latency import nic_sharing_end_s
from pipesim.planner.schedule_time import schedule_order
from pipesim.schedules.action import Op
from pipesim.schedules.placement import chain_bounds

__all__ = ["WALKED_SCHEDULES", "shared_walk_time_s"]

WALKED_SCHEDULES: tuple[str, ...] = ("dapple", "1f1b", "zb-h1", "zb-h2", "zb-auto")
"""Schedules whose orders the walk runs (one stage per rank, one unit per action)."""

Piece = tuple[int, int, float, float, tuple[tuple[int, float], ...]]
"""``(src device, dst device, bytes, route latency s, ((link, seconds per byte), ...))``."""


def _pieces(
    model: CostModelLike, src: Sequence[int], dst: Sequence[int], samples: int, nbytes: float
) -> list[Piece]:
    """A transfer's :func:`~pipesim.plan.resplit` pieces with their routes' finite links."""
    cluster = model.cluster
    out: list[Piece] = []
    for i, k, n in resplit(split_samples(samples, len(src)), split_samples(samples, len(dst))):
        a, z = src[i], dst[k]
        if a == z:
            continue
        route = cluster.route(a, z)
        latency = sum(cluster.links[link].latency_s for link in route)
        per_byte = tuple(
            (link, 1.0 / cluster.links[link].bandwidth_bytes_per_s)
            for link in dict.fromkeys(route)
            if cluster.links[link].bandwidth_bytes_per_s < math.inf
        )
        out.append((a, z, n / samples * nbytes, latency, per_byte))
    return out


def shared_walk_time_s(model: CostModelLike, plan: Plan, costs: Sequence[StageCosts]) -> float | None:
    """The iteration time of ``plan`` walked with its transfers queued on shared links, seconds
    (see the module docstring); ``None`` when the walk does not apply: a schedule outside
    :data:`WALKED_SCHEDULES`, or no finite link that two streams, or a stream and a gradient
    all-reduce, cross (then every transfer runs alone and the closed forms hold)."""
    if plan.schedule not in WALKED_SCHEDULES or plan.chunks != 1:
        return None
    p, m, num = plan.num_ranks, plan.num_microbatches, plan.num_stages
    placement = plan.placement(model.cluster.num_devices)
    where = rank_of(plan)
    samples = largest_microbatch(plan)
    heads, tails = chain_bounds("looped", num)
    fwd_pieces: list[list[Piece]] = [[] for _ in range(num)]  # boundary s -> s + 1
    bwd_pieces: list[list[Piece]] = [[] for _ in range(num)]  # boundary s + 1 -> s
    crossing: dict[int, set[tuple[int, int]]] = {}
    for b in range(num - 1):
        if where[b] == where[b + 1]:
            continue
        src, dst = placement[where[b]], placement[where[b + 1]]
        nbytes = samples * model.cut_bytes_per_sample[plan.stages[b].last_layer]
        fwd_pieces[b] = _pieces(model, src, dst, samples, nbytes)
        bwd_pieces[b] = _pieces(model, dst, src, samples, nbytes)
        for a, z, _, _, links in fwd_pieces[b] + bwd_pieces[b]:
            for link, _ in links:
                crossing.setdefault(link, set()).add((a, z))
    nic = [
        model.allreduce_network_links(placement[where[s]]) if plan.stages[s].replicas > 1 else frozenset()
        for s in range(num)
    ]
    reduced: set[int] = set().union(*nic)
    if not any(len(streams) > 1 or link in reduced for link, streams in crossing.items()):
        return None
    options: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in dict(plan.schedule_options).items()
    }
    order = schedule_order(plan.schedule, p, m, plan.chunks, tuple(sorted(options.items())))
    rows = order.ranks
    if any(a.op is Op.FB for row in rows for a in row):
        return None
    f_time = [c.fwd_s for c in costs]
    b_time = [c.bwd_s for c in costs]
    w_time = [min(c.wgrad_s, c.bwd_s) for c in costs]
    f_end: list[list[float | None]] = [[None] * m for _ in range(num)]
    g_end: list[list[float | None]] = [[None] * m for _ in range(num)]
    arr_f: list[list[float | None]] = [[None] * m for _ in range(num)]  # input activation at stage s
    arr_b: list[list[float | None]] = [[None] * m for _ in range(num)]  # output gradient at stage s
    stage_end = [0.0] * num
    free = [0.0] * p
    pointer = [0] * p
    link_free: dict[int, float] = {}
    stream_free: dict[tuple[int, int], float] = {}
    link_jobs: list[tuple[float, float, frozenset[int]]] = []  # pieces on all-reduce links
    events: list[tuple[float, int, int, int, int]] = []  # (time, seq, direction, boundary, mb)
    seq = 0

    def send(t: float, pieces: list[Piece]) -> float:
        arrival = t
        for a, z, nbytes, latency, links in pieces:
            base = max(t + latency, stream_free.get((a, z), 0.0))
            end = base
            for link, per_byte in links:
                busy = nbytes * per_byte
                fin = max(base, link_free.get(link, 0.0)) + busy
                link_free[link] = fin
                if fin > end:
                    end = fin
                if link in reduced:
                    link_jobs.append((fin - busy, busy, frozenset((link,))))
            stream_free[(a, z)] = end
            if end > arrival:
                arrival = end
        return arrival

    def advance(r: int) -> None:
        nonlocal seq
        row = rows[r]
        i, t_free = pointer[r], free[r]
        while i < len(row):
            action = row[i]
            op, s, mb = action.op, action.stage, action.microbatch
            assert mb is not None
            ready: float | None
            if op is Op.F:
                ready = 0.0 if heads[s] else (f_end[s - 1][mb] if where[s - 1] == where[s] else arr_f[s][mb])
                if ready is None:
                    break
                end = max(t_free, ready) + f_time[s]
                f_end[s][mb] = end
                if not tails[s] and where[s + 1] != where[s]:
                    heapq.heappush(events, (end, seq, 0, s, mb))
                    seq += 1
            elif op is Op.W:
                ready = g_end[s][mb]
                if ready is None:
                    break
                end = max(t_free, ready) + w_time[s]
            else:  # B or I
                ready = f_end[s][mb]
                if ready is None:
                    break
                if not tails[s]:
                    grad = g_end[s + 1][mb] if where[s + 1] == where[s] else arr_b[s][mb]
                    if grad is None:
                        break
                    ready = max(ready, grad)
                end = max(t_free, ready) + (b_time[s] if op is Op.B else b_time[s] - w_time[s])
                g_end[s][mb] = end
                if not heads[s] and where[s - 1] != where[s]:
                    heapq.heappush(events, (end, seq, 1, s - 1, mb))
                    seq += 1
            stage_end[s] = max(stage_end[s], end)
            t_free = end
            i += 1
        pointer[r], free[r] = i, t_free

    for r in range(p):
        advance(r)
    while events:
        t, _, direction, b, mb = heapq.heappop(events)
        if direction == 0:
            arr_f[b + 1][mb] = send(t, fwd_pieces[b])
            advance(where[b + 1])
        else:
            arr_b[b][mb] = send(t, bwd_pieces[b])
            advance(where[b])
    if any(pointer[r] < len(rows[r]) for r in range(p)):  # the generator's orders never deadlock
        return None
    jobs = [(stage_end[s], costs[s].allreduce_s, nic[s]) for s in range(num)]
    tails_s = [c.optimizer_s for c in costs] + [0.0] * len(link_jobs)
    return max(max(free), nic_sharing_end_s(jobs + link_jobs, tails_s))
