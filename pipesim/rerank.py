"""Re-rank a planner's shortlist by simulation: the ``rerank`` callable of :func:`pipesim.planner.plan`.

The planner ranks plans by its analytic estimate and never imports the simulator; this module,
in the top layer, hands it a callable that simulates each shortlisted plan instead::

    from pipesim.planner import plan
    from pipesim.rerank import simulated_rerank

    plans = plan(profile, cluster, 128, rerank=simulated_rerank(profile, cluster))
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import replace

from pipesim.plan import Plan
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, simulate

__all__ = ["simulated_rerank"]

log = logging.getLogger(__name__)


def simulated_rerank(
    profile: ModelProfile | str,
    cluster: Cluster | str,
    options: SimOptions | None = None,
    *,
    overrides: Mapping[str, object] | None = None,
) -> Callable[[Plan], float]:
    """A ``rerank`` callable that simulates a plan and returns its iteration time, seconds.

    Plans whose simulated peak memory does not fit a device get ``inf`` (ranked last). The model
    and cluster go through :func:`pipesim.profiles.inputs.resolve_inputs`, as in
    :func:`pipesim.planner.plan`: pass the same model, cluster and ``overrides`` to both.

    Args:
        profile: a :class:`ModelProfile`, or a zoo name, ``gpt:...`` spec or profile file path.
        cluster: a :class:`Cluster`, or a preset name or cluster TOML path.
        options: simulator knobs (default :class:`~pipesim.simulator.SimOptions`); traces are
            never recorded (``record_trace=False``).
        overrides: what-if changes to the cluster.

    Raises:
        UnknownNameError: an unknown model or cluster name.
        InputError: a bad override. The callable raises what :func:`pipesim.simulator.simulate`
            raises for a plan it cannot run.
    """
    model, machine = resolve_inputs(profile, cluster, overrides=overrides)
    opts = replace(options or SimOptions(), record_trace=False)

    def simulated_time_s(plan: Plan) -> float:
        result = simulate(plan, model, machine, opts)
        value = result.iteration_time_s if result.fits else math.inf
        log.debug("rerank: %d stages, M=%d: %.6g s", plan.num_stages, plan.num_microbatches, value)
        return value

    return simulated_time_s
