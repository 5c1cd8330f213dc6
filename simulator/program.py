"""The lowered program: what every device runs in one iteration, as instruction lists.

``lower(plan, profile, cluster, options)`` turns a plan into a :class:`Program`:

    schedule (compute actions per pipeline rank, :mod:`pipesim.schedules`)
      -> stage-level lowering (:func:`pipesim.schedules.lowering.lowered_blocks`: sends and
         receives between stages, one ``ALL_REDUCE`` per replicated stage)
      -> device-level expansion (here): each rank's steps become the instruction list of each of
         its replicas' devices, with durations, memory, bytes and routes filled in; a send between
         replica sets of different sizes becomes the pieces :func:`pipesim.plan.resplit` gives; a
         stage's all-reduce becomes one collective, or one per gradient bucket.

The engine (:mod:`pipesim.simulator.engine`) executes the instructions and decides nothing.
Instructions are small named tuples (cheap to make by the million, printable); the lists are
generated lazily from the schedule's stream (:meth:`Program.blocks`: one compute instruction with
the receive before it and the sends and post after it; :meth:`Program.stream`: the blocks
flattened) so a program of any length runs in constant memory;
:meth:`Program.instructions` and :meth:`Program.format` materialize one device's list to look at.

Instruction semantics (per device, strictly in list order on its compute stream):

* :class:`Compute` occupies the compute stream for ``duration_s``; each of ``alloc_bytes`` is
  allocated at its start and each of ``free_bytes`` released at its end; each ``(fraction, collective)``
  of ``marks`` makes this device ready for that collective once ``fraction`` of the duration
  has run (gradient buckets, ZeRO's per-unit collectives); each of ``waits`` stalls the op
  once ``fraction`` of it has run until that collective has ended (ZeRO-3's parameter gathers;
  at one fraction the marks come first); its ``tp`` (a tensor-parallel stage's op,
  :mod:`pipesim.simulator.tp_collectives`) is the op's TP collectives as one collective among
  the TP group, launched ``tp.hidden_s`` before the compute ends, and the op ends once both
  the compute and the collective have ended (its stall counts as busy time: Megatron-LM runs
  them on the compute stream).
* :class:`Recv` waits until ``pieces`` transfers keyed ``key`` have arrived.
* An overlapped pair (``FB`` then its ``B``, DualPipe's ``F&B``, :mod:`pipesim.schedules.pairs`)
  is one :data:`Block`: both receives are waited for before either computation starts, the two
  :class:`Compute` s (the forward's and the backward's parts of ``F&B``, each allocating and
  freeing what the op alone would) run back to back, then both sends go.
* :class:`Send` posts one transfer (it does not block the compute stream): ``nbytes`` over
  ``route`` to the arrival ``key`` on ``dst_device``; concurrent transfers share links max-min
  fairly; an empty route is delivered at once (same device, or free links).
* :class:`Post` makes this device ready for a collective (does not block).
* :class:`Update` (last, at most one per device): the optimizer step
  (:mod:`pipesim.profiles.costmodels.optimizer`), a compute op ``O`` that starts once the
  device's compute stream has run everything else and each of ``after`` (the gradient
  collectives of the device's stages) has ended. With ZeRO-1/2 or the distributed optimizer
  it runs between the reduce-scatter and the parameter all-gather, as Megatron-LM does: the
  all-gather (``Collective.after_step``) waits for its members' steps (docs/optimizer.md).

A :class:`Collective` (gradient all-reduce of one stage's bucket among its replicas, or one of
ZeRO's reduce-scatters and all-gathers, :mod:`pipesim.simulator.zero_lowering`) starts once
every member is ready (at once for one that nobody posts), the collective ``after`` it (the
stage's previous bucket, the previous one on its stream) has ended, with ``after_drain``
every compute stream has finished, and with ``after_step`` every member's optimizer step has.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import NamedTuple

from pipesim.errors import InputError, invalid
from pipesim.plan import Plan, Recompute, resplit
from pipesim.profiles.costmodels.memory import static_memory_bytes, weight_versions
from pipesim.profiles.costmodels.sharding import CollectiveKind
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules import Schedule
from pipesim.schedules.action import Op
from pipesim.schedules.lowering import Block as LoweredBlock
from pipesim.schedules.lowering import last_backwards, lowered_blocks
from pipesim.schedules.lowering import lower as lower_schedule
from pipesim.schedules.pairs import PAIR_RULE, pair_parts
from pipesim.schedules.registry import stream_schedule
from pipesim.schedules.schedule import ScheduleStream
from pipesim.schedules.validate import validate
from pipesim.simulator.dp_collectives import Collective, data_parallel_collectives
from pipesim.simulator.microbatch_costs import MicrobatchCosts
from pipesim.simulator.optimizer_steps import optimizer_steps
from pipesim.simulator.options import SimOptions
from pipesim.simulator.stage_costs import CostOptions, StageCosts, StageFacts
from pipesim.simulator.tp_collectives import TpComm
from pipesim.simulator.tp_lowering import TpLowering
from pipesim.simulator.zero_lowering import ZeroLowering

__all__ = [
    "Block",
    "Collective",
    "Compute",
    "Instruction",
    "Post",
    "Program",
    "Recv",
    "Send",
    "Update",
    "lower",
]

ArrivalKey = tuple[str, int, int, int]
"""``("act" | "grad", receiving stage, micro-batch, receiving replica)``."""


class Compute(NamedTuple):
    """Run ``op`` (``F``, ``B``, ``I``, ``W``) of ``stage`` on ``microbatch`` for ``duration_s``."""

    op: str
    stage: int
    microbatch: int
    duration_s: float
    alloc_bytes: tuple[float, ...]
    free_bytes: tuple[float, ...]
    marks: tuple[tuple[float, int], ...]
    step: int  # index of the action in the rank's lowered schedule row
    waits: tuple[tuple[float, int], ...] = ()
    tp: TpComm | None = None


class Recv(NamedTuple):
    """Wait for ``pieces`` transfers keyed ``key`` (an activation or a gradient)."""

    key: ArrivalKey
    pieces: int
    step: int


class Send(NamedTuple):
    """Post one transfer of ``nbytes`` over ``route`` to ``dst_device`` (arrival ``key``)."""

    key: ArrivalKey
    stage: int  # the sending stage
    microbatch: int
    dst_device: int
    nbytes: float
    route: tuple[int, ...]


class Post(NamedTuple):
    """Mark this device ready for collective ``collective`` (does not block)."""

    collective: int


class Update(NamedTuple):
    """The optimizer step of one device: ``compute`` (op ``O``, micro-batch -1) once its stream
    has run everything else and every collective in ``after`` has ended."""

    compute: Compute
    after: tuple[int, ...]


Instruction = Compute | Recv | Send | Post | Update

Block = tuple[tuple[Recv, ...], tuple[Compute, ...], tuple[Send, ...], Post | None]
"""One unit a device runs: its receives (waited for, in order, before it starts), its compute
instructions (run back to back: one, or an overlapped pair's forward and backward parts,
:mod:`pipesim.schedules.pairs`), then its sends and its post (the stream is the blocks,
flattened)."""


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
            if c.shared_with is not None and c.stage in self._posts
        )
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}
        self._updates = dict(updates or {})

    def update(self, rank: int, replica: int) -> Update | None:
        """The optimizer step of the device running ``replica`` of ``rank`` (``None``: off, or
        nothing to update)."""
        return self._updates.get((rank, replica))

    @property
    def gated(self) -> bool:
        """Whether some compute op waits for a collective (ZeRO-3's gathers)."""
        return self.zero is not None and self.zero.gated

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
        :func:`~pipesim.schedules.lowering.lowered_units` groups them)."""
        sched = self.schedule
        where = sched.stage_ranks
        reduce = {s for s in self._posts.keys() | self._marks.keys() if where[s] == rank}
        after = last_backwards(sched.row(rank), reduce) if reduce else None
        samples = self._costs.samples
        cached = self._costs.uniform  # costs depend on the micro-batch's size only: reuse them
        # (op, stage, samples) -> (receive kind or None, pieces, op name, duration, alloc, free, send parts)
        templates: dict[tuple[Op, int, int], _Template] = {}
        new = tuple.__new__  # namedtuples made without their Python-level __new__ (the same tuples)
        no_sends: tuple[Send, ...] = ()
        no_recvs: tuple[Recv, ...] = ()
        zero = self.zero
        overlap = sched.fb_overlap

        def one(
            block: LoweredBlock, recv_step: int, compute_step: int
        ) -> Block:
            recv_op, op, s, mb, send_op, reduced = block
            key = (op, s, samples[mb])
            template = templates.get(key) if cached else None
            if template is None:
                template = self._template(recv_op, op, s, mb, send_op, replica)
                if cached:
                    templates[key] = template
            kind, pieces, name, duration, alloc, free, parts, tp_comm = template
            recvs = no_recvs
            if kind is not None:
                recvs = (new(Recv, ((kind, s, mb, replica), pieces, recv_step)),)
            marks = self._marks.get(s, _NO_MARKS) if reduced else _NO_MARKS
            if marks and name == "B" and self._costs.recompute is not Recompute.NONE:
                marks = self._after_replay(marks, s, mb, replica)
            waits = _NO_MARKS
            if zero is not None and zero.per_unit(s):
                fwd, bwd, _, _, rec, _ = self._costs.of(s, mb, replica)
                marks, waits = zero.events(name, s, mb, fwd, bwd, rec, self.stages[s].wgrad_fraction)
            compute = new(Compute, (name, s, mb, duration, alloc, free, marks, compute_step, waits, tp_comm))
            out = no_sends
            if send_op is not None:
                out = tuple(
                    [
                        new(Send, ((kind_out, dst, mb, k), s, mb, dst_device, nbytes, route))
                        for kind_out, dst, k, dst_device, nbytes, route in parts
                    ]
                )
            post = None
            if reduced:
                cid = self._posts.get(s)
                if cid is not None:
                    post = Post(cid)
            return (recvs, (compute,), out, post)

        step = 0
        op_fb = Op.FB
        blocks = lowered_blocks(
            sched.row(rank),
            num_ranks=sched.num_ranks,
            num_stages=sched.num_stages,
            allreduce_after=after,
            placement=sched.placement,
        )
        for block in blocks:
            if block[1] is not op_fb:
                got = block[0] is not None
                yield one(block, step, step + got)
                step += got + 1 + (block[4] is not None) + block[5]
                continue
            # an overlapped pair (lowered_units' rule): both receives, then both computations as
            # one unit, then both sends
            first, second = block, next(blocks, None)
            if second is None or second[1] is not Op.B:
                raise InputError(f"{first[2]}FB{first[3]} {PAIR_RULE}")
            got_f, got_b = first[0] is not None, second[0] is not None
            at = step + got_f + got_b
            recv_f, (fwd,), out_f, _ = one(first, step, at)  # (FB is never a stage's last backward)
            recv_b, (bwd,), out_b, post = one(second, step + got_f, at + 1)
            if overlap:
                front, back = pair_parts(fwd.duration_s, bwd.duration_s, overlap)
                fwd, bwd = fwd._replace(duration_s=float(front)), bwd._replace(duration_s=float(back))
            step = at + 2 + (first[4] is not None) + (second[4] is not None) + second[5]
            yield (recv_f + recv_b, (fwd, bwd), out_f + out_b, post)

    def _template(
        self, recv_op: Op | None, op: Op, s: int, mb: int, send_op: Op | None, replica: int
    ) -> _Template:
        """What a block's instructions hold besides the micro-batch and the step (see :meth:`blocks`)."""
        kind = None
        pieces = 0
        if recv_op is not None:
            kind = "act" if recv_op is Op.RECV_F else "grad"
            src = s - 1 if recv_op is Op.RECV_F else s + 1
            pieces = sum(1 for _, k, _ in self._pieces(src, s, mb) if k == replica)
        name, duration, alloc, free, tp_comm = self._compute_parts(op, s, mb, replica)
        if self.zero is not None and self.zero.per_unit(s):  # ZeRO-3's runtime issuing its calls
            fwd, bwd, _, _, rec, _ = self._costs.of(s, mb, replica)
            duration += self.zero.issue_s(name, s, fwd, bwd, rec, self.stages[s].wgrad_fraction)
        held = self.zero.held_bytes(name, s) if self.zero is not None else 0.0
        if held:  # ZeRO's gathered units and unreduced gradients, while the op runs
            alloc, free = (*alloc, held), (*free, held)
        parts = tuple(self._send_parts(send_op, s, mb, replica)) if send_op is not None else ()
        return (kind, pieces, name, duration, alloc, free, parts, tp_comm)

    def _compute_parts(
        self, op: Op, s: int, mb: int, replica: int
    ) -> tuple[str, float, tuple[float, ...], tuple[float, ...], TpComm | None]:
        """``(op, duration s, bytes allocated at the start, bytes freed at the end, TP
        collectives)``.

        With activation recomputation the replayed forward (``rec``) runs at the start of ``B``
        (of ``I`` when the backward is split), inside the same instruction; with a split backward
        the re-materialised layer inputs (``held``) stay until ``W`` has read them.
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
        if op is Op.I:
            return ("I", rec + bwd * (1.0 - wf), (work,), (work - held,) if held else (work,), None)
        return ("W", bwd * wf, (), (stash, held) if held else (stash,), None)

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
        for j, k, count in self._pieces(s, dst, mb):
            if j == replica:
                dst_device = stages[dst].devices[k]
                yield (kind, dst, k, dst_device, count * per_sample, self._route(src_device, dst_device))

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


def _stage_facts(
    plan: Plan, profile: ModelProfile, placement: tuple[tuple[int, ...], ...], stage_ranks: tuple[int, ...]
) -> list[StageFacts]:
    out = []
    for s, spec in enumerate(plan.stages):
        rank = stage_ranks[s]
        layers = range(spec.first_layer, spec.last_layer + 1)
        weights = sum(profile.layers[i].parameter_bytes for i in layers)
        bwd_total = sum(profile.layers[i].bwd_time_s for i in layers)
        w_time = sum(profile.layers[i].bwd_time_s * profile.layers[i].weight_grad_fraction for i in layers)
        wgrad = w_time / bwd_total if bwd_total > 0 else (0.5 if weights else 0.0)
        out.append(
            StageFacts(index=s, rank=rank, layers=layers, devices=placement[rank], wgrad_fraction=wgrad)
        )
    return out


def _name(value: object) -> str:
    """The text of a name given as a ``str`` or a ``str`` enum member (``str()`` of an enum
    member is its qualified name, not its value)."""
    return str(getattr(value, "value", value))


def _device_speeds(cluster: Cluster, dtype: str, what_if: Mapping[int, float]) -> dict[int, float]:
    """Per-device compute speed: a heterogeneous cluster's device types times the what-if factors."""
    speeds = cluster.device_speed_factors(dtype)
    for device, factor in what_if.items():
        speeds[device] = speeds.get(device, 1.0) * factor
    return speeds


def lower(
    plan: Plan,
    profile: ModelProfile,
    cluster: Cluster,
    options: SimOptions,
    *,
    schedule: Schedule | None = None,
    costs: MicrobatchCosts | None = None,
) -> Program:
    """Lower ``plan`` into the :class:`Program` the engine runs.

    Args:
        plan: the plan.
        profile: the model's per-layer costs.
        cluster: devices and links (placement, routes).
        options: the simulation options (speed factors, jitter, all-reduce overlap, free links).
        schedule: an explicit schedule (its compute actions are used) instead of the one
            ``plan.schedule`` names; it must have the plan's ranks, stages and micro-batches.
        costs: explicit per-stage, per-micro-batch costs (see :func:`pipesim.simulator.simulate`).

    Returns:
        The program (instruction lists are generated when streamed).

    Raises:
        Infeasible: the plan needs more devices than the cluster has, or more stages than layers.
        InputError: the plan does not match the model or the cluster, an unknown schedule, or a
            ``schedule`` or ``costs`` whose shape differs from the plan's.
        ScheduleError: the schedule breaks a rule of :func:`pipesim.schedules.validate`.
    """
    plan.check_against(profile.num_layers, cluster.num_devices)
    if costs is not None:
        costs.check_shape(plan.num_stages, plan.num_microbatches)
    stream: ScheduleStream
    if schedule is None:
        stream = stream_schedule(
            plan.schedule,
            num_ranks=plan.num_ranks,
            num_microbatches=plan.num_microbatches,
            chunks=plan.chunks,
            **dict(plan.schedule_options),
        )
    elif (schedule.num_ranks, schedule.num_stages, schedule.num_microbatches) != (
        plan.num_ranks,
        plan.num_stages,
        plan.num_microbatches,
    ):
        raise invalid(
            "schedule",
            f"{schedule.num_ranks} ranks, {schedule.num_stages} stages, {schedule.num_microbatches} "
            "micro-batches",
            f"must match the plan's {plan.num_ranks} ranks, {plan.num_stages} stages, "
            f"{plan.num_microbatches} micro-batches",
        )
    else:
        schedule = schedule.compute_only()
        validate(schedule)
        stream = ScheduleStream.of(schedule)
    plan.check_stage_placement(stream.stage_ranks)
    placement = plan.placement(cluster.num_devices)
    stages = _stage_facts(plan, profile, placement, stream.stage_ranks)
    opts = CostOptions(
        speed_factors=_device_speeds(cluster, profile.dtype, options.speed_factors),
        jitter_f=options.jitter_for("F"),
        jitter_b=options.jitter_for("B"),
        seed=options.seed,
        allreduce_overlap=_name(options.allreduce_overlap),
        bucket_bytes=float(options.bucket_bytes),
        free_links=options.free_links,
    )
    tp_pass = TpLowering(plan, profile, cluster, free_links=opts.free_links)
    tp = tp_pass if tp_pass.active else None
    collectives, marks, zero = data_parallel_collectives(
        plan, profile, stages, stream, tp, opts, cluster, zero_prefetch=options.zero_prefetch
    )
    device_layers: dict[int, list[int]] = {}
    for stage in stages:
        for device in stage.devices:
            device_layers.setdefault(device, []).extend(stage.layers)
    static = {d: static_memory_bytes(profile, layers, plan.optimizer, plan.grad_reduce_dtype)
              for d, layers in device_layers.items()}
    if tp is not None:
        static = tp.static_memory({st.index: st.devices for st in stages})
    for stage in stages:  # the weight versions asynchronous PipeDream / 2BW keep beyond the first
        extra = weight_versions(_name(plan.schedule), stage.index, plan.num_stages, plan.num_microbatches) - 1
        if extra > 0 and plan.chunks == 1:
            weights = float(sum(profile.layers[i].parameter_bytes for i in stage.layers))
            for device in stage.devices:
                static[device] += extra * weights
    updates = None
    if options.optimizer_step:
        steps = optimizer_steps(plan, profile, cluster, stages, collectives, tp)
        updates = {
            key: Update(Compute("O", stage, -1, duration, (), (), (), -1), after)
            for key, (stage, duration, after) in steps.items()
        }
    return Program(
        plan=plan,
        schedule=stream,
        stages=stages,
        collectives=collectives,
        static_memory=static,
        costs=StageCosts(plan, profile, stages, opts, costs),
        cluster=cluster,
        opts=opts,
        bucket_marks=marks,
        tp=tp,
        zero=zero,
        updates=updates,
    )
