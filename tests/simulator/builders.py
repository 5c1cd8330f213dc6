"""Shared builders for simulator tests."""

from __future__ import annotations

from pipesim.plan import Plan, StagePlan
from pipesim.profiles.models.profile import Layer, ModelProfile


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
