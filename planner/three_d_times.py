"""A 3D configuration's per-stage op times, as the simulator's lowering times its ops: each
stage's ``F``, its ``I`` (the whole ``B`` outside zero-bubble schedules) and its ``W``, with the
rank's own replicas' TP rings in lock step and other ranks' TP blocks on its links
(:mod:`pipesim.planner.nic_sharing`); read by :func:`pipesim.planner.three_d.prepare_config`."""

from __future__ import annotations

from collections.abc import Callable

from pipesim.planner.nic_sharing import RingSharers, concurrent_delay_s
from pipesim.planner.three_d_costs import ThreeDCosts
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.costmodels.tensor_parallel import TpStageTimes
from pipesim.profiles.models.profile import ModelProfile

__all__ = ["stage_op_times", "wgrad_fraction"]


def stage_op_times(
    model: ThreeDCosts, chunks: list[tuple[int, int]], stages_of: list[list[int]], mbs: int, t: int, sp: bool,
    overlap: bool, rc: Recompute, c: int, rings: tuple[int, ...], cp_hops: tuple[int, ...], split: bool,
    sharers: RingSharers | None, wires: Callable[[int, int], tuple[float, float]],
) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], tuple[float, ...],
           tuple[TpStageTimes, ...], tuple[float, ...]]:
    """Per stage its ``F``, its ``I`` (the whole ``B`` unless ``split``) and its ``W``, with the
    rank's own replicas' TP rings in lock step; per rank the delay by other ranks' TP blocks and
    the pipeline sends on its links per micro-batch; per stage its TP x CP times and replayed forward, seconds
    (:func:`~pipesim.planner.three_d.prepare_config`)."""
    n, p = len(chunks), len(stages_of)
    f_stage, i_stage, w_stage, slow_of = [0.0] * n, [0.0] * n, [0.0] * n, [0.0] * p
    all_times: list[TpStageTimes] = []
    replays = [0.0] * n
    share = mbs * model.shape.seq * model.shape.hidden * model.elem / (t * c)  # one rank's send, bytes
    for r in range(p):
        sends = sharers.sends[r] if sharers is not None and sharers.sends else ()
        held = 0.0  # its TP blocks' seconds on their bottleneck per micro-batch
        for k in stages_of[r]:
            first, last = chunks[k]
            times = model.times(first, last, mbs, t, sp, overlap, c, rings[r], cp_hops[r])
            all_times.append(times)
            f_op = times.fwd_tp_s + times.fwd_comm_s
            replay = replays[k] = model.replay(first, last, mbs, t, sp, rc, overlap, c, rings[r], cp_hops[r])
            b_op = times.bwd_tp_s + times.bwd_comm_s + replay
            if split:  # I exposes its TP collectives whole; W is the weight-gradient compute
                w_stage[k] = times.bwd_tp_s * wgrad_fraction(model.profile, first, last)
                b_op += times.bwd_split_comm_s - times.bwd_comm_s - w_stage[k]  # the I
            if sharers is not None and sharers.own[r] > 1:  # its replicas' rings, in lock step
                own_f, own_b = wires(r, k // p)
                f_op += (sharers.own[r] - 1) * own_f
                b_op += (sharers.own[r] - 1) * own_b
            if sharers is not None and sharers.tp[r]:  # other ranks' TP blocks on its bottleneck
                own_f, own_b = wires(r, k // p)
                others = [[wires(q, k // p) for q in ranks] for ranks in sharers.tp[r]]
                slow_of[r] += concurrent_delay_s(own_f, [[w[0] for w in ws] for ws in others])
                slow_of[r] += concurrent_delay_s(own_b, [[w[1] for w in ws] for ws in others])
            if sends:
                held += sum(wires(r, k // p))
            f_stage[k], i_stage[k] = f_op, b_op
        if sends:  # the pipeline sends of a micro-batch on its bottleneck (nic_sharing.pipeline_sends)
            slow_of[r] += concurrent_delay_s(held, [[share * x] for x in sends])
    order = [k for ks in stages_of for k in ks]
    by_stage: list[TpStageTimes | None] = [None] * n
    for k, x in zip(order, all_times, strict=True):
        by_stage[k] = x
    return (tuple(f_stage), tuple(i_stage), tuple(w_stage), tuple(slow_of),
            tuple(x for x in by_stage if x is not None), tuple(replays))


def wgrad_fraction(profile: ModelProfile, first: int, last: int) -> float:
    """The weight-gradient share of layers ``first..last``'s backward, as the simulator's
    lowering splits a backward into ``I`` and ``W`` (its ``StageFacts.wgrad_fraction``)."""
    layers = profile.layers[first : last + 1]
    total = sum(layer.bwd_time_s for layer in layers)
    if total <= 0:
        return 0.5 if any(layer.parameter_bytes for layer in layers) else 0.0
    return sum(layer.bwd_time_s * layer.weight_grad_fraction for layer in layers) / total
