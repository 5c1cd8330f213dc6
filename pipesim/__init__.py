"""pipesim: a discrete-event simulator and what-if analyzer for pipeline + data parallel training.

The public API is re-exported here lazily, so that importing one layer (``pipesim.profiles``,
``pipesim.schedules``) does not import the others. Type checkers see the same names as real
imports (the ``TYPE_CHECKING`` block), and no module ``__getattr__``, so ``pipesim.simulate`` has
its real signature and a typo such as ``pipesim.simulat`` is an error.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipesim.api import load_cluster as load_cluster
    from pipesim.api import load_model as load_model
    from pipesim.api import make_plan as make_plan
    from pipesim.api import simulate as simulate
    from pipesim.errors import FormatError as FormatError
    from pipesim.errors import Infeasible as Infeasible
    from pipesim.errors import InputError as InputError
    from pipesim.errors import PipesimError as PipesimError
    from pipesim.errors import UnknownNameError as UnknownNameError
    from pipesim.plan import Estimate as Estimate
    from pipesim.plan import Plan as Plan
    from pipesim.plan import StagePlan as StagePlan
    from pipesim.plan_file import load_plan as load_plan
    from pipesim.plan_file import save_plan as save_plan
    from pipesim.profiles import Cluster as Cluster
    from pipesim.profiles import Layer as Layer
    from pipesim.profiles import ModelProfile as ModelProfile
    from pipesim.profiles.costmodels.retarget import retarget as retarget
    from pipesim.profiles.inputs import resolve_inputs as resolve_inputs
    from pipesim.schedules import make_schedule as make_schedule
    from pipesim.schedules import schedule_names as schedule_names
    from pipesim.simulator import SimOptions as SimOptions
    from pipesim.simulator import SimulationResult as SimulationResult
    from pipesim.verification import VerifyReport as VerifyReport
    from pipesim.verification import verify as verify

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


if not TYPE_CHECKING:  # hidden from type checkers: they resolve the names through the imports above

    def __getattr__(name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'pipesim' has no attribute {name!r}")
        value = getattr(import_module(module), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
