"""pipesim: a discrete-event simulator and what-if analyzer for pipeline + data parallel training.

The public API is re-exported here lazily, so that importing one layer (``pipesim.profiles``,
``pipesim.schedules``) does not import the others.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    # name -> module that defines it
    "PipesimError": "pipesim.errors",
    "InputError": "pipesim.errors",
    "Infeasible": "pipesim.errors",
    "UnknownNameError": "pipesim.errors",
    "FormatError": "pipesim.errors",
    "Layer": "pipesim.profiles",
    "ModelProfile": "pipesim.profiles",
    "Cluster": "pipesim.profiles",
    "load_model": "pipesim.api",
    "load_cluster": "pipesim.api",
    "resolve_inputs": "pipesim.profiles.inputs",
    "make_plan": "pipesim.api",
    "simulate": "pipesim.api",
    "Plan": "pipesim.plan",
    "StagePlan": "pipesim.plan",
    "Estimate": "pipesim.plan",
    "load_plan": "pipesim.plan_file",
    "save_plan": "pipesim.plan_file",
    "SimOptions": "pipesim.simulator",
    "SimulationResult": "pipesim.simulator",
    "make_schedule": "pipesim.schedules",
    "verify": "pipesim.verification",
    "VerifyReport": "pipesim.verification",
    "retarget": "pipesim.profiles.costmodels.retarget",
    "schedule_names": "pipesim.schedules",
}

__all__ = ["__version__", *sorted(_EXPORTS)]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipesim' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
