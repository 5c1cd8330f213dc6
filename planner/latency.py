"""Closed-form pipeline latency per schedule, in time independent of the micro-batch count.

Every form takes the pipeline as a sequence of *(pseudo-)stages*: compute stages with a transfer
pseudo-stage between each two (DAPPLE's treatment of communication, Fan et al., PPoPP 2021,
Sec. 4), so ``fwd_s = [F_0, c_f(0), F_1, c_f(1), ..., F_{S-1}]`` and ``bwd_s`` likewise (``c_f``,
``c_b``: the activation and gradient transfer across a cut). The all-reduce of a stage's gradients
among its replicas (``allreduce_s``, 0 on transfer pseudo-stages) starts when the stage has run
its last backward and overlaps the rest of the pipeline's drain.

=================  =============================================================================
schedule           iteration time (equal stages ``t_f``, ``t_b``, free links: exact)
=================  =============================================================================
dapple, 1f1b       DAPPLE's warm-up + steady + ending phases around a pivot ``Q``
                   (:func:`pipeline_time_s`); ``(m + p - 1)(t_f + t_b)``
gpipe              two flow shops (all forwards, then all backwards):
                   ``(m + p - 1)(t_f + t_b) + (p - 1)(c_f + c_b)``
interleaved        ``(m + (p - 1)/v)(t_f + t_b)`` for ``v`` chunks, ``p | m`` (Megatron-LM, SC'21,
                   Sec. 2.2.2)
zb-h1              ``m(T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W)`` for ``T_W <= T_F`` (Qi et al.,
                   ICLR 2024, Sec. 3.1; ``T_B`` the input-gradient time)
zb-h2              ``m(T_F + T_B + T_W) + (p - 1) T_F`` for ``T_F = T_B = T_W``, ``m >= 2p - 1``
                   (ibid., Sec. 3.2: no idle time between a rank's first and last action)
=================  =============================================================================

With unequal stages each form takes a *pivot* (the stage, or rank, whose ``m`` micro-batches set
the steady phase) and adds the fill and drain of the others; the forms for interleaved and
zero-bubble schedules with unequal stages, links or chunks are approximations (see
``docs/planner.md``), checked against :func:`pipesim.schedules.evaluate` and the simulator.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.errors import invalid

__all__ = [
    "NEG_INF",
    "backward_end_times",
    "gpipe_time_s",
    "looped_time_s",
    "nic_sharing_end_s",
    "one_f_one_b_loops_s",
    "pipeline_time_s",
    "prepend",
]

NEG_INF = -float("inf")


def _check(fwd_s: Sequence[float], bwd_s: Sequence[float], allreduce_s: Sequence[float], m: int) -> None:
    n = len(fwd_s)
    if n == 0 or len(bwd_s) != n or len(allreduce_s) != n:
        raise invalid("fwd_s", list(fwd_s), "need one forward, backward and all-reduce time per stage")
    if m < 1:
        raise invalid("num_microbatches", m, "must be >= 1")


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
    fwd_s: Sequence[float], bwd_s: Sequence[float], allreduce_s: Sequence[float], num_microbatches: int
) -> float:
    """DAPPLE's iteration time of a 1F1B-family pipeline (dapple, 1f1b), seconds.

    Fan et al., PPoPP 2021, Sec. 4: warm-up ``sum_{s<=Q} F_s``, steady phase ``(M - 1)(F_Q + B_Q)``
    of the pivot ``Q`` and ending phase ``max_{s<=Q} (sum_{s'=s..Q} B_s' + AR_s)`` (the stages'
    all-reduces overlapping the drain), maximised over the pivot ``Q``. With equal stages and free
    links it is ``(M + S - 1)(F + B)``; with transfers ``c_f``, ``c_b`` no slower than the stages
    ``(M + S - 1)(F + B) + (S - 1)(c_f + c_b)``. ``O(S)``.

    Raises:
        InputError: lists of different lengths or empty, or ``M < 1``.
    """
    _check(fwd_s, bwd_s, allreduce_s, num_microbatches)
    state = (NEG_INF, NEG_INF)
    for s in range(len(fwd_s) - 1, -1, -1):
        state = prepend(state, fwd_s[s], bwd_s[s], allreduce_s[s], num_microbatches)
    return state[1]


def gpipe_time_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    allreduce_s: Sequence[float],
    num_microbatches: int,
    *,
    fwd_latency_s: Sequence[float] | None = None,
    bwd_latency_s: Sequence[float] | None = None,
) -> float:
    """GPipe's iteration time: all forwards, then all backwards, seconds.

    Each phase is a flow shop of ``M`` identical jobs over the (pseudo-)stages, whose makespan is
    ``sum + (M - 1) max``: ``sum F + (M - 1) max F`` for the forwards, then for the backwards
    from the last stage down, stage ``s``'s all-reduce starting after its last backward:
    ``max_s (sum_{s'>=s} B + (M - 1) max_{s'>=s} B + AR_s)``. ``O(S)``. A transfer
    pseudo-stage's latency (``fwd_latency_s``, ``bwd_latency_s``: per (pseudo-)stage, 0 on
    compute stages; default all 0) is a delay, not an occupation: a pipelined stream overlaps it
    with the bytes ahead (docs/communication.md), so it counts in the sum and not in the max.

    Raises:
        InputError: lists of different lengths or empty, or ``M < 1``.
    """
    _check(fwd_s, bwd_s, allreduce_s, num_microbatches)
    ends = _gpipe_ends(fwd_s, bwd_s, num_microbatches, fwd_latency_s, bwd_latency_s)
    return max(end + ar for end, ar in zip(ends, allreduce_s, strict=True))


def _gpipe_ends(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    m: int,
    fwd_latency_s: Sequence[float] | None,
    bwd_latency_s: Sequence[float] | None,
) -> list[float]:
    """GPipe's two flow shops: when each (pseudo-)stage ends its last backward, seconds."""
    n = len(fwd_s)
    lat_f = [0.0] * n if fwd_latency_s is None else fwd_latency_s
    lat_b = [0.0] * n if bwd_latency_s is None else bwd_latency_s
    if len(lat_f) != n or len(lat_b) != n:
        raise invalid("fwd_latency_s", list(lat_f), "need one latency per (pseudo-)stage in each direction")
    start = sum(fwd_s) + (m - 1) * max(f - a for f, a in zip(fwd_s, lat_f, strict=True))
    out = [0.0] * n
    total = 0.0
    top = 0.0
    for s in range(n - 1, -1, -1):
        total += bwd_s[s]
        top = max(top, bwd_s[s] - lat_b[s])
        out[s] = start + total + (m - 1) * top
    return out


def looped_time_s(
    rank_busy_s: Sequence[float],
    rank_fill_s: Sequence[float],
    link_busy_s: Sequence[float],
    link_fill_s: float,
    num_microbatches: int,
) -> float:
    """Iteration time (before the all-reduces) of interleaved and zero-bubble pipelines, seconds.

    The pivot form every closed form above shares: the pivot (a rank, or a link between two
    ranks) is busy ``M`` times its per-micro-batch time, and the critical path adds the fill and
    drain through every other rank (``rank_fill_s[r]``) and every transfer (``link_fill_s``)::

        T = max( max_q [M busy_q + sum_{r != q} fill_r] ,  max_l M link_l + sum_r fill_r ) + links

    ``rank_busy_s[r]``: compute per micro-batch of rank ``r`` (all its chunks, forward and
    backward); ``rank_fill_s[r]``: what rank ``r`` adds to the fill and drain (interleaved:
    ``(F_r + B_r) / v``, one chunk; ZB-H1: ``F + I - min(W, F)``; ZB-H2:
    ``F + max(0, I - 2W)``); ``link_busy_s[l]``: transfer time per micro-batch on the boundary
    between ranks ``l`` and ``l + 1`` (all chunks, both directions); ``link_fill_s``: the
    transfers on the fill and drain path. Exact for equal ranks and free links (see the module
    docstring); ``O(p)``.

    Raises:
        InputError: no ranks, lists of different lengths, or ``M < 1``.
    """
    p = len(rank_busy_s)
    if p == 0 or len(rank_fill_s) != p:
        raise invalid("rank_busy_s", list(rank_busy_s), "need one busy and one fill time per rank")
    if num_microbatches < 1:
        raise invalid("num_microbatches", num_microbatches, "must be >= 1")
    m = num_microbatches
    fill = sum(rank_fill_s)
    best = max(m * busy + fill - own for busy, own in zip(rank_busy_s, rank_fill_s, strict=True))
    if link_busy_s:
        best = max(best, m * max(link_busy_s) + fill)
    return best + link_fill_s


def one_f_one_b_loops_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    send_fwd_s: Sequence[float],
    send_bwd_s: Sequence[float],
    in_flight: Sequence[int],
    warmup: Sequence[int],
    num_microbatches: int,
) -> float:
    """The 1F1B family's loop terms: what DAPPLE's form misses for unequal stages and slow links, seconds.

    ``fwd_s``, ``bwd_s``: per compute stage; ``send_fwd_s[b]``, ``send_bwd_s[b]``: ``c_f``,
    ``c_b`` of the cut after stage ``b``; ``in_flight[i]``: the micro-batches stage ``i`` holds at
    most (``K_i``, clamped to ``M``); ``warmup[i]``: the same before clamping. Two terms, maximised:

    * **pivot with wait**: stage ``q`` idles until micro-batch 0 has made the round trip
      ``RT_q`` through the later stages and transfers, less the ``K_q - 1`` forwards it runs
      meanwhile, then runs its ``M`` forward-backward pairs::

          sum_{s<q} (F_s + c_f) + M (F_q + B_q) + max(0, RT_q - (K_q - 1) F_q) + sum_{s<q} (B_s + c_b)

      (without the wait: DAPPLE's ``A_q + P_q``, which assumes the warm-up forwards hide the
      round trip);
    * **loops**: stages ``i..j`` and back hold ``n = K_i - K_j + 1`` micro-batches and pass at
      most ``n`` per round trip ``R_ij`` (compute and transfers), so with the fill to stage ``i``
      and back: ``fill_i + R_ij + (M - 1) R_ij / n`` for ``K_i < M``.

    Equal to ``(M + p - 1)(t_f + t_b)`` for equal stages and free links. ``O(p^2)``.
    """
    p, m = len(fwd_s), num_microbatches
    link_s = [f + b for f, b in zip(send_fwd_s, send_bwd_s, strict=True)]
    before = [0.0]  # sum_{s<q} (F_s + c_f(s))
    after = [0.0]  # sum_{s<q} (B_s + c_b(s))
    for s in range(p - 1):
        before.append(before[-1] + fwd_s[s] + send_fwd_s[s])
        after.append(after[-1] + bwd_s[s] + send_bwd_s[s])
    best = 0.0
    beyond = 0.0
    for q in range(p - 1, -1, -1):
        wait = max(0.0, beyond - (in_flight[q] - 1) * fwd_s[q]) if m > 1 else 0.0
        best = max(best, before[q] + m * (fwd_s[q] + bwd_s[q]) + wait + after[q])
        beyond += fwd_s[q] + bwd_s[q] + (link_s[q - 1] if q > 0 else 0.0)
    fill = 0.0
    for i in range(p):
        loop = 0.0
        for j in range(i, p):
            loop += fwd_s[j] + bwd_s[j]
            tokens = max(1, warmup[i] - warmup[j] + 1)
            if warmup[i] < m and (tokens < m or i == j):
                best = max(best, fill + loop + (m - 1) * loop / tokens)
            if j < p - 1:
                loop += link_s[j]
        fill += fwd_s[i] + bwd_s[i] + (link_s[i] if i < p - 1 else 0.0)
    return best


def backward_end_times(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    num_microbatches: int,
    schedule: str,
    *,
    fwd_latency_s: Sequence[float] | None = None,
    bwd_latency_s: Sequence[float] | None = None,
) -> list[float]:
    """When each (pseudo-)stage finishes its last backward under the latency model, seconds.

    1F1B family: ``E_s = max_{Q >= s} (A_Q + sum_{s'=s..Q} B_s')`` (see :func:`prepend`); gpipe:
    the forward makespan plus the backward flow shop from the last stage down to ``s``, with the
    transfer latencies as delays (see :func:`gpipe_time_s`; the 1F1B family's form charges a
    transfer its whole time per micro-batch and takes no latencies). ``O(S^2)`` for the 1F1B
    family (``S`` stages, never ``M``).

    Raises:
        InputError: a schedule other than dapple, 1f1b and gpipe.
    """
    n = len(fwd_s)
    m = num_microbatches
    if schedule == "gpipe":
        return _gpipe_ends(fwd_s, bwd_s, m, fwd_latency_s, bwd_latency_s)
    if schedule not in ("dapple", "1f1b"):
        raise invalid("schedule", schedule, "backward end times are modelled for dapple, 1f1b and gpipe")
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


def nic_sharing_end_s(
    jobs: Sequence[tuple[float, float, frozenset[int]]], tails_s: Sequence[float] | None = None
) -> float:
    """A lower bound on when the last of several all-reduces ends when they share NIC links, seconds.

    Each job is ``(start_s, alone_s, nic_links)``: it starts at ``start_s`` and takes ``alone_s``
    when nothing else uses its links. Jobs crossing one link cannot together finish before
    ``max_k (start_k + sum of alone_s of the jobs starting at or after start_k)`` on that link
    (the link is busy for each job's whole time; work-conserving sharing reaches the bound when
    each job's bottleneck is that link). A closed form over the jobs, not a simulation; jobs
    crossing no NIC link give ``start_s + alone_s``. ``tails_s[k]`` (default 0) is work job ``k``'s
    devices do after it, off the links (the optimizer step): a job ends ``tail`` later, and the
    last of the jobs sharing a link at least the smallest of their tails later.
    """
    tails = tails_s if tails_s is not None else [0.0] * len(jobs)
    finish = max(
        (start + alone + tail for (start, alone, _), tail in zip(jobs, tails, strict=True)), default=0.0
    )
    by_link: dict[int, list[tuple[float, float, float]]] = {}
    for (start, alone, links), extra in zip(jobs, tails, strict=True):
        for link in links:
            by_link.setdefault(link, []).append((start, alone, extra))
    for users in by_link.values():
        if len(users) < 2:
            continue
        users.sort()
        tail = 0.0
        least = float("inf")
        for start, alone, extra in reversed(users):
            tail += alone
            least = min(least, extra)
            finish = max(finish, start + tail + least)
    return finish
