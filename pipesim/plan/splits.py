"""Splits a plan is built from: a micro-batch's samples over replicas, and a model's layers over
stages (contiguous ranges, balanced by time). Part of :mod:`pipesim.plan` (re-exported there)."""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.errors import Infeasible, InputError, invalid

__all__ = ["balanced_split", "block_stage_ranges", "resplit", "split_samples", "stage_ranges"]


def split_samples(samples: int, parts: int) -> tuple[tuple[int, int], ...]:
    """Split ``samples`` into ``parts`` contiguous ranges as evenly as possible.

    The first ``samples % parts`` ranges get one sample more. Returns ``(start, stop)`` pairs.

    Raises:
        InputError: ``parts < 1`` or ``samples < parts``.
    """
    if parts < 1:
        raise invalid("parts", parts, "must be >= 1")
    if samples < parts:
        raise InputError(f"samples={samples}: cannot split into {parts} non-empty parts")
    base, extra = divmod(samples, parts)
    ranges = []
    start = 0
    for k in range(parts):
        stop = start + base + (1 if k < extra else 0)
        ranges.append((start, stop))
        start = stop
    return tuple(ranges)


def resplit(
    src_shares: Sequence[tuple[int, int]], dst_shares: Sequence[tuple[int, int]]
) -> tuple[tuple[int, int, int], ...]:
    """The pieces that re-split one micro-batch from one replica set to another.

    Each replica holds a contiguous range of the micro-batch's samples (as :func:`split_samples`
    gives them). Source replica ``i`` sends to destination replica ``k`` the samples both ranges
    hold. The two partitions are merged in one pass, so there are at most
    ``len(src_shares) + len(dst_shares) - 1`` pieces.

    Args:
        src_shares: ``(start, stop)`` sample ranges of the source replicas, in order.
        dst_shares: the same for the destination replicas; both must cover the same samples.

    Returns:
        ``(source index, destination index, samples)`` per non-empty overlap, in source order.

    Raises:
        InputError: the two partitions do not cover the same contiguous range of samples.
    """
    if not src_shares or not dst_shares:
        raise invalid("shares", (tuple(src_shares), tuple(dst_shares)), "both sides need a replica")
    if src_shares[0][0] != dst_shares[0][0] or src_shares[-1][1] != dst_shares[-1][1]:
        raise invalid(
            "shares", (tuple(src_shares), tuple(dst_shares)), "must cover the same samples on both sides"
        )
    out: list[tuple[int, int, int]] = []
    i = k = 0
    while i < len(src_shares) and k < len(dst_shares):
        (a, b), (c, d) = src_shares[i], dst_shares[k]
        common = min(b, d) - max(a, c)
        if common > 0:
            out.append((i, k, common))
        if b <= d:
            i += 1
        if d <= b:
            k += 1
    return tuple(out)


def stage_ranges(split: Sequence[int], num_layers: int) -> list[tuple[int, int]]:
    """Turn stage sizes in layers (``--split 10,14,24``) into inclusive layer ranges.

    Raises:
        InputError: a size < 1, or the sizes do not add up to ``num_layers``.
    """
    if any(n < 1 for n in split):
        raise invalid("split", list(split), "every stage needs at least one layer")
    if sum(split) != num_layers:
        raise invalid("split", list(split), f"must add up to the model's {num_layers} layers")
    ranges = []
    start = 0
    for n in split:
        ranges.append((start, start + n - 1))
        start += n
    return ranges


def block_stage_ranges(
    blocks: Sequence[int], num_layers: int, *, first_block: int = 1
) -> list[tuple[int, int]]:
    """Inclusive layer ranges of stages holding ``blocks[k]`` consecutive blocks each, as
    Megatron-LM splits a transformer: the layers before the first block (``first_block`` of
    them: the embedding) go with the first stage, the layers after the last stage's blocks (the
    final norm and head, and any blocks no stage names) with the last.

    Args:
        blocks: blocks per stage (per virtual stage for interleaved schedules), each >= 1.
        num_layers: the profile's layer count.
        first_block: index of the first block layer (layers ``0 .. first_block - 1`` precede
            the blocks), >= 0.

    Raises:
        InputError: no stage, a count < 1, ``first_block < 0``, or more blocks than the layers
            after ``first_block`` hold.
    """
    if not blocks or any(n < 1 for n in blocks):
        raise invalid("blocks", list(blocks), "needs at least one stage, each with at least one block")
    if first_block < 0:
        raise invalid("first_block", first_block, "must be >= 0")
    if first_block + sum(blocks) > num_layers:
        raise invalid("blocks", list(blocks), f"add up to more than the {num_layers - first_block} layers "
                      f"after layer {first_block}")
    ranges = []
    start = first_block
    for n in blocks:
        ranges.append((start, start + n - 1))
        start += n
    ranges[0] = (0, ranges[0][1])
    ranges[-1] = (ranges[-1][0], num_layers - 1)
    return ranges


def balanced_split(stage_times_s: Sequence[float], num_stages: int) -> list[int]:
    """Cut a chain of layer times into ``num_stages`` contiguous stages minimising the slowest one.

    An exact dynamic program over prefix sums (O(S n^2) worst case, n layers): among splits with
    the smallest maximum stage time it returns the one that is lexicographically smallest in
    stage sizes from the end (later stages get more layers), so results are deterministic.

    Args:
        stage_times_s: time of each layer (forward + backward), seconds.
        num_stages: stages wanted.

    Returns:
        The number of layers in each stage.

    Raises:
        Infeasible: more stages than layers.
        InputError: ``num_stages < 1``.
    """
    n = len(stage_times_s)
    if num_stages < 1:
        raise invalid("stages", num_stages, "must be >= 1")
    if num_stages > n:
        raise Infeasible(f"stages={num_stages}: a model with {n} layers has at most {n} stages")
    prefix = [0.0]
    for t in stage_times_s:
        prefix.append(prefix[-1] + t)
    inf = float("inf")
    # with no negative time the first stage's time grows with j: once it reaches the best found,
    # no later j can improve it (the same result, without the rest of the loop)
    growing = all(t >= 0 for t in stage_times_s)
    # best[k][i]: smallest max-stage time covering layers i..n-1 with k stages
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    choice = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][n] = 0.0
    for k in range(1, num_stages + 1):
        rest, row, picks = best[k - 1], best[k], choice[k]
        for i in range(n - k, -1, -1):
            start = prefix[i]
            for j in range(i + 1, n - k + 2):
                first = prefix[j] - start
                if growing and first >= row[i]:
                    break
                value = first if first > rest[j] else rest[j]
                if value < row[i]:
                    row[i] = value
                    picks[i] = j
    sizes = []
    i = 0
    for k in range(num_stages, 0, -1):
        j = choice[k][i]
        sizes.append(j - i)
        i = j
    return sizes
