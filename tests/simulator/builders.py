"""Shared builders for simulator tests."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.models.profile import Layer, ModelProfile

if TYPE_CHECKING:
    from hypothesis import strategies as st


def equal_profile(
    num_layers: int,
    *,
    fwd_s: float = 1.0,
    bwd_s: float = 2.0,
    activation_bytes: int = 1 << 20,
    parameter_bytes: int = 1 << 24,
    batch: int = 4,
    wgrad_fraction: float | None = None,
) -> ModelProfile:
    """A chain of identical layers whose costs are for ``batch`` samples."""
    return ModelProfile(
        name="equal",
        layers=tuple(
            Layer(
                name=f"layer{i}",
                fwd_time_s=fwd_s,
                bwd_time_s=bwd_s,
                activation_bytes=activation_bytes,
                parameter_bytes=parameter_bytes,
                wgrad_fraction=wgrad_fraction,
            )
            for i in range(num_layers)
        ),
        profile_batch_size=batch,
    )


def one_layer_per_stage(
    p: int,
    m: int,
    *,
    batch: int = 4,
    schedule: str = "gpipe",
    replicas: int = 1,
    chunks: int = 1,
    **kw: object,
) -> Plan:
    """p*chunks stages of one layer each, m micro-batches of ``batch * replicas`` samples."""
    return Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i, replicas=replicas) for i in range(p * chunks)),
        global_batch_size=m * batch * replicas,
        num_microbatches=m,
        schedule=schedule,
        chunks=chunks,
        **kw,  # type: ignore[arg-type]
    )


def random_plan(
    draw: st.DrawFn,
    schedule: str,
    *,
    max_microbatches: int,
    min_op_time_s: float,
    recompute: bool = False,
) -> tuple[Plan, ModelProfile]:
    """A random plan of ``schedule`` and its random profile, drawn with hypothesis ``draw``: 1-4
    pipeline ranks (the schedule's default chunks each, e.g. two for ``interleaved`` and the V
    shapes, placed as the schedule places them), 1-3 layers per stage, 1-3 replicas per
    rank, layer times from ``min_op_time_s``, any all-reduce algorithm, and with ``recompute``
    either recomputation mode."""
    from hypothesis import strategies as st

    from pipesim.schedules.placement import stage_rank
    from pipesim.schedules.registry import schedule_info

    info = schedule_info(schedule)
    chunks = info.default_chunks  # 2 for interleaved, looped BFS and the V shapes
    p = draw(st.integers(1, 4))
    m = p * draw(st.integers(1, 2)) if chunks > 1 else draw(st.integers(1, max_microbatches))
    if schedule == "dualpipev":
        m = 2 * m  # DualPipeV needs m >= 2p
    dual = info.placement == "dual"
    if dual:  # DualPipe: an even p, an even m >= 2p, p model stages each run twice
        p = draw(st.sampled_from([2, 4]))
        m = 2 * p * draw(st.integers(1, 2))
    sizes = [draw(st.integers(1, 3)) for _ in range(p if dual else p * chunks)]
    replicas = [draw(st.integers(1, 3)) for _ in range(p)]
    batch = draw(st.sampled_from([1, 2, 4]))
    layers = tuple(
        Layer(
            name=f"l{i}",
            fwd_time_s=draw(st.floats(min_op_time_s, 5e-2)),
            bwd_time_s=draw(st.floats(min_op_time_s, 1e-1)),
            activation_bytes=draw(st.integers(1, 8 << 20)),
            parameter_bytes=draw(st.integers(0, 64 << 20)),
            wgrad_fraction=draw(st.sampled_from([0.0, 0.3, 0.5])),
        )
        for i in range(sum(sizes))
    )
    profile = ModelProfile(name="random", layers=layers, profile_batch_size=batch)
    stages, first = [], 0
    for s, n in enumerate(sizes):
        rank = stage_rank(info.placement, s, p)
        stages.append(StagePlan(first_layer=first, last_layer=first + n - 1, replicas=replicas[rank]))
        first += n
    if dual:  # stage p + j copies stage j's layers, on rank p - 1 - j
        for s in range(p, 2 * p):
            copy = stages[s - p]
            rank = stage_rank(info.placement, s, p)
            stages.append(
                StagePlan(first_layer=copy.first_layer, last_layer=copy.last_layer, replicas=replicas[rank])
            )
    plan = Plan(
        stages=tuple(stages),
        global_batch_size=m * max(replicas) * draw(st.integers(1, 2)),
        num_microbatches=m,
        schedule=schedule,
        chunks=chunks,
        recompute=draw(st.sampled_from(["none", "full"])) if recompute else "none",
        allreduce=draw(st.sampled_from(["ring", "hierarchical", "tree", "auto"])),
    )
    return plan, profile
