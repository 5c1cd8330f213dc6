"""A cluster's all-reduce two ways, for the NCCL protocol tests: the cost curves the planner reads
and the simulator's run of the same collective on the cluster's network."""

from __future__ import annotations

import simpy

from pipesim.profiles.costmodels.collective import AllReduceCurves, allreduce_curves
from pipesim.profiles.costmodels.nccl_protocol import link_classes
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network


def cluster_curves(cluster: Cluster, members: list[int], *, classes: bool = True) -> AllReduceCurves:
    """The all-reduce curves of ``members`` on ``cluster``'s routes, hierarchical over its servers;
    ``classes``: with NCCL's per-link-class hand-offs and tuner (else NCCL before 2.5)."""
    links = cluster.links
    bw = [lk.bandwidth_bytes_per_s for lk in links]
    lat = [lk.latency_s for lk in links]
    kinds = link_classes(links)
    return allreduce_curves(
        members,
        cluster.route,
        bw.__getitem__,
        lat.__getitem__,
        server_of=cluster.server_of,
        link_class=kinds.__getitem__ if classes else None,
    )


def simulated_allreduce_s(
    cluster: Cluster, members: list[int], nbytes: float, algorithm: str = "auto", *, classes: bool = True
) -> float:
    """Seconds the simulator's all-reduce of ``nbytes`` among ``members`` takes alone on
    ``cluster``'s network (``classes`` as :func:`cluster_curves`)."""
    env = simpy.Environment()
    net = Network.over_links(env, cluster.links, nccl_tuner=classes)
    env.process(
        allreduce(env, net, members, nbytes, cluster.route, server_of=cluster.server_of, algorithm=algorithm)
    )
    env.run()
    return float(env.now)
