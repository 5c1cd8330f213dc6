"""A 3D configuration's per-stage op times, as the simulator's lowering times its ops: each
stage's ``F``, its ``I`` (the whole ``B`` outside zero-bubble schedules) and its ``W``, with the
rank's own replicas' TP rings in lock step and other ranks' TP blocks on its links
(:mod:`pipesim.planner.nic_sharing`); read by :func:`pipesim.planner.three_d.prepare_config`."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence

from pipesim.planner.nic_sharing import RingSharers, concurrent_delay_s
from pipesim.planner.three_d_costs import ThreeDCosts
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.costmodels.tensor_parallel import TpStageTimes
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules.placement import stage_ranks
from pipesim.schedules.registry import placement_of

__all__ = ["boundary_sends", "stage_layout", "stage_op_times", "wgrad_fraction"]


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
    share = model.act_share_bytes(mbs, t, c)  # one rank's send, bytes
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


def boundary_sends(
    model: ThreeDCosts, where: Sequence[int], act: float,
    pairs_of: Callable[[int, int], tuple[tuple[int, int], ...]],
    cache: dict[tuple[int, int], tuple[tuple[float, float], ...]],
    ranks: int = 1,
) -> tuple[list[float], list[float]]:
    """Per stage boundary ``k`` (stages ``k`` and ``k + 1`` on ranks ``where[k]`` and
    ``where[k + 1]``) the pipeline transfer of one activation of ``act`` bytes per TP and CP rank
    and its route latency, seconds: every replica's send between the two ranks (``pairs_of(a,
    b)``: per replica its first devices) at once, sharing the links they cross
    (:meth:`~pipesim.planner.three_d_costs.ThreeDCosts.send_terms`, kept in ``cache`` by rank
    pair; each replica's ``ranks`` TP x CP ranks' sends counted where their routes share a link,
    :func:`~pipesim.profiles.costmodels.dp_rings.replica_sends`); 0 between stages on one rank
    (the V shapes' turn). A boundary between ranks on different servers pays its NIC hop where
    ranks 0 and 1 share a server (the estimate charged every boundary rank 0's hop before: V-Min
    -3.8% on ``p = 4`` over two DGX servers)."""
    sends: list[float] = []
    lats: list[float] = []
    for a, b in itertools.pairwise(where):
        if a == b:
            sends.append(0.0)
            lats.append(0.0)
            continue
        terms = cache.get((a, b))
        if terms is None:
            terms = cache[(a, b)] = model.send_terms(pairs_of(a, b), ranks)
        time_s, lat_s = max(((lat + act * per_byte, lat) for lat, per_byte in terms), default=(0.0, 0.0))
        sends.append(time_s)
        lats.append(lat_s)
    return sends, lats


@functools.lru_cache(maxsize=1024)
def stage_layout(schedule: str, p: int, v: int) -> tuple[tuple[int, ...], list[list[int]]]:
    """Per stage its rank and per rank its stages (``p v`` stages on ``p`` ranks) in
    ``schedule``'s placement (looped, or the V shapes'); shared between calls: read only."""
    where = tuple(stage_ranks(placement_of(schedule) or "looped", p * v, p))
    stages_of: list[list[int]] = [[] for _ in range(p)]
    for k, r in enumerate(where):
        stages_of[r].append(k)
    return where, stages_of
