"""The least route latency between two stages' devices, for the estimate's pipelined sends.

A pipeline transfer between two stages pays the route latency of the pair of devices it runs
between; the estimate charges the least one (:class:`LeastLatency`). Over every device pair that
is ``|src| x |dst|`` routes (a 256 x 256 stage pair on 1024 GPUs, once per estimate), so where
servers are interchangeable (identical servers behind one switch,
:attr:`~pipesim.profiles.hardware.cluster_type.Cluster.servers_interchangeable`) it uses that a
pair's latency depends only on whether the two devices share a server and on their local
indices: the minimum runs over at most ``g x g`` local-index pairs of each kind (``g`` GPUs per
server), each timed once per cluster on a representative pair. Equal to the pairwise minimum
(tests/planner/test_least_latency.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipesim.profiles.hardware.cluster_type import Cluster

__all__ = ["LeastLatency"]


class LeastLatency:
    """``least(src, dst)``: the least route latency between a device of ``src`` and another of
    ``dst`` (either direction), seconds; 0 where they share a device.

    Args:
        cluster: the cluster whose routes are timed (its links' ``latency_s``).
    """

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._lat = [link.latency_s for link in cluster.links]
        self._class: dict[tuple[bool, int, int], float] = {}

    def __call__(self, src: Sequence[int], dst: Sequence[int]) -> float:
        """The least latency, seconds (see the class docstring).

        Raises:
            InputError: a device id is out of range.
        """
        if not set(src).isdisjoint(dst):
            return 0.0
        cluster = self.cluster
        if not cluster.servers_interchangeable:
            return self.pairwise(src, dst)
        server_of, local_index = cluster.server_of, cluster.local_index
        src_at: dict[int, set[int]] = {}
        dst_at: dict[int, set[int]] = {}
        for a in src:
            src_at.setdefault(local_index(a), set()).add(server_of(a))
        for b in dst:
            dst_at.setdefault(local_index(b), set()).add(server_of(b))
        best = math.inf
        for i, src_servers in src_at.items():
            for j, dst_servers in dst_at.items():
                if not src_servers.isdisjoint(dst_servers):  # a pair inside one server
                    best = min(best, self._class_latency_s(True, i, j))
                if len(src_servers) > 1 or len(dst_servers) > 1 or src_servers != dst_servers:
                    best = min(best, self._class_latency_s(False, i, j))  # a pair across two
        return 0.0 if best == math.inf else best

    def _class_latency_s(self, same_server: bool, i: int, j: int) -> float:
        """The least latency, either direction, between local device ``i`` of one server and
        local device ``j`` of the same server (``same_server``) or of another, seconds."""
        key = (same_server, i, j)
        found = self._class.get(key)
        if found is None:
            a = self.cluster.devices_of_server(0)[i]
            b = self.cluster.devices_of_server(0 if same_server else 1)[j]
            found = self._class[key] = self.pairwise((a,), (b,))
        return found

    def pairwise(self, src: Sequence[int], dst: Sequence[int]) -> float:
        """The least latency over every device pair, seconds (any cluster).

        Raises:
            InputError: a device id is out of range.
        """
        lat, route = self._lat, self.cluster.route
        best = math.inf
        for a in src:
            for b in dst:
                if a == b:
                    return 0.0
                there = sum(lat[link] for link in route(a, b))
                back = sum(lat[link] for link in route(b, a))
                best = min(best, there, back)
        return 0.0 if best == math.inf else best
