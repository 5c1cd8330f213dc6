"""The DAPPLE search space: replica counts per stage, where stages may start, and the placement
unit on large clusters (what :mod:`pipesim.planner.dapple`'s dynamic program searches over)."""

from __future__ import annotations

from collections.abc import Sequence

from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "CUT_BLOCKS",
    "MAX_DEVICE_UNITS",
    "MAX_EXACT_LAYERS",
    "cut_positions",
    "device_unit",
    "even_split",
    "replica_candidates",
]

MAX_DEVICE_UNITS = 64
"""Largest number of placement units the search handles device by device (see :func:`device_unit`)."""

MAX_EXACT_LAYERS = 96
"""Models with more layers are cut only at :data:`CUT_BLOCKS` block boundaries (see :func:`cut_positions`)."""

CUT_BLOCKS = 48
"""Blocks a long model is merged into before the search."""


def device_unit(num_devices: int, gpus_per_server: int) -> int:
    """The granularity of replica counts: 1 up to :data:`MAX_DEVICE_UNITS` devices, else whole servers.

    On a larger cluster every stage takes a power-of-two multiple of ``u = g * 2^j`` devices (``g``
    GPUs per server; ``j`` the smallest with ``num_devices / u <= MAX_DEVICE_UNITS``), so the
    devices used, the search's state, take at most ``MAX_DEVICE_UNITS + 1`` values.
    """
    if num_devices <= MAX_DEVICE_UNITS:
        return 1
    unit = gpus_per_server
    while num_devices / unit > MAX_DEVICE_UNITS and unit * 2 <= num_devices:
        unit *= 2
    return unit


def replica_candidates(
    microbatch_size: int,
    num_devices: int,
    gpus_per_server: int,
    unit: int | None = None,
    *,
    full: bool = True,
) -> list[int]:
    """Replica counts the search tries for a micro-batch of ``microbatch_size`` samples.

    With ``full=False`` (``replica_space="structured"``) and ``unit == 1``: the counts that
    divide the micro-batch (equal shares) and are a power of two or a multiple of the server size.
    With ``full`` (the planner's default, ``replica_space="full"``), up to
    :data:`MAX_DEVICE_UNITS` devices (``unit == 1``, the default there): every count
    ``1..min(microbatch_size, num_devices)``, DAPPLE's full space. A count that does not divide
    the micro-batch gives uneven shares (:func:`pipesim.plan.split_samples`), which the estimate
    times at the largest share. On a larger cluster (``unit > 1``, see :func:`device_unit`) the
    space is bounded to structured counts: ``unit * 2^j <= num_devices`` that divide the
    micro-batch (each of the up to 64 multiples of the unit would cost the search about as much
    as the whole structured set). ``gpus_per_server`` only sets the default unit.
    """
    u = device_unit(num_devices, gpus_per_server) if unit is None else unit
    if u == 1:
        counts = range(1, min(microbatch_size, num_devices) + 1)
        if full:
            return list(counts)
        return [
            r for r in counts if microbatch_size % r == 0 and (r & (r - 1) == 0 or r % gpus_per_server == 0)
        ]
    out = []
    r = u
    while r <= min(microbatch_size, num_devices):
        if microbatch_size % r == 0:
            out.append(r)
        r *= 2
    return out


def cut_positions(profile: ModelProfile) -> tuple[int, ...]:
    """Layer indices where a stage may start (0 first), plus the layer count at the end.

    Every layer up to :data:`MAX_EXACT_LAYERS` layers. A longer model is first split into
    :data:`CUT_BLOCKS` blocks of about equal forward + backward time (a boundary where the
    running total reaches ``k / CUT_BLOCKS`` of the whole); each block boundary then moves,
    within half a block either way, to the cut with the fewest crossing bytes (nearest on
    ties; two boundaries that meet become one), so branching models are not cut through a
    residual block.
    """
    n = profile.num_layers
    if n <= MAX_EXACT_LAYERS:
        return tuple(range(n + 1))
    times = [lay.fwd_time_s + lay.bwd_time_s for lay in profile.layers]
    crossing = [c.crossing_bytes for c in profile.cuts()]  # crossing[k]: stage starting at k + 1
    half = max(1, -(-n // (2 * CUT_BLOCKS)))
    out = [0]
    for pos in even_split(times, CUT_BLOCKS)[1:-1]:
        window = range(max(1, pos - half), min(n - 1, pos + half) + 1)
        best = min(window, key=lambda s: (crossing[s - 1], abs(s - pos), s))
        if best > out[-1]:  # two boundaries that move to one cut merge their blocks
            out.append(best)
    out.append(n)
    return tuple(out)


def even_split(times: Sequence[float], parts: int) -> list[int]:
    """Block boundaries ``0 = c_0 < ... < c_parts = len(times)`` cutting where the running total
    first reaches ``k / parts`` of the whole (each part non-empty; ``parts <= len(times)``)."""
    n = len(times)
    total = sum(times)
    bounds = [0]
    acc = 0.0
    k = 1
    for idx, t in enumerate(times):
        acc += t
        left_blocks = n - (idx + 1)
        if k < parts and (acc >= total * k / parts or left_blocks == parts - k):
            bounds.append(idx + 1)
            k += 1
    bounds.append(n)
    return bounds
