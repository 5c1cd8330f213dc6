"""Pipeline latency models: DAPPLE's closed form, its suffix recurrence, and a list scheduler.

* :func:`pipeline_time_s` / :func:`prepend`: DAPPLE's warm-up + steady + ending latency (Fan et
  al., PPoPP 2021, Sec. 4) over (pseudo-)stages, and the monotone suffix recurrence the DAPPLE
  dynamic program uses; GPipe's two flow-shop phases.
* :func:`timeline_schedule`: the plan's real action order on per-stage (or per replica class)
  timelines, transfers and the stages' all-reduces as fluid flows sharing the links they cross
  (or one FIFO link per transfer: DAPPLE's pseudo-stages); :func:`list_schedule`, its one
  timeline per stage form.
* :func:`ending_with_sharing`: the gradient all-reduces of the ending phase, sharing NIC links
  (for the closed form).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from typing import NamedTuple

from pipesim.errors import InputError, invalid

__all__ = [
    "FLUSH_SCHEDULES",
    "NEG_INF",
    "Flow",
    "LinkLoads",
    "backward_end_times",
    "ending_with_sharing",
    "in_flight",
    "list_schedule",
    "pipeline_time_s",
    "prepend",
    "timeline_schedule",
]

FLUSH_SCHEDULES: tuple[str, ...] = ("dapple", "1f1b", "gpipe")
"""Schedules the estimator knows: the 1F1B family (dapple, 1f1b) and gpipe."""

NEG_INF = -float("inf")


def in_flight(schedule: str, stage: int, num_stages: int, num_microbatches: int) -> int:
    """Micro-batches whose activations stage ``stage`` (0-based, of ``num_stages``) holds at its peak.

    ``min(S - i, M)`` for the 1F1B family (dapple, 1f1b), ``M`` for gpipe.

    Raises:
        InputError: a schedule the estimator does not know.
    """
    if schedule == "gpipe":
        return num_microbatches
    if schedule in ("dapple", "1f1b"):
        return min(num_stages - stage, num_microbatches)
    raise invalid("schedule", schedule, f"the planner estimates only {', '.join(FLUSH_SCHEDULES)}")


def prepend(
    state: tuple[float, float], fwd_s: float, bwd_s: float, allreduce_s: float, num_microbatches: int
) -> tuple[float, float]:
    """Put one (pseudo-)stage in front of a pipeline suffix summarised by ``(W, Z)``.

    For a sequence of (pseudo-)stages ``0..S-1`` with times ``F_s``, ``B_s``, ``AR_s`` and ``M``
    micro-batches, let ``A_Q = sum_{s<=Q} F_s + (M - 1)(F_Q + B_Q)``, ``P_Q = sum_{s<=Q} B_s`` and
    ``T_Q = max_{s<=Q} (sum_{s'=s..Q} B_s' + AR_s)``; the latency is ``Z = max_Q (A_Q + T_Q)``
    and ``W = max_Q (A_Q + P_Q)``. Prepending ``(F, B, AR)`` gives::

        W' = max(F + (M - 1)(F + B) + B,  F + B + W)
        Z' = max(F + (M - 1)(F + B) + B + AR,  F + max(Z, B + AR + W))

    Both are non-decreasing in ``W`` and ``Z``, so a dynamic program may keep only the
    Pareto-minimal ``(W, Z)`` of the suffixes it extends. The empty suffix is ``(-inf, -inf)``.
    """
    w, z = state
    head = fwd_s + (num_microbatches - 1) * (fwd_s + bwd_s) + bwd_s
    w2 = max(head, fwd_s + bwd_s + w)
    z2 = max(head + allreduce_s, fwd_s + max(z, bwd_s + allreduce_s + w))
    return w2, z2


def pipeline_time_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    allreduce_s: Sequence[float],
    num_microbatches: int,
    schedule: str = "dapple",
) -> float:
    """Iteration time of a pipeline of (pseudo-)stages, seconds.

    1F1B family (dapple, 1f1b): DAPPLE's latency (Fan et al., PPoPP 2021, Sec. 4): warm-up
    ``sum_{s<=Q} F_s``, steady phase ``(M - 1)(F_Q + B_Q)`` of the pivot ``Q`` and ending phase
    ``max_{s<=Q} (sum_{s'=s..Q} B_s' + AR_s)``, maximised over the pivot ``Q``. With equal stages
    and free links it is ``(M + S - 1)(F + B)``.

    gpipe: all forwards, then all backwards, each a flow shop of identical jobs (makespan
    ``sum + (M - 1) max``): ``sum F + (M - 1) max F + max_s (sum_{s'>=s} B + (M - 1) max_{s'>=s} B
    + AR_s)``.

    Args:
        fwd_s, bwd_s, allreduce_s: per (pseudo-)stage times, seconds, in pipeline order.
        num_microbatches: ``M`` >= 1.
        schedule: ``dapple``, ``1f1b`` or ``gpipe``.

    Raises:
        InputError: lists of different lengths or empty, ``M < 1``, or an unknown schedule.
    """
    n = len(fwd_s)
    if n == 0 or len(bwd_s) != n or len(allreduce_s) != n:
        raise invalid("fwd_s", list(fwd_s), "need one forward, backward and all-reduce time per stage")
    if num_microbatches < 1:
        raise invalid("num_microbatches", num_microbatches, "must be >= 1")
    m = num_microbatches
    if schedule == "gpipe":
        forward = sum(fwd_s) + (m - 1) * max(fwd_s)
        tail = 0.0
        total_b = 0.0
        max_b = 0.0
        for s in range(n - 1, -1, -1):
            total_b += bwd_s[s]
            max_b = max(max_b, bwd_s[s])
            tail = max(tail, total_b + (m - 1) * max_b + allreduce_s[s])
        return forward + tail
    if schedule not in ("dapple", "1f1b"):
        raise invalid("schedule", schedule, f"the planner estimates only {', '.join(FLUSH_SCHEDULES)}")
    state = (NEG_INF, NEG_INF)
    for s in range(n - 1, -1, -1):
        state = prepend(state, fwd_s[s], bwd_s[s], allreduce_s[s], m)
    return state[1]


def backward_end_times(
    fwd_s: Sequence[float], bwd_s: Sequence[float], num_microbatches: int, schedule: str
) -> list[float]:
    """When each (pseudo-)stage finishes its last backward under the latency model, seconds.

    1F1B family: ``E_s = max_{Q >= s} (A_Q + sum_{s'=s..Q} B_s')`` (see :func:`prepend`); gpipe:
    the forward makespan plus the backward flow shop from the last stage down to ``s``.
    """
    n = len(fwd_s)
    m = num_microbatches
    if schedule == "gpipe":
        start = sum(fwd_s) + (m - 1) * max(fwd_s)
        out = [0.0] * n
        total = 0.0
        top = 0.0
        for s in range(n - 1, -1, -1):
            total += bwd_s[s]
            top = max(top, bwd_s[s])
            out[s] = start + total + (m - 1) * top
        return out
    x = 0.0
    a = []
    for q in range(n):
        x += fwd_s[q]
        a.append(x + (m - 1) * (fwd_s[q] + bwd_s[q]))
    out = [0.0] * n
    for s in range(n):
        acc = 0.0
        best = NEG_INF
        for q in range(s, n):
            acc += bwd_s[q]
            best = max(best, a[q] + acc)
        out[s] = best
    return out


LinkLoads = Sequence[tuple[Hashable, float]]
"""``(link, busy_s)``: how long one transfer keeps each link it crosses busy, seconds."""


class Flow(NamedTuple):
    """One transfer per micro-batch between two timelines of :func:`timeline_schedule`.

    ``op`` ``"F"``: an activation, ready when ``src`` finishes a micro-batch's forward and needed
    before ``dst``'s forward of it; ``"B"``: a gradient, from ``src``'s backward to ``dst``'s.
    ``solo_s`` is its time alone, seconds; ``loads`` the busy time of every link it crosses.
    ``latency_s`` is a delay before it starts, seconds (route latency: no link is used).

    A flow may bundle several pieces that run side by side (the pieces between two classes of
    replicas): ``solo_s`` is then one piece's time on its own route and ``loads`` the busy time
    of all of them, so a link ``k`` pieces cross is asked for ``k`` times its capacity and the
    bundle takes ``k`` pieces' time there, and a piece shares a link with another flow's pieces
    as the simulator's max-min fair network shares it between single transfers.
    """

    op: str
    src: int
    dst: int
    solo_s: float
    loads: LinkLoads = ()
    latency_s: float = 0.0


def list_schedule(
    ranks: Sequence[Sequence[tuple[str, int, int]]],
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    fwd_comm_s: Sequence[float],
    bwd_comm_s: Sequence[float],
    *,
    fwd_links: Sequence[LinkLoads] | None = None,
    bwd_links: Sequence[LinkLoads] | None = None,
) -> tuple[float, list[float]]:
    """List-schedule per-rank action orders with transfers queued on links, seconds.

    ``ranks[r]`` is rank ``r``'s ordered ``(op, stage, microbatch)`` list (``op`` ``F`` or ``B``,
    one stage per rank). An action starts when its rank is free and its input has arrived. An
    activation leaving stage ``s`` after its forward is a transfer ready at that time taking
    ``fwd_comm_s[s]`` alone; a gradient leaving stage ``s + 1`` likewise takes ``bwd_comm_s[s]``.

    Links: by default each boundary and direction is one FIFO link (DAPPLE's pseudo-stage: the
    transfer occupies it for its whole time, micro-batches queue). With ``fwd_links[s]`` /
    ``bwd_links[s]`` (the busy time of every link a transfer crosses) transfers are instead
    fluid flows that share each link among those crossing it (:func:`_fluid_transfers`, an
    event-driven pass in time order): transfers of any boundaries and micro-batches that meet
    on a NIC slow each other down as they do in the simulator's max-min fair network.

    Returns:
        ``(makespan, end of each stage's last backward)``.

    Raises:
        InputError: a rank runs more than one stage, or the orders deadlock.
    """
    num = len(ranks)
    stage_of: list[int] = []
    orders: list[list[tuple[str, int]]] = []
    for actions in ranks:
        stages = {s for _, s, _ in actions}
        if len(stages) > 1:
            raise invalid("ranks", sorted(stages), "the list scheduler runs one stage per rank")
        stage_of.append(stages.pop() if stages else len(stage_of))
        orders.append([(op, k) for op, _, k in actions])
    unit_of = {s: r for r, s in enumerate(stage_of)}
    shared = fwd_links is not None or bwd_links is not None
    flows = []
    for s in range(num - 1):
        a, b = unit_of[s], unit_of[s + 1]
        flows.append(Flow("F", a, b, fwd_comm_s[s], fwd_links[s] if fwd_links is not None else ()))
        flows.append(Flow("B", b, a, bwd_comm_s[s], bwd_links[s] if bwd_links is not None else ()))
    makespan, last_b = timeline_schedule(
        orders, [fwd_s[s] for s in stage_of], [bwd_s[s] for s in stage_of], flows, shared_links=shared
    )
    ends = [0.0] * num
    for r, s in enumerate(stage_of):
        ends[s] = last_b[r]
    return makespan, ends


def timeline_schedule(
    orders: Sequence[Sequence[tuple[str, int]]],
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    flows: Sequence[Flow],
    *,
    shared_links: bool = True,
    tails: Sequence[tuple[Sequence[int], float, LinkLoads]] = (),
) -> tuple[float, list[float]]:
    """List-schedule timelines joined by transfers, seconds.

    Timeline ``u`` runs ``orders[u]``, ``(op, microbatch)`` pairs (``op`` ``F`` or ``B``) taking
    ``fwd_s[u]`` and ``bwd_s[u]`` each, in order: an action starts when the timeline is free and
    every flow into it of its kind (``F`` or ``B``, see :class:`Flow`) has delivered that
    micro-batch. A timeline is a pipeline stage, or a class of a stage's replicas that run in
    step (:mod:`pipesim.planner.replicas`).

    ``tails`` are jobs ``(timelines, solo_s, loads)`` that start when all those timelines have
    finished their last backward (a stage's gradient all-reduce) and run like flows.

    With ``shared_links`` the flows and tails are fluid and share the links in their ``loads``
    (:func:`_fluid_transfers`): an all-reduce slows the activations and gradients still crossing
    its NICs, and they slow it. Otherwise each flow is its own FIFO link: micro-batches queue on
    it, each occupying it for ``solo_s``; each tail runs alone.

    Returns:
        ``(makespan including the tails, end of each timeline's last backward)``.

    Raises:
        InputError: the orders deadlock.
    """
    num = len(orders)
    out: dict[tuple[str, int], list[int]] = {}
    need: dict[tuple[str, int], int] = {}
    for j, flow in enumerate(flows):
        out.setdefault((flow.op, flow.src), []).append(j)
        need[(flow.op, flow.dst)] = need.get((flow.op, flow.dst), 0) + 1
    out_f = [out.get(("F", u), []) for u in range(num)]
    out_b = [out.get(("B", u), []) for u in range(num)]
    need_f = [need.get(("F", u), 0) for u in range(num)]
    need_b = [need.get(("B", u), 0) for u in range(num)]
    got: dict[tuple[str, int, int], tuple[int, float]] = {}  # flows delivered, latest
    arrived: dict[tuple[str, int, int], float] = {}
    free = [0.0] * num
    last_b = [0.0] * num
    pos = [0] * num
    events: list[tuple[float, int, int, int]] = []  # (ready time, seq, flow, microbatch)
    seq = 0
    finished = [False] * num
    tails_of: list[list[int]] = [[] for _ in range(num)]
    waiting = [len(set(units)) for units, _, _ in tails]
    for tail, (units, _, _) in enumerate(tails):
        for u in set(units):
            tails_of[u].append(tail)
    tail_end = 0.0
    delay = [flow.latency_s for flow in flows]

    def advance(u: int) -> None:
        nonlocal seq
        actions = orders[u]
        p = pos[u]
        while p < len(actions):
            op, k = actions[p]
            if op == "F":
                ready = arrived.get(("F", u, k)) if need_f[u] else 0.0
            else:
                ready = arrived.get(("B", u, k)) if need_b[u] else 0.0
            if ready is None:
                break
            start = free[u] if free[u] > ready else ready
            end = start + (fwd_s[u] if op == "F" else bwd_s[u])
            free[u] = end
            if op == "F":
                sends = out_f[u]
            else:
                sends = out_b[u]
                if end > last_b[u]:
                    last_b[u] = end
            for j in sends:
                heapq.heappush(events, (end + delay[j], seq, j, k))
                seq += 1
            p += 1
        pos[u] = p
        if p == len(actions) and not finished[u]:
            finished[u] = True
            for tail in tails_of[u]:
                waiting[tail] -= 1
                if waiting[tail] == 0:
                    ready = max(last_b[v] for v in tails[tail][0])
                    heapq.heappush(events, (ready, seq, len(flows) + tail, 0))
                    seq += 1

    def deliver(j: int, k: int, when: float) -> None:
        nonlocal tail_end
        if j >= len(flows):
            tail_end = max(tail_end, when)
            return
        flow = flows[j]
        key = (flow.op, flow.dst, k)
        count, latest = got.get(key, (0, NEG_INF))
        count += 1
        if when > latest:
            latest = when
        if count < (need_f if flow.op == "F" else need_b)[flow.dst]:
            got[key] = (count, latest)
            return
        arrived[key] = latest
        advance(flow.dst)

    for u in range(num):
        advance(u)
    solo = [flow.solo_s for flow in flows] + [dur for _, dur, _ in tails]
    if not shared_links:
        link_free: dict[int, float] = {}
        while events:
            t, _, j, k = heapq.heappop(events)
            begin = max(t, link_free.get(j, 0.0))
            link_free[j] = done = begin + solo[j]
            deliver(j, k, done)
    else:
        loads = _merge_links([flow.loads for flow in flows] + [ld for _, _, ld in tails])
        _fluid_transfers(events, solo, loads, deliver)
    if any(pos[u] < len(orders[u]) for u in range(num)):
        raise InputError("the schedule's action orders deadlock in the planner's list scheduler")
    return max(max(free, default=0.0), tail_end), last_b


def _merge_links(loads: Sequence[LinkLoads]) -> list[LinkLoads]:
    """Merge links crossed by exactly the same flows into one (exact for the fluid model).

    Such links always carry the same transfers, so only each flow's largest busy time on them
    can bind; a route of many hops becomes one or two links.
    """
    users: dict[Hashable, list[int]] = {}
    for j, flow_loads in enumerate(loads):
        for link, _ in flow_loads:
            users.setdefault(link, []).append(j)
    group = {link: tuple(u) for link, u in users.items()}
    out: list[LinkLoads] = []
    for flow_loads in loads:
        merged: dict[Hashable, float] = {}
        for link, busy in flow_loads:
            key = group[link]
            if busy > merged.get(key, -1.0):
                merged[key] = busy
        out.append(tuple(merged.items()))
    return out


def _fluid_transfers(
    events: list[tuple[float, int, int, int]],
    solo_s: Sequence[float],
    loads: Sequence[LinkLoads],
    deliver: Callable[[int, int, float], None],
) -> None:
    """Run transfers as fluid flows that share links max-min fairly, delivering each when done.

    ``events`` holds ``(ready time, seq, flow, microbatch)``. A transfer ``j`` alone progresses at
    ``1 / solo_j`` of itself per second and then keeps link ``l`` busy ``d_jl`` seconds, so at
    full speed it asks for ``u_jl = d_jl / solo_j`` of the link (more than 1 for a bundle of
    pieces that cross ``l`` side by side, see :class:`Flow`). Each transfer runs at a fraction
    ``x_j <= 1`` of its full speed; the ``x`` are the max-min fair allocation under ``sum_j x_j
    u_jl <= 1`` on every link (progressive filling: raise every ``x`` together, freeze those on
    a link that fills, go on with the rest), as the simulator's network shares links between
    transfers: ``n`` equal transfers on one link get ``1 / n`` each, and a transfer held back
    elsewhere leaves the rest of a link to the others. ``deliver(flow, microbatch, time)`` may
    push new ready transfers onto ``events`` (never earlier than now).
    """
    # Every transfer of one flow index has the same solo time and link loads, so all of a flow's
    # active transfers progress at the same speed: the state is kept per flow (a class), with a
    # virtual clock of the progress one of its transfers makes, and each transfer finishes when
    # the clock has advanced by 1 since it started. A start or finish re-fills only the flows
    # linked to it through shared links (its connected component).
    now = 0.0
    speed: dict[int, float] = {}  # flow -> fraction of one transfer per second
    virt: dict[int, float] = {}  # flow -> virtual progress at t_upd
    t_upd: dict[int, float] = {}
    members: dict[int, list[tuple[float, int, int]]] = {}  # flow -> heap of (target, id, microbatch)
    on_link: dict[Hashable, set[int]] = {}  # link -> active flows
    unit: list[list[tuple[Hashable, float]]] = []  # (link, share one transfer asks for at full speed)
    for solo, flow_loads in zip(solo_s, loads, strict=True):
        unit.append([(link, busy / solo) for link, busy in flow_loads] if solo > 0 else [])
    peak = [max((u for _, u in links), default=0.0) for links in unit]
    finish: dict[int, tuple[float, int]] = {}  # flow -> (when its next transfer ends, its id)
    next_id = 0

    def refill(*seeds: int) -> None:
        component = set(seeds)
        todo = list(seeds)
        while todo:
            c = todo.pop()
            for link, _ in loads[c]:
                for other in on_link.get(link, ()):
                    if other not in component:
                        component.add(other)
                        todo.append(other)
        flows = [c for c in component if c in members]
        for c in flows:
            virt[c] += speed[c] * (now - t_upd[c])
            t_upd[c] = now
        if len(flows) == 1:  # alone on its links: the busiest one (or its own speed) binds
            (c,) = flows
            over = len(members[c]) * peak[c]
            speed[c] = 1.0 / (solo_s[c] * over) if over > 1.0 else 1.0 / solo_s[c]
            target, j, _ = members[c][0]
            finish[c] = (now + (target - virt[c]) / speed[c], j)
            return
        coef = {}
        for c in flows:
            n = len(members[c])
            coef[c] = [(link, n * u) for link, u in unit[c]]
        room: dict[Hashable, float] = {}
        ask: dict[Hashable, float] = {}  # what the live flows on each link ask for at full speed
        users: dict[Hashable, list[int]] = {}
        for c in flows:
            for link, a in coef[c]:
                room[link] = 1.0
                ask[link] = ask.get(link, 0.0) + a
                users.setdefault(link, []).append(c)
        level = 0.0
        live = set(flows)
        while live:
            step = 1.0 - level
            for link, a in ask.items():
                if room[link] < step * a:
                    step = room[link] / a
            level += step
            if level >= 1.0 - 1e-12:
                break
            full = []
            for link, a in ask.items():
                room[link] -= step * a
                if room[link] <= 1e-12:
                    full.append(link)
            for link in full:
                for c in users[link]:
                    if c in live:
                        live.discard(c)
                        speed[c] = level / solo_s[c]
                        for its, a in coef[c]:
                            left = ask.get(its)
                            if left is not None:
                                left -= a
                                if left <= 1e-15 * a or its == link:
                                    del ask[its]
                                else:
                                    ask[its] = left
                ask.pop(link, None)
        for c in live:
            speed[c] = level / solo_s[c]
        for c in flows:
            target, j, _ = members[c][0]
            finish[c] = (now + (target - virt[c]) / speed[c], j)

    while events or members:
        t_done = math.inf
        who = -1
        if finish:
            who = min(finish, key=finish.__getitem__)
            t_done = finish[who][0]
        t_ready = events[0][0] if events else math.inf
        if t_done <= t_ready:
            now = max(now, t_done)
            heap = members[who]
            virt[who] += speed[who] * (now - t_upd[who])
            t_upd[who] = now
            _, _, k = heapq.heappop(heap)
            if heap:
                refill(who)
            else:  # the flow leaves: re-fill the flows that shared a link with it
                del members[who]
                del finish[who]
                near: set[int] = set()
                for link, _ in loads[who]:
                    on_link[link].discard(who)
                    near |= on_link[link]
                if near:
                    refill(*near)
            deliver(who, k, now)
        else:
            _, _, flow, k = heapq.heappop(events)
            now = max(now, t_ready)
            if solo_s[flow] <= 0:
                deliver(flow, k, now)
                continue
            if flow not in members:
                members[flow] = []
                virt[flow] = 0.0
                t_upd[flow] = now
                speed[flow] = 1.0 / solo_s[flow]
            heapq.heappush(members[flow], (virt[flow] + speed[flow] * (now - t_upd[flow]) + 1.0, next_id, k))
            next_id += 1
            for link, _ in loads[flow]:
                on_link.setdefault(link, set()).add(flow)
            refill(flow)


def ending_with_sharing(jobs: Sequence[tuple[float, float, frozenset[int]]]) -> float:
    """When the last of several all-reduces ends if those crossing one NIC link share it, seconds.

    Each job is ``(start_s, solo_duration_s, nic_links)``; a running job progresses at rate
    ``1 / max over its links of (running jobs on that link)`` (processor sharing on the most
    shared NIC link; a job that crosses no NIC link runs at full speed). Returns the latest finish.
    """
    pending = sorted((j for j in jobs if j[1] > 0), key=lambda j: j[0])
    finish = max((j[0] for j in jobs), default=0.0)
    remaining: list[float] = []
    links: list[frozenset[int]] = []
    now = 0.0
    idx = 0
    while idx < len(pending) or remaining:
        if not remaining:
            now = max(now, pending[idx][0])
        while idx < len(pending) and pending[idx][0] <= now:
            remaining.append(pending[idx][1])
            links.append(pending[idx][2])
            idx += 1
        count: dict[int, int] = {}
        for job_links in links:
            for link in job_links:
                count[link] = count.get(link, 0) + 1
        rates = [1.0 / max((count[link] for link in job_links), default=1) for job_links in links]
        step = min(left / rate for left, rate in zip(remaining, rates, strict=True))
        if idx < len(pending):
            step = min(step, pending[idx][0] - now)
        now += step
        remaining = [left - step * rate for left, rate in zip(remaining, rates, strict=True)]
        keep = [k for k, left in enumerate(remaining) if left > 1e-12 * max(1.0, now)]
        if len(keep) < len(remaining):
            finish = max(finish, now)
            remaining = [remaining[k] for k in keep]
            links = [links[k] for k in keep]
    return finish
