"""The one input path: (model, cluster, what-if overrides) -> the profile re-targeted to the cluster.

Every CLI command and API entry point that takes a model and a cluster goes through
:func:`resolve_inputs` (or, where there is no model profile, :func:`resolve_cluster`, the
cluster half of it), so that ``plan``, ``verify``, ``simulate``, ``compare``, sweeps and the
Python API all see the same numbers for the same inputs.

Both functions are idempotent: resolving what they returned gives the same objects back, so a
layer may resolve again what its caller already resolved.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from pipesim.errors import InputError, invalid
from pipesim.profiles.costmodels.retarget import retarget_precision, retarget_to
from pipesim.profiles.hardware.cluster import Cluster, load_cluster, with_overrides
from pipesim.profiles.hardware.specs import parse_precision
from pipesim.profiles.models.loader import load_model
from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "ClusterLike",
    "ModelLike",
    "check_has_compute",
    "resolve_cluster",
    "resolve_inputs",
]

ModelLike = ModelProfile | str
"""A model: a :class:`ModelProfile`, or a zoo name, ``gpt:...`` spec or profile file path."""
ClusterLike = Cluster | str
"""A cluster: a :class:`Cluster`, or a preset name or cluster TOML path."""


def _overrides_text(overrides: Mapping[str, object]) -> str:
    return ",".join(f"{key}={value}" for key, value in overrides.items())


def resolve_cluster(cluster: ClusterLike, overrides: Mapping[str, object] | None = None) -> Cluster:
    """Load a cluster and apply what-if overrides (the cluster half of :func:`resolve_inputs`).

    Args:
        cluster: a :class:`Cluster`, or a preset name or cluster TOML path.
        overrides: what-if changes (``{"device": "A100-80GB", "nic": "100GbE"}``), as
            ``pipesim ... --set KEY=VALUE`` gives them; see ``docs/hardware.md``. ``None`` or
            empty: the cluster as given.

    Raises:
        UnknownNameError: an unknown cluster name.
        FormatError: a malformed cluster file.
        InputError: ``overrides`` is not a mapping, or has a bad key or value; the message starts
            with the key and its value (``servers=-1: must be ...``) or, for an unknown key, with
            ``overrides <key=value,...>:``.
    """
    machine = load_cluster(cluster) if isinstance(cluster, str) else cluster
    if not isinstance(machine, Cluster):
        raise InputError(f"cluster={type(cluster).__name__}: must be a Cluster, a preset name or a TOML path")
    if overrides is None:
        return machine
    if not isinstance(overrides, Mapping):
        raise InputError(
            f"overrides={overrides!r}: must be a mapping of key to value, e.g. {{'nic': '100GbE'}}"
        )
    if not overrides:
        return machine
    try:
        return with_overrides(machine, overrides)
    except InputError as exc:
        message = str(exc)
        if any(message.startswith(f"{key}=") for key in overrides):
            raise  # the message already names the key, its value and the rule
        raise InputError(f"overrides {_overrides_text(overrides)}: {message}") from None


def check_has_compute(profile: ModelProfile) -> None:
    """Refuse a model with no compute time: an iteration of it takes no time, and its throughput
    (samples / 0 s) is infinite, which no output can carry.

    Raises:
        InputError: every layer's forward and backward time is 0 s.
    """
    total_s = sum(layer.fwd_time_s + layer.bwd_time_s for layer in profile.layers)
    if not total_s > 0:
        rule = "has no compute time (every layer's forward and backward time is 0 s); nothing to simulate"
        raise invalid("model", profile.name, rule)


def _is_zoo(spec: str) -> bool:
    """A zoo name or ``gpt:`` spec that is not also an existing file (a file wins, as in
    :func:`pipesim.profiles.models.loader.load_model`)."""
    from pipesim.profiles.models.zoo import is_zoo_spec

    try:
        exists = Path(spec).exists()
    except (OSError, ValueError):
        exists = False
    return is_zoo_spec(spec) and not exists


def resolve_inputs(
    model: ModelLike,
    cluster: ClusterLike,
    *,
    overrides: Mapping[str, object] | None = None,
    pbs: int | None = None,
    dtype: str | None = None,
) -> tuple[ModelProfile, Cluster]:
    """Load a model and a cluster, apply what-if overrides, and re-target the model to the device.

    Args:
        model: a :class:`ModelProfile`, or a zoo name, ``gpt:...`` spec or profile file path.
        cluster: a :class:`Cluster`, or a preset name or cluster TOML path.
        overrides: what-if changes to the cluster (``{"device": "A100-80GB", "nic": "100GbE"}``),
            as ``pipesim ... --set KEY=VALUE`` gives them; see ``docs/hardware.md``.
        pbs: the profile batch size of a TorchGraph file whose name carries no ``-pbs-N``
            (only used when ``model`` is a path).
        dtype: the training precision (``fp32``, ``tf32``, ``fp16``, ``bf16``, ``fp8`` or the
            long names), as ``--dtype`` gives it; ``None``: a zoo model in fp32, a file in the
            precision it was measured in. A zoo model is costed on the cluster's device in this
            precision (:func:`pipesim.profiles.models.zoo.zoo_model`); a profile file is
            re-targeted to the device, then to the precision
            (:func:`pipesim.profiles.costmodels.retarget.retarget_precision`). Only for models
            given by name or path: a :class:`ModelProfile` is used in its own precision.

    Returns:
        ``(profile, cluster)``: the profile as it runs on the cluster's device (re-targeted by a
        per-layer roofline when it was measured on another catalog device; unchanged when it was
        measured on that device already), and the cluster with the overrides applied.

    Raises:
        UnknownNameError: an unknown model, cluster or device name.
        FormatError: a malformed model or cluster file.
        InputError: a bad override key or value (see :func:`resolve_cluster`), a ``pbs`` given
            with a profile object or a zoo model, a ``dtype`` that is unknown, given with a
            profile object or that the device cannot run (``dtype='bfloat16': V100-SXM2-16GB
            cannot train in it; it supports float32, float16``), a model with no compute time
            (:func:`check_has_compute`), or a device that does not support the profile's dtype.
    """
    precision = None if dtype is None else parse_precision(dtype)
    machine = resolve_cluster(cluster, overrides)
    if isinstance(model, str) and _is_zoo(model):
        from pipesim.profiles.models.zoo import zoo_model

        if pbs is not None:
            raise InputError(f"pbs={pbs} given for zoo model {model!r}; pbs only applies to TorchGraph files")
        profile = zoo_model(model, dtype=precision or "float32", device=machine.device)
        check_has_compute(profile)
        return profile, machine
    if isinstance(model, str):
        profile = load_model(model, pbs=pbs)
    elif isinstance(model, ModelProfile):
        if pbs is not None:
            raise InputError(f"pbs={pbs!r}: only applies when the model is a file path, not a profile")
        if precision is not None and precision != model.dtype:
            raise invalid("dtype", precision, f"only applies to a model given by name or path; the profile "
                          f"{model.name!r} is in {model.dtype} (use retarget_precision to change it)")
        profile = model
    else:
        raise InputError(
            f"model={type(model).__name__}: must be a ModelProfile, a zoo name or a profile file path"
        )
    check_has_compute(profile)
    if profile.reference_device != machine.device.name:
        profile = retarget_to(profile, machine.device)
    if precision is not None and precision != profile.dtype:
        profile = retarget_precision(profile, precision, machine.device)
    return profile, machine
