"""The simulator: SimPy execution of plans on modelled GPUs and links (``pipesim.simulator``).

Charts (:mod:`pipesim.simulator.gantt`) and Chrome traces (:mod:`pipesim.simulator.chrome`) are
imported from their modules, so that simulating does not load matplotlib.
"""

from pipesim.simulator.engine import SimOptions, simulate
from pipesim.simulator.memory import OPTIMIZER_STATE_MULTIPLIER, static_memory_bytes
from pipesim.simulator.trace import DeviceMetrics, EventKind, MemoryCurve, SimulationResult, TraceEvent

__all__ = [
    "OPTIMIZER_STATE_MULTIPLIER",
    "DeviceMetrics",
    "EventKind",
    "MemoryCurve",
    "SimOptions",
    "SimulationResult",
    "TraceEvent",
    "simulate",
    "static_memory_bytes",
]
