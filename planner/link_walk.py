"""A plan's order walked per replica, its transfers and gradient all-reduces sharing the links they cross.

The estimate's closed forms (:mod:`pipesim.planner.latency`) and the order evaluation
(:mod:`pipesim.planner.schedule_time`) time every transfer alone and every stage's replicas in
lock step at the largest share; the link bound
(:meth:`~pipesim.planner.estimate.CostModel.link_bound_s`) only sums a link's bytes over the
iteration. None of them sees what slows a pipeline whose transfers of *different* stage
boundaries, in *both* directions, and its gradient all-reduces meet on one link (a server's NIC
or PCIe uplink on a 10 GbE cluster): each transfer runs at its share of the link while the
others run, and the rank that needs it waits with it, round after round of the 1F1B loop.
:func:`shared_walk_time_s` times that with one discrete-event walk of the plan's own order (the
generator's, as the simulator runs it):

* **Compute**: every replica of a stage runs the stage's row of the order (``F``, ``B``, or
  ``I`` then ``W``), each action when the replica is free and its inputs have arrived, at its own
  share of the micro-batch (:func:`~pipesim.plan.split_samples`: uneven replica sets run apart,
  the smaller shares ahead, as in the simulator).
* **Transfers**: one :func:`~pipesim.plan.resplit` of the micro-batch per stage boundary; each
  piece leaves when its source replica's action ends and is one flow from its device to its
  peer's. A device pair's pieces go one after another in issue order (one FIFO stream per
  ordered pair, as the simulator's point-to-point streams), the route latency pipelined (as in
  :func:`pipesim.schedules.evaluate`). A replica's action waits for all its pieces.
* **Link sharing**: the fluid model of :mod:`pipesim.planner.nic_sharing` for any number of
  flows: the flows crossing a link share it equally while they run (each flow at the smallest
  share along its route), as the simulator's max-min sharing gives equal flows
  (``simulator/network.py``), short of redistributing a share a flow cannot use.
* **Gradient all-reduces**: a replicated stage's starts when its last replica's last action
  ends, as one more flow over the NIC links it crosses
  (:meth:`~pipesim.planner.estimate.CostModel.allreduce_network_links`) that takes its
  estimated time alone and shares those links with the transfers still in flight and the other
  stages' all-reduces; then the optimizer step (after a tied matrix's pair all-reduce on the
  stages of a tied pair: :func:`~pipesim.planner.tied_grads.tied_finish_s`).

With every stream on links of its own and no all-reduce on a transfer's link (no sharing), the
walk adds nothing to the order evaluation the estimate already takes: :func:`shared_walk_time_s`
answers ``None`` there, and keeps the closed forms exact; also where the shared links carry less
than :data:`LOAD_FRACTION` of a micro-batch's compute (their sharing cannot move the pipeline
much; the walk's cost is spared). One walk costs ``O(actions x replicas + flow events x flows in
flight)``; past :data:`DIRECT_MICROBATCHES` micro-batches the order is walked at three counts a
period apart and extrapolated, so the cost stops growing with the micro-batch count once the
steady phase is reached. Each walk is kept in the cost model's memo under everything it reads,
by value (stages' ranks, replicas' devices and compute times, pieces and routes, all-reduces, the
count walked): plans that walk alike at other global batch sizes share it (a planner's sweep).

Measured against the simulation over the 218 plans of ``experiments/planner_speedup.py``
(docs/planner.md): the largest ``|error|`` from 29.4% to 3.1%; the docs/communication.md
example of 8 single-GPU servers over 1 Gb/s from -31% to the simulation (the two streams on
each uplink share it equally, as max-min gives equal flows). Queueing the flows on a link first
come, first served instead (tried: 16.5% largest) gives the earlier transfer the whole link,
where sharing slows both; timing every replica at the largest share in lock step (tried: vgg19's
12 | 3 | 1 plans +11% to +13%) misses that replicas with smaller shares send earlier.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any, Protocol

from pipesim.plan import Plan, resplit, split_samples
from pipesim.planner.cost_tables import ShareTable, StageCosts, largest_microbatch
from pipesim.planner.iteration_time import CostModelLike, rank_of
from pipesim.planner.schedule_time import schedule_order
from pipesim.planner.tied_grads import rank_pairs, tied_finish_s
from pipesim.schedules.action import Op

__all__ = [
    "DIRECT_MICROBATCHES",
    "LOAD_FRACTION",
    "MAX_WALKED_REPLICAS",
    "PERIODIC_TOLERANCE",
    "WALKED_SCHEDULES",
    "WalkModel",
    "shared_walk_time_s",
]

WALKED_SCHEDULES: tuple[str, ...] = ("dapple", "1f1b", "zb-h1", "zb-h2", "zb-auto")
"""Schedules whose orders the walk runs (one stage per rank, one unit per action)."""

DIRECT_MICROBATCHES = 16
"""Orders of at most this many micro-batches (or three periods of the steady phase) are walked
whole; longer ones at three counts one period apart, and extrapolated by whole periods once the
three grow alike (the window doubles until they do), as
:func:`~pipesim.planner.schedule_time.order_time_s` extrapolates the order's evaluation: the
walk's cost does not grow with the micro-batch count once the steady phase is reached."""

PERIODIC_TOLERANCE = 1e-3
"""Three walks a period apart grow alike when their two growths differ by at most this fraction
of the last: the extrapolation's error is then at most that fraction of the extrapolated part
(shared links and uneven replicas settle to a steady phase only up to rounding-sized drifts)."""

MAX_WALKED_REPLICAS = 128
"""Plans with more replicas than this in all (summed over stages) are left to the closed forms:
the walk runs every replica, and a plan's many replicas of one stage on a large cluster (1024
GPUs in ``benchmarks/bench_planner.py large``) would take it seconds per estimate."""

LOAD_FRACTION = 0.25
"""The walk runs where a shared link carries, per micro-batch, at least this fraction of the
busiest replica's compute per micro-batch (forward and backward); below it, the sharing moves
the iteration by at most about that fraction, and the closed forms answer."""

_F, _B, _I, _W = 0, 1, 2, 3
_OPS = {Op.F: _F, Op.B: _B, Op.I: _I, Op.W: _W}


class WalkModel(CostModelLike, Protocol):
    """What the walk asks of :class:`~pipesim.planner.estimate.CostModel` beyond
    :class:`~pipesim.planner.iteration_time.CostModelLike`."""

    memo: dict[tuple[object, ...], object]

    def share_table(self, samples: float) -> ShareTable:
        """Prefix sums of per-layer costs at ``samples`` per replica."""
        ...


Route = tuple[float, tuple[tuple[int, float], ...]]
"""A device pair's route: ``(latency s, ((link, seconds per byte), ...))`` over its finite links."""

FlowRoute = tuple[float, tuple[tuple[int, float], ...], float]
"""A route as a plan's flows take it: ``(latency s, its links that other flows of the plan may
cross, (link, seconds per byte), its rate alone in bytes/s)``."""


def _route(model: WalkModel, a: int, z: int) -> Route:
    key = ("link-walk-route", a, z)
    found = model.memo.get(key)
    if found is None:
        cluster = model.cluster
        route = cluster.route(a, z)
        found = model.memo[key] = (
            sum(cluster.links[link].latency_s for link in route),
            tuple(
                (link, 1.0 / cluster.links[link].bandwidth_bytes_per_s)
                for link in dict.fromkeys(route)
                if cluster.links[link].bandwidth_bytes_per_s < math.inf
            ),
        )
    return found  # type: ignore[return-value]


def shared_walk_time_s(model: WalkModel, plan: Plan, costs: Sequence[StageCosts]) -> float | None:
    """The iteration time of ``plan`` walked per replica with its transfers and all-reduces
    sharing links, seconds (see the module docstring); ``None`` when the walk does not apply:
    a schedule outside :data:`WALKED_SCHEDULES` or with chunks, one stage, a stage with more
    replicas than a micro-batch has samples, more than :data:`MAX_WALKED_REPLICAS` replicas in
    all, no finite link that two streams (or a stream and a
    gradient all-reduce) cross, or shared links busy less than :data:`LOAD_FRACTION` of the
    busiest replica's compute per micro-batch (the closed forms answer there).

    ``costs`` are the plan's :meth:`~pipesim.planner.estimate.CostModel.stage_costs` (each
    stage at its largest share); replicas with a smaller share read ``model.share_table``.

    Raises:
        InputError: the schedule's generator refuses the plan's micro-batch count or options
            (as :func:`~pipesim.planner.schedule_time.order_time_s` does).
    """
    if plan.schedule not in WALKED_SCHEDULES or plan.chunks != 1:
        return None
    p, num = plan.num_ranks, plan.num_stages
    m_all = plan.num_microbatches
    placement = plan.placement(model.cluster.num_devices)
    where = rank_of(plan)
    samples = largest_microbatch(plan)
    if num < 2 or any(stage.replicas > samples for stage in plan.stages):
        return None  # no transfer; or replicas without a sample, which the closed forms time
    if sum(stage.replicas for stage in plan.stages) > MAX_WALKED_REPLICAS:
        return None  # the walk's cost grows with the replicas: the closed forms
    # units: one per (stage, replica)
    first_unit: list[int] = []
    unit_stage: list[int] = []
    unit_device: list[int] = []
    unit_share: list[int] = []
    for s in range(num):
        first_unit.append(len(unit_stage))
        devices = placement[where[s]]
        for j, (lo, hi) in enumerate(split_samples(samples, len(devices))):
            unit_stage.append(s)
            unit_device.append(devices[j])
            unit_share.append(hi - lo)
    first_unit.append(len(unit_stage))
    units = len(unit_stage)
    # pieces per boundary: (src unit, dst unit, bytes); out_f[u]: u's activation pieces, out_b[u]
    # its gradient pieces; need_f[u] / need_b[u]: how many pieces u waits for per micro-batch
    out_f: list[list[tuple[int, float, Any]]] = [[] for _ in range(units)]
    out_b: list[list[tuple[int, float, Any]]] = [[] for _ in range(units)]
    need_f = [0] * units
    need_b = [0] * units
    crossing: dict[int, set[tuple[int, int]]] = {}
    for b in range(num - 1):
        if where[b] == where[b + 1]:
            continue
        src, dst = placement[where[b]], placement[where[b + 1]]
        nbytes = samples * model.cut_bytes_per_sample[plan.stages[b].last_layer]
        for i, k, n in resplit(split_samples(samples, len(src)), split_samples(samples, len(dst))):
            ua, uz = first_unit[b] + i, first_unit[b + 1] + k
            a, z = src[i], dst[k]
            piece = n / samples * nbytes
            there = _route(model, a, z) if a != z else None
            back = _route(model, z, a) if a != z else None
            out_f[ua].append((uz, piece, there))
            out_b[uz].append((ua, piece, back))
            need_f[uz] += 1
            need_b[ua] += 1
            for pair, route in (((a, z), there), ((z, a), back)):
                for link, _ in route[1] if route else ():
                    crossing.setdefault(link, set()).add(pair)
    nic = [
        model.allreduce_network_links(placement[where[s]]) if plan.stages[s].replicas > 1 else frozenset()
        for s in range(num)
    ]
    reduced: set[int] = set().union(*nic)
    shared = {link for link, pairs in crossing.items() if len(pairs) > 1 or link in reduced}
    if not shared:
        return None
    # per route: its latency, the shared links it crosses, its rate alone (bytes/s)
    flow_routes: dict[int, FlowRoute] = {}
    for out in (out_f, out_b):
        for u in range(units):
            for j, (peer, nbytes, route) in enumerate(out[u]):
                if route is None:
                    continue
                found = flow_routes.get(id(route))
                if found is None:
                    alone = min((1.0 / per for _, per in route[1]), default=math.inf)
                    found = flow_routes[id(route)] = (
                        route[0], tuple(x for x in route[1] if x[0] in shared), alone
                    )
                out[u][j] = (peer, nbytes, found)
    # compute times per unit: the stage's costs at the largest share, the table at a smaller one
    f_time, b_time, w_time = [0.0] * units, [0.0] * units, [0.0] * units
    largest = [-(-samples // plan.stages[s].replicas) for s in range(num)]
    for u in range(units):
        s = unit_stage[u]
        c = costs[s]
        if unit_share[u] == largest[s]:
            f_time[u], b_time[u], w_time[u] = c.fwd_s, c.bwd_s, min(c.wgrad_s, c.bwd_s)
        else:
            table = model.share_table(unit_share[u])
            lo, hi = plan.stages[s].first_layer, plan.stages[s].last_layer + 1
            f_time[u] = table.fwd[hi] - table.fwd[lo]
            b_time[u] = table.bwd[hi] - table.bwd[lo]
            w_time[u] = min(table.wgrad[hi] - table.wgrad[lo], b_time[u])
    # a shared link busy a small part of the pipeline's cycle cannot move it: the closed forms
    load: dict[int, float] = {}
    for out in (out_f, out_b):
        for flows_of in out:
            for _, nbytes, route in flows_of:
                for link, per in route[1] if route is not None else ():
                    load[link] = load.get(link, 0.0) + nbytes * per
    cycle = max(f + b for f, b in zip(f_time, b_time, strict=True))
    if max(load.values(), default=0.0) < LOAD_FRACTION * cycle:
        return None

    tied = rank_pairs(costs, range(num))  # (one stage per rank here)
    options: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in dict(plan.schedule_options).items()
    }
    order_options = tuple(sorted(options.items()))
    # everything a walk reads, by value: plans that walk alike (the same stages, devices, shares and
    # order at another global batch size) share their walks (same inputs, same result)
    walk_key = (
        "link-walk-run",
        plan.schedule,
        order_options,
        p,
        tuple(where),
        tuple(first_unit),
        tuple(unit_device),
        tuple(f_time),
        tuple(b_time),
        tuple(w_time),
        tuple(tuple(flows_of) for flows_of in out_f),
        tuple(tuple(flows_of) for flows_of in out_b),
        tuple((c.allreduce_s, c.optimizer_s, c.tied) for c in costs),
        tuple(tuple(sorted(links)) for links in nic),
    )

    def run(m: int) -> float | None:
        """The walk of the order of ``m`` micro-batches, kept in ``model.memo`` by ``walk_key`` and ``m``."""
        key = (*walk_key, m)
        if key in model.memo:
            return model.memo[key]  # type: ignore[return-value]
        found = model.memo[key] = walk(m)
        return found

    def walk(m: int) -> float | None:
        """The walk of the order of ``m`` micro-batches."""
        order = schedule_order(plan.schedule, p, m, plan.chunks, order_options)
        rows: list[list[tuple[int, int]]] = []
        for row in order.ranks:
            ops = []
            for action in row:
                if action.op not in _OPS or action.microbatch is None:
                    return None
                ops.append((_OPS[action.op], action.microbatch))
            rows.append(ops)
        heads = [s == 0 for s in range(num)]
        tails = [s == num - 1 for s in range(num)]
        f_end: list[list[float]] = [[-1.0] * m for _ in range(units)]
        g_end: list[list[float]] = [[-1.0] * m for _ in range(units)]
        arr_f: list[list[float]] = [[-1.0] * m for _ in range(units)]  # all input pieces arrived
        arr_b: list[list[float]] = [[-1.0] * m for _ in range(units)]  # all gradient pieces arrived
        left_f = [[need_f[u]] * m for u in range(units)]
        left_b = [[need_b[u]] * m for u in range(units)]
        latest_f = [[0.0] * m for _ in range(units)]
        latest_b = [[0.0] * m for _ in range(units)]
        unit_end = [0.0] * units
        free = [0.0] * units
        pointer = [0] * units
        issues: list[tuple[float, int, int, int, int]] = []  # (time, seq, unit, direction, mb)
        delayed: list[tuple[float, int, list[Any]]] = []  # flows waiting out their latency or start
        pending = [first_unit[s + 1] - first_unit[s] for s in range(num)]  # replicas still running
        seq = 0

        def advance(u: int) -> None:
            nonlocal seq
            s = unit_stage[u]
            row = rows[where[s]]
            i, t_free = pointer[u], free[u]
            while i < len(row):
                op, mb = row[i]
                if op == _F:
                    if heads[s]:
                        ready = 0.0
                    else:
                        ready = arr_f[u][mb]
                        if ready < 0:
                            break
                    end = (ready if ready > t_free else t_free) + f_time[u]
                    f_end[u][mb] = end
                    if not tails[s]:
                        heapq.heappush(issues, (end, seq, u, 0, mb))
                        seq += 1
                elif op == _W:
                    ready = g_end[u][mb]
                    if ready < 0:
                        break
                    end = (ready if ready > t_free else t_free) + w_time[u]
                else:  # B or I
                    ready = f_end[u][mb]
                    if ready < 0:
                        break
                    if not tails[s]:
                        grad = arr_b[u][mb]
                        if grad < 0:
                            break
                        ready = max(ready, grad)
                    took = b_time[u] if op == _B else b_time[u] - w_time[u]
                    end = (ready if ready > t_free else t_free) + took
                    g_end[u][mb] = end
                    if not heads[s]:
                        heapq.heappush(issues, (end, seq, u, 1, mb))
                        seq += 1
                t_free = end
                i += 1
            pointer[u], free[u] = i, t_free
            if i == len(row):
                unit_end[u] = t_free
                pending[s] -= 1
                if pending[s] == 0 and costs[s].allreduce_s > 0:  # the stage's all-reduce, a flow
                    at = max(unit_end[first_unit[s] : first_unit[s + 1]])
                    links = tuple((link, 1.0) for link in nic[s])
                    flow = [costs[s].allreduce_s, links, 1.0, None, (2, s, 0), 0.0]
                    heapq.heappush(delayed, (at, seq, flow))
                    seq += 1

        # the network: flows [remaining, shared links ((link, s per unit), ...), rate alone,
        # stream, target, rate now]; a flow on no shared link runs at its rate alone (a timer)
        flows: list[list[Any]] = []
        timers: list[tuple[float, int, list[Any]]] = []
        count: dict[int, int] = {}
        busy_streams: set[tuple[int, int]] = set()
        queued: dict[tuple[int, int], list[tuple[float, list[Any]]]] = {}
        now = 0.0
        changed = True

        def start(flow: list[Any]) -> None:
            nonlocal seq, changed
            if not flow[1]:
                heapq.heappush(timers, (now + flow[0] / flow[2], seq, flow))
                seq += 1
                return
            flows.append(flow)
            changed = True
            for link, _ in flow[1]:
                count[link] = count.get(link, 0) + 1

        def arrive(target: tuple[int, int, int]) -> None:
            direction, u, mb = target
            if direction == 0:
                left_f[u][mb] -= 1
                if now > latest_f[u][mb]:
                    latest_f[u][mb] = now
                if left_f[u][mb] == 0:
                    arr_f[u][mb] = latest_f[u][mb]
                    advance(u)
            elif direction == 1:
                left_b[u][mb] -= 1
                if now > latest_b[u][mb]:
                    latest_b[u][mb] = now
                if left_b[u][mb] == 0:
                    arr_b[u][mb] = latest_b[u][mb]
                    advance(u)
            else:
                ar_end[u] = now

        def issue(u: int, direction: int, mb: int) -> None:
            nonlocal seq
            for peer, nbytes, route in out_f[u] if direction == 0 else out_b[u]:
                target = (direction, peer, mb)
                if route is None:
                    arrive(target)
                    continue
                stream = (unit_device[u], unit_device[peer])
                flow = [nbytes, route[1], route[2], stream, target, 0.0]
                if stream in busy_streams:
                    queued.setdefault(stream, []).append((now + route[0], flow))
                else:
                    busy_streams.add(stream)
                    heapq.heappush(delayed, (now + route[0], seq, flow))
                    seq += 1

        def finish(flow: list[Any]) -> None:
            nonlocal seq
            stream = flow[3]
            if stream is not None:
                waiting = queued.get(stream)
                if waiting:
                    ready_at, nxt_flow = waiting.pop(0)
                    heapq.heappush(delayed, (max(ready_at, now), seq, nxt_flow))
                    seq += 1
                else:
                    busy_streams.discard(stream)
            arrive(flow[4])

        ar_end = [0.0] * num
        for u in range(units):
            advance(u)
        inf = math.inf
        heappop = heapq.heappop
        while True:
            step = inf
            if flows:  # each flow's rate (flow[5]) changes only when a flow starts or ends
                if changed:
                    for flow in flows:
                        rate = flow[2]
                        for link, per in flow[1]:
                            r = 1.0 / (per * count[link])
                            if r < rate:
                                rate = r
                        flow[5] = rate
                    changed = False
                for flow in flows:
                    t = flow[0] / flow[5]
                    if t < step:
                        step = t
            nxt = issues[0][0] if issues else inf
            if delayed and delayed[0][0] < nxt:
                nxt = delayed[0][0]
            if timers and timers[0][0] < nxt:
                nxt = timers[0][0]
            if step == inf and nxt == inf:
                break
            later = now + step
            if nxt < later:  # step = max(0, nxt - now), later = max(nxt, now), without calls
                step = nxt - now
                if not step > 0.0:
                    step = 0.0
                later = now if now > nxt else nxt
            now = later
            if flows:
                finished: list[list[Any]] = []
                kept: list[list[Any]] = []
                for flow in flows:
                    moved = flow[5] * step
                    if flow[0] <= moved * (1 + 1e-12):
                        finished.append(flow)
                    else:
                        flow[0] -= moved
                        kept.append(flow)
                if finished:
                    flows[:] = kept
                    changed = True
                    for flow in finished:
                        for link, _ in flow[1]:
                            count[link] -= 1
                        finish(flow)
            while timers and timers[0][0] <= now:
                finish(heappop(timers)[2])
            while delayed and delayed[0][0] <= now:
                start(heappop(delayed)[2])
            while issues and issues[0][0] <= now:
                _, _, u, direction, mb = heappop(issues)
                issue(u, direction, mb)
            while delayed and delayed[0][0] <= now:
                start(heappop(delayed)[2])
        if any(pointer[u] < len(rows[where[unit_stage[u]]]) for u in range(units)):
            return None  # the generator's orders never deadlock
        end = max(free)
        ready = []
        for s in range(num):
            done = ar_end[s] if costs[s].allreduce_s > 0 else max(unit_end[first_unit[s] : first_unit[s + 1]])
            end = max(end, done + costs[s].optimizer_s)
            ready.append(done)
        return max(end, tied_finish_s(tied, ready, [c.optimizer_s for c in costs]))

    m = m_all
    period = p * 4 // math.gcd(p, 4)
    limit = max(DIRECT_MICROBATCHES, 3 * period)
    while m > limit:
        # the steady phase repeats every `period` micro-batches (the order's, as
        # pipesim.planner.schedule_time extrapolates it): once three walks a period apart grow
        # alike (PERIODIC_TOLERANCE), whole periods are added; a longer transient doubles the window
        m2 = limit - (limit - m) % period
        t0, t1, t2 = run(m2 - 2 * period), run(m2 - period), run(m2)
        if t0 is None or t1 is None or t2 is None:
            return None
        if abs((t2 - t1) - (t1 - t0)) <= PERIODIC_TOLERANCE * (t2 - t1):
            busiest = max(f + b for f, b in zip(f_time, b_time, strict=True))  # no replica runs faster
            return t2 + (m - m2) // period * max(t2 - t1, period * busiest)
        limit *= 2
    return run(m)
