"""Device placement policies on hierarchical clusters (DAPPLE's fresh-first, append-first, scatter-first).

A policy is a device *order* plus a rule for where the next stage starts in it. The planner
places stages from the last to the first (its dynamic program extends pipeline suffixes), taking
the order from its end: after ``q`` positions are used (counted from the end), a stage of ``r``
replicas starting at position ``t = stage_start(q)`` gets ``order[N - t - r : N - t]``. So the
last stage sits at the end of the order and the first stage near its beginning.

* ``append-first``: server-major order (all GPUs of server 0, then server 1, ...); a stage starts
  right after the previous one, so it first fills the server in use.
* ``fresh-first``: server-major order; a stage starts at the next server boundary, so it takes
  whole new servers (the rest of a partly used server stays idle).
* ``scatter-first``: round-robin order (GPU 0 of every server, then GPU 1 of every server, ...);
  a stage starts right after the previous one, so its replicas spread over the servers.

Servers of different GPU counts (one device type, e.g. ``[8, 12]``, issue 18) are placed the same
way: the round-robin skips servers that have no GPU ``j``, and fresh-first starts at the next
boundary of the actual servers (see :func:`placement_grid`).
"""

from __future__ import annotations

import bisect
import itertools
import math
from enum import Enum

from pipesim.errors import UnknownNameError
from pipesim.profiles.hardware.cluster import Cluster

__all__ = ["Placement", "device_order", "parse_placement", "placement_grid", "placement_unit", "stage_start"]


class Placement(str, Enum):
    """DAPPLE's device assignment policies (Fan et al., PPoPP 2021, Sec. 4.3)."""

    FRESH_FIRST = "fresh-first"
    APPEND_FIRST = "append-first"
    SCATTER_FIRST = "scatter-first"

    def __str__(self) -> str:
        return self.value


def parse_placement(name: str | Placement) -> Placement:
    """The policy called ``name``.

    Raises:
        UnknownNameError: not one of the three policies.
    """
    if isinstance(name, Placement):
        return name
    try:
        return Placement(name)
    except ValueError:
        raise UnknownNameError("placement policy", str(name), [p.value for p in Placement]) from None


def device_order(cluster: Cluster, policy: Placement) -> tuple[int, ...]:
    """The order in which ``policy`` hands out device ids."""
    if policy is Placement.SCATTER_FIRST:
        servers = [cluster.devices_of_server(s) for s in range(cluster.num_servers)]
        return tuple(devs[j] for j in range(max(map(len, servers))) for devs in servers if j < len(devs))
    return tuple(range(cluster.num_devices))


def placement_grid(cluster: Cluster) -> int | tuple[int, ...]:
    """What :func:`stage_start` rounds fresh-first starts to: the GPUs per server when every
    server has as many, else the server boundaries counted from the end of the order."""
    counts = cluster.server_gpu_counts
    if len(set(counts)) == 1:
        return counts[0]
    return (0, *itertools.accumulate(reversed(counts)))


def placement_unit(cluster: Cluster) -> int:
    """The server size the search's structured replica counts use: GPUs per server, or for servers
    of different GPU counts their greatest common divisor."""
    return math.gcd(*cluster.server_gpu_counts)


def stage_start(used: int, policy: Placement, gpus_per_server: int | tuple[int, ...]) -> int:
    """Where in the order the next stage starts, after ``used`` positions are taken.

    ``gpus_per_server``: the server size, or (servers of different sizes) the server boundaries
    from the end of the order (:func:`placement_grid`); fresh-first rounds up to the next one
    (past the last boundary: ``used`` itself, which places nothing).
    """
    if policy is Placement.FRESH_FIRST:
        if isinstance(gpus_per_server, tuple):
            i = bisect.bisect_left(gpus_per_server, used)
            return gpus_per_server[i] if i < len(gpus_per_server) else used
        return -(-used // gpus_per_server) * gpus_per_server
    return used
