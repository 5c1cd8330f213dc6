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
"""

from __future__ import annotations

from enum import Enum

from pipesim.errors import UnknownNameError
from pipesim.profiles.hardware.cluster import Cluster

__all__ = ["Placement", "device_order", "parse_placement", "stage_start"]


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
    n, g = cluster.num_servers, cluster.gpus_per_server
    if policy is Placement.SCATTER_FIRST:
        return tuple(s * g + j for j in range(g) for s in range(n))
    return tuple(range(n * g))


def stage_start(used: int, policy: Placement, gpus_per_server: int) -> int:
    """Where in the order the next stage starts, after ``used`` positions are taken."""
    if policy is Placement.FRESH_FIRST:
        return -(-used // gpus_per_server) * gpus_per_server
    return used
