"""What the simulator's all-reduces cost: closed forms, and the route-based estimate on its network.

The closed forms (:func:`ring_allreduce_time_s`, :func:`hierarchical_allreduce_time_s`) are the
times of :mod:`pipesim.simulator.collectives`' algorithms on equal, uncontended links, with the
NCCL protocol of least time (:mod:`pipesim.profiles.costmodels.nccl_protocol`). The estimate
(:func:`estimate_allreduce_time_s`) and the algorithm ``auto`` runs
(:func:`choose_allreduce_algorithm`) come from the route-based curves of
:mod:`pipesim.profiles.costmodels.collective` on the network's actual routes, the same curves
the planner uses, so planner and simulator pick the same algorithm and protocol; the curves are
made once per network, members, route and ``server_of`` (:func:`network_curves`).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from pipesim.errors import check_count, check_nonneg, check_positive
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm, AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.nccl_protocol import IDEAL, LinkClass, Protocol, best_protocol
from pipesim.simulator.collective_steps import Route, ServerOf, check_allreduce, check_members
from pipesim.simulator.network import Network

__all__ = [
    "call_protocol",
    "choose_allreduce_algorithm",
    "estimate_allreduce_time_s",
    "hierarchical_allreduce_time_s",
    "network_curves",
    "ring_allreduce_time_s",
]


def ring_allreduce_time_s(
    n: int,
    nbytes: float,
    bandwidth_bytes_per_s: float,
    latency_s: float,
    *,
    link_class: LinkClass | None = None,
) -> float:
    """Ring all-reduce time on n members over equal, uncontended links, seconds.

    On ideal links (``latency_s`` 0) ``2 (n - 1) / n * nbytes / bandwidth_bytes_per_s``
    (Patarasuk and Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
    JPDC 2009: the ring's 2(n - 1) steps of S/n bytes); otherwise, with the NCCL protocol of
    least time (:mod:`pipesim.profiles.costmodels.nccl_protocol`: launch ``L``, hand-off ``h``
    per step, ``f`` wire bytes per byte),
    ``L + 2 (n - 1) (a + h) + f * 2 (n - 1) / n * nbytes / bandwidth_bytes_per_s``, where without
    ``link_class`` ``a`` is ``latency_s`` and ``h`` the NVLink hand-off, and with it ``h`` is
    NCCL's hand-off for the class and ``a`` is ``latency_s`` on a network (``NET``: pass the
    route's network links' latency) and 0 inside a server (the hop's latency is inside ``h``).
    0 for n <= 1.

    Raises:
        InputError: n < 1, negative bytes or latency, or bandwidth <= 0.
    """
    check_count("n", n)
    check_nonneg("nbytes", nbytes)
    check_nonneg("latency_s", latency_s)
    check_positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s, allow_inf=True)
    if n <= 1:
        return 0.0

    hop_s = latency_s if link_class in (None, LinkClass.NET) else 0.0

    def wire_s(x: float) -> float:
        return 2 * (n - 1) * (hop_s + x / n / bandwidth_bytes_per_s)

    return best_protocol(2 * (n - 1), wire_s, nbytes, timed=latency_s > 0, link_class=link_class)[1]


def hierarchical_allreduce_time_s(
    n_servers: int,
    gpus_per_server: int,
    nbytes: float,
    *,
    intra_bandwidth_bytes_per_s: float,
    intra_latency_s: float,
    inter_bandwidth_bytes_per_s: float,
    inter_latency_s: float,
) -> float:
    """Hierarchical all-reduce time (see the module docstring), seconds, uncontended links.

    ``2 (g - 1) (a_intra + S / (g B_intra)) + 2 (k - 1) (a_inter + S / (g k B_inter))`` with
    k = ``n_servers``, g = ``gpus_per_server``, on ideal links (both latencies 0); otherwise
    with the NCCL protocol of least time as in :func:`ring_allreduce_time_s` (its launch, its
    hand-off at each of the ``2 (g - 1) + 2 (k - 1)`` steps, ``S`` times its wire factor).
    ``inter_bandwidth_bytes_per_s`` is the rate one of the g concurrent inter-server rings gets
    per hop: divide a shared NIC's bandwidth by the number of rings crossing it.

    Raises:
        InputError: a count < 1, negative bytes or latency, or a bandwidth <= 0.
    """
    check_count("n_servers", n_servers)
    check_count("gpus_per_server", gpus_per_server)
    check_nonneg("nbytes", nbytes)
    check_nonneg("intra_latency_s", intra_latency_s)
    check_nonneg("inter_latency_s", inter_latency_s)
    check_positive("intra_bandwidth_bytes_per_s", intra_bandwidth_bytes_per_s, allow_inf=True)
    check_positive("inter_bandwidth_bytes_per_s", inter_bandwidth_bytes_per_s, allow_inf=True)
    k, g = n_servers, gpus_per_server

    def wire_s(x: float) -> float:
        shard = x / g
        intra = 2 * (g - 1) * (intra_latency_s + shard / intra_bandwidth_bytes_per_s)
        inter = 2 * (k - 1) * (inter_latency_s + shard / k / inter_bandwidth_bytes_per_s)
        return intra + inter

    steps = 2 * (g - 1) + 2 * (k - 1)
    timed = (g > 1 and intra_latency_s > 0) or (k > 1 and inter_latency_s > 0)
    return best_protocol(steps, wire_s, nbytes, timed=timed)[1] if steps else 0.0


def estimate_allreduce_time_s(
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
    algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.RING,
) -> float:
    """Cheap analytic all-reduce time on the network's actual routes, seconds (for planners).

    Each step takes the slowest of its chunks, a chunk taking its route's latency (plus the
    network's overhead) plus ``chunk / min over its links of (bandwidth / chunks of this step on
    the link)``. Exact for equal chunks on a bottleneck that only they share (so for the closed
    forms); contention with other traffic is not seen. ``auto`` gives the fastest that applies.

    Raises:
        UnknownNameError: unknown algorithm.
        InputError: bad members or bytes, or ``hierarchical`` without ``server_of``.
    """
    algo, order = check_allreduce(algorithm, members, nbytes, server_of)
    if network.free_links or len(order) <= 1:
        return 0.0
    return network_curves(network, order, route, server_of).time_s(nbytes, algo.value)


def choose_allreduce_algorithm(
    network: Network,
    members: Sequence[int],
    nbytes: float,
    route: Route,
    *,
    server_of: ServerOf | None = None,
) -> AllReduceAlgorithm:
    """The algorithm ``auto`` runs: ring, hierarchical or tree (rule: :mod:`pipesim.simulator.collectives`).

    Raises:
        InputError: bad members or bytes.
    """
    order = check_members(members)
    check_nonneg("nbytes", nbytes)
    if server_of is None or len(order) <= 1 or network.free_links:
        return AllReduceAlgorithm.RING
    return network_curves(network, order, route, server_of).algorithm_for(nbytes, AllReduceAlgorithm.AUTO)


def network_curves(
    network: Network, order: list[int], route: Route, server_of: ServerOf | None
) -> AllReduceCurves:
    """The shared route-based cost curves (:mod:`pipesim.profiles.costmodels.collective`) on this
    network, computed once per network, members, route and ``server_of`` (every collective call
    asks for its protocol)."""
    cache = _CURVES.get(network)
    if cache is None:
        cache = _CURVES[network] = {}
    key = (tuple(order), route, server_of)
    found = cache.get(key)
    if found is None:
        found = cache[key] = allreduce_curves(
            order,
            route,
            network.bandwidth_bytes_per_s,
            network.latency_s,
            server_of=server_of,
            overhead_s=network.overhead_s,
            link_class=network.link_class if network.has_link_classes else None,
        )
    return found


_CURVES: weakref.WeakKeyDictionary[Network, dict[tuple[object, ...], AllReduceCurves]] = (
    weakref.WeakKeyDictionary()
)
"""Curves per live network (a network's links never change)."""


def call_protocol(
    network: Network,
    order: list[int],
    route: Route,
    server_of: ServerOf | None,
    nbytes: float,
    algorithm: AllReduceAlgorithm,
) -> Protocol:
    """The NCCL protocol an all-reduce of ``nbytes`` with ``algorithm`` runs with on this
    network (:meth:`~pipesim.profiles.costmodels.collective.AllReduceCurves.protocol_for`);
    ``IDEAL`` on free links or for one member."""
    if network.free_links or len(order) <= 1:
        return IDEAL
    return network_curves(network, order, route, server_of).protocol_for(nbytes, algorithm)
