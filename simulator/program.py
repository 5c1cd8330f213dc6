"""The lowered program: what every device runs in one iteration, as instruction lists.

:func:`pipesim.simulator.lowering.lower` turns a plan into a :class:`Program`:

    schedule (compute actions per pipeline rank, :mod:`pipesim.schedules`)
      -> stage-level lowering (:func:`pipesim.schedules.lowering.lowered_units`: sends and
         receives between stages, one ``ALL_REDUCE`` per replicated stage, an overlapped
         pair's two blocks as one unit)
      -> device-level expansion (here): each rank's steps become the instruction list of each of
         its replicas' devices, with durations, memory, bytes and routes filled in; a send between
         replica sets of different sizes becomes the pieces :func:`pipesim.plan.resplit` gives
         (under TP each piece one transfer, or one per TP rank where the ranks' routes share a
         link that slows them: :meth:`~pipesim.simulator.tp_lowering.TpLowering.rank_sends`); a stage's
         all-reduce becomes one collective, or one per gradient bucket.

The engine (:mod:`pipesim.simulator.engine`) executes the instructions
(:mod:`pipesim.simulator.instructions`, which says what each one means) and decides nothing.
The lists are generated lazily from the schedule's stream (:meth:`Program.blocks`: one compute
instruction with the receive before it and the sends and post after it; :meth:`Program.stream`:
the blocks flattened) so a program of any length runs in constant memory;
:meth:`Program.instructions` and :meth:`Program.format` materialize one device's list to look at.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping

from pipesim.errors import invalid
from pipesim.plan import Plan, Recompute, resplit
from pipesim.profiles.costmodels.sharding import CollectiveKind
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.schedules import Schedule
from pipesim.schedules.action import Op
from pipesim.schedules.lowering import last_backwards, lowered_blocks
from pipesim.schedules.lowering import lower as lower_schedule
from pipesim.schedules.pairs import pair_parts
from pipesim.schedules.schedule import ScheduleStream
from pipesim.simulator.dp_collectives import Collective
from pipesim.simulator.instructions import Block, Compute, Instruction, Post, Recv, Send, Update
from pipesim.simulator.stage_costs import CostOptions, StageCosts, StageFacts
from pipesim.simulator.tp_collectives import TpComm
from pipesim.simulator.tp_lowering import TpLowering
from pipesim.simulator.zero_lowering import ZeroLowering

__all__ = ["Program"]

_NO_MARKS: tuple[tuple[float, int], ...] = ()

_Template = tuple[
    str | None,
    int,
    str,
    float,
    tuple[float, ...],
    tuple[float, ...],
    tuple[tuple[str, int, int, int, float, tuple[int, ...]], ...],
    TpComm | None,
]


@functools.lru_cache(maxsize=4096)
def _resplit(
    src: tuple[tuple[int, int], ...], dst: tuple[tuple[int, int], ...]
) -> tuple[tuple[int, int, int], ...]:
    return resplit(src, dst)


class Program:
    """The lowered program of one iteration: per-device instruction lists plus collectives.

    Build it with :func:`lower`. Attributes:
        plan: the plan it runs.
        schedule: the compute-only schedule (validated) whose lowering this is, as a stream
            (its rows are generated when a device's instructions are).
        stages: per-stage facts (:class:`StageFacts`).
        streams: ``(rank, replica, device)`` of every device stream, in start order.
        collectives: every gradient all-reduce (:class:`Collective`).
        static_memory_bytes: weights + gradients + optimizer state per device, bytes.
    """

    def __init__(
        self,
        *,
        plan: Plan,
        schedule: ScheduleStream,
        stages: list[StageFacts],
        collectives: list[Collective],
        static_memory: dict[int, float],
        costs: StageCosts,
        cluster: Cluster,
        opts: CostOptions,
        bucket_marks: dict[int, tuple[tuple[float, int], ...]],
        tp: TpLowering | None = None,
        zero: ZeroLowering | None = None,
        updates: Mapping[tuple[int, int], Update] | None = None,
        gather_waits: Mapping[int, tuple[tuple[float, int], ...]] | None = None,
    ) -> None:
        self.plan = plan
        self.tp = tp
        self.zero = zero
        """ZeRO's per-unit collectives (:mod:`pipesim.simulator.zero_lowering`), or ``None``."""
        """The tensor-parallel / sharding pass (:mod:`pipesim.simulator.tp_lowering`), or ``None``."""
        self.schedule = schedule
        self.stages = tuple(stages)
        self.collectives = tuple(collectives)
        self.static_memory_bytes = static_memory
        self.streams = tuple(
            (rank, replica, device)
            for rank, devices in enumerate(plan.placement(cluster.num_devices))
            for replica, device in enumerate(devices)
        )
        self._costs = costs
        self._cluster = cluster
        self._opts = opts
        self._marks = bucket_marks  # stage -> marks on its last backward (bucketed all-reduce)
        self._posts = {
            c.stage: c.index
            for c in collectives
            if c.bucket == 0 and not bucket_marks.get(c.stage) and c.posted
            and c.kind != CollectiveKind.ALL_GATHER.value and (zero is None or not zero.per_unit(c.stage))
        }
        self._posts.update(  # dualpipe: the reverse copy's devices post to the same all-reduce
            (c.shared_with, c.index)
            for c in collectives
            if c.shared_with is not None and c.posted and c.stage in self._posts
        )
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._updates = dict(updates or {})
        # stage -> its first forward's waits for the overlapped parameter all-gathers
        self._gather_waits = dict(gather_waits or {})
        # rank -> the index in its row of each reducing stage's last backward (the same for
        # every replica of the rank: found once, by the first to ask)
        self._last_backwards: dict[int, dict[int, int] | None] = {}

    def update(self, rank: int, replica: int) -> Update | None:
        """The optimizer step of the device running ``replica`` of ``rank`` (``None``: off, or
        nothing to update)."""
        return self._updates.get((rank, replica))

    @property
    def gated(self) -> bool:
        """Whether some compute op waits for a collective (ZeRO-3's gathers, the overlapped
        parameter all-gathers of :mod:`pipesim.simulator.param_gather`)."""
        return (self.zero is not None and self.zero.gated) or bool(self._gather_waits)

    def lowered_schedule(self) -> Schedule:
        """The stage-level lowered schedule (sends, receives, all-reduces), validated."""
        return lower_schedule(self.schedule.materialize(), self._posts.keys() | self._marks.keys())

    def stream(self, rank: int, replica: int) -> Iterator[Instruction]:
        """The instructions of the device running ``replica`` of ``rank``, generated lazily
        (:meth:`blocks`, flattened)."""
        for recvs, computes, sends, post in self.blocks(rank, replica):
            yield from recvs
            yield from computes
            yield from sends
            if post is not None:
                yield post
        update = self.update(rank, replica)
        if update is not None:
            yield update

    def blocks(self, rank: int, replica: int) -> Iterator[Block]:
        """The instructions of the device running ``replica`` of ``rank``, one :data:`Block` per
        unit it runs (a compute instruction with the receive before it, the sends and the post
        after it; an overlapped pair's two, :mod:`pipesim.schedules.pairs`), generated lazily
        from the schedule's rows (:func:`pipesim.schedules.lowering.lowered_blocks`, grouped as
        :func:`~pipesim.schedules.lowering.lowered_units` groups them: an ``FB`` block and the
        next one, which ``lowered_blocks`` checks is its ``B``)."""
        sched = self.schedule
        if rank in self._last_backwards:
            after = self._last_backwards[rank]
        else:
            where = sched.stage_ranks
            reduce = {s for s in self._posts.keys() | self._marks.keys() if where[s] == rank}
            after = self._last_backwards[rank] = last_backwards(sched.row(rank), reduce) if reduce else None
        samples = self._costs.samples
        cached = self._costs.uniform  # costs depend on the micro-batch's size only: reuse them
        # per stage, (op, samples) -> (receive kind or None, pieces, op name, duration, alloc, free,
        # send parts); keyed by the op alone where every micro-batch has the same size
        same_size = len(set(samples)) == 1
        templates: list[dict[Op | tuple[Op, int], _Template]] = [{} for _ in self.stages]
        new = tuple.__new__  # namedtuples made without their Python-level __new__ (the same tuples)
        no_sends: tuple[Send, ...] = ()
        no_recvs: tuple[Recv, ...] = ()
        zero = self.zero
        gather_waits = self._gather_waits
        gathered: set[int] = set()  # stages whose first forward has waited for its parameter gathers
        # stages whose units wait or mark beyond their template: ZeRO's per-unit collectives, the
        # overlapped parameter gathers
        waited = {s for s in range(len(self.stages)) if zero is not None and zero.per_unit(s)}
        waited.update(gather_waits)
        overlap = sched.fb_overlap
        op_fb = Op.FB
        # an overlapped pair's FB (lowered_blocks checks that the next block is its B), held until
        # that B: its receives, its compute, its sends and whether it sends
        fb: tuple[tuple[Recv, ...], Compute, tuple[Send, ...], bool] | None = None
        step = 0  # index of the next lowered step in the rank's row (Recv.step, Compute.step)
        lowered = lowered_blocks(
            sched.row(rank),
            num_ranks=sched.num_ranks,
            num_stages=sched.num_stages,
            allreduce_after=after,
            placement=sched.placement,
        )
        for recv_op, op, s, mb, send_op, reduced in lowered:
            key = op if same_size else (op, samples[mb])
            template = templates[s].get(key) if cached else None
            if template is None:
                template = self._template(recv_op, op, s, mb, send_op, replica)
                if cached:
                    templates[s][key] = template
            kind, pieces, name, duration, alloc, free, parts, tp_comm = template
            recvs = no_recvs
            if kind is not None:
                recvs = (new(Recv, ((kind, s, mb, replica), pieces, step)),)
                step += 1
            marks = waits = _NO_MARKS
            post = None
            if reduced:  # the stage's last backward: its bucket marks and its post
                marks = self._marks.get(s, _NO_MARKS)
                if marks and name == "B" and self._costs.recompute is not Recompute.NONE:
                    marks = self._after_replay(marks, s, mb, replica)
                cid = self._posts.get(s)
                if cid is not None:
                    post = Post(cid)
            if s in waited:  # ZeRO's per-unit collectives, or the parameter gathers
                if zero is not None and zero.per_unit(s):
                    fwd, bwd, rec = self._zero_times(s, mb, replica)
                    marks, waits = zero.events(name, s, mb, fwd, bwd, rec, self.stages[s].wgrad_fraction)
                elif name == "F" and s not in gathered:  # the stage's first forward
                    waits = gather_waits[s]
                    gathered.add(s)
            compute = new(Compute, (name, s, mb, duration, alloc, free, marks, step, waits, tp_comm))
            out: tuple[Send, ...] = no_sends
            if len(parts) == 1:  # (most sends: one piece, without a list to build)
                kind_out, dst, k, dst_device, nbytes, route = parts[0]
                out = (new(Send, ((kind_out, dst, mb, k), s, mb, dst_device, nbytes, route)),)
            elif parts:
                out = tuple(
                    [
                        new(Send, ((kind_out, dst, mb, k), s, mb, dst_device, nbytes, route))
                        for kind_out, dst, k, dst_device, nbytes, route in parts
                    ]
                )
            if fb is None:
                if op is op_fb:
                    fb = (recvs, compute, out, send_op is not None)
                    continue
                yield (recvs, (compute,), out, post)
                step += 1 + (send_op is not None) + reduced
                continue
            # the pair's B: both receives, then both computations as one unit (the FB's step, then
            # the B's), then both sends (as lowered_units groups them)
            recv_f, fwd_op, out_f, sent_f = fb
            fb = None
            front_s, back_s = fwd_op.duration_s, duration
            if overlap:
                front, back = pair_parts(front_s, back_s, overlap)
                front_s, back_s = float(front), float(back)
            pair = (
                fwd_op._replace(step=step, duration_s=front_s),
                compute._replace(step=step + 1, duration_s=back_s),
            )
            yield (recv_f + recvs, pair, out_f + out, post)
            step += 2 + sent_f + (send_op is not None) + reduced

    def _template(
        self, recv_op: Op | None, op: Op, s: int, mb: int, send_op: Op | None, replica: int
    ) -> _Template:
        """What a block's instructions hold besides the micro-batch and the step (see :meth:`blocks`)."""
        kind = None
        pieces = 0
        if recv_op is not None:
            kind = "act" if recv_op is Op.RECV_F else "grad"
            src = s - 1 if recv_op is Op.RECV_F else s + 1
            pieces = sum(self._sends_per_piece(src, s, j, replica)
                         for j, k, _ in self._pieces(src, s, mb) if k == replica)
        name, duration, alloc, free, tp_comm = self._compute_parts(op, s, mb, replica)
        if self.zero is not None and self.zero.per_unit(s):  # ZeRO-3's runtime issuing its calls
            fwd, bwd, rec = self._zero_times(s, mb, replica)
            duration += self.zero.issue_s(name, s, fwd, bwd, rec, self.stages[s].wgrad_fraction)
        held = self.zero.held_bytes(name, s) if self.zero is not None else 0.0
        if held:  # ZeRO's gathered units and unreduced gradients, while the op runs
            alloc, free = (*alloc, held), (*free, held)
        parts = tuple(self._send_parts(send_op, s, mb, replica)) if send_op is not None else ()
        return (kind, pieces, name, duration, alloc, free, parts, tp_comm)

    def _zero_times(self, s: int, mb: int, replica: int) -> tuple[float, float, float]:
        """Stage ``s``'s forward, backward and replay of ``mb`` as its compute runs them (under TP:
        :meth:`~pipesim.simulator.tp_lowering.TpLowering.compute_times`), seconds, for ZeRO's units."""
        fwd, bwd, _, _, rec, _ = self._costs.of(s, mb, replica)
        tp = self.tp
        if tp is not None and tp.is_tp(s):
            return tp.compute_times(s, self._part(s, mb, replica), replica, fwd, bwd, rec)
        return fwd, bwd, rec

    def _compute_parts(
        self, op: Op, s: int, mb: int, replica: int
    ) -> tuple[str, float, tuple[float, ...], tuple[float, ...], TpComm | None]:
        """``(op, duration s, bytes allocated at the start, bytes freed at the end, TP
        collectives)``.

        With activation recomputation the replayed forward (``rec``) runs at the start of ``B``
        (of ``I`` when the backward is split), inside the same instruction; with a split backward
        what ``W`` reads (``held``: the weight GEMMs' inputs and output gradients, or everything
        a layer without shapes kept) stays until ``W`` ends and ``I`` releases the rest
        (:func:`pipesim.profiles.costmodels.memory.wgrad_kept_bytes`).
        """
        fwd, bwd, stash, work, rec, held = self._costs.of(s, mb, replica)
        wf = self.stages[s].wgrad_fraction
        if op is Op.FB:  # an overlapped pair's forward: its own costs (the pair's time: blocks())
            op = Op.F
        tp = self.tp
        if tp is not None and tp.is_tp(s):
            return tp.compute_parts(op, s, self._part(s, mb, replica), replica, fwd, bwd, wf, rec)
        if op is Op.F:
            return ("F", fwd, (stash,), (), None)
        if op is Op.B:
            return ("B", rec + bwd, (work,), (work, stash), None)
        if op is Op.I:  # I releases all but what W reads (StageActivations.held_bytes)
            return ("I", rec + bwd * (1.0 - wf), (work,), (work + stash - held,), None)
        return ("W", bwd * wf, (), (held,), None)

    def _after_replay(
        self, marks: tuple[tuple[float, int], ...], s: int, mb: int, replica: int
    ) -> tuple[tuple[float, int], ...]:
        """Bucket marks of a ``B`` that starts with a recomputed forward: a bucket's gradients
        exist once the replay and its share of the backward have run."""
        _, bwd, _, _, rec, _ = self._costs.of(s, mb, replica)
        total = rec + bwd
        if total <= 0:
            return marks
        return tuple(((rec + f * bwd) / total, c) for f, c in marks)

    def _part(self, s: int, mb: int, replica: int) -> int:
        """Samples of ``replica``'s share of micro-batch ``mb`` on stage ``s``."""
        start, stop = self._costs.shares(self._costs.samples[mb], len(self.stages[s].devices))[replica]
        return stop - start

    def _send_parts(
        self, op: Op, s: int, mb: int, replica: int
    ) -> Iterator[tuple[str, int, int, int, float, tuple[int, ...]]]:
        """``(kind, receiving stage, receiving replica, its device, bytes, route)`` per piece."""
        stages = self.stages
        dst = s + 1 if op is Op.SEND_F else s - 1
        kind = "act" if op is Op.SEND_F else "grad"
        per_sample = self._costs.out_per_sample(s if op is Op.SEND_F else dst, mb)
        if self.tp is not None:
            per_sample /= self.tp.send_divisor(s, dst)
        src_device = stages[s].devices[replica]
        tp = self.tp
        for j, k, count in self._pieces(s, dst, mb):
            if j == replica:
                dst_device = stages[dst].devices[k]
                ranks = tp.rank_sends(s, dst, src_device, dst_device) if tp is not None else ()
                if ranks:  # every TP rank's share on its own route, where they share a link that slows them
                    for a, b in ranks:
                        yield (kind, dst, k, b, count * per_sample, self._route(a, b))
                else:
                    yield (kind, dst, k, dst_device, count * per_sample, self._route(src_device, dst_device))

    def _sends_per_piece(self, src: int, dst: int, j: int, k: int) -> int:
        """How many transfers carry the piece from stage ``src``'s replica ``j`` to stage
        ``dst``'s replica ``k``: one, or one per TP rank where their routes share a link that
        slows them (:meth:`~pipesim.simulator.tp_lowering.TpLowering.rank_sends`)."""
        if self.tp is None:
            return 1
        ranks = self.tp.rank_sends(src, dst, self.stages[src].devices[j], self.stages[dst].devices[k])
        return len(ranks) or 1

    def _pieces(self, src: int, dst: int, mb: int) -> tuple[tuple[int, int, int], ...]:
        n = self._costs.samples[mb]
        a = self._costs.shares(n, len(self.stages[src].devices))
        b = self._costs.shares(n, len(self.stages[dst].devices))
        return _resplit(a, b)

    def _route(self, src: int, dst: int) -> tuple[int, ...]:
        if self._opts.free_links or src == dst:
            return ()
        key = (src, dst)
        found = self._routes.get(key)
        if found is None:
            found = self._routes[key] = tuple(self._cluster.route(src, dst))
        return found

    def instructions(self, device: int) -> list[Instruction]:
        """Every instruction of ``device`` (materialized; for inspection and tests).

        Raises:
            InputError: ``device`` runs no stage of the plan.
        """
        for rank, replica, d in self.streams:
            if d == device:
                return list(self.stream(rank, replica))
        raise invalid(
            "device", device, f"must be one of the plan's devices {sorted(self.static_memory_bytes)}"
        )

    def format(self, device: int) -> str:
        """``device``'s instruction list as text, one instruction per line."""
        lines = [f"device {device}:"]
        for ins in self.instructions(device):
            if isinstance(ins, Compute):
                text = f"{ins.stage}{ins.op}{ins.microbatch}  {ins.duration_s:.6g} s"
                if ins.marks:
                    text += "  marks " + ", ".join(f"ar{c}@{f:.3g}" for f, c in ins.marks)
                if ins.waits:
                    text += "  waits " + ", ".join(f"ar{c}@{f:.3g}" for f, c in ins.waits)
                if ins.tp is not None:
                    text += f"  tp {ins.tp.nbytes:.6g} B ({ins.tp.hidden_s:.3g} s hidden)"
            elif isinstance(ins, Recv):
                kind, s, mb, k = ins.key
                text = f"recv {kind} {s}:{mb} replica {k} ({ins.pieces} piece{'s' * (ins.pieces != 1)})"
            elif isinstance(ins, Send):
                kind, s, mb, k = ins.key
                text = f"send {kind} {ins.stage}->{s}:{mb} to gpu{ins.dst_device} {ins.nbytes:.6g} B"
                text += f" route {list(ins.route)}" if ins.route else " (at once)"
            elif isinstance(ins, Update):
                after = ", ".join(f"ar{c}" for c in ins.after) or "the stream"
                text = f"optimizer step  {ins.compute.duration_s:.6g} s  after {after}"
            else:
                c = self.collectives[ins.collective]
                text = f"post ar{c.index} (stage {c.stage} {c.kind} {c.nbytes:.6g} B)"
            lines.append("  " + text)
        return "\n".join(lines)
