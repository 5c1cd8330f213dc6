"""Parameter sweeps: run a grid of models, clusters, overrides, batch sizes, planners and schedules
into one resumable CSV file (see ``docs/sweep.md``); :mod:`pipesim.reports.plots` draws the results.
"""

from pipesim.sweep.config import SweepConfig, SweepPoint, load_sweep_config, parse_sweep_config
from pipesim.sweep.runner import SweepSummary, run_sweep
from pipesim.sweep.store import COLUMNS, PARAMETER_COLUMNS, point_key, read_results

__all__ = [
    "COLUMNS",
    "PARAMETER_COLUMNS",
    "SweepConfig",
    "SweepPoint",
    "SweepSummary",
    "load_sweep_config",
    "parse_sweep_config",
    "point_key",
    "read_results",
    "run_sweep",
]
