"""Simulating a per-layer (intra-layer) parallelization strategy on a cluster.

The input is neutral: a list of :class:`StrategyStep` (one per layer, in execution order), each
with the seconds of compute every device spends, the point-to-point transfers that bring the
layer its inputs in the layout it needs (re-distributions), and the collectives it does
(all-reduces among device groups, neighbour exchanges). Whoever builds the steps (e.g.
:mod:`pipesim.strategy` for PaSE strategies) decides what they contain; this module only runs
them.

Execution is bulk-synchronous, matching the additive cost model of per-layer planners: step
after step, first all its transfers start together, then (when they have arrived) every device
computes, then all its collectives start together; the step ends when the last one finishes.
Transfers and collectives are real network traffic (:class:`~pipesim.simulator.network.Network`,
max-min fair link sharing) over the cluster's routes, so contention and slow hops show up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import simpy

from pipesim.errors import check_nonneg, invalid
from pipesim.profiles.costmodels.collective import AllReduceAlgorithm
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network

__all__ = [
    "CollectiveSpec",
    "StepTiming",
    "StrategySimResult",
    "StrategyStep",
    "TransferSpec",
    "simulate_strategy",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransferSpec:
    """``nbytes`` from device ``src`` to device ``dst`` (a no-op when they are equal)."""

    src: int
    dst: int
    nbytes: float

    def __post_init__(self) -> None:
        check_nonneg("transfer.nbytes", self.nbytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class CollectiveSpec:
    """A collective among ``members`` (device ids, in ring order).

    Attributes:
        kind: ``"allreduce"`` (each member contributes ``nbytes``) or ``"exchange"`` (each member
            sends ``nbytes`` to the next member of the ring, all at once).
        members: distinct device ids; one member costs nothing.
        nbytes: bytes per member, >= 0.
    """

    kind: str
    members: tuple[int, ...]
    nbytes: float

    def __post_init__(self) -> None:
        if self.kind not in ("allreduce", "exchange"):
            raise invalid("collective.kind", self.kind, "must be 'allreduce' or 'exchange'")
        if len(set(self.members)) != len(self.members) or not self.members:
            raise invalid("collective.members", self.members, "must be distinct device ids, at least one")
        check_nonneg("collective.nbytes", self.nbytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategyStep:
    """One layer's work.

    Attributes:
        name: the layer's name (for reports).
        compute_s: seconds of compute per device id (absent devices idle).
        transfers: re-distribution transfers, done before the compute.
        collectives: collectives, done after the compute.
    """

    name: str
    compute_s: Mapping[int, float] = field(default_factory=dict)
    transfers: tuple[TransferSpec, ...] = ()
    collectives: tuple[CollectiveSpec, ...] = ()

    def __post_init__(self) -> None:
        for dev, sec in self.compute_s.items():
            check_nonneg(f"{self.name}.compute_s[{dev}]", sec)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTiming:
    """Simulated seconds of one step's three phases."""

    name: str
    transfer_s: float
    compute_s: float
    collective_s: float

    @property
    def total_s(self) -> float:
        """The step's duration."""
        return self.transfer_s + self.compute_s + self.collective_s


@dataclass(frozen=True, slots=True, kw_only=True)
class StrategySimResult:
    """The simulated training step.

    Attributes:
        step_time_s: seconds of one training step (all steps, back to back).
        steps: per-step phase times.
    """

    step_time_s: float
    steps: tuple[StepTiming, ...]

    @property
    def compute_s(self) -> float:
        """Seconds spent computing (the slowest device of each step)."""
        return sum(s.compute_s for s in self.steps)

    @property
    def communication_s(self) -> float:
        """Seconds spent in transfers and collectives."""
        return sum(s.transfer_s + s.collective_s for s in self.steps)


def simulate_strategy(
    steps: Sequence[StrategyStep],
    cluster: Cluster,
    *,
    allreduce_algorithm: str | AllReduceAlgorithm = AllReduceAlgorithm.RING,
) -> StrategySimResult:
    """Run ``steps`` bulk-synchronously on ``cluster`` and time them.

    Args:
        steps: the layers' work, in execution order.
        cluster: devices and links (routes from :meth:`Cluster.route`).
        allreduce_algorithm: ``"ring"`` (default, what PaSE's cost model assumes),
            ``"hierarchical"`` or ``"auto"``.

    Returns:
        The step time and the per-step phase times.

    Raises:
        InputError: a device id outside the cluster, or a bad algorithm name.
    """
    n_dev = cluster.num_devices
    for step in steps:
        used = [*step.compute_s, *(t.src for t in step.transfers), *(t.dst for t in step.transfers)]
        used += [m for c in step.collectives for m in c.members]
        bad = [d for d in used if not (isinstance(d, int) and 0 <= d < n_dev)]
        if bad:
            raise invalid(
                f"{step.name}.device", bad[0], f"must be a device id in 0..{n_dev - 1} of {cluster.name}"
            )
    env = simpy.Environment()
    network = Network.over_links(env, cluster.links)
    timings: list[StepTiming] = []

    def run() -> Any:
        for step in steps:
            t0 = env.now
            events = [
                network.transfer(cluster.route(t.src, t.dst), t.nbytes)
                for t in step.transfers
                if t.src != t.dst
            ]
            if events:
                yield simpy.AllOf(env, events)
            t1 = env.now
            longest = max(step.compute_s.values(), default=0.0)
            if longest > 0:
                yield env.timeout(longest)
            t2 = env.now
            procs: list[simpy.Event] = []
            for coll in step.collectives:
                if len(coll.members) < 2 or coll.nbytes == 0:
                    continue
                if coll.kind == "allreduce":
                    body = allreduce(
                        env,
                        network,
                        coll.members,
                        coll.nbytes,
                        cluster.route,
                        server_of=cluster.server_of,
                        algorithm=allreduce_algorithm,
                    )
                    procs.append(env.process(body))
                else:
                    ring = coll.members
                    for i, src in enumerate(ring):
                        dst = ring[(i + 1) % len(ring)]
                        procs.append(network.transfer(cluster.route(src, dst), coll.nbytes))
            if procs:
                yield simpy.AllOf(env, procs)
            timings.append(
                StepTiming(name=step.name, transfer_s=t1 - t0, compute_s=t2 - t1, collective_s=env.now - t2)
            )

    env.process(run())
    env.run()
    return StrategySimResult(step_time_s=float(env.now), steps=tuple(timings))
