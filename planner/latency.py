"""Pipeline latency models: DAPPLE's closed form, its suffix recurrence, and a list scheduler.

* :func:`pipeline_time_s` / :func:`prepend`: DAPPLE's warm-up + steady + ending latency (Fan et
  al., PPoPP 2021, Sec. 4) over (pseudo-)stages, and the monotone suffix recurrence the DAPPLE
  dynamic program uses; GPipe's two flow-shop phases.
* :func:`list_schedule`: the plan's real action order on per-rank timelines with one FIFO link
  per boundary and direction (transfers as DAPPLE pseudo-stages).
* :func:`ending_with_sharing`: the gradient all-reduces of the ending phase, sharing NIC links.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.errors import InputError, invalid

__all__ = [
    "FLUSH_SCHEDULES",
    "NEG_INF",
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


def list_schedule(
    ranks: Sequence[Sequence[tuple[str, int, int]]],
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    fwd_comm_s: Sequence[float],
    bwd_comm_s: Sequence[float],
) -> tuple[float, list[float]]:
    """List-schedule per-rank action orders with one FIFO link per boundary and direction, seconds.

    ``ranks[r]`` is rank ``r``'s ordered ``(op, stage, microbatch)`` list (``op`` ``F`` or ``B``,
    one stage per rank). An action starts when its rank is free and its input has arrived; an
    activation leaving stage ``s`` queues on link ``s -> s + 1`` (first come, first served, as a
    DAPPLE pseudo-stage) and takes ``fwd_comm_s[s]``; a gradient likewise on ``s + 1 -> s``.

    Returns:
        ``(makespan, end of each stage's last backward)``.

    Raises:
        InputError: the orders deadlock.
    """
    num = len(ranks)
    act: dict[tuple[int, int], float] = {}
    grad: dict[tuple[int, int], float] = {}
    free = [0.0] * num
    link_f = [0.0] * max(0, num - 1)
    link_b = [0.0] * max(0, num - 1)
    last_b = [0.0] * num
    pos = [0] * num
    left = sum(len(r) for r in ranks)
    while left:
        progress = False
        for r in range(num):
            actions = ranks[r]
            while pos[r] < len(actions):
                op, s, k = actions[pos[r]]
                if op == "F":
                    ready = act.get((s, k)) if s > 0 else 0.0
                else:
                    ready = grad.get((s, k)) if s < num - 1 else 0.0
                if ready is None:
                    break
                start = max(free[r], ready)
                end = start + (fwd_s[s] if op == "F" else bwd_s[s])
                free[r] = end
                if op == "F" and s < num - 1:
                    t0 = max(end, link_f[s])
                    link_f[s] = t0 + fwd_comm_s[s]
                    act[(s + 1, k)] = link_f[s]
                elif op == "B":
                    last_b[s] = max(last_b[s], end)
                    if s > 0:
                        t0 = max(end, link_b[s - 1])
                        link_b[s - 1] = t0 + bwd_comm_s[s - 1]
                        grad[(s - 1, k)] = link_b[s - 1]
                pos[r] += 1
                left -= 1
                progress = True
        if not progress:
            raise InputError("the schedule's action orders deadlock in the planner's list scheduler")
    return max(free, default=0.0), last_b


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
