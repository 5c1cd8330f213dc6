"""The planner entry point: a registry of planner names and :func:`plan`, which ranks their plans."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from pipesim.errors import Infeasible, UnknownNameError, invalid
from pipesim.plan import Estimate, Plan, Recompute
from pipesim.planner.baselines import dp_plans, gpipe_plans, single_plan
from pipesim.planner.dapple import dapple_search, to_plan
from pipesim.planner.estimate import CostModel
from pipesim.planner.pipedream import pipedream_plans
from pipesim.planner.placement import Placement, parse_placement
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["estimate_plan", "plan", "planner_names"]

log = logging.getLogger(__name__)

RERANK_SHORTLIST = 12
"""DP results (best per micro-batch count and placement) re-ranked by the full estimate."""

_Planner = Callable[[CostModel, int, float, int, Sequence[Placement], Sequence[int] | None], list[Plan]]


def _dapple(
    model: CostModel,
    gbs: int,
    limit: float,
    top: int,
    placements: Sequence[Placement],
    ms: Sequence[int] | None,
) -> list[Plan]:
    # The DP is exact for DAPPLE's closed-form latency; re-rank a wider shortlist by the full
    # estimate (list-scheduled timeline, NIC sharing in the ending phase).
    results = dapple_search(
        model,
        gbs,
        placements=placements,
        microbatch_counts=ms,
        memory_limit_bytes=limit,
        top=max(3 * top, RERANK_SHORTLIST),
    )
    plans = [to_plan(r, gbs, optimizer=model.optimizer, allreduce=model.allreduce) for r in results]
    dp_costs = [r.time_s for r in results]
    try:  # pure data parallelism is one point of DAPPLE's space: keep it in the shortlist
        best_dp = dp_plans(model, gbs, limit)[0]
        plans.append(replace(best_dp, planner="dapple", estimate=None))
        dp_costs.append(model.estimate(best_dp, contention=False, exact_schedule=False).iteration_time_s)
    except Infeasible:
        pass
    # Re-rank by the full estimate, in the order of the DP's cost. The full estimate adds link
    # sharing and the real schedule's order to the DP's closed form and has never been seen below
    # it, so once the DP cost reaches the top-th best full estimate the rest cannot enter the top.
    keyed: list[tuple[float, int, Plan]] = []
    for i in sorted(range(len(plans)), key=lambda k: (dp_costs[k], k)):
        if len(keyed) >= top and dp_costs[i] >= sorted(t for t, _, _ in keyed)[top - 1]:
            keyed.append((math.inf, i, plans[i]))
            continue
        keyed.append((model.estimate(plans[i]).iteration_time_s, i, plans[i]))
    keyed.sort(key=lambda t: (t[0], t[1]))
    return [p for _, _, p in keyed]


_PLANNERS: dict[str, _Planner] = {
    "dapple": _dapple,
    "dp": lambda model, gbs, limit, top, pl, ms: dp_plans(model, gbs, limit),
    "gpipe": lambda model, gbs, limit, top, pl, ms: gpipe_plans(model, gbs, limit, microbatch_counts=ms),
    "pipedream": lambda model, gbs, limit, top, pl, ms: pipedream_plans(model, gbs, limit),
}


def planner_names() -> tuple[str, ...]:
    """The planner names :func:`plan` accepts."""
    return tuple(sorted(_PLANNERS))


def _finish(plan: Plan, model: CostModel, single_s: float | None, dp_s: float | None) -> Plan:
    placement = plan.placement(model.cluster.num_devices)
    stages = tuple(replace(st, devices=placement[i]) for i, st in enumerate(plan.stages))
    est = model.estimate(plan)
    t = est.iteration_time_s
    return Plan(
        stages=stages,
        global_batch_size=plan.global_batch_size,
        num_microbatches=plan.num_microbatches,
        schedule=plan.schedule,
        schedule_options=plan.schedule_options,
        optimizer=plan.optimizer,
        allreduce=plan.allreduce,
        recompute=plan.recompute,
        planner=plan.planner,
        estimate=Estimate(
            iteration_time_s=t,
            throughput_samples_per_s=est.throughput_samples_per_s,
            peak_memory_bytes=est.peak_memory_bytes,
            speedup_vs_single=None if single_s is None or t <= 0 else single_s / t,
            speedup_vs_dp=None if dp_s is None or t <= 0 else dp_s / t,
            device_peak_memory_bytes=est.device_peak_memory_bytes,
        ),
    )


def plan(
    profile: ModelProfile,
    cluster: Cluster,
    global_batch_size: int,
    *,
    planner: str = "dapple",
    top: int = 5,
    memory_limit_bytes: float | None = None,
    optimizer: str = "adam",
    allreduce: str = "auto",
    recompute: Recompute | str | bool = Recompute.NONE,
    placements: Iterable[str | Placement] | None = None,
    microbatch_counts: Sequence[int] | None = None,
) -> list[Plan]:
    """Plan a training iteration of ``profile`` on ``cluster``: ranked plans, best first.

    Args:
        profile: the model.
        cluster: the devices and links.
        global_batch_size: samples per iteration (>= 1).
        planner: ``dapple`` (default), ``dp``, ``gpipe`` or ``pipedream`` (see
            :func:`planner_names`).
        top: most plans to return (>= 1).
        memory_limit_bytes: per-device memory limit, bytes (default: the device's memory).
        optimizer: ``sgd``, ``momentum`` or ``adam`` (optimizer-state memory).
        allreduce: gradient all-reduce algorithm, ``auto``, ``ring`` or ``hierarchical``.
        recompute: activation recomputation, ``none`` or ``full`` (``True`` is ``full``; memory only).
        placements: DAPPLE placement policies to try (default all: ``fresh-first``,
            ``append-first``, ``scatter-first``).
        microbatch_counts: micro-batch counts to try (default every divisor of the batch).

    Returns:
        Plans with ``planner`` set and an :class:`~pipesim.plan.Estimate` (iteration time,
        throughput, peak memory, speedups over one device and over the best ``dp`` plan).

    Raises:
        UnknownNameError: unknown planner or placement policy.
        InputError: a bad batch size, ``top`` or memory limit.
        Infeasible: no plan fits in memory.
    """
    if planner not in _PLANNERS:
        raise UnknownNameError("planner", planner, _PLANNERS)
    if not isinstance(global_batch_size, int) or isinstance(global_batch_size, bool) or global_batch_size < 1:
        raise invalid("global_batch_size", global_batch_size, "must be an integer >= 1")
    if not isinstance(top, int) or top < 1:
        raise invalid("top", top, "must be an integer >= 1")
    if memory_limit_bytes is not None and not (memory_limit_bytes > 0 and math.isfinite(memory_limit_bytes)):
        raise invalid("memory_limit_bytes", memory_limit_bytes, "must be a finite number > 0")
    if microbatch_counts is not None:
        for m in microbatch_counts:
            if not isinstance(m, int) or m < 1 or global_batch_size % m:
                raise invalid(
                    "microbatch_counts",
                    list(microbatch_counts),
                    f"each must be an integer >= 1 dividing the global batch ({global_batch_size})",
                )
    policies = tuple(parse_placement(p) for p in placements) if placements is not None else tuple(Placement)
    limit = (
        float(memory_limit_bytes) if memory_limit_bytes is not None else float(cluster.device.memory_bytes)
    )
    model = CostModel(profile, cluster, optimizer=optimizer, recompute=recompute, allreduce=allreduce)
    plans = _PLANNERS[planner](model, global_batch_size, limit, top, policies, microbatch_counts)
    single = single_plan(model, global_batch_size, limit)
    single_s = single.estimate.iteration_time_s if single is not None and single.estimate else None
    try:
        dp_best = dp_plans(model, global_batch_size, limit)[0] if planner != "dp" else plans[0]
        dp_s = dp_best.estimate.iteration_time_s if dp_best.estimate else None
    except Infeasible:
        dp_s = None
    finished = [_finish(p, model, single_s, dp_s) for p in plans[:top]]
    log.info(
        "planner %s: %d plans, best %.6g s",
        planner,
        len(finished),
        finished[0].estimate.iteration_time_s if finished[0].estimate else math.nan,
    )
    return finished


def estimate_plan(plan: Plan, profile: ModelProfile, cluster: Cluster) -> Estimate:
    """The planner's analytic estimate of any dapple/1f1b/gpipe plan (no speedups filled in).

    Raises:
        InputError: the plan does not fit the model or cluster, or uses a schedule the estimate
            does not model.
        Infeasible: the plan needs more devices than the cluster has.
    """
    model = CostModel(
        profile, cluster, optimizer=plan.optimizer, recompute=plan.recompute, allreduce=plan.allreduce
    )
    return model.estimate(plan)
