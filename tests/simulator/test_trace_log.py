"""Columnar trace records (``simulator/trace_log.py``) and the link stretches a network keeps:
the events made from them are the ones an eager recorder makes, in the same order."""

from __future__ import annotations

import pickle
import random
from collections.abc import Generator
from operator import attrgetter

import pytest
import simpy

from pipesim.errors import InputError
from pipesim.simulator import EventKind, LinkInterval, Network, TraceEvent
from pipesim.simulator.link_records import LinkStretches
from pipesim.simulator.trace_log import (
    ALL_REDUCE,
    OP_CODE,
    SEND_ACTIVATION,
    SEND_GRADIENT,
    TraceEvents,
    TraceLog,
)

_LINK_NAMES = ("s0.gpu0->s0.nvswitch", "s0.nvswitch->s0.gpu1", "s0.nic0->switch", "switch->s1.nic0")
_SEND_KIND = {SEND_ACTIVATION: EventKind.SEND_ACTIVATION, SEND_GRADIENT: EventKind.SEND_GRADIENT}
_OP_KIND = {
    "F": EventKind.FORWARD,
    "B": EventKind.BACKWARD,
    "I": EventKind.INPUT_GRAD,
    "W": EventKind.WEIGHT_GRAD,
}


def _records(seed: int) -> tuple[TraceLog, LinkStretches, list[TraceEvent]]:
    """Random records (with many exact ties) in both forms: columns, and the events an eager
    recorder would have appended in the same order."""
    rng = random.Random(seed)
    times = [0.0, 0.5, 1.0, 1.0 + 2**-40, 3.25, 0.1 + 0.2]  # few distinct times: ties on purpose
    log, links = TraceLog(), LinkStretches()
    eager: list[TraceEvent] = []
    for _ in range(400):
        start = rng.choice(times)
        end = start + rng.choice((0.0, 0.25, 1 / 3))
        device = rng.randrange(12)  # gpu10 and gpu11 sort between gpu1 and gpu2
        what = rng.randrange(4)
        if what == 0:
            op = rng.choice("FBIW")
            stage, mb = rng.randrange(3), rng.randrange(70000)
            log.compute.extend((device, OP_CODE[op], stage, mb, start, end))
            eager.append(TraceEvent(f"gpu{device}", _OP_KIND[op], start, end, device, stage, mb, 0.0, None))
        elif what == 1:
            code = rng.choice((SEND_ACTIVATION, SEND_GRADIENT))
            stage, mb, peer, nbytes = (
                rng.randrange(3),
                rng.randrange(9),
                rng.randrange(12),
                rng.random() * 1e9,
            )
            log.comm.extend((device, code, stage, mb, nbytes, peer, start, end))
            eager.append(
                TraceEvent(f"gpu{device}.comm", _SEND_KIND[code], start, end, device, stage, mb, nbytes, peer)
            )
        elif what == 2:
            stage, nbytes = rng.randrange(3), float(rng.randrange(1 << 40))
            log.comm.extend((device, ALL_REDUCE, stage, -1, nbytes, -1, start, end))
            eager.append(
                TraceEvent(f"gpu{device}.comm", EventKind.ALL_REDUCE, start, end, device, stage, None, nbytes)
            )
        else:
            link, rate = rng.randrange(len(_LINK_NAMES)), rng.random() * 3e10
            links.data.extend((link, start, end, rate))
            nbytes = rate * (end - start)
            eager.append(TraceEvent(_LINK_NAMES[link], EventKind.LINK, start, end, nbytes=nbytes))
    return log, links, eager


def _old_order(events: list[TraceEvent]) -> tuple[TraceEvent, ...]:
    """The eager recorder's order: a stable sort by (start, resource, end)."""
    return tuple(sorted(events, key=attrgetter("start_s", "resource", "end_s")))


@pytest.mark.parametrize("seed", range(5))
def test_materialized_events_are_the_eager_recorders_to_the_last_bit(seed: int) -> None:
    log, links, eager = _records(seed)
    got = TraceEvents(log, links, _LINK_NAMES)
    assert len(got) == len(eager)  # counted without making the events
    want = _old_order(eager)
    assert got == want
    for a, b in zip(got, want, strict=True):  # same types too: ints stay ints, None stays None
        assert [type(x) for x in a] == [type(x) for x in b]
        assert [x.hex() if isinstance(x, float) else x for x in a] == [
            x.hex() if isinstance(x, float) else x for x in b
        ]


def test_trace_events_behave_as_the_tuple_they_stand_for() -> None:
    log, links, eager = _records(7)
    events = TraceEvents(log, links, _LINK_NAMES)
    want = _old_order(eager)
    assert events[0] == want[0]
    assert events[-1] == want[-1]
    assert events[3:9] == want[3:9]
    assert isinstance(events[3:9], tuple)
    assert list(events) == list(want)
    assert want[5] in events
    assert events == want
    assert want == events
    assert events == TraceEvents(*_records(7)[:2], _LINK_NAMES)
    assert events != want[1:]
    assert events != list(want)
    extra = (TraceEvent("x", EventKind.LINK, 9.0, 10.0),)
    assert events + extra == want + extra
    assert extra + events == extra + want
    assert hash(events) == hash(want)
    assert pickle.loads(pickle.dumps(events)) == want
    assert pickle.loads(pickle.dumps(TraceEvents(*_records(7)[:2], _LINK_NAMES))) == want


def test_no_records_no_events() -> None:
    events = TraceEvents(TraceLog(), None, ())
    assert len(events) == 0
    assert events == ()
    assert tuple(events) == ()


def _busy_network(**recorder: object) -> Network:
    """Four transfers that share links, starting at three times, on a network with ``recorder``."""
    env = simpy.Environment()
    net = Network(env, [1e9, 2e9, 1e9], [0.0, 1e-6, 0.0], **recorder)  # type: ignore[arg-type]

    def send(route: tuple[int, ...], nbytes: float, delay: float) -> Generator[simpy.Event, None, None]:
        yield env.timeout(delay)
        yield net.transfer(route, nbytes)

    for route, nbytes, delay in [
        ((0, 1), 3e6, 0.0),
        ((1, 2), 1e6, 1e-4),
        ((0,), 5e5, 2e-4),
        ((2, 1), 2e6, 0.0),
    ]:
        env.process(send(route, nbytes, delay))
    env.run()
    return net


def test_link_stretches_hold_what_on_link_interval_reports() -> None:
    intervals: list[LinkInterval] = []
    _busy_network(on_link_interval=intervals.append)
    stretches = LinkStretches()
    _busy_network(link_stretches=stretches)
    assert len(intervals) > 4
    assert stretches.intervals() == intervals
    assert len(stretches) == len(intervals)


def test_one_link_recorder_at_a_time() -> None:
    with pytest.raises(InputError, match="at most one"):
        Network(
            simpy.Environment(),
            [1e9],
            [0.0],
            on_link_interval=lambda _: None,
            link_stretches=LinkStretches(),
        )
