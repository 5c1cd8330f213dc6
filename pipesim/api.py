"""The public Python API: load inputs, build plans, simulate them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipesim.errors import invalid
from pipesim.plan import Plan, Recompute, StagePlan, balanced_split, stage_ranges
from pipesim.profiles.hardware.cluster import Cluster, load_cluster
from pipesim.profiles.models.loader import load_model
from pipesim.profiles.models.profile import ModelProfile
from pipesim.simulator import SimOptions, SimulationResult
from pipesim.simulator import simulate as _simulate

__all__ = ["load_cluster", "load_model", "make_plan", "simulate"]


def make_plan(
    profile: ModelProfile,
    *,
    global_batch_size: int,
    num_microbatches: int,
    stages: int | None = None,
    split: Sequence[int] | None = None,
    replicas: Sequence[int] | None = None,
    schedule: str = "dapple",
    schedule_options: Mapping[str, Any] | None = None,
    chunks: int = 1,
    optimizer: str = "adam",
    recompute: Recompute | str | bool = Recompute.NONE,
    allreduce: str = "auto",
) -> Plan:
    """Build a plan by hand: stages by count (balanced by time) or by explicit layer counts.

    Args:
        profile: the model.
        global_batch_size: samples per iteration.
        num_microbatches: micro-batches per iteration.
        stages: number of (virtual) stages, split so the slowest stage is as fast as possible
            (forward + backward time); give this or ``split``. Default: one stage.
        split: layers per stage, e.g. ``[10, 14, 24]``.
        replicas: replicas per pipeline rank (default 1 each).
        schedule, schedule_options, chunks, optimizer, recompute, allreduce: see :class:`Plan`.

    Raises:
        InputError: both or neither of ``stages``/``split`` are wrong, a split that does not
            cover the model, or a replica list of the wrong length.
        Infeasible: more stages than layers.
    """
    if stages is not None and split is not None:
        raise invalid("stages", stages, "give either the number of stages or a split, not both")
    if split is None:
        times = [a.fwd_time_s + a.bwd_time_s for a in profile.layers]
        split = balanced_split(times, stages or 1)
    ranges = stage_ranges(split, profile.num_layers)
    ranks = len(ranges) // chunks if chunks >= 1 else len(ranges)
    if replicas is None:
        replicas = [1] * ranks
    if len(replicas) != ranks:
        raise invalid("replicas", list(replicas), f"must give one count per pipeline rank ({ranks})")
    return Plan(
        stages=tuple(
            StagePlan(first_layer=a, last_layer=b, replicas=replicas[i % ranks])
            for i, (a, b) in enumerate(ranges)
        ),
        global_batch_size=global_batch_size,
        num_microbatches=num_microbatches,
        schedule=schedule,
        schedule_options=dict(schedule_options or {}),
        chunks=chunks,
        optimizer=optimizer,
        recompute=recompute,
        allreduce=allreduce,
    )


def simulate(
    plan: Plan,
    profile: ModelProfile | str,
    cluster: Cluster | str,
    options: SimOptions | None = None,
) -> SimulationResult:
    """Simulate one iteration of ``plan``; ``profile`` and ``cluster`` may be names or files.

    Raises:
        PipesimError: see :func:`pipesim.simulator.simulate`, :func:`load_model` and
            :func:`load_cluster`.
    """
    if isinstance(profile, str):
        profile = load_model(profile)
    if isinstance(cluster, str):
        cluster = load_cluster(cluster)
    return _simulate(plan, profile, cluster, options)
