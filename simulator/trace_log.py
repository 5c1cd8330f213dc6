"""Trace records kept in columns while a run executes, made into :class:`TraceEvent` objects when read.

A traced 1024-GPU run records about a million events. Building a :class:`TraceEvent` per record
as it happens, sorting them and having the garbage collector visit each one cost about 40 % of the
run (benchmarks/README.md, case (b)); most callers (sweeps, ``--json``, the benchmarks) never read
them. So the executors append the fields of each record to flat arrays of doubles (a
:class:`TraceLog`, and the network's :class:`~pipesim.simulator.link_records.LinkStretches`), and
:class:`TraceEvents` turns them into the sorted tuple of events on first read, with exactly the
values an eager recorder would have put in each event.
"""

from __future__ import annotations

import gc
from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any, SupportsIndex, overload

import numpy as np

from pipesim.simulator.link_records import LinkStretches
from pipesim.simulator.trace import EventKind, TraceEvent

__all__ = ["COMM_FIELDS", "COMPUTE_FIELDS", "OP_CODE", "TraceEvents", "TraceLog"]

COMPUTE_FIELDS = 6
"""Doubles per compute record: device, op code (:data:`OP_CODE`), stage, micro-batch, start_s, end_s."""

COMM_FIELDS = 8
"""Doubles per communication record: device, kind code (0 activation, 1 gradient, 2 all-reduce),
stage, micro-batch (-1: none), nbytes, peer (-1: none), start_s, end_s."""

OP_CODE = {"F": 0, "B": 1, "I": 2, "W": 3, "O": 4}
"""The code of each compute op in a compute record (``O``: the optimizer step, micro-batch -1)."""

_make = tuple.__new__

_COMPUTE_KINDS = (
    EventKind.FORWARD,
    EventKind.BACKWARD,
    EventKind.INPUT_GRAD,
    EventKind.WEIGHT_GRAD,
    EventKind.OPTIMIZER,
)
_COMM_KINDS = (
    EventKind.SEND_ACTIVATION,
    EventKind.SEND_GRADIENT,
    EventKind.ALL_REDUCE,
    EventKind.TP_COLLECTIVE,
)
SEND_ACTIVATION, SEND_GRADIENT, ALL_REDUCE, TP_COLLECTIVE = 0.0, 1.0, 2.0, 3.0
"""Kind codes of communication records."""


class TraceLog:
    """The compute and communication records of one run, in the order they happened.

    Small integers (devices, stages, micro-batches, codes) are exact as doubles. Each record is
    appended with one ``extend`` of a tuple (see :data:`COMPUTE_FIELDS` and :data:`COMM_FIELDS`).
    """

    __slots__ = ("comm", "compute")

    def __init__(self) -> None:
        self.compute = array("d")
        self.comm = array("d")


class TraceEvents(Sequence[TraceEvent]):
    """The trace events of a run, sorted by (start, resource, end), in record order on ties.

    Behaves as the tuple of :class:`TraceEvent` it stands for (indexing, slicing, iteration,
    ``len``, ``==`` with a tuple, ``+`` with a tuple); the events are made on first use other
    than ``len``. Resources: ``"gpu<d>"`` for compute records, ``"gpu<d>.comm"`` for
    communication records, the link's name for link stretches (link names hold ``"->"``, so a
    link never shares a track with a device: the three kinds of records never tie).

    Args:
        log: the compute and communication records.
        links: the link busy stretches, or ``None``.
        link_names: the name of each link, by index.
    """

    __slots__ = ("_events", "_link_names", "_links", "_log")

    def __init__(self, log: TraceLog, links: LinkStretches | None, link_names: Sequence[str]) -> None:
        self._log: TraceLog | None = log
        self._links = links
        self._link_names = tuple(link_names)
        self._events: tuple[TraceEvent, ...] | None = None

    def _all(self) -> tuple[TraceEvent, ...]:
        if self._events is None:
            assert self._log is not None
            # A million new tuples: no collector passes while they come (the engine pauses the
            # collector during a run for the same reason); re-enabled only if it was on.
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                self._events = _materialize(self._log, self._links, self._link_names)
            finally:
                if was_enabled:
                    gc.enable()
            self._log = self._links = None  # the events now hold everything
        return self._events

    def __len__(self) -> int:
        if self._events is not None:
            return len(self._events)
        assert self._log is not None
        n = len(self._log.compute) // COMPUTE_FIELDS + len(self._log.comm) // COMM_FIELDS
        return n + (len(self._links) if self._links is not None else 0)

    @overload
    def __getitem__(self, index: SupportsIndex) -> TraceEvent: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TraceEvent, ...]: ...

    def __getitem__(self, index: SupportsIndex | slice) -> TraceEvent | tuple[TraceEvent, ...]:
        return self._all()[index]

    def __iter__(self) -> Iterator[TraceEvent]:
        return iter(self._all())

    def __contains__(self, value: object) -> bool:
        return value in self._all()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TraceEvents):
            return self._all() == other._all()
        if isinstance(other, tuple):
            return self._all() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __add__(self, other: tuple[TraceEvent, ...]) -> tuple[TraceEvent, ...]:
        return self._all() + tuple(other)

    def __radd__(self, other: tuple[TraceEvent, ...]) -> tuple[TraceEvent, ...]:
        return tuple(other) + self._all()

    def __repr__(self) -> str:
        return f"TraceEvents(<{len(self)} events>)"


def _ints(column: Any) -> list[int]:
    return column.astype(np.int64).tolist()  # type: ignore[no-any-return]


def _or_none(values: list[int]) -> list[int | None]:
    return [v if v >= 0 else None for v in values]


def _lookup(ids: Any, names: dict[int, str], rank: dict[str, int]) -> Any:
    """The rank of each id's name, as an array."""
    table = np.zeros(max(names, default=-1) + 1, dtype=np.int64)
    for i, name in names.items():
        table[i] = rank[name]
    return table[ids]


def _materialize(
    log: TraceLog, links: LinkStretches | None, link_names: tuple[str, ...]
) -> tuple[TraceEvent, ...]:
    """The events of the records, with the fields and the order an eager recorder gives."""
    c = np.frombuffer(log.compute, dtype=np.float64).reshape(-1, COMPUTE_FIELDS)
    m = np.frombuffer(log.comm, dtype=np.float64).reshape(-1, COMM_FIELDS)
    lk = np.frombuffer(links.data if links is not None else array("d"), dtype=np.float64)
    lk = lk.reshape(-1, LinkStretches.FIELDS)
    c_ids, m_ids, l_ids = (a[:, 0].astype(np.int64) for a in (c, m, lk))
    c_dev, m_dev, l_idx = c_ids.tolist(), m_ids.tolist(), l_ids.tolist()
    gpu = {d: f"gpu{d}" for d in set(c_dev)}
    comm = {d: f"gpu{d}.comm" for d in set(m_dev)}
    link = {k: link_names[k] for k in set(l_idx)}
    rank = {name: i for i, name in enumerate(sorted({*gpu.values(), *comm.values(), *link.values()}))}
    ranks = np.concatenate(
        [_lookup(ids, table, rank) for ids, table in ((c_ids, gpu), (m_ids, comm), (l_ids, link))]
    )
    starts = np.concatenate((c[:, 4], m[:, 6], lk[:, 1]))
    ends = np.concatenate((c[:, 5], m[:, 7], lk[:, 2]))
    # lexsort is stable: records that tie on (start, resource, end) keep their record order.
    order = np.lexsort((ends, ranks, starts)).tolist()

    # each event as tuple.__new__(TraceEvent, fields): a named tuple without its Python __new__
    events: list[TraceEvent] = list(
        map(
            _make,
            repeat(TraceEvent),
            zip(
                map(gpu.__getitem__, c_dev),
                map(_COMPUTE_KINDS.__getitem__, _ints(c[:, 1])),
                c[:, 4].tolist(),
                c[:, 5].tolist(),
                c_dev,
                _ints(c[:, 2]),
                _or_none(_ints(c[:, 3])),
                repeat(0.0),
                repeat(None),
            ),
        )
    )
    events += map(
        _make,
        repeat(TraceEvent),
        zip(
            map(comm.__getitem__, m_dev),
            map(_COMM_KINDS.__getitem__, _ints(m[:, 1])),
            m[:, 6].tolist(),
            m[:, 7].tolist(),
            m_dev,
            _ints(m[:, 2]),
            _or_none(_ints(m[:, 3])),
            m[:, 4].tolist(),
            _or_none(_ints(m[:, 5])),
            strict=True,
        ),
    )
    # a stretch moved bytes_per_s * (end_s - start_s) bytes: the same two IEEE operations
    nbytes = lk[:, 3] * (lk[:, 2] - lk[:, 1])
    events += map(
        _make,
        repeat(TraceEvent),
        zip(
            map(link.__getitem__, l_idx),
            repeat(EventKind.LINK),
            lk[:, 1].tolist(),
            lk[:, 2].tolist(),
            repeat(None),
            repeat(None),
            repeat(None),
            nbytes.tolist(),
            repeat(None),
        ),
    )
    return itemgetter(*order)(events) if len(order) > 1 else tuple(events)
