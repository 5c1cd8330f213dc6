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
                   (:func:`pipeline_time_s`), and the longest path through the 1F1B order
                   with pipelined transfers (:func:`one_f_one_b_loops_s`); ``(m + p - 1)(t_f +
                   t_b)``, with links ``c_f = l + x_f``, ``c_b = l + x_b`` (``l`` latency)
                   ``(m + p - 1)(t_f + t_b) + (c_f + c_b)(p + m - 2 - ceil((m - 1)/p))``
                   while no stream is the bottleneck
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

A transfer's route latency is a delay, not an occupation: the simulator's point-to-point stream
overlaps it with the bytes of the transfer ahead (docs/communication.md). So a latency counts
once on every path through the transfer, and a stream's queue pays it once: GPipe's flow shops
and the 1F1B paths take it so (``fwd_latency_s``, ``latency_fwd_s``, ``steady_s``); DAPPLE's
own form (:func:`prepend` without ``steady_s``, the DP's cost) charges it per micro-batch.
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
    "one_f_one_b_upper_s",
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
    state: tuple[float, float],
    fwd_s: float,
    bwd_s: float,
    allreduce_s: float,
    num_microbatches: int,
    steady_s: float | None = None,
) -> tuple[float, float]:
    """Put one (pseudo-)stage in front of a pipeline suffix summarised by ``(W, Z)``.

    For a sequence of (pseudo-)stages ``0..S-1`` with times ``F_s``, ``B_s``, ``AR_s`` and ``M``
    micro-batches, let ``A_Q = sum_{s<=Q} F_s + (M - 1) D_Q``, ``P_Q = sum_{s<=Q} B_s`` and
    ``T_Q = max_{s<=Q} (sum_{s'=s..Q} B_s' + AR_s)``; the latency is ``Z = max_Q (A_Q + T_Q)``
    and ``W = max_Q (A_Q + P_Q)``. ``D_Q`` (``steady_s``) is what the (pseudo-)stage is busy per
    micro-batch in the steady phase: ``F + B`` by default (DAPPLE's model, in which a transfer
    pseudo-stage carries its activation and gradient in turn, latency and all); with pipelined
    streams a transfer's is ``max(c_f - l_f, c_b - l_b)`` (each direction its own stream, the
    latency paid once: see :func:`one_f_one_b_loops_s`). Prepending ``(F, B, AR, D)`` gives::

        W' = max(F + (M - 1) D + B,  F + B + W)
        Z' = max(F + (M - 1) D + B + AR,  F + max(Z, B + AR + W))

    Both are non-decreasing in ``W`` and ``Z``, so a dynamic program may keep only the
    Pareto-minimal ``(W, Z)`` of the suffixes it extends. The empty suffix is ``(-inf, -inf)``.
    """
    w, z = state
    steady = fwd_s + bwd_s if steady_s is None else steady_s
    head = fwd_s + (num_microbatches - 1) * steady + bwd_s
    w2 = max(head, fwd_s + bwd_s + w)
    z2 = max(head + allreduce_s, fwd_s + max(z, bwd_s + allreduce_s + w))
    return w2, z2


def pipeline_time_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    allreduce_s: Sequence[float],
    num_microbatches: int,
    *,
    steady_s: Sequence[float] | None = None,
) -> float:
    """DAPPLE's iteration time of a 1F1B-family pipeline (dapple, 1f1b), seconds.

    Fan et al., PPoPP 2021, Sec. 4: warm-up ``sum_{s<=Q} F_s``, steady phase ``(M - 1)(F_Q + B_Q)``
    of the pivot ``Q`` and ending phase ``max_{s<=Q} (sum_{s'=s..Q} B_s' + AR_s)`` (the stages'
    all-reduces overlapping the drain), maximised over the pivot ``Q``. With equal stages and free
    links it is ``(M + S - 1)(F + B)``; with transfers ``c_f``, ``c_b`` no slower than the stages
    ``(M + S - 1)(F + B) + (S - 1)(c_f + c_b)``. ``steady_s``: each (pseudo-)stage's time per
    micro-batch in the steady phase (default ``F + B``; see :func:`prepend`). ``O(S)``.

    Raises:
        InputError: lists of different lengths or empty, or ``M < 1``.
    """
    _check(fwd_s, bwd_s, allreduce_s, num_microbatches)
    steady = _steady(fwd_s, bwd_s, steady_s)
    state = (NEG_INF, NEG_INF)
    for s in range(len(fwd_s) - 1, -1, -1):
        state = prepend(state, fwd_s[s], bwd_s[s], allreduce_s[s], num_microbatches, steady[s])
    return state[1]


def _steady(
    fwd_s: Sequence[float], bwd_s: Sequence[float], steady_s: Sequence[float] | None
) -> Sequence[float]:
    if steady_s is None:
        return [f + b for f, b in zip(fwd_s, bwd_s, strict=True)]
    if len(steady_s) != len(fwd_s):
        raise invalid("steady_s", list(steady_s), "need one steady time per (pseudo-)stage")
    return steady_s


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
    between ranks ``l`` and ``l + 1`` (all chunks, both directions), less the route latency (a
    pipelined stream pays it once, in the fill); ``link_fill_s``: the
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
    *,
    latency_fwd_s: Sequence[float] | None = None,
    latency_bwd_s: Sequence[float] | None = None,
) -> float:
    """The 1F1B family's critical paths that DAPPLE's form misses (unequal stages, slow links), seconds.

    ``fwd_s``, ``bwd_s``: per compute stage; ``send_fwd_s[b]``, ``send_bwd_s[b]``: ``c_f``,
    ``c_b`` of the cut after stage ``b``, of which ``latency_fwd_s[b]``, ``latency_bwd_s[b]``
    (default 0) is route latency; ``in_flight[i]``: the micro-batches stage ``i`` holds at most
    (``K_i``, clamped to ``M``); ``warmup[i]``: the same before clamping.

    **The model** (the simulator's and :func:`pipesim.schedules.evaluate`'s): stage ``i`` runs
    ``F_0 .. F_{K_i - 1}``, then ``B_k, F_{k + K_i}`` pairs, then the last backwards; a transfer
    across cut ``b`` is a pure delay ``l`` followed by ``x = c - l`` on its stream (one FIFO per
    direction): ``arrival = max(issued + l, previous arrival) + x``. The iteration is the longest
    path through that graph. Edges: a stage's order, a micro-batch crossing a cut (``c``), and a
    stream's order (``x`` per micro-batch, latency not repeated). Any path from ``F_0`` on stage 0
    to ``B_{M-1}`` on stage 0 decomposes into a *spine* (down to its deepest stage and back) and
    *round trips*: from stage ``i`` (after ``B_k``, its next action is ``F_{k + K_i}``) down to
    stage ``j`` (where ``F_k`` is followed by ``B_{k - K_j + 1}``) and back, which costs
    ``R_ij = sum_{s=i..j} (F_s + B_s) + sum_{b=i..j-1} (c_f + c_b)`` and advances the
    micro-batch index by ``n_ij = K_i - K_j + 1`` (``n_ii = 1``: a stage's own ``F + B``), and
    stream steps (``x``, advancing 1). The index must advance ``M - 1`` in all, so::

        T = sum_s (F_s + B_s) + sum_b (c_f + c_b) + max { sum R : sum n = M - 1 }

    an unbounded knapsack of exact capacity ``M - 1`` over ``O(p^2)`` round trips, solved exactly
    at a cost independent of ``M`` (:func:`_most_over`). A path cannot take its round trips in
    any order: one turning at ``j`` leaves the index at most ``M - K_j``, so the last ``K_j - 1``
    advances go to steps that need no room (round trips through the last stage, stream steps, a
    stage's lone cool-down ``B``; :func:`_ordered_best`). This is where latency is and is not on
    the critical path: a round trip pays the latency of every cut it crosses, once per ``n_ij``
    micro-batches (1F1B's steady state: a forward's send overlaps the backwards behind it, but
    micro-batch ``k + K_i`` cannot start before ``k``'s gradient is back, so a round trip longer
    than ``K_i`` stage times paces the stage), while a stream's queue pays it once (the
    pipelined stream hides it behind the transfer ahead). With equal stages (``F``, ``B``,
    ``c_f``, ``c_b``, any latencies, ``M >= 1``) the best round trip is the longest and the form
    is exact: ``(M + p - 1)(F + B) + (c_f + c_b)(p - 1 + M - 1 - ceil((M - 1) / p))`` when the
    streams are not the bottleneck (checked against the evaluator and the simulator in
    ``tests/planner/test_pipelined_latency.py``).

    With unequal stages this is an estimate, not a bound: a path may also turn above the last
    stage (peak ``J < p - 1``, ``K_J - 1`` more index to advance; those spines are left out here,
    and taking them with the round trips in any order gives the upper bound
    :func:`one_f_one_b_upper_s`, which is loose), and the room rule above is a simplification.
    Measured against the evaluator in ``tests/planner/test_pipelined_latency.py`` (-6.2% ..
    +2.4% on random stages, latencies and streams; docs/planner.md). The pivot's wait is added,
    a path of its own: stage ``q`` idles until micro-batch 0 has made the round trip ``RT_q``
    through the later stages, less the ``K_q - 1`` forwards it runs meanwhile::

        sum_{s<q} (F_s + c_f) + M (F_q + B_q) + max(0, RT_q - (K_q - 1) F_q) + sum_{s<q} (B_s + c_b)

    ``O(p^4)`` at most (``p`` rooms, each a knapsack over a window of ``p^2``), never ``M``; equal
    to ``(M + p - 1)(t_f + t_b)`` for equal stages and free links.

    Raises:
        InputError: latency lists of the wrong length, or a latency above its transfer time.
    """
    p, m = len(fwd_s), num_microbatches
    lat_f, lat_b = _cut_latencies(send_fwd_s, send_bwd_s, latency_fwd_s, latency_bwd_s)
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
    items = _round_trips(fwd_s, bwd_s, send_fwd_s, send_bwd_s, lat_f, lat_b, warmup, m, p - 1)
    spine = sum(fwd_s) + sum(bwd_s) + sum(link_s)
    return max(best, spine + _ordered_best(items, m - 1))


def one_f_one_b_upper_s(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    send_fwd_s: Sequence[float],
    send_bwd_s: Sequence[float],
    in_flight: Sequence[int],
    warmup: Sequence[int],
    num_microbatches: int,
    *,
    latency_fwd_s: Sequence[float] | None = None,
    latency_bwd_s: Sequence[float] | None = None,
) -> float:
    """An upper bound on a 1F1B-family pipeline's iteration (before all-reduces), seconds.

    The relaxation of :func:`one_f_one_b_loops_s`'s path decomposition over every spine: a path
    whose deepest stage is ``J`` turns there from ``F_k`` to ``B_{k - K_J + 1}``, so its round
    trips (those with ``j <= J``) and stream steps advance the index ``M - 2 + K_J``::

        T <= max_J [ sum_{s<=J} (F_s + B_s) + sum_{b<J} (c_f + c_b) + max { sum R : sum n = M - 2 + K_J } ]

    It drops the order in which the path can take its round trips (a round trip turning at
    ``j`` needs ``K_j - 1`` micro-batches of room), and the warm-up and cool-down steps of a
    stage (``F`` or ``B`` alone) count as ``F + B``: every path is at most this. Same arguments
    as :func:`one_f_one_b_loops_s`; ``O(p^4)``.

    Raises:
        InputError: latency lists of the wrong length, or a latency above its transfer time.
    """
    p, m = len(fwd_s), num_microbatches
    lat_f, lat_b = _cut_latencies(send_fwd_s, send_bwd_s, latency_fwd_s, latency_bwd_s)
    best = NEG_INF
    spine = 0.0
    for peak in range(p):
        spine += fwd_s[peak] + bwd_s[peak] + (send_fwd_s[peak - 1] + send_bwd_s[peak - 1] if peak else 0.0)
        items = _round_trips(fwd_s, bwd_s, send_fwd_s, send_bwd_s, lat_f, lat_b, warmup, m, peak)
        best = max(best, spine + _most_over(_all_items(items), m - 2 + min(in_flight[peak], m)))
    return best


def _cut_latencies(
    send_fwd_s: Sequence[float],
    send_bwd_s: Sequence[float],
    latency_fwd_s: Sequence[float] | None,
    latency_bwd_s: Sequence[float] | None,
) -> tuple[Sequence[float], Sequence[float]]:
    """The latency part of each cut's transfers (default 0), checked against the transfer times."""
    n = len(send_fwd_s)
    out = []
    for name, given, total in (
        ("latency_fwd_s", latency_fwd_s, send_fwd_s),
        ("latency_bwd_s", latency_bwd_s, send_bwd_s),
    ):
        lat = [0.0] * n if given is None else given
        if len(lat) != n:
            raise invalid(name, list(lat), f"need one latency per cut ({n})")
        for b, (a, c) in enumerate(zip(lat, total, strict=True)):
            if not 0 <= a <= c:
                raise invalid(f"{name}[{b}]", a, f"must be in 0..the transfer time {c}")
        out.append(lat)
    return out[0], out[1]


def _round_trips(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    send_fwd_s: Sequence[float],
    send_bwd_s: Sequence[float],
    lat_f: Sequence[float],
    lat_b: Sequence[float],
    warmup: Sequence[int],
    m: int,
    deepest: int,
) -> dict[int, dict[int, float]]:
    """The longest round trip (``R_ij``) per index advance (``n_ij``) among those turning at a
    stage ``<= deepest``, with the stream steps of the cuts above it and the stages' cool-down
    steps (a lone ``B``), keyed by the *room* each needs, ``K_j - 1`` for a turn at ``j`` (see
    :func:`one_f_one_b_loops_s`): ``{room: {n: value}}``. A round trip from ``i < j`` needs a
    steady phase on stage ``i`` (``K_i < M``)."""
    items: dict[int, dict[int, float]] = {}

    def add(room: int, n: int, value: float) -> None:
        sized = items.setdefault(room, {})
        if n not in sized or value > sized[n]:
            sized[n] = value

    for i in range(deepest + 1):
        loop = 0.0
        for j in range(i, deepest + 1):
            loop += fwd_s[j] + bwd_s[j]
            room = min(warmup[j], m) - 1
            if j == i:
                add(room, 1, loop)
            elif warmup[i] < m:
                add(room, max(1, warmup[i] - warmup[j] + 1), loop)
            if j < deepest:
                loop += send_fwd_s[j] + send_bwd_s[j]
        add(0, 1, bwd_s[i])
    for b in range(deepest):
        add(0, 1, send_fwd_s[b] - lat_f[b])
        add(0, 1, send_bwd_s[b] - lat_b[b])
    return items


def _ordered_best(items: dict[int, dict[int, float]], capacity: int) -> float:
    """The longest advance of ``capacity`` by round trips that a path can take in order: a round
    trip turning at ``j`` leaves the index at most ``M - K_j``, so with ``R`` the most room any
    taken round trip needs, the last ``R`` are advanced by items needing none. A room whose round
    trips improve on none already in the pool is not tried again."""
    if capacity <= 0:
        return 0.0
    free = items.get(0, {})
    best = NEG_INF
    pool: dict[int, float] = {}
    for room in sorted(items):
        if room > capacity:
            break
        grew = False
        for n, value in items[room].items():
            if n not in pool or value > pool[n]:
                pool[n] = value
                grew = True
        if grew:
            best = max(best, _most_over(pool, capacity - room) + _most_over(free, room))
    return best


def _all_items(items: dict[int, dict[int, float]]) -> dict[int, float]:
    """Every item, whatever room it needs (the relaxation of :func:`one_f_one_b_upper_s`)."""
    out: dict[int, float] = {}
    for sized in items.values():
        for n, value in sized.items():
            if n not in out or value > out[n]:
                out[n] = value
    return out


def _most_over(items: dict[int, float], capacity: int) -> float:
    """The largest total value of items (``size: value``, sizes >= 1, repeats allowed, size 1
    present) whose sizes add up to exactly ``capacity``; 0 for ``capacity <= 0``. An item worth
    no more than its size in items of size 1 is dropped.

    Cost independent of ``capacity``: with ``n*`` the size of the best value per size and
    ``n_max`` the largest size, some optimum holds fewer than ``n*`` other items (any ``n*`` of
    them contain a group whose sizes add up to a multiple of ``n*``, which the best item
    replaces at no loss), so beyond ``n* n_max`` the optimum grows by whole best items; a
    dynamic program covers the rest, ``O(n* n_max len(items))``.
    """
    if capacity <= 0:
        return 0.0
    unit = items.get(1, NEG_INF)  # n of it beat any item of size n worth less
    sizes = [n for n in sorted(items) if n == 1 or items[n] > n * unit]
    star = sizes[0]
    for n in sizes[1:]:
        if items[n] * star > items[star] * n:  # exact for int and Fraction values
            star = n
    window = star * sizes[-1]
    whole = 0
    if capacity > window:
        whole = -(-(capacity - window) // star)
    cap = capacity - whole * star
    best: list[float | None] = [0.0] + [None] * cap
    for c in range(1, cap + 1):
        top: float | None = None
        for n in sizes:
            if n > c:
                break
            prev = best[c - n]
            if prev is not None and (top is None or prev + items[n] > top):
                top = prev + items[n]
        best[c] = top
    found = best[cap]
    if found is None:  # unreachable with a size-1 item
        raise invalid("items", sorted(items), "need an item of size 1")
    return found + whole * items[star]


def backward_end_times(
    fwd_s: Sequence[float],
    bwd_s: Sequence[float],
    num_microbatches: int,
    schedule: str,
    *,
    fwd_latency_s: Sequence[float] | None = None,
    bwd_latency_s: Sequence[float] | None = None,
    steady_s: Sequence[float] | None = None,
) -> list[float]:
    """When each (pseudo-)stage finishes its last backward under the latency model, seconds.

    1F1B family: ``E_s = max_{Q >= s} (A_Q + sum_{s'=s..Q} B_s')`` with ``steady_s`` as in
    :func:`prepend` (the latencies enter there: a path's, not a pivot's); gpipe: the forward
    makespan plus the backward flow shop from the last stage down to ``s``, with the transfer
    latencies as delays (see :func:`gpipe_time_s`). ``O(S^2)`` for the 1F1B family (``S``
    stages, never ``M``).

    Raises:
        InputError: a schedule other than dapple, 1f1b and gpipe.
    """
    n = len(fwd_s)
    m = num_microbatches
    if schedule == "gpipe":
        return _gpipe_ends(fwd_s, bwd_s, m, fwd_latency_s, bwd_latency_s)
    if schedule not in ("dapple", "1f1b"):
        raise invalid("schedule", schedule, "backward end times are modelled for dapple, 1f1b and gpipe")
    steady = _steady(fwd_s, bwd_s, steady_s)
    x = 0.0
    a = []
    for q in range(n):
        x += fwd_s[q]
        a.append(x + (m - 1) * steady[q])
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
