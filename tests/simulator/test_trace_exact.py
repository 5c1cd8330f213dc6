"""The full trace of a run, to the last bit: events, link busy stretches, memory curves, metrics.

The trace is kept in columns while the simulator runs and turned into :class:`TraceEvent` objects
only when read (``simulator/trace_log.py``). These tests pin the whole result of small GPT plans
whose flows share links (both all-reduce algorithms, every all-reduce overlap, a jittered
zero-bubble run, an interleaved run, the fast path) to a digest of what the eager recorder of
main at 1786d68 produced, and check the materialized events against an eager reference built
from the same run.

When a change to the *physics* (not to the recording) is meant to change these runs, print the
new digests with ``python -m tests.simulator.test_trace_exact`` and update ``EXPECTED`` in the
same commit, saying why.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from pipesim.api import make_plan
from pipesim.profiles.hardware.cluster import get_cluster, with_overrides
from pipesim.profiles.models.zoo import zoo_model
from pipesim.simulator import SimOptions, SimulationResult, simulate

_GPT = "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=51200"

CASES: dict[str, dict[str, Any]] = {
    **{
        f"{alg}-{overlap}": {"allreduce": alg, "options": {"allreduce_overlap": overlap}}
        for alg in ("hierarchical", "ring")
        for overlap in ("after_backward", "end", "bucketed")
    },
    "zb-h1-jitter": {
        "allreduce": "hierarchical",
        "schedule": "zb-h1",
        "options": {"jitter": 0.1, "seed": 7},
    },
    "interleaved": {"allreduce": "ring", "schedule": "interleaved", "chunks": 2, "options": {}},
    "fast-path": {"allreduce": "ring", "options": {"free_links": True}},
}
"""Small GPT plans on 8 servers x 8 V100: 4 stages x 16 replicas, 8 micro-batches, 1F1B unless
said; stage replicas span servers, so all-reduce and pipeline flows share the NICs."""

EXPECTED = {
    "hierarchical-after_backward": "6e3933f983343ab6",
    "hierarchical-end": "c40aca77940ed8d7",
    "hierarchical-bucketed": "6b5b2a0b0957cdca",
    "ring-after_backward": "494029d0cd3bdf47",
    "ring-end": "dbc627a844bb2f98",
    "ring-bucketed": "1d123995a8384906",
    "zb-h1-jitter": "c8db29ab6ba67657",
    "interleaved": "632c02fd5cd860c5",
    "fast-path": "99414518fe9fb4b4",
}
"""Digests (:func:`digest`) of each case's result. First pinned on main at 1786d68 (eager trace
recorder); re-pinned when the physics changed on purpose: point-to-point sends FIFO per device pair
(issue 14)."""


def run_case(name: str) -> SimulationResult:
    """Simulate one case of :data:`CASES`, with its trace."""
    case = CASES[name]
    profile = zoo_model(_GPT)
    cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 8})
    chunks = case.get("chunks", 1)
    plan = make_plan(
        profile,
        global_batch_size=16 * 8,
        num_microbatches=8,
        stages=4 * chunks,
        replicas=[16] * 4,
        schedule=case.get("schedule", "1f1b"),
        chunks=chunks,
        allreduce=case["allreduce"],
    )
    options = SimOptions(bucket_bytes=64 * 1024**2, **case["options"])
    return simulate(plan, profile, cluster, options)


def _field(x: object) -> str:
    """A field as text: floats (and times that may be the integer 0) in hex, to the last bit."""
    if x is None:
        return "N"
    if isinstance(x, float):
        return x.hex()
    return repr(x)


def digest(result: SimulationResult) -> str:
    """A hash of everything a result holds: scalars, device metrics, every event in order (every
    field), every memory curve."""
    h = hashlib.sha256()

    def put(*xs: object) -> None:
        h.update(("|".join(_field(x) for x in xs) + "\n").encode())

    r = result
    put(
        float(r.iteration_time_s),
        r.global_batch_size,
        r.schedule,
        r.num_stages,
        r.num_microbatches,
        float(r.exposed_allreduce_time_s),
        r.num_events,
    )
    put(*r.stage_peak_memory_bytes)
    put(*r.link_names)
    for d in r.devices:
        put(
            d.device,
            d.stages,
            d.busy_time_s,
            d.comm_wait_time_s,
            d.bubble_time_s,
            d.allreduce_time_s,
            d.static_memory_bytes,
            d.peak_memory_bytes,
            d.memory_capacity_bytes,
        )
    put(len(r.events))
    for e in r.events:
        put(
            e.resource,
            e.kind.value,
            float(e.start_s),
            float(e.end_s),
            e.device,
            e.stage,
            e.microbatch,
            float(e.nbytes),
            e.peer,
        )
    for device in sorted(r.memory):
        curve = r.memory[device]
        put(device, *(float(t) for t in curve.times_s))
        put(*curve.bytes)
    return h.hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(CASES))
def test_trace_is_main_s_to_the_last_bit(name: str) -> None:
    assert digest(run_case(name)) == EXPECTED[name]


if __name__ == "__main__":
    for case in CASES:
        print(f'    "{case}": "{digest(run_case(case))}",')
