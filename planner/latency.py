"""Pipeline latency models: DAPPLE's closed form, its suffix recurrence, and a list scheduler.

* :func:`pipeline_time_s` / :func:`prepend`: DAPPLE's warm-up + steady + ending latency (Fan et
  al., PPoPP 2021, Sec. 4) over (pseudo-)stages, and the monotone suffix recurrence the DAPPLE
  dynamic program uses; GPipe's two flow-shop phases.
* :func:`list_schedule`: the plan's real action order on per-rank timelines, transfers queued on
  the links they cross (or one FIFO link per boundary and direction: DAPPLE's pseudo-stages).
* :func:`ending_with_sharing`: the gradient all-reduces of the ending phase, sharing NIC links.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from pipesim.errors import InputError, invalid

__all__ = [
    "FLUSH_SCHEDULES",
    "NEG_INF",
    "LinkLoads",
    "backward_end_times",
    "ending_with_sharing",
    "in_flight",
    "list_schedule",
    "pipeline_time_s",
    "prepend",
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
        InputError: the orders deadlock.
    """
    num = len(ranks)
    rank_of: dict[int, int] = {}
    for r, actions in enumerate(ranks):
        for _, s, _ in actions:
            rank_of[s] = r
    loads_f: list[LinkLoads] = list(fwd_links) if fwd_links is not None else [()] * (num - 1)
    loads_b: list[LinkLoads] = list(bwd_links) if bwd_links is not None else [()] * (num - 1)
    arrived: dict[tuple[str, int, int], float] = {}
    free = [0.0] * num
    last_b = [0.0] * num
    pos = [0] * num
    events: list[tuple[float, int, str, int, int]] = []
    seq = 0

    def advance(r: int) -> None:
        nonlocal seq
        actions = ranks[r]
        p = pos[r]
        while p < len(actions):
            op, s, k = actions[p]
            if op == "F":
                ready = arrived.get(("F", s, k)) if s > 0 else 0.0
            else:
                ready = arrived.get(("B", s, k)) if s < num - 1 else 0.0
            if ready is None:
                break
            start = free[r] if free[r] > ready else ready
            end = start + (fwd_s[s] if op == "F" else bwd_s[s])
            free[r] = end
            if op == "F":
                if s < num - 1:
                    heapq.heappush(events, (end, seq, "F", s, k))
                    seq += 1
            else:
                if end > last_b[s]:
                    last_b[s] = end
                if s > 0:
                    heapq.heappush(events, (end, seq, "B", s - 1, k))
                    seq += 1
            p += 1
        pos[r] = p

    def deliver(op: str, s: int, k: int, when: float) -> None:
        if op == "F":
            arrived[("F", s + 1, k)] = when
            advance(rank_of[s + 1])
        else:
            arrived[("B", s, k)] = when
            advance(rank_of[s])

    for r in range(num):
        advance(r)
    if fwd_links is None and bwd_links is None:
        # one FIFO link per boundary and direction
        link_free: dict[Hashable, float] = {}
        while events:
            t, _, op, s, k = heapq.heappop(events)
            begin = max(t, link_free.get((op, s), 0.0))
            link_free[(op, s)] = done = begin + (fwd_comm_s[s] if op == "F" else bwd_comm_s[s])
            deliver(op, s, k, done)
    else:
        loads_f, loads_b = _merge_links(loads_f, loads_b)
        _fluid_transfers(events, loads_f, loads_b, fwd_comm_s, bwd_comm_s, deliver)
    if any(pos[r] < len(ranks[r]) for r in range(num)):
        raise InputError("the schedule's action orders deadlock in the planner's list scheduler")
    return max(free, default=0.0), last_b


def _merge_links(
    loads_f: Sequence[LinkLoads], loads_b: Sequence[LinkLoads]
) -> tuple[list[LinkLoads], list[LinkLoads]]:
    """Merge links crossed by exactly the same transfer kinds into one (exact for the fluid model).

    Such links always carry the same transfers, so only each kind's largest busy time on them
    can bind; a route of many hops becomes one or two links.
    """
    users: dict[Hashable, list[tuple[str, int]]] = {}
    for op, table in (("F", loads_f), ("B", loads_b)):
        for s, loads in enumerate(table):
            for link, _ in loads:
                users.setdefault(link, []).append((op, s))
    group = {link: tuple(u) for link, u in users.items()}
    out: list[list[LinkLoads]] = []
    for table in (loads_f, loads_b):
        merged_table: list[LinkLoads] = []
        for loads in table:
            merged: dict[Hashable, float] = {}
            for link, busy in loads:
                key = group[link]
                if busy > merged.get(key, -1.0):
                    merged[key] = busy
            merged_table.append(tuple(merged.items()))
        out.append(merged_table)
    return out[0], out[1]


def _fluid_transfers(
    events: list[tuple[float, int, str, int, int]],
    loads_f: Sequence[LinkLoads],
    loads_b: Sequence[LinkLoads],
    fwd_comm_s: Sequence[float],
    bwd_comm_s: Sequence[float],
    deliver: Callable[[str, int, int, float], None],
) -> None:
    """Run transfers as fluid flows that share links, delivering each when it completes.

    A transfer ``j`` alone takes ``solo_j`` and keeps link ``l`` busy ``d_jl``, so at full
    speed it uses the fraction ``u_jl = d_jl / solo_j`` of the link. While the transfers on
    ``l`` ask for ``U_l = sum_j u_jl > 1`` of it, each gets its share scaled by ``1 / U_l``
    (work-conserving proportional sharing; equal transfers bottlenecked on one link get ``1 /
    n`` each, the max-min fair share): ``j`` progresses at ``min(1, min_l 1 / U_l) / solo_j`` of
    itself per second. ``deliver`` may push new ready transfers onto ``events`` (never earlier
    than now).
    """
    now = 0.0
    # id -> [remaining fraction at t_upd, rate, t_upd, solo, loads, version, op, stage, microbatch]
    active: dict[int, list[Any]] = {}
    on_link: dict[Hashable, set[int]] = {}
    demand: dict[Hashable, float] = {}  # U_l
    done: list[tuple[float, int, int]] = []  # (completion time, id, version), stale entries skipped
    next_id = 0

    def rerate(links: LinkLoads) -> None:
        touched: set[int] = set()
        for link, _ in links:
            touched |= on_link[link]
        for j in sorted(touched):
            st = active[j]
            st[0] -= st[1] * (now - st[2])
            st[2] = now
            over = 1.0
            for link, _ in st[4]:
                if demand[link] > over:
                    over = demand[link]
            slow = st[3] * over
            st[1] = 1.0 / slow
            st[5] += 1
            heapq.heappush(done, (now + st[0] * slow, j, st[5]))

    while events or active:
        while done and (done[0][1] not in active or active[done[0][1]][5] != done[0][2]):
            heapq.heappop(done)
        t_done = done[0][0] if done else math.inf
        t_ready = events[0][0] if events else math.inf
        if t_done <= t_ready:
            _, who, _ = heapq.heappop(done)
            now = max(now, t_done)
            st = active.pop(who)
            for link, busy in st[4]:
                on_link[link].discard(who)
                demand[link] = demand[link] - busy / st[3] if on_link[link] else 0.0
            rerate(st[4])
            deliver(st[6], st[7], st[8], now)
        else:
            _, _, op, s, k = heapq.heappop(events)
            now = max(now, t_ready)
            solo = fwd_comm_s[s] if op == "F" else bwd_comm_s[s]
            loads = (loads_f if op == "F" else loads_b)[s]
            if solo <= 0:
                deliver(op, s, k, now)
                continue
            j = next_id
            next_id += 1
            active[j] = [1.0, 1.0 / solo, now, solo, loads, 0, op, s, k]
            heapq.heappush(done, (now + solo, j, 0))
            for link, busy in loads:
                on_link.setdefault(link, set()).add(j)
                demand[link] = demand.get(link, 0.0) + busy / solo
            rerate(loads)


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
