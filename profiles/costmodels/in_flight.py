"""How many micro-batches' activations a rank holds at its peak, per schedule, and what a split
backward keeps until its weight-gradient pass: the closed forms the planner's memory estimate and
the schedules' tests use (:func:`in_flight_microbatches`, :func:`held_until_w`,
:func:`held_until_w_fewest`), and the weight versions an asynchronous pipeline keeps
(:func:`weight_versions`). Moved out of :mod:`~pipesim.profiles.costmodels.memory`, which
re-exports them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from pipesim.errors import check_count, check_fraction, invalid

__all__ = [
    "IN_FLIGHT_SCHEDULES",
    "IN_FLIGHT_SCHEDULES_ALL",
    "held_until_w",
    "held_until_w_fewest",
    "in_flight_microbatches",
    "weight_versions",
]


IN_FLIGHT_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved", "zb-h1", "zb-h2")
"""Schedules whose peak in-flight micro-batch counts :func:`in_flight_microbatches` knows."""


IN_FLIGHT_SCHEDULES_ALL: tuple[str, ...] = (
    *IN_FLIGHT_SCHEDULES,
    "looped-bfs",
    "interleaved-zb",
    "zbv",
    "dualpipev",
    "dualpipe",
    "chimera",
    "v-half",
    "v-min",
    "zb-auto",
    "pipedream-async",
    "pipedream-2bw",
)
"""Every schedule :func:`in_flight_microbatches` knows (:data:`IN_FLIGHT_SCHEDULES` are those the
planner's estimate covers)."""


def in_flight_microbatches(
    schedule: str,
    rank: int,
    num_ranks: int,
    num_microbatches: int,
    *,
    chunks: int = 1,
    warmup: str | Sequence[int] = "default",
    memory_limit: int | None = None,
    wgrad_memory_fraction: float = 1.0,
) -> int:
    """Forwards whose activations rank ``rank`` (0-based, of ``p``) holds at its peak.

    With ``chunks = v > 1`` the count is of chunk forwards (each one micro-batch on one of the
    rank's ``v`` stages). Activations are held from a forward until its backward (``B``), or its
    weight-gradient ``W`` in the zero-bubble schedules (see ``docs/schedules.md``):

    * ``gpipe``: ``m`` (all forwards run before the first backward);
    * ``dapple`` / ``1f1b``: the warm-up count ``K_i = min(p - i, m)`` (``"slow-link"``:
      ``min(2 (p - i) - 1, m)``; an explicit list gives ``K_i``), DAPPLE Sec. 3;
    * ``interleaved``: ``min((v - 1) g + 2 (p - 1 - i) + 1, v m)`` with the round ``g`` of
      micro-batches (``g = m / max(1, m // p)``; ``g = m`` for ``v = 1``);
    * ``zb-h1``: the warm-up ``(v - 1) g + (p - 1 - i) + 1`` plus the ``i`` put-off ``W`` actions,
      ``min((v - 1) g + p, v m)`` (``min(p, m)`` for ``v = 1``), Qi et al., ICLR 2024, Sec. 3.1;
    * ``zb-h2``: ``min(2 p - 1, m)`` (ibid., Sec. 3.2);
    * ``looped-bfs``: ``v m`` (every micro-batch on every chunk before the first backward);
    * ``interleaved-zb``: as ``zb-h1``;
    * ``zbv`` (two chunks in a V): ``min(2 p, 2 m, m + i + 1)``, i.e. ``p`` micro-batches of the
      rank's layers for ``m >= 2p - 1``, as 1F1B's first stage (Qi et al., ICLR 2024, sec. 6);
    * ``dualpipev``: ``2 p + 1`` (``m >= 2p``);
    * ``dualpipe`` (bidirectional, two model stages per rank): ``p + 1`` (``m >= 2p``; DeepSeek-V3
      report, sec. 3.2.1, table 2: activations ``PP + 1``, parameters ``2x``);
    * ``chimera`` (bidirectional, two model stages per rank): ``p / 2 + 1 + min(i, p - 1 - i)``,
      ``p / 2 + 1`` at the ends to ``p`` in the middle (Li & Hoefler, SC 2021, sec. 3.5:
      between ``D/2 + 1`` and ``D`` micro-batches; ``m`` a multiple of ``p``);
    * ``v-half`` / ``v-min`` (two chunks): at most ``min(2 L, 2 m)`` with ``L = (p + 2) // 2`` /
      ``(p + 4) // 3`` micro-batches (Qi et al., NeurIPS 2024); the busiest rank reaches it;
    * ``zb-auto``: ``min(memory_limit, m)`` (default limit ``p``); with
      ``wgrad_memory_fraction = h < 1`` (what a micro-batch still holds from ``I`` to ``W``, in
      the scheduler's units) at most ``min(floor(memory_limit / h), m)``: the scheduler keeps
      ``stashed + h pending`` within the limit, so up to ``1 / h`` times as many forwards are
      held in part; how many its greedy order reaches on each rank depends on the order (the
      planner walks it: :mod:`pipesim.planner.memory_estimate`), this is the bound;
    * ``pipedream-async`` / ``pipedream-2bw``: as ``1f1b``.

    Raises:
        InputError: an unknown schedule, a bad warm-up, ``rank`` outside ``0..p-1`` or a
            ``wgrad_memory_fraction`` outside (0, 1].
    """
    p, m, v, i = num_ranks, num_microbatches, chunks, rank
    if not 0 <= i < p:
        raise invalid("rank", i, f"must be in 0..{p - 1}")
    if schedule == "gpipe":
        return m
    if schedule in ("dapple", "1f1b"):
        if isinstance(warmup, str):
            if warmup == "default":
                return min(p - i, m)
            if warmup == "slow-link":
                return min(2 * (p - i) - 1, m)
            raise invalid("warmup", warmup, "must be 'default', 'slow-link' or a list of per-stage counts")
        counts = list(warmup)
        if len(counts) != p:
            raise invalid("warmup", counts, f"must have one count per stage ({p})")
        return min(int(counts[i]), m)
    group = m // max(1, m // p) if v > 1 else m
    if schedule == "interleaved":
        return min((v - 1) * group + 2 * (p - 1 - i) + 1, v * m)
    if schedule == "zb-h1":
        return min((v - 1) * group + p, v * m)
    if schedule == "zb-h2":
        return min(2 * p - 1, m)
    return _in_flight_more(schedule, i, p, m, v, memory_limit, wgrad_memory_fraction)


def _in_flight_more(
    schedule: str, i: int, p: int, m: int, v: int, memory_limit: int | None, wgrad_memory_fraction: float
) -> int:
    """:func:`in_flight_microbatches` for the schedules past :data:`IN_FLIGHT_SCHEDULES`."""
    if schedule == "looped-bfs":
        return v * m
    if schedule == "interleaved-zb":
        group = m // max(1, m // p) if v > 1 else m
        return min((v - 1) * group + p, v * m)
    if schedule == "zbv":
        return min(2 * p, 2 * m, m + i + 1)
    if schedule == "dualpipev":
        return 2 * p + 1
    if schedule == "dualpipe":
        return p + 1
    if schedule == "chimera":
        return p // 2 + 1 + min(i, p - 1 - i)
    if schedule in ("v-half", "v-min"):
        limit = (p + 2) // 2 if schedule == "v-half" else (p + 4) // 3
        return min(2 * limit, 2 * m)
    if schedule == "zb-auto":  # the scheduler's units: F adds 1, I frees 1 - h, W the rest h
        # exact, as the scheduler counts
        kept = Fraction(check_fraction("wgrad_memory_fraction", wgrad_memory_fraction))
        return min(math.floor((p if memory_limit is None else memory_limit) / kept), m)
    if schedule in ("pipedream-async", "pipedream-2bw"):
        return min(p - i, m)
    known = ", ".join(IN_FLIGHT_SCHEDULES_ALL)
    raise invalid("schedule", schedule, f"in-flight counts are known for {known}")


def weight_versions(schedule: str, stage: int, num_ranks: int, num_microbatches: int) -> int:
    """Weight versions stage ``stage`` (0-based, of ``p`` one-stage ranks) keeps at once.

    ``pipedream-async``: ``min(p - stage, m)``, one per in-flight micro-batch (weight stashing,
    Narayanan et al., SOSP 2019, sec. 3.3); ``pipedream-2bw``: 2, the version being updated and
    the one in use (Narayanan et al., ICML 2021, sec. 3.1; 1 when ``p = 1``); every flushed
    schedule: 1. Each extra version costs the stage's weight bytes.

    Raises:
        InputError: ``stage`` outside ``0..p-1`` or a count below 1.
    """
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    if type(stage) is not int or not 0 <= stage < num_ranks:
        raise invalid("stage", stage, f"must be an integer in 0..{num_ranks - 1}")
    if schedule == "pipedream-async":
        return min(num_ranks - stage, num_microbatches)
    if schedule == "pipedream-2bw":
        return 2 if num_ranks > 1 else 1
    return 1


def held_until_w(schedule: str, rank: int, in_flight: int) -> int:
    """Micro-batches whose ``I`` has run but whose ``W`` still waits, at rank ``rank``'s memory
    peak in a zero-bubble schedule (0-based ``rank``; ``in_flight``: its
    :func:`in_flight_microbatches` count ``K``).

    With ``full`` recomputation each of them still holds its re-materialised layer inputs
    (:attr:`StageActivations.held_bytes`). ZB-H1 puts off ``i`` weight-gradient passes on rank
    ``i`` (Qi et al., ICLR 2024, Sec. 3.1; with chunks too); ZB-H2 ``2 i`` (its rank ``i`` runs
    ``2 (p - i) - 1`` warm-up forwards of the ``2 p - 1`` it holds); at most ``K - 1``. Other
    schedules do not split the backward: 0. Held equal to the simulator's peak for equal stages
    in ``tests/planner/test_recompute_estimate.py``.
    """
    if schedule not in ("zb-h1", "zb-h2"):
        return 0
    return min(rank if schedule == "zb-h1" else 2 * rank, max(0, in_flight - 1))


def held_until_w_fewest(schedule: str, rank: int, num_ranks: int, num_microbatches: int) -> int:
    """Micro-batches between ``I`` and ``W`` at the first moment rank ``rank`` (0-based, of
    ``p``) holds its :func:`in_flight_microbatches` count of forwards, in a zero-bubble
    schedule with ``m`` micro-batches: ZB-H1 ``max(0, i - max(0, p - m))`` (with chunks too),
    ZB-H2 ``max(0, min(2 p - 1, m) - (2 (p - i) - 1))``: the forwards past those it runs before
    its first ``I`` (ZB-H1: ``p - i``, as 1F1B; ZB-H2: ``2 (p - i) - 1``; Qi et al., ICLR 2024,
    Sec. 3), each ``I`` since then having put its ``W`` off; ``i`` and ``2 i`` once ``m`` is large.
    When a micro-batch holds less between ``I`` and ``W`` than before ``I``
    (:attr:`StageActivations.held_bytes` below ``stash_bytes``, as with shaped layers) the rank
    peaks there; :func:`held_until_w` gives the count where it holds more. Equal to the
    simulator's peak for equal stages in ``tests/planner/test_zb_memory_estimate.py``. Other
    schedules: 0.
    """
    p, m, i = num_ranks, num_microbatches, rank
    if schedule == "zb-h1":
        return max(0, i - max(0, p - m))
    if schedule == "zb-h2":
        return max(0, min(2 * p - 1, m) - (2 * (p - i) - 1))
    return 0
