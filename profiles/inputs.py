"""The one input path: (model, cluster, what-if overrides) -> the profile re-targeted to the cluster.

Every CLI command and API entry point that takes a model and a cluster goes through
:func:`resolve_inputs`, so that ``plan``, ``verify``, ``simulate``, ``compare``, sweeps and the
Python API all see the same numbers for the same inputs.
"""

from __future__ import annotations

from collections.abc import Mapping

from pipesim.profiles.costmodels.retarget import retarget_to
from pipesim.profiles.hardware.cluster import Cluster, load_cluster, with_overrides
from pipesim.profiles.models.loader import load_model
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["resolve_inputs"]


def resolve_inputs(
    model: ModelProfile | str,
    cluster: Cluster | str,
    *,
    overrides: Mapping[str, object] | None = None,
    pbs: int | None = None,
) -> tuple[ModelProfile, Cluster]:
    """Load a model and a cluster, apply what-if overrides, and re-target the model to the device.

    Args:
        model: a :class:`ModelProfile`, or a zoo name, ``gpt:...`` spec or profile file path.
        cluster: a :class:`Cluster`, or a preset name or cluster TOML path.
        overrides: what-if changes to the cluster (``{"device": "A100-80GB", "nic": "100GbE"}``),
            as ``pipesim ... --set KEY=VALUE`` gives them; see ``docs/hardware.md``.
        pbs: the profile batch size of a TorchGraph file whose name carries no ``-pbs-N``
            (only used when ``model`` is a path).

    Returns:
        ``(profile, cluster)``: the profile as it runs on the cluster's device (re-targeted by a
        per-layer roofline when it was measured on another catalog device; unchanged when it was
        measured on that device already), and the cluster with the overrides applied.

    Raises:
        UnknownNameError: an unknown model, cluster or device name.
        FormatError: a malformed model or cluster file.
        InputError: a bad override key or value, or a device that does not support the
            profile's dtype.
    """
    profile = load_model(model, pbs=pbs) if isinstance(model, str) else model
    machine = load_cluster(cluster) if isinstance(cluster, str) else cluster
    if overrides:
        machine = with_overrides(machine, overrides)
    return retarget_to(profile, machine.device), machine
