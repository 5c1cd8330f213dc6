"""The rows of a Gantt chart: one per stage (its replicas and their TP and CP ranks together)
or one per device, and the devices a replica's stream stands for (:func:`replica_mirrors`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from pipesim.plan import Plan
from pipesim.simulator.trace import EventKind, SimulationResult

__all__ = ["GanttRow", "gantt_rows", "replica_mirrors"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GanttRow:
    """One timeline row: the device whose stream is drawn, the devices it stands for, the
    memory device shown."""

    label: str
    device: int
    devices: tuple[int, ...]
    memory_device: int


def _span(devices: Sequence[int]) -> str:
    ds = sorted(devices)
    if len(ds) > 1 and ds[-1] - ds[0] == len(ds) - 1:
        return f"gpu{ds[0]}-{ds[-1]}"
    shown = ",".join(str(d) for d in ds[:3]) + (",…" if len(ds) > 3 else "")
    return f"gpu{shown}"


def _stages_text(stages: Sequence[int]) -> str:
    return ",".join(str(s) for s in stages[:3]) + (",…" if len(stages) > 3 else "")


def replica_mirrors(plan: Plan, result: SimulationResult) -> dict[int, tuple[int, ...]]:
    """Each stream device of ``result`` (a replica's first device) mapped to the devices of its
    replica, which run its stream in lock step: the ``tensor_parallel x context_parallel``
    consecutive ids from it (``plan``'s stages; :meth:`pipesim.plan.Plan.placement`)."""
    return {
        d.device: tuple(range(d.device, d.device + plan.stages[d.stages[0]].replica_width))
        for d in result.devices
        if d.stages
    }


def gantt_rows(
    result: SimulationResult,
    by_device: bool,
    mirrors: Mapping[int, Sequence[int]] | None,
    drawn: Collection[EventKind],
) -> list[GanttRow]:
    """The rows of a result: one per device (a stream device's mirrors each on their own row),
    or one per group of devices holding the same stages (mirrors included); devices with
    events of a ``drawn`` kind count too."""
    found = {d.device for d in result.devices} | set(result.memory)
    found |= {e.device for e in result.events if e.device is not None and e.kind in drawn}
    stages_of = {d.device: d.stages for d in result.devices}
    peak = {d.device: d.peak_memory_bytes for d in result.devices}
    mirrors = mirrors or {}

    def mirrored(d: int) -> tuple[int, ...]:
        return tuple(mirrors.get(d, ())) or (d,)

    if by_device:
        return [
            GanttRow(
                label=f"gpu{m} · s{_stages_text(stages_of[d])}" if stages_of.get(d) else f"gpu{m}",
                device=d,
                devices=(m,),
                memory_device=d,
            )
            for d in sorted(found)
            for m in mirrored(d)
        ]
    groups: dict[tuple[int, ...], list[int]] = {}
    for d in sorted(found):
        groups.setdefault(stages_of.get(d) or (-1 - d,), []).append(d)
    rows = []
    for stages, members in groups.items():
        every = [m for d in members for m in mirrored(d)]
        name = f"s{_stages_text(stages)} · {_span(every)}" if stages[0] >= 0 else _span(every)
        fullest = max(members, key=lambda d: (peak.get(d, 0.0), -d))
        rows.append(GanttRow(label=name, device=members[0], devices=tuple(every), memory_device=fullest))
    rows.sort(key=lambda r: (stages_of.get(r.device) or (1 << 30,), r.device))
    return rows
