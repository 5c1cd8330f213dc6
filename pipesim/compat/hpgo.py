"""A drop-in for DAPPLE's planner Python API (the ``HPGO`` package of the DAPPLE repository).

``import pipesim.compat.hpgo as HPGO`` and a script written against HPGO keeps working::

    conductor = HPGO.conductor_from_torch_graph_and_seps("vgg-19-pbs-32.txt", 32, 1024, [8, 16])
    speedup, stages = conductor.py_orchestrate()

Everything below follows HPGO's own meanings (DAPPLE repository, commit fd75dcf:
``src/api/pylib.rs`` for the three functions, ``src/orchestration/orchestrate.rs`` for
``SyncOrchestrate``/``py_orchestrate``, ``src/parallelism/sync_pipeline.rs`` for the speedup,
``src/input/torch_graph_py.rs`` for the state numbering, ``src/model/model.rs`` for ``Model``);
the plan itself comes from pipesim's ``dapple`` planner. See ``docs/hpgo.md``.

* ``speedup``: HPGO's ``sync_pipeline_speedup_analytical`` divides the single-device compute time
  of the global batch (forward + backward of every node, scaled linearly from the profile batch)
  by the plan's iteration time. Here the same numerator is divided by pipesim's estimated
  iteration time of the plan, so the figure is "over one GPU", not over data parallelism.
* ``stages``: one ``(start, end, gpus / rp, GPU ids)`` per stage, first stage first. ``start`` and
  ``end`` index HPGO's *states*: the nodes left after HPGO drops the ``Input*`` sources and the
  ``__getitem__*`` sinks (VGG-19: 25 states for pipesim's 26 layers). A stage covers states
  ``start .. end - 1``, except the last one, whose ``end`` is the last state ``L - 1`` and is
  included (HPGO's ``analyse_plan_sync`` reports it that way). ``rp`` is the number of times the
  whole pipeline is replicated (here the greatest common divisor of the stages' GPU counts) and the
  third field is the stage's GPU count over ``rp``, as in HPGO.
* HPGO numbers the states of a branching graph (PipeDream's antichain DAG) in an order that
  depends on Python's string hashing, so that numbering cannot be reproduced; for such profiles
  pass ``numbering="pipesim"`` to get pipesim layer indices (end exclusive) instead.
* ``devices``/``seps``: cumulative GPU count per server; uneven servers (``[8, 12]``) become a
  cluster of one server group per size, which DAPPLE's planner places at the real server
  boundaries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pipesim.errors import InputError, invalid
from pipesim.plan import Plan
from pipesim.planner import plan as make_plans
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_cluster, resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.torchgraph import load_torchgraph

__all__ = [
    "Devices",
    "Layer",
    "Model",
    "Numbering",
    "OrchestrateResult",
    "SyncOrchestrate",
    "cluster_from_seps",
    "conductor_from_torch_graph_and_seps",
    "devices_from_seps",
    "hpgo_states",
    "model_from_torch_graph",
]

Numbering = Literal["hpgo", "pipesim"]
_NUMBERINGS = ("hpgo", "pipesim")
_TOP = 5
"""Plans kept in :attr:`SyncOrchestrate.res` (HPGO keeps one per pipeline depth it tried)."""

Stage = tuple[int, int, int, list[int]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Layer:
    """One HPGO state (``HPGO.Layer``), at the global batch size.

    Attributes:
        id: the state index.
        name: always ``None`` (HPGO leaves it unset).
        desc: the node's description (pipesim's layer name).
        compute_time: forward + backward time of the global batch on one device, seconds.
        activation_size: the node's output bytes for the global batch.
        output_activation_size: bytes crossing a cut after this state, global batch.
        parameter_size: parameter bytes.
    """

    id: int
    name: str | None
    desc: str
    compute_time: float
    activation_size: float
    output_activation_size: float
    parameter_size: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Model:
    """HPGO's ``Model``: the profile normalised to the global batch size.

    Attributes:
        layers: one :class:`Layer` per state (per layer with ``numbering="pipesim"``).
        global_batch_size: samples per iteration.
        profile_batch_size: samples the profile was measured at.
        min_micro_batch_size: HPGO's default, 1.
        optimizer_memory_scaling: HPGO's default, 1.
        peak_activation_per_batch: activation bytes of all states per sample.
        profile: the pipesim profile behind it.
        states: the pipesim layer index of each state.
        numbering: whose indices the stages use (``"hpgo"`` or ``"pipesim"``).
    """

    layers: tuple[Layer, ...]
    global_batch_size: int
    profile_batch_size: int
    min_micro_batch_size: int = 1
    optimizer_memory_scaling: int = 1
    peak_activation_per_batch: float
    profile: ModelProfile
    states: tuple[int, ...]
    numbering: Numbering = "hpgo"


@dataclass(frozen=True, slots=True, kw_only=True)
class Devices:
    """HPGO's ``Devices``: GPUs numbered 0..N-1, server boundaries at ``seps``.

    Attributes:
        num_gpus: GPUs in all (the last separator).
        num_machines: servers.
        seps: cumulative GPU count per server.
    """

    num_gpus: int
    num_machines: int
    seps: tuple[int, ...]

    @property
    def server_sizes(self) -> tuple[int, ...]:
        """GPUs per server."""
        return tuple(b - a for a, b in zip((0, *self.seps[:-1]), self.seps, strict=True))


@dataclass(frozen=True, slots=True, kw_only=True)
class OrchestrateResult:
    """One candidate plan: ``speedup`` over one GPU, ``stages`` as ``py_orchestrate`` gives them,
    ``rp`` pipeline replicas, and the pipesim :class:`~pipesim.plan.Plan`."""

    speedup: float
    stages: tuple[Stage, ...]
    rp: int
    plan: Plan


def devices_from_seps(seps: Sequence[int]) -> Devices:
    """HPGO's ``devices_from_seps``: servers from cumulative GPU counts (``[8, 16]``, ``[8, 12]``).

    Raises:
        InputError: not a non-empty, strictly increasing list of positive integers.
    """
    values = list(seps)
    if (
        not values
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in values)
        or any(b <= a for a, b in itertools.pairwise(values))
    ):
        raise invalid("devices", values, "must be increasing cumulative GPU counts per server, e.g. [8, 16]")
    return Devices(num_gpus=values[-1], num_machines=len(values), seps=tuple(values))


def cluster_from_seps(
    devices: Sequence[int] | Devices,
    base: str | Cluster = "dapple-2x8-v100",
    *,
    overrides: Mapping[str, object] | None = None,
) -> Cluster:
    """A pipesim cluster from HPGO's cumulative GPU counts (servers of different sizes: one group each).

    Args:
        devices: cumulative GPU count per server (``[8, 16]`` = 2 x 8) or a :class:`Devices`.
        base: the server template (a preset name, TOML file or :class:`Cluster`; default
            DAPPLE's testbed: V100 16 GB, NVLink inside a server, 25 Gb/s Ethernet between).
        overrides: further what-if changes (``{"device": "A100-80GB"}``), applied after the
            server counts (for servers of different sizes: to the template, before them); see
            :func:`pipesim.profiles.inputs.resolve_cluster`.

    A server whose size differs from the template's is an NVSwitch box with NVLink 2 ports (as
    for equal servers). Servers of different sizes (``[8, 12]``: 8 and 4 GPUs) become one server
    group each (``docs/hardware.md``), which DAPPLE's planner places at their real boundaries.

    Raises:
        InputError: bad counts or a bad override.
    """
    d = devices if isinstance(devices, Devices) else devices_from_seps(devices)
    sizes = d.server_sizes
    if len(set(sizes)) != 1:
        template = resolve_cluster(resolve_cluster(base), overrides)
        groups: list[dict[str, object]] = []
        for size in sizes:
            group: dict[str, object] = {"servers": 1, "gpus_per_server": size}
            if size != template.gpus_per_server:
                group.update({"intra": "nvswitch", "intra_link": "NVLink2"})
            groups.append(group)
        return resolve_cluster(template, {"group": groups})
    shape: dict[str, object] = {"servers": len(sizes)}
    template = resolve_cluster(base)
    if sizes[0] != template.gpus_per_server:
        shape.update({"gpus_per_server": sizes[0], "intra": "nvswitch", "intra_link": "NVLink2"})
    return resolve_cluster(resolve_cluster(template, shape), overrides)


def hpgo_states(profile: ModelProfile) -> tuple[int, ...]:
    """The pipesim layer index of each of HPGO's states, in HPGO's order.

    HPGO drops source nodes whose description starts with ``Input`` and then sink nodes whose
    description starts with ``__getitem__``; for a chain, the remaining nodes in order are its
    states.

    Raises:
        InputError: what remains is not a chain (HPGO's numbering of a branching graph depends
            on string hashing); use ``numbering="pipesim"``.
    """
    n = len(profile.layers)
    edges = profile.edges if profile.edges is not None else tuple((k, k + 1) for k in range(n - 1))
    preds: list[set[int]] = [set() for _ in range(n)]
    succs: list[set[int]] = [set() for _ in range(n)]
    for src, dst in edges:
        succs[src].add(dst)
        preds[dst].add(src)
    names = [layer.name for layer in profile.layers]
    dropped = {i for i in range(n) if not preds[i] and names[i].startswith("Input")}
    alive = [i for i in range(n) if i not in dropped]
    dropped |= {i for i in alive if not (succs[i] - dropped) and names[i].startswith("__getitem__")}
    kept = tuple(i for i in range(n) if i not in dropped)
    kept_edges = sorted((s, d) for s, d in edges if s not in dropped and d not in dropped)
    if kept_edges != list(itertools.pairwise(kept)):
        raise invalid(
            "numbering",
            "hpgo",
            f"{profile.name} branches; HPGO numbers a branching graph's states in an order that "
            "depends on Python's string hashing, so it cannot be reproduced: use numbering='pipesim'",
        )
    return kept


def _model(profile: ModelProfile, global_batch_size: int, numbering: Numbering) -> Model:
    if numbering not in _NUMBERINGS:
        raise invalid("numbering", numbering, f"must be one of {', '.join(_NUMBERINGS)}")
    if isinstance(global_batch_size, bool) or not isinstance(global_batch_size, int) or global_batch_size < 1:
        raise invalid("global_batch_size", global_batch_size, "must be an integer >= 1")
    states = hpgo_states(profile) if numbering == "hpgo" else tuple(range(len(profile.layers)))
    scale = global_batch_size / profile.profile_batch_size
    layers = []
    for k, i in enumerate(states):
        layer = profile.layers[i]
        layers.append(
            Layer(
                id=k,
                name=None,
                desc=layer.name,
                compute_time=(layer.fwd_time_s + layer.bwd_time_s) * scale,
                activation_size=layer.activation_bytes * scale,
                output_activation_size=layer.activation_bytes * scale,
                parameter_size=float(layer.parameter_bytes),
            )
        )
    peak = sum(profile.layers[i].activation_bytes for i in states) / profile.profile_batch_size
    return Model(
        layers=tuple(layers),
        global_batch_size=global_batch_size,
        profile_batch_size=profile.profile_batch_size,
        peak_activation_per_batch=peak,
        profile=profile,
        states=states,
        numbering=numbering,
    )


def model_from_torch_graph(filename: str, pbs: int, gbs: int, *, numbering: Numbering = "hpgo") -> Model:
    """HPGO's ``model_from_torch_graph``: a TorchGraph profile normalised to ``gbs`` samples.

    Raises:
        FormatError: a malformed profile.
        InputError: a bad ``pbs``/``gbs``, or a branching graph with ``numbering="hpgo"``.
    """
    return _model(load_torchgraph(filename, pbs=pbs), gbs, numbering)


@dataclass(slots=True)
class SyncOrchestrate:
    """HPGO's conductor: ``m`` (model), ``d`` (devices); :meth:`py_orchestrate` plans and fills
    ``res``.

    Attributes:
        m: the model, normalised to the global batch.
        d: the devices.
        res: the candidate plans of the last :meth:`py_orchestrate`, best first.
        overrides: what-if changes to the cluster (not in HPGO).
    """

    m: Model
    d: Devices
    res: list[OrchestrateResult] = field(default_factory=list)
    overrides: Mapping[str, object] | None = None

    @property
    def profile(self) -> ModelProfile:
        """The pipesim profile, re-targeted to the cluster's device (as measured for uneven servers)."""
        return self.m.profile

    @property
    def cluster(self) -> Cluster:
        """The pipesim cluster of :attr:`d` with the overrides.

        Raises:
            InputError: a bad override.
        """
        return cluster_from_seps(self.d, overrides=self.overrides)

    @property
    def global_batch_size(self) -> int:
        """Samples per iteration."""
        return self.m.global_batch_size

    @property
    def plans(self) -> list[Plan]:
        """The pipesim plans behind :attr:`res`."""
        return [r.plan for r in self.res]

    def _stages(self, plan: Plan) -> tuple[tuple[Stage, ...], int]:
        states = self.m.states
        hpgo = self.m.numbering == "hpgo"
        rp = math.gcd(*(s.replicas for s in plan.stages))
        stages: list[Stage] = []
        for n, s in enumerate(plan.stages):
            start = sum(1 for i in states if i < s.first_layer)
            end = sum(1 for i in states if i <= s.last_layer)
            if hpgo and n == len(plan.stages) - 1:
                end = len(states) - 1  # HPGO reports the last stage's end as the last state
            stages.append((start, end, s.replicas // rp, sorted(s.devices or ())))
        return tuple(stages), rp

    def py_orchestrate(self) -> tuple[float, list[Stage]]:
        """Plan; return ``(speedup over one GPU, stages)`` of the best plan, as HPGO does.

        Raises:
            InputError: a device that cannot run the profile's dtype.
            Infeasible: no plan fits in device memory.
        """
        profile, cluster = resolve_inputs(self.m.profile, self.cluster)
        plans = make_plans(
            profile, cluster, self.m.global_batch_size, planner="dapple", top=_TOP, schedule="dapple"
        )
        scale = self.m.global_batch_size / profile.profile_batch_size
        # HPGO's numerator: the states' compute (the input's is zeroed, dropped sinks left out)
        layers = [profile.layers[i] for i in self.m.states]
        single_s = sum(layer.fwd_time_s + layer.bwd_time_s for layer in layers) * scale
        self.res = []
        for plan in plans:
            assert plan.estimate is not None
            stages, rp = self._stages(plan)
            t = plan.estimate.iteration_time_s
            self.res.append(OrchestrateResult(speedup=single_s / t, stages=stages, rp=rp, plan=plan))
        if not self.res:
            raise InputError("the dapple planner returned no plan")
        best = max(self.res, key=lambda r: r.speedup)
        return best.speedup, [(a, b, c, list(ids)) for a, b, c, ids in best.stages]


def conductor_from_torch_graph_and_seps(
    profile_filename: str,
    profile_batch_size: int,
    global_batch_size: int,
    devices: Sequence[int],
    *,
    overrides: Mapping[str, object] | None = None,
    numbering: Numbering = "hpgo",
) -> SyncOrchestrate:
    """HPGO's ``conductor_from_torch_graph_and_seps``.

    Args:
        profile_filename: the TorchGraph ``.txt`` profile.
        profile_batch_size: the batch the profile was measured at (overrides ``-pbs-N``).
        global_batch_size: samples per iteration.
        devices: cumulative GPU count per server, e.g. ``[8, 16]`` for 2 servers of 8.
        overrides: what-if changes to the cluster (not in HPGO; ``{"device": "A100-80GB"}``).
        numbering: ``"hpgo"`` (HPGO's states) or ``"pipesim"`` (pipesim layers) for stages.

    Raises:
        FormatError: a malformed profile.
        InputError: a bad batch size, bad device counts, a bad override, or a branching graph
            with ``numbering="hpgo"``.
    """
    d = devices_from_seps(devices)
    profile, _ = resolve_inputs(
        profile_filename, cluster_from_seps(d, overrides=overrides), pbs=profile_batch_size
    )
    return SyncOrchestrate(m=_model(profile, global_batch_size, numbering), d=d, overrides=overrides)
