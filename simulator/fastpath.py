"""The fast path: SimPy-free execution of a lowered program when no two transfers share a link.

Transfers from one device to another form a pipelined FIFO stream (in issue order; see
:mod:`pipesim.simulator.engine`): a transfer's latency starts when it is issued or when its
stream's previous transfer's last byte left, whichever is later, and its bytes flow once the
previous one's arrived, so one stream's transfers never share a link with each other. When no
two transfers slow each other down, the link model has no state: a transfer
over a route takes the route's latency plus its bytes over the route's slowest link (free links:
nothing; ``p2p_channels`` equal flows of one transfer take the same time as one).
That holds by construction with ``SimOptions(free_links=True)`` or ``contention=False``. With
max-min sharing on (``contention=True``) it holds exactly when no two flows are ever on one link
at the same time (a flow alone gets its bottleneck's full bandwidth under max-min): the fast path
then tracks, per link, when flows hold it, and gives up (:class:`LinksShared`) at the first
overlap, so that the caller runs the SimPy engine instead. That check needs every transfer in
the program, so with sharing on it is offered only to programs without collectives and without
a trace (per-link trace events come from the engine's network).

Then every instruction's time follows from the instructions it depends on, and the program can be
list-scheduled device by device, with no event queue: a device runs its instructions in order
until a receive whose pieces are not all sent yet, and is woken when the last one is (an
overlapped pair's block, :mod:`pipesim.schedules.pairs`: until both its receives are in). Collectives
(only on unshared links) do not interact with anything either: each one's duration is that of
the very same :func:`pipesim.simulator.scatter_gather.collective` (all-reduce, or ZeRO's
reduce-scatters and all-gathers) run alone on a contention-free
:class:`~pipesim.simulator.network.Network` (cached per collective shape). Where compute waits
for them (ZeRO-3's gathers, ``Compute.waits``), a collective's end is resolved as soon as every
member has marked it ready and the collective before it has ended (as the engine starts it); an
op that reaches a wait whose collective is not resolved yet stalls there, its progress kept, and
resumes when it is (the 1536-GPU ZeRO-3 row of GPT-3 175B, benchmarks/README.md).

A tensor- or context-parallel op's communication (:class:`~pipesim.simulator.tp_collectives.TpComm`,
posted and awaited by the op's own device: the CP ring exchange, then the TP collectives) is
timed inline as the device runs: launched ``hidden_s`` before the compute ends, its parts take,
one after another, their flows' latency plus bytes at their routes' bandwidth
(:func:`~pipesim.simulator.tp_collectives.part_alone_s`), and with ``contention`` their flows hold
their links like sends do, so a program whose TP flows would meet other traffic is handed to the
engine too.

It executes the same :class:`~pipesim.simulator.program.Program` as the SimPy engine, reports
into the same :class:`~pipesim.simulator.tally.Tally`, and is held equal to the engine by
``tests/simulator/test_fastpath.py`` (relative 1e-9).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pipesim.errors import invalid
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.schedules.validate import deadlock_error
from pipesim.simulator.dp_collectives import Collective
from pipesim.simulator.fast_links import LinkHolds, LinksShared, Transfers
from pipesim.simulator.instructions import Block, Recv, Send
from pipesim.simulator.program import Program
from pipesim.simulator.tally import Tally
from pipesim.simulator.trace import SimulationResult

__all__ = ["LinksShared", "execute_fast", "held_by_rendezvous"]

_Key = tuple[str, int, int, int]
_BACKWARDS = ("B", "W")
"""Ops whose end may be the last backward's (:attr:`Tally.last_backward_end`)."""


class _Rendezvous:
    """Point-to-point streams whose sends above ``eager`` bytes wait for their receive's post.

    Per stream ``(src, dst)``, the sends not resolved yet, in issue order: the first waits for
    its receive to be posted (its time is not known before), the others behind it (FIFO). A
    send resolves as :meth:`pipesim.simulator.engine._Engine._start` runs it: its first
    ``eager`` bytes go at ``begin = max(issue, the stream's previous arrival)`` (paying the
    route's latency), the rest at ``max(their arrival, post)``; all at once when the receive was
    posted by ``begin``.
    """

    def __init__(self, links: Transfers, eager: float, holds: LinkHolds | None) -> None:
        self.links = links
        self.eager = eager
        self.holds = holds
        self.posted: dict[_Key, float] = {}  # receive -> when its device reached it
        self.wire_free: dict[tuple[int, int], float] = {}  # stream -> its last arrival
        self.queues: dict[tuple[int, int], deque[tuple[Send, float, int]]] = {}
        self.awaiting: dict[_Key, list[tuple[int, int]]] = {}  # receive -> streams held by it

    def send(self, send: Send, t: float, device: int) -> list[tuple[Send, int, float, float]]:
        """Issue ``send`` from ``device`` at ``t``: the ``(send, device, begin, end)`` resolved now."""
        pair = (device, send.dst_device)
        queue = self.queues.get(pair)
        if queue is not None:
            queue.append((send, t, device))
            return []
        self.queues[pair] = deque([(send, t, device)])
        out: list[tuple[Send, int, float, float]] = []
        self._drain(pair, out)
        return out

    def post(self, key: _Key, t: float) -> list[tuple[Send, int, float, float]]:
        """The receive ``key`` is posted at ``t`` (once): the sends this resolves."""
        out: list[tuple[Send, int, float, float]] = []
        if key in self.posted:
            return out
        self.posted[key] = t
        for pair in self.awaiting.pop(key, ()):
            self._drain(pair, out)
        return out

    def _drain(self, pair: tuple[int, int], out: list[tuple[Send, int, float, float]]) -> None:
        queue = self.queues[pair]
        while queue:
            send, t, device = queue[0]
            # pipelined stream: its latency may begin as the previous send's last byte leaves
            begin = max(t, self.wire_free.get(pair, -math.inf) - self.links.latency_s(send.route))
            end = self._resolve(send, begin)
            if end is None:
                self.awaiting.setdefault(send.key, []).append(pair)
                return
            queue.popleft()
            self.wire_free[pair] = end
            out.append((send, device, begin, end))
        del self.queues[pair]

    def _resolve(self, send: Send, begin: float) -> float | None:
        links, route, nbytes = self.links, send.route, send.nbytes
        rest = nbytes - self.eager
        posted = self.posted.get(send.key) if rest > 0 else begin
        if posted is None:
            return None
        if posted <= begin:
            end = begin + links.time_s(route, nbytes)
            self._hold(route, nbytes, begin, end)
            return end
        eager_end = begin + links.time_s(route, self.eager)
        self._hold(route, self.eager, begin, eager_end)
        go = max(eager_end, posted)
        end = go + links.bytes_s(route, rest)
        if self.holds is not None:
            held = links.flow(route, rest)[1]
            if held:
                self.holds.hold(held, go, end)
        return end

    def _hold(self, route: tuple[int, ...], nbytes: float, begin: float, end: float) -> None:
        if self.holds is not None:
            latency, held = self.links.flow(route, nbytes)
            if held:
                self.holds.hold(held, begin + latency, end)

    def oldest_issue_s(self) -> float:
        """The earliest issue time of a send not resolved yet (``inf`` if none)."""
        return min((queue[0][1] for queue in self.queues.values()), default=math.inf)


def held_by_rendezvous(
    stuck: Sequence[tuple[int, int, str | None]], held: Mapping[int, Collection[_Key]]
) -> list[tuple[int, int, str | None]]:
    """``stuck`` (for :func:`~pipesim.schedules.validate.deadlock_error`) with what a rank waits
    for when sends to it are held by the rendezvous: ``held`` maps such a rank to the receives
    its held sends wait for, which come after the receive it waits at."""
    out = []
    for rank, step, why in stuck:
        keys = held.get(rank)
        if keys and why is None:
            names = ", ".join(
                f"{kind} of stage {stage} micro-batch {mb}" for kind, stage, mb, _ in sorted(keys)
            )
            why = (
                f"data queued behind a send held by the rendezvous until this rank posts its "
                f"receive ({names}), which comes later in its order (SimOptions.rendezvous)"
            )
        out.append((rank, step, why))
    return out


def execute_fast(
    program: Program,
    cluster: Cluster,
    *,
    record_trace: bool,
    free_links: bool,
    contention: bool = False,
    eager_bytes: float | None = None,
) -> SimulationResult:
    """Execute ``program`` by list scheduling, transfers never slowing each other down.

    Args:
        program: the lowered program.
        cluster: devices and links.
        record_trace: keep trace events and full memory curves.
        free_links: transfers take no time (else: latency + bytes / route bandwidth).
        contention: links are shared max-min fairly: check that no two flows ever share one.
        eager_bytes: with a number, the rendezvous (``SimOptions.rendezvous``): a send's bytes
            beyond these wait for their receive to be posted; ``None`` (default) no rendezvous.

    Returns:
        The same :class:`SimulationResult` the SimPy engine gives on these links.

    Raises:
        LinksShared: with ``contention``, two flows would share a link (run the engine instead).
        InputError: ``contention`` on links that are not free, with collectives or a trace.
        ScheduleError: the program deadlocks (for a validated schedule, only where the
            rendezvous holds a send whose receive comes after the data queued behind it).
    """
    shared = contention and not free_links
    if shared and (program.collectives or record_trace):
        raise invalid(
            "contention", contention, "the fast path checks sharing only without collectives or trace"
        )
    holds = LinkHolds() if shared else None
    tally = Tally(program, record=record_trace)
    links = Transfers(cluster, free_links=free_links)
    streams = [program.blocks(rank, replica) for rank, replica, _ in program.streams]
    devices = [device for _, _, device in program.streams]
    n = len(streams)
    t_free = [0.0] * n
    busy = [0.0] * n
    wait = [0.0] * n
    pending: list[Block | None] = [None] * n  # a block whose receive has not arrived yet
    # arrival key -> [pieces arrived, last arrival time, last production time, the stream that
    # waits for it (-1: none yet), the pieces it waits for]: made by its first send or by its
    # receiver, if that comes first; the receive that takes it removes it
    arrivals: dict[_Key, list[Any]] = {}
    ready_at = [0.0] * len(program.collectives)
    wire_free: dict[tuple[int, int], float] = {}  # p2p stream (src, dst) -> its last arrival
    rdv = _Rendezvous(links, eager_bytes, holds) if eager_bytes is not None else None
    next_prune = 1024

    def arrive(send: Send, src: int, begin: float, end: float) -> None:
        """A send resolved by the rendezvous: its piece arrives at ``end``."""
        key = send.key
        if record_trace:
            tally.send(src, key[0], send.stage, key[2], send.nbytes, send.dst_device, begin, end)
        got = arrivals[key]
        got[0] += 1
        if end > got[1]:
            got[1] = end
        if got[3] >= 0 and got[0] == got[4]:
            runnable.append(got[3])
            got[3] = -1

    # ZeRO-3's gathers gate the compute: a collective's end is resolved as soon as every member
    # is ready for it and the one before it has ended, and the streams waiting for it resume
    specs = program.collectives
    gated = program.gated
    members = [len(spec.members) for spec in specs]
    ready_n = [0] * len(specs)
    done_at: list[float | None] = [None] * len(specs)
    blocked: dict[int, list[int]] = {}  # collective -> streams stalled in an op until it ends
    op_state: list[list[Any] | None] = [None] * n  # a gated op's progress when it stalled
    followers: dict[int, list[int]] = {}
    for spec in specs:
        if spec.after is not None:
            followers.setdefault(spec.after, []).append(spec.index)

    def mark(cid: int, at: float) -> None:
        """A member is ready for collective ``cid`` at ``at``."""
        if at > ready_at[cid]:
            ready_at[cid] = at
        ready_n[cid] += 1
        if gated and ready_n[cid] == members[cid]:
            resolve(cid)

    def resolve(first: int) -> None:
        """End times of ``first`` and the collectives after it that can start now (as
        :meth:`~pipesim.simulator.engine._Engine._collective`; those after the drain are left
        to the end); their stalled streams become runnable."""
        todo = [first]
        while todo:
            cid = todo.pop()
            spec = specs[cid]
            if done_at[cid] is not None or spec.after_drain or spec.after_step or spec.after_devices:
                continue  # (those after the drain, some streams or the optimizer steps: at the end)
            if spec.posted and ready_n[cid] < members[cid]:
                continue
            begin = ready_at[cid]
            if spec.after is not None:
                before = done_at[spec.after]
                if before is None:
                    continue
                begin = max(begin, before)
            done_at[cid] = begin + links.collective_s(
                spec.kind, spec.group or spec.members, spec.nbytes, spec.algorithm
            )
            runnable.extend(blocked.pop(cid, ()))
            todo.extend(followers.get(cid, ()))

    memory_now, memory_peak = tally.memory_now, tally.memory_peak
    finished = 0
    computes = 0  # compute ops run without a trace (the tally's count of them)
    over = [False] * n  # streams that ran their last instruction
    runnable = list(range(n - 1, -1, -1))
    if gated:
        for spec in specs:
            if not spec.posted:
                resolve(spec.index)
    while runnable:
        i = runnable.pop()
        device = devices[i]
        it = streams[i]
        t = t_free[i]
        busy_i = busy[i]
        wait_i = wait[i]
        # without a trace the tally's memory rule (Tally.compute: allocate at the start, free at
        # the end, the peak after each allocation) runs inline here, on the device's state
        now = memory_now[device]
        peak_t, peak = memory_peak[device]
        last_backward = 0.0
        block = pending[i]
        pending[i] = None
        if block is None:
            block = next(it, None)
        while block is not None:
            recvs, ops, sends, post = block
            if recvs:  # (none left when resuming a gated op: its block is kept from that op on)
                if rdv is not None:  # a unit posts all its receives at once (what the posts
                    for recv in recvs:  # resolve goes to this device, not waiting yet)
                        for resolved in rdv.post(recv.key, t):
                            arrive(*resolved)
                missing: Recv | None = None
                for recv in recvs:  # in order, as the engine waits for them
                    key = recv.key
                    got = arrivals.pop(key, None)  # (put back below while pieces are missing)
                    if got is not None and got[0] >= recv.pieces:
                        if rdv is not None:
                            rdv.posted.pop(key, None)
                        if got[1] > t:  # the data's time on the wire after it was produced or we were free
                            produced = got[2]
                            waited = got[1] - (produced if produced > t else t)
                            if waited > 0.0:
                                wait_i += waited
                            t = got[1]
                    elif recv.pieces:  # (a replica that receives nothing never waits)
                        missing = recv
                        break
                if missing is not None:  # wait for it (a pair: with the receives before it taken)
                    if got is None:
                        arrivals[key] = [0, 0.0, 0.0, i, missing.pieces]
                    else:
                        arrivals[key] = got
                        got[3], got[4] = i, missing.pieces
                    if missing is not recvs[0]:
                        block = (recvs[recvs.index(missing):], ops, sends, post)
                    pending[i] = block
                    break
            for ins in ops:
                duration = ins.duration_s
                tp = ins.tp
                if ins.waits:  # ZeRO-3: its units wait for their gathers (Engine._gated)
                    state = op_state[i]
                    if state is None:
                        points = sorted([(f * duration, 1, 0, c) for f, c in ins.marks]
                                        + [(f * duration, 1, 1, c) for f, c in ins.waits])
                        if tp is not None:  # its launch comes before the points at that time
                            points.append((max(0.0, duration - tp.hidden_s), 0, 2, -1))
                            points.sort()
                        state = [points, 0, t, 0.0, 0.0, t, 0.0]
                    points, k, start, elapsed, stalled, cur, launch = state
                    while k < len(points):
                        at, _, kind, cid = points[k]
                        if at > elapsed:
                            cur += at - elapsed
                            elapsed = at
                        if kind == 0:
                            mark(cid, cur)
                        elif kind == 2:
                            launch = cur
                        else:
                            ends = done_at[cid]
                            if ends is None:  # its gather has not started yet: wait for it
                                break
                            if ends > cur:
                                stalled += ends - cur
                                cur = ends
                        k += 1
                    if k < len(points):
                        op_state[i] = [points, k, start, elapsed, stalled, cur, launch]
                        blocked.setdefault(points[k][3], []).append(i)
                        pending[i] = ((), ops[ops.index(ins):], sends, post)  # resumes this op
                        break
                    op_state[i] = None
                    t = cur + (duration - elapsed if duration > elapsed else 0.0)
                    wait_i += stalled
                else:
                    if ins.marks:
                        mark_t, elapsed = t, 0.0
                        for fraction, cid in ins.marks:
                            if fraction * duration > elapsed:
                                mark_t += fraction * duration - elapsed
                                elapsed = fraction * duration
                            mark(cid, mark_t)
                    start = t
                    if duration > 0:
                        t = t + duration
                    launch = start + max(0.0, duration - tp.hidden_s) if tp is not None else 0.0
                busy_i += duration
                compute_end = t
                if tp is not None:  # its TP/CP parts, launched before the compute ends (Engine._gated)
                    coll_end = launch
                    for part in tp.parts:  # one after another
                        if holds is not None:
                            for route, nbytes in zip(part.flows, part.flow_bytes, strict=True):
                                held = links.flow(route, nbytes)[1]
                                if held:
                                    flows_at = coll_end + part.latency_s
                                    holds.hold(held, flows_at, flows_at + links.bytes_s(route, nbytes))
                        coll_end += links.part_s(part)
                    if coll_end > t:
                        busy_i += coll_end - t
                        t = coll_end
                    tally.tp_collective(device, ins, tp.nbytes, launch, coll_end)
                if record_trace:
                    tally.compute(device, ins, start, t, compute_end)
                else:
                    computes += 1
                    for nbytes in ins.alloc_bytes:
                        now += nbytes
                        if now > peak:
                            peak_t, peak = start, now
                    for nbytes in ins.free_bytes:
                        now -= nbytes
                    if ins.op in _BACKWARDS:
                        last_backward = t
            else:
                ins = None
            if ins is not None:  # stalled in a gated op
                break
            for send in sends:
                key = send.key
                got = arrivals.get(key)
                if got is None:
                    got = arrivals[key] = [0, 0.0, 0.0, -1, 0]
                if t > got[2]:
                    got[2] = t
                route = send.route
                if not route:  # (same device, or free links: at once)
                    end = t
                elif rdv is not None:
                    tally.num_ops += 1
                    for resolved in rdv.send(send, t, device):
                        arrive(*resolved)
                    if holds is not None and holds.added >= next_prune:
                        next_prune = holds.added + 1024
                        running = min(t_free[j] for j in range(n) if not over[j])
                        holds.prune(min(running, rdv.oldest_issue_s()))
                    continue
                else:
                    tally.num_ops += 1
                    # FIFO per (src, dst) stream, pipelined: its latency may begin as the previous
                    # send's last byte leaves, so it arrives at max(t + latency, previous arrival)
                    # + bytes / bandwidth (Engine._start)
                    pair = (device, send.dst_device)
                    begin = t
                    prev = wire_free.get(pair)
                    if prev is not None:
                        prev -= links.latency_s(route)
                        if prev > begin:
                            begin = prev
                    end = wire_free[pair] = begin + links.time_s(route, send.nbytes)
                    if holds is not None:
                        latency, held = links.flow(route, send.nbytes)
                        if held:
                            holds.hold(held, begin + latency, end)
                            if holds.added % 1024 == 0:
                                holds.prune(min(t_free[j] for j in range(n) if not over[j]))
                    if record_trace:
                        tally.send(
                            device, key[0], send.stage, key[2], send.nbytes, send.dst_device, begin, end
                        )
                got[0] += 1
                if end > got[1]:
                    got[1] = end
                if got[3] >= 0 and got[0] == got[4]:  # its receiver waits for this piece: wake it
                    runnable.append(got[3])
                    got[3] = -1
            if post is not None:
                mark(post.collective, t)
            block = next(it, None)
        t_free[i] = t
        busy[i] = busy_i
        wait[i] = wait_i
        if not record_trace:
            memory_now[device] = now
            memory_peak[device] = (peak_t, peak)
            if last_backward > tally.last_backward_end:
                tally.last_backward_end = last_backward
        if block is None:
            over[i] = True
            finished += 1
    tally.num_ops += computes
    if finished < n:
        lowered = program.lowered_schedule()
        stuck: dict[int, tuple[int, int, str | None]] = {}
        for i, (rank, _, _) in enumerate(program.streams):
            unit = pending[i]
            if unit is not None and rank not in stuck:  # its step: the receive or the op it waits at
                step = unit[0][0].step if unit[0] else unit[1][0].step
                stuck[rank] = (rank, step, None)
        held_for: dict[int, list[_Key]] = {}
        if rdv is not None:
            rank_of = {device: rank for rank, _, device in program.streams}
            for key, pairs in rdv.awaiting.items():
                for _, dst in pairs:
                    held_for.setdefault(rank_of[dst], []).append(key)
        raise deadlock_error(lowered.ranks, held_by_rendezvous([stuck[r] for r in sorted(stuck)], held_for))
    drained = max(t_free, default=0.0)
    device_end: dict[int, float] = {}  # device -> when its last stream ran its last instruction
    for i, device in enumerate(devices):
        device_end[device] = max(device_end.get(device, 0.0), t_free[i])
    done = [0.0] * len(program.collectives)

    def run_collective(spec: Collective, begin: float) -> None:
        start = max(begin, ready_at[spec.index])
        if spec.after_drain:
            start = max(start, drained)
        if spec.after is not None:
            start = max(start, done[spec.after])
        for device in spec.after_devices:
            start = max(start, device_end[device])
        for cid in spec.after_more:  # (earlier in the program: run already)
            start = max(start, done[cid])
        done[spec.index] = start + links.collective_s(
            spec.kind, spec.group or spec.members, spec.nbytes, spec.algorithm
        )
        tally.collective(spec.members, spec.stage, spec.nbytes, start, done[spec.index])

    for spec in program.collectives:
        if not spec.after_step:
            run_collective(spec, 0.0)
    stepped: dict[int, float] = {}  # device -> the end of its optimizer step
    for i, (rank, replica, device) in enumerate(program.streams):
        t = t_free[i]
        update = program.update(rank, replica)
        if update is not None:  # the optimizer step, after the device's gradient collectives
            start = max([t, *(done[c] for c in update.after)])
            t = start + update.compute.duration_s
            busy[i] += update.compute.duration_s
            tally.compute(device, update.compute, start, t)
            stepped[device] = t
        tally.stream_done(device, busy[i], wait[i], t, t_free[i])
    for spec in program.collectives:  # the all-gathers of the updated shards, after the steps
        if spec.after_step:
            run_collective(spec, max((stepped.get(d, 0.0) for d in spec.members), default=0.0))
    return tally.result(cluster, tuple(link.name for link in cluster.links))
