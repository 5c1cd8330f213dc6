"""Megatron-Core r0.8.0's data-parallel buckets under the distributed optimizer
(``sharding = distributed``): only pipeline rank 0's first chunk is cut, buckets count the
bytes one device holds, an interleaved rank's buckets start after the chunk's last backward, the
tied copy rides in its user layer's bucket, and the 3D estimate's overlapped parameter gathers
(:func:`~pipesim.planner.param_gather.gather_head_s`) against hand-computed chains and the
simulation."""

from __future__ import annotations

import math

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner.param_gather import gather_head_s
from pipesim.profiles.costmodels.buckets import bucket_layers, megatron_bucketed
from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.lowering import lower
from pipesim.simulator.trace import EventKind, TraceEvent
from tests.simulator.builders import equal_profile

TWO_SERVERS = with_overrides(get_cluster("dgx1-v100"), {"servers": 2})
LAYER_BYTES = 64 << 20
FWD_S, BWD_S = 0.01, 0.02


def _stages(layers: list[tuple[int, int]], sharding: str, t: int = 1) -> tuple[StagePlan, ...]:
    return tuple(StagePlan(first_layer=a, last_layer=b, replicas=2, tensor_parallel=t, sharding=sharding)
                 for a, b in layers)


def _scatters(plan: Plan, opts: SimOptions, profile: object) -> dict[int, list[float]]:
    program = lower(plan, profile, TWO_SERVERS, opts)  # type: ignore[arg-type]
    out: dict[int, list[float]] = {}
    for c in program.collectives:
        if c.kind in ("reduce-scatter", "all-reduce"):
            out.setdefault(c.stage, []).append(c.nbytes)
    return out


def test_megatron_bucketed_is_rank_zero_first_chunk() -> None:
    assert megatron_bucketed([0, 1, 0, 1]) == 0
    assert megatron_bucketed([1, 0, 1, 0]) == 1
    assert megatron_bucketed([0, 1, 1, 0]) == 0  # V shape: rank 0's first chunk is stage 0
    assert megatron_bucketed([]) is None


@pytest.mark.parametrize(("sharding", "cut"), [("distributed", [4, 1]), ("zero1", [4, 4])])
def test_only_rank_zero_first_chunk_is_cut(sharding: str, cut: list[int]) -> None:
    """1F1B over two ranks, four layers a stage, buckets of one layer: the distributed optimizer
    (Megatron-Core: ``bucket_size = None`` on pipeline ranks > 0) cuts stage 0 only; ZeRO-1
    (DeepSpeed, PyTorch DDP's rule) cuts both. Either way a stage's bytes add up."""
    profile = equal_profile(8, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=LAYER_BYTES)
    plan = Plan(stages=_stages([(0, 3), (4, 7)], sharding), global_batch_size=32, num_microbatches=4,
                schedule="1f1b")
    found = _scatters(plan, SimOptions(allreduce_overlap="bucketed", bucket_bytes=LAYER_BYTES), profile)
    assert [len(found[s]) for s in (0, 1)] == cut
    assert [sum(found[s]) for s in (0, 1)] == [4 * LAYER_BYTES] * 2  # fp32: gradients as parameters


def test_buckets_count_the_devices_tp_shard() -> None:
    """Megatron and PyTorch DDP count their local (TP-sharded) tensors: a bucket of 1.5 layer
    shards holds two layers at t = 2 (each device holds half a layer), not one."""
    profile = equal_profile(4, parameter_bytes=100)
    whole = bucket_layers(profile, range(4), 75)
    shard = bucket_layers(profile, range(4), 75, lambda i: 50.0)
    assert [b[0] for b in whole] == [(3,), (2,), (1,), (0,)]
    assert [b[0] for b in shard] == [(3, 2), (1, 0)]
    assert [b[1] for b in shard] == [100.0, 100.0]
    assert bucket_layers(profile, range(4), math.inf, lambda i: 50.0) == [((3, 2, 1, 0), 200.0, 1.0)]


def test_interleaved_buckets_start_after_the_chunks_backward() -> None:
    """Interleaved (Megatron's default ``--delay-grad-reduce``: ``grad_sync_func``): stage 0's
    two buckets start together after its last backward, not as the backward fills them; on a
    one-chunk pipeline (1F1B) the first starts inside that backward."""
    profile = equal_profile(8, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=LAYER_BYTES)
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=LAYER_BYTES, contention=False)
    for schedule, chunks, layers in (("interleaved", 2, [(0, 1), (2, 3), (4, 5), (6, 7)]),
                                     ("1f1b", 1, [(0, 3), (4, 7)])):
        plan = Plan(stages=_stages(layers, "distributed"), global_batch_size=32, num_microbatches=4,
                    schedule=schedule, chunks=chunks)
        result = simulate(plan, profile, TWO_SERVERS, opts)
        program = lower(plan, profile, TWO_SERVERS, opts)
        devices = program.stages[0].devices
        scatters = sum(1 for c in program.collectives if c.stage == 0 and c.kind == "reduce-scatter")
        assert scatters == 4 // chunks  # a bucket per layer
        last_b = max(e.end_s for e in result.events if e.kind is EventKind.BACKWARD and e.stage == 0
                     and e.device == devices[0])
        firsts = sorted(e.start_s for e in result.events if e.kind is EventKind.ALL_REDUCE and e.stage == 0
                        and e.device == devices[0])[:scatters]  # (the all-gather after the step last)
        if chunks > 1:
            assert firsts[0] >= last_b - 1e-12
        else:
            assert firsts[0] < last_b


def test_tied_copy_rides_in_the_output_layers_gather() -> None:
    """A tied GPT on two stages: the last stage holds the embedding's copy (Megatron's shared
    output weight); its parameter all-gathers before the forward move its layers and the copy,
    as its reduce-scatters do and as the all-gather after the step does without the option."""
    spec = "gpt:layers=4,hidden=512,heads=8,seq=512,vocab=32000"
    profile, cluster = resolve_inputs(spec, "dgx-h100-1024", overrides={"servers": 2}, dtype="bf16")
    n = profile.num_layers
    stages = (StagePlan(first_layer=0, last_layer=2, replicas=8, sharding="distributed"),
              StagePlan(first_layer=3, last_layer=n - 1, replicas=8, sharding="distributed"))
    opts = SimOptions(allreduce_overlap="bucketed", bucket_bytes=1 << 20)
    found = {}
    for on in (False, True):
        plan = Plan(stages=stages, global_batch_size=32, num_microbatches=4, schedule="1f1b",
                    overlap_param_gather=on)
        program = lower(plan, profile, cluster, opts)
        found[on] = [(c.stage, c.kind, c.nbytes, c.after_step) for c in program.collectives]
    own = float(sum(profile.layers[i].parameter_bytes for i in range(3, n)))
    copy = sum(b for s, k, b, _ in found[False] if s == 1 and k == "all-gather") - own
    assert copy > 0  # the copy: vocabulary x hidden of the output layer's tied matrix
    gathers = [b for s, k, b, step in found[True] if s == 1 and k == "all-gather"]
    assert not any(step for _, _, _, step in found[True])
    assert gathers == [own + copy]  # rank 1: one bucket (Megatron's bucket_size None), copy included
    scatters = sum(b for s, k, b, _ in found[True] if s == 1 and k == "reduce-scatter")
    assert scatters == pytest.approx(2 * (own + copy), rel=1e-12)  # fp32 gradients of bf16


def test_gather_head_chains_every_chunk_hand_computed() -> None:
    """Interleaved, two ranks, two one-layer chunks each, gathers of 0.025 s against 0.01 s
    forwards and no sends: rank 0 gathers stage 0 (done 0.025, reached at 0) then stage 2
    (done 0.05, reached at 0.02): the later chunk's chain shows, ``D = 0.05 - 0.02 = 0.03``."""
    profile = equal_profile(4, fwd_s=FWD_S)
    chunks, ranks = [(0, 0), (1, 1), (2, 2), (3, 3)], [0, 1, 0, 1]
    starts, fwd = [0.0, 0.01, 0.02, 0.03], [FWD_S] * 4
    head = gather_head_s(profile, chunks, ranks, starts, fwd, math.inf, lambda i, s: 100.0, lambda b: 0.025)
    assert head == pytest.approx(0.03, abs=1e-15)
    head = gather_head_s(profile, chunks, ranks, starts, fwd, math.inf, lambda i, s: 100.0, lambda b: 0.015)
    assert head == pytest.approx(0.015, abs=1e-15)  # stage 0's own gather: 0.015 - 0


def test_gather_head_cuts_only_the_first_stage_hand_computed() -> None:
    """Two ranks of two layers each, buckets of one layer (100 bytes), gathers of 1e-4 s a
    byte: stage 0 is cut (layer 0's gather ends at 0.01 when the forward starts, layer 1's at
    0.02, reached at 0.01: both 0.01 late); stage 1 is one gather of 0.02 s reached at 0.02."""
    profile = equal_profile(4, fwd_s=FWD_S)
    head = gather_head_s(profile, [(0, 1), (2, 3)], [0, 1], [0.0, 0.02], [0.02, 0.02], 100.0,
                         lambda i, s: 100.0, lambda b: b * 1e-4)
    assert head == pytest.approx(0.01, abs=1e-15)
    # stage 1 reached at once (no compute before it): its one gather of 200 bytes shows whole
    head = gather_head_s(profile, [(0, 1), (2, 3)], [0, 1], [0.0, 0.0], [0.02, 0.02], 100.0,
                         lambda i, s: 100.0, lambda b: b * 1e-4)
    assert head == pytest.approx(0.02, abs=1e-15)


def test_simulated_chain_matches_gather_head() -> None:
    """Differential: interleaved over two ranks, one-layer chunks whose gathers outlast the
    two forwards between a rank's chunks, links not shared: the simulated delay of the
    iteration's compute (rank by rank the last compute end with the option against without;
    the all-gather after the step is not compute) equals :func:`gather_head_s` of the trace's
    own gather times (per stage: its layer's bytes stand for the seconds), reach times and
    forwards."""
    profile = equal_profile(8, fwd_s=FWD_S, bwd_s=BWD_S, parameter_bytes=2 << 30)
    layers = [(k, k) for k in range(8)]
    runs = {}
    for on in (False, True):
        plan = Plan(stages=_stages(layers, "distributed"), global_batch_size=32, num_microbatches=4,
                    schedule="interleaved", chunks=4, overlap_param_gather=on)
        runs[on] = simulate(plan, profile, TWO_SERVERS, SimOptions(contention=False))
    program = lower(plan, profile, TWO_SERVERS, SimOptions(contention=False))
    dev = {st.index: st.devices[0] for st in program.stages}
    ranks = [st.rank for st in program.stages]
    off, on = runs[False].events, runs[True].events
    starts = [min(e.start_s for e in off if e.kind is EventKind.FORWARD and e.stage == k
                  and e.device == dev[k] and e.microbatch == 0) for k in range(8)]
    first_b = min(e.start_s for e in on if e.kind is EventKind.BACKWARD)  # (the reduce-scatters come later)
    gather = {e.stage: e.duration_s for e in on
              if e.kind is EventKind.ALL_REDUCE and e.device == dev[e.stage] and e.start_s < first_b}
    assert sorted(gather) == list(range(8))
    assert min(gather.values()) > 2 * FWD_S  # the chain outlasts the p forwards between chunks
    head = gather_head_s(profile, layers, ranks, starts, [FWD_S] * 8, math.inf,
                         lambda i, s: gather[s], lambda seconds: seconds)

    def compute_end(events: list[TraceEvent]) -> float:
        return max(e.end_s for e in events if e.kind in (EventKind.FORWARD, EventKind.BACKWARD))

    assert compute_end(on) - compute_end(off) == pytest.approx(head, rel=1e-9)
    assert head > max(gather[0] - starts[0], gather[1] - starts[1])  # the first chunks' alone (as before)
