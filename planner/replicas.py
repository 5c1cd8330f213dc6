"""Replica classes: the replicas of a stage that the estimate may time as one timeline.

A stage of ``r`` replicas splits each micro-batch of ``n`` samples with
:func:`pipesim.plan.split_samples`: when ``r`` does not divide ``n`` the first ``n % r`` replicas
get one sample more and finish later. In the simulator each replica sends its pieces when it
finishes, and each replica of the next stage starts when its own pieces have arrived, so the
replicas of one stage drift apart (12 replicas of shares 2 and 1 feeding 3 replicas over one NIC:
the 1-sample pieces cross while the 2-sample replicas still compute). Timing every replica at the
largest share and sending all pieces together overestimates such plans by 10-20%.

Equal shares drift apart too when the replicas' pieces take routes of different latency or
bandwidth (a GPU behind the NIC's PCIe switch and one behind the host bridge; NVLink pairs of 20
and 40 GB/s): the replicas that receive first compute first, and their next pieces then cross a
shared NIC alone while the others' are still queued. Over a few micro-batches the replicas settle
into a staggered order that time-shares the NIC, so each waits for its own piece rather than for
every piece of the stage (gnmt16 on 4 x 4 PCIe V100s, four stages of 4: 0.2 ms per piece instead of
0.9 ms for the whole transfer, +12% to +16% before).

:func:`replica_classes` groups the replicas that run in step: same share, and pieces exchanged
with the same classes of both neighbouring stages over the same kind of route (``piece_keys``).
The estimate gives each class its own timeline and each pair of classes that exchange pieces its
own transfer. With equal shares and routes alike every stage is one class (the per-stage model).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from pipesim.errors import invalid

__all__ = ["overlaps", "replica_classes"]


def overlaps(src: Sequence[tuple[int, int]], dst: Sequence[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """``(source replica, destination replica, samples in common)`` of two splits of a micro-batch.

    ``src`` and ``dst`` are contiguous ``(start, stop)`` sample ranges covering the same samples
    in order (:func:`pipesim.plan.split_samples`); one entry per non-empty overlap, at most
    ``len(src) + len(dst) - 1``, found by merging the two partitions.
    """
    out: list[tuple[int, int, int]] = []
    i = k = 0
    while i < len(src) and k < len(dst):
        lo = max(src[i][0], dst[k][0])
        hi = min(src[i][1], dst[k][1])
        if hi > lo:
            out.append((i, k, hi - lo))
        if src[i][1] <= dst[k][1]:
            i += 1
        else:
            k += 1
    return out


def replica_classes(
    shares: Sequence[Sequence[tuple[int, int]]],
    piece_keys: Sequence[Sequence[Hashable]] | None = None,
) -> list[list[int]]:
    """The class of every replica of every stage, numbered per stage from 0 in replica order.

    ``shares[s]`` are stage ``s``'s replicas' sample ranges of one micro-batch. Two replicas of a
    stage share a class when they hold equally many samples and exchange pieces
    (:func:`overlaps`) with the same set of (class, piece key) of the previous and of the next
    stage: partition refinement from the share sizes until no class splits (at most one round
    per replica, each linear in the number of pieces).

    ``piece_keys[s][j]`` (default: all equal) describes piece ``j`` of ``overlaps(shares[s],
    shares[s + 1])``, e.g. its route's latency and bandwidth: replicas whose pieces differ are
    timed apart.

    Raises:
        InputError: ``piece_keys`` without one key per piece.
    """
    num = len(shares)
    links = [overlaps(shares[s], shares[s + 1]) for s in range(num - 1)]
    keys: list[Sequence[Hashable]] = (
        [[None] * len(pieces) for pieces in links] if piece_keys is None else list(piece_keys)
    )
    if len(keys) != len(links) or any(len(k) != len(p) for k, p in zip(keys, links, strict=True)):
        raise invalid(
            "piece_keys", [len(k) for k in keys], f"need one key per piece: {[len(p) for p in links]}"
        )
    cls = [_renumber([hi - lo for lo, hi in stage]) for stage in shares]
    count = sum(max(c, default=-1) + 1 for c in cls)
    while True:
        prev_sets: list[list[set[tuple[int, Hashable]]]] = [[set() for _ in stage] for stage in shares]
        next_sets: list[list[set[tuple[int, Hashable]]]] = [[set() for _ in stage] for stage in shares]
        for s, pieces in enumerate(links):
            for (i, k, _), key in zip(pieces, keys[s], strict=True):
                next_sets[s][i].add((cls[s + 1][k], key))
                prev_sets[s + 1][k].add((cls[s][i], key))
        cls = [
            _renumber(
                [
                    (cls[s][k], frozenset(prev_sets[s][k]), frozenset(next_sets[s][k]))
                    for k in range(len(shares[s]))
                ]
            )
            for s in range(num)
        ]
        new_count = sum(max(c, default=-1) + 1 for c in cls)
        if new_count == count:
            return cls
        count = new_count


def _renumber(keys: Sequence[object]) -> list[int]:
    """Class ids ``0, 1, ...`` in order of first appearance of each distinct key."""
    ids: dict[object, int] = {}
    return [ids.setdefault(key, len(ids)) for key in keys]
