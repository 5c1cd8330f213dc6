"""Check a planner's estimate against the simulator: relative errors of iteration time and peak memory.

This module needs both the planner and the simulator, so it lives in the top-level API layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipesim.errors import invalid
from pipesim.plan import Plan
from pipesim.planner import estimate_plan
from pipesim.profiles.inputs import ClusterLike, ModelLike, resolve_inputs
from pipesim.simulator import SimOptions, simulate

__all__ = ["VerifyReport", "verify"]


@dataclass(frozen=True, slots=True, kw_only=True)
class VerifyReport:
    """An estimate next to a simulation of the same plan.

    Attributes:
        plan: the plan checked (with its estimate).
        estimated_iteration_time_s: the planner's iteration time, seconds.
        simulated_iteration_time_s: the simulator's, seconds.
        estimated_peak_memory_bytes: the planner's peak memory of the fullest device, bytes.
        simulated_peak_memory_bytes: the simulator's, bytes.
    """

    plan: Plan
    estimated_iteration_time_s: float
    simulated_iteration_time_s: float
    estimated_peak_memory_bytes: float
    simulated_peak_memory_bytes: float

    @property
    def relative_error(self) -> float:
        """``(estimated - simulated) / simulated`` iteration time (signed)."""
        return _rel(self.estimated_iteration_time_s, self.simulated_iteration_time_s)

    @property
    def peak_memory_relative_error(self) -> float:
        """``(estimated - simulated) / simulated`` peak memory (signed)."""
        return _rel(self.estimated_peak_memory_bytes, self.simulated_peak_memory_bytes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``pipesim verify --json`` prints one per plan)."""
        return {
            "planner": self.plan.planner,
            "estimated_iteration_time_s": self.estimated_iteration_time_s,
            "simulated_iteration_time_s": self.simulated_iteration_time_s,
            "relative_error": self.relative_error,
            "estimated_peak_memory_bytes": self.estimated_peak_memory_bytes,
            "simulated_peak_memory_bytes": self.simulated_peak_memory_bytes,
            "peak_memory_relative_error": self.peak_memory_relative_error,
        }


def _rel(estimated: float, simulated: float) -> float:
    if simulated == 0:
        return 0.0 if estimated == 0 else float("inf")
    return (estimated - simulated) / simulated


def verify(
    plan: Plan,
    cluster: ClusterLike,
    *,
    profile: ModelLike,
    overrides: Mapping[str, object] | None = None,
    options: SimOptions | None = None,
) -> VerifyReport:
    """Simulate ``plan`` and compare with its estimate (the plan's own, else the planner's estimate).

    Example::

        report = pipesim.verify(plans[0], "dgx-h100-x4", profile="bert48")
        assert abs(report.relative_error) < 0.05

    Args:
        plan: a plan, usually from :func:`pipesim.planner.plan`. Its own estimate is used when
            it has one, so plan with the same (re-targeted) inputs you verify with.
        cluster: the cluster it runs on (a :class:`Cluster`, preset name or cluster TOML file).
        profile: the model (a profile, zoo name, ``gpt:...`` spec or profile file); re-targeted
            to the cluster's device like every input (see
            :func:`pipesim.profiles.inputs.resolve_inputs`).
        overrides: what-if changes to the cluster (``{"device": "H100-SXM"}``).
        options: simulator knobs (default: the cluster as given, no trace kept).

    Raises:
        InputError: the plan does not fit the model or cluster, has no estimate and uses a
            schedule the planner cannot estimate, or a bad model, cluster or override.
        Infeasible: the plan needs more devices than the cluster has.
    """
    if not isinstance(plan, Plan):
        raise invalid("plan", type(plan).__name__, "must be a Plan")
    model, machine = resolve_inputs(profile, cluster, overrides=overrides)
    estimate = plan.estimate if plan.estimate is not None else estimate_plan(plan, model, machine)
    result = simulate(plan, model, machine, options or SimOptions(record_trace=False))
    simulated_peak = max(d.peak_memory_bytes for d in result.devices)
    return VerifyReport(
        plan=plan,
        estimated_iteration_time_s=estimate.iteration_time_s,
        simulated_iteration_time_s=result.iteration_time_s,
        estimated_peak_memory_bytes=estimate.peak_memory_bytes,
        simulated_peak_memory_bytes=simulated_peak,
    )
