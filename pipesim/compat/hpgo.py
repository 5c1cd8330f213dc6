"""A drop-in for DAPPLE's planner Python API (the ``HPGO`` package of the DAPPLE repository).

``import pipesim.compat.hpgo as HPGO`` and an existing script keeps working::

    conductor = HPGO.conductor_from_torch_graph_and_seps("xlnet-36-pbs-1.txt", 1, 128, [8, 16])
    speedup, stages = conductor.py_orchestrate()

The call shapes follow the DAPPLE repository's README ("Example Usage of Python API") and the
``py_orchestrate`` signature of its Rust planner: it returns ``(speedup, stages)`` with one
``(first layer, end layer (exclusive), replicas, GPU ids)`` tuple per stage of the best plan. The
plan comes from pipesim's ``dapple`` planner on a cluster of DAPPLE's testbed servers (V100
16 GB, NVLink inside, 25 Gb/s Ethernet between) with ``devices`` as the cumulative GPU count per
server; the speedup is over the best data-parallel plan, the figure DAPPLE reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pipesim.errors import invalid
from pipesim.plan import Plan
from pipesim.planner import plan as make_plans
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_cluster, resolve_inputs
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["Conductor", "cluster_from_seps", "conductor_from_torch_graph_and_seps"]


def cluster_from_seps(
    devices: Sequence[int],
    base: str | Cluster = "dapple-2x8-v100",
    *,
    overrides: Mapping[str, object] | None = None,
) -> Cluster:
    """A cluster of identical servers from HPGO's cumulative GPU counts (``[8, 16]`` = 2 x 8).

    Args:
        devices: cumulative GPU count per server.
        base: the server template (a preset name, TOML file or :class:`Cluster`; default
            DAPPLE's testbed).
        overrides: further what-if changes (``{"device": "A100-80GB"}``), applied after the
            server counts; see :func:`pipesim.profiles.inputs.resolve_cluster`.

    Raises:
        InputError: the counts are not increasing multiples of one server size, or a bad
            override.
    """
    seps = list(devices)
    if not seps or any(not isinstance(s, int) or s < 1 for s in seps):
        raise invalid("devices", seps, "must be cumulative GPU counts per server, e.g. [8, 16]")
    sizes = [b - a for a, b in zip([0, *seps[:-1]], seps, strict=True)]
    if len(set(sizes)) != 1 or sizes[0] < 1:
        raise invalid("devices", seps, "servers must all have the same number of GPUs, e.g. [8, 16]")
    shape: dict[str, object] = {"servers": len(sizes)}
    template = resolve_cluster(base)
    if sizes[0] != template.gpus_per_server:
        shape.update({"gpus_per_server": sizes[0], "intra": "nvswitch", "intra_link": "NVLink2"})
    return resolve_cluster(resolve_cluster(template, shape), overrides)


@dataclass(slots=True)
class Conductor:
    """HPGO's conductor: holds the model and devices; :meth:`py_orchestrate` plans.

    Attributes:
        profile: the model.
        cluster: the devices.
        global_batch_size: samples per iteration.
        plans: the ranked plans of the last :meth:`py_orchestrate`.
    """

    profile: ModelProfile
    cluster: Cluster
    global_batch_size: int
    plans: list[Plan] = field(default_factory=list)

    def py_orchestrate(self) -> tuple[float, list[tuple[int, int, int, list[int]]]]:
        """Plan and return ``(speedup over data parallelism, stages)`` of the best plan.

        The profile is re-targeted to the cluster's device first (the one input path,
        :func:`pipesim.profiles.inputs.resolve_inputs`).

        Raises:
            Infeasible: no plan fits in device memory.
            InputError: the cluster's device cannot run the profile's dtype.
        """
        profile, cluster = resolve_inputs(self.profile, self.cluster)
        self.plans = make_plans(profile, cluster, self.global_batch_size, planner="dapple", top=1)
        best = self.plans[0]
        assert best.estimate is not None
        speedup = best.estimate.speedup_vs_dp if best.estimate.speedup_vs_dp is not None else 1.0
        stages = [(s.first_layer, s.last_layer + 1, s.replicas, sorted(s.devices or ())) for s in best.stages]
        return speedup, stages


def conductor_from_torch_graph_and_seps(
    profile_filename: str,
    profile_batch_size: int,
    global_batch_size: int,
    devices: Sequence[int],
    *,
    overrides: Mapping[str, object] | None = None,
) -> Conductor:
    """Build a conductor from a PipeDream/DAPPLE TorchGraph profile, as ``HPGO`` does.

    Args:
        profile_filename: the TorchGraph ``.txt`` profile.
        profile_batch_size: the batch the profile was measured at.
        global_batch_size: samples per iteration.
        devices: cumulative GPU count per server, e.g. ``[8, 16]`` for 2 servers of 8.
        overrides: what-if changes to the cluster (not in HPGO; ``{"device": "A100-80GB"}``).

    Raises:
        InputError: an unreadable profile, bad device counts or a bad override.
    """
    profile, cluster = resolve_inputs(
        profile_filename,
        cluster_from_seps(devices, overrides=overrides),
        pbs=profile_batch_size,
    )
    return Conductor(profile=profile, cluster=cluster, global_batch_size=global_batch_size)
