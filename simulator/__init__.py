"""The simulator: SimPy execution of plans on modelled GPUs and links (``pipesim.simulator``).

Charts (:mod:`pipesim.reports.gantt`) and Chrome traces (:mod:`pipesim.reports.chrome`) are
imported from their modules, so that simulating does not load matplotlib.
"""

from pipesim.simulator.collectives import (
    AllReduceAlgorithm,
    allreduce,
    choose_allreduce_algorithm,
    estimate_allreduce_time_s,
    hierarchical_allreduce,
    hierarchical_allreduce_time_s,
    ring_allreduce,
    ring_allreduce_time_s,
)
from pipesim.simulator.engine import SimOptions, simulate
from pipesim.simulator.network import LinkInterval, Network, NetworkStats, TransferRecord
from pipesim.simulator.trace import DeviceMetrics, EventKind, MemoryCurve, SimulationResult, TraceEvent

__all__ = [
    "AllReduceAlgorithm",
    "DeviceMetrics",
    "EventKind",
    "LinkInterval",
    "MemoryCurve",
    "Network",
    "NetworkStats",
    "SimOptions",
    "SimulationResult",
    "TraceEvent",
    "TransferRecord",
    "allreduce",
    "choose_allreduce_algorithm",
    "estimate_allreduce_time_s",
    "hierarchical_allreduce",
    "hierarchical_allreduce_time_s",
    "ring_allreduce",
    "ring_allreduce_time_s",
    "simulate",
]
