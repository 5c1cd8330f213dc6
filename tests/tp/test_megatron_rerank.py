"""Issue 15's planner bullet, last part: ``--planner megatron`` ranks by the 3D estimate and
reranks its shortlist by simulation (``pipesim.planner.plan``'s ``rerank``, the CLI's default
``--rerank simulate``)."""

from __future__ import annotations

import pytest

from pipesim.planner import plan
from pipesim.planner.megatron import MEGATRON_SHORTLIST
from pipesim.profiles.inputs import resolve_inputs
from pipesim.rerank import simulated_rerank
from pipesim.simulator import SimOptions, simulate

GPT = "gpt:layers=4,hidden=1024,heads=16,seq=1024,vocab=50257"


def test_the_megatron_shortlist_is_reranked_by_simulation() -> None:
    profile, cluster = resolve_inputs(GPT, "dgx-a100-x2", dtype="fp16")
    top = 4
    plain = plan(profile, cluster, 32, planner="megatron", top=MEGATRON_SHORTLIST)
    estimates = [p.estimate.iteration_time_s for p in plain if p.estimate is not None]
    assert estimates == sorted(estimates)  # ranked by the estimate
    rerank = simulated_rerank(profile, cluster)
    reranked = plan(profile, cluster, 32, planner="megatron", top=top, rerank=rerank)
    options = SimOptions(record_trace=False)
    sims = {id(p): simulate(p, profile, cluster, options).iteration_time_s for p in plain}
    got = [simulate(p, profile, cluster, options).iteration_time_s for p in reranked]
    assert got == sorted(got)
    assert got[0] == pytest.approx(min(sims.values()), rel=1e-12)  # the shortlist's fastest first
    # a rerank that reverses the estimate's order is followed
    backwards = plan(profile, cluster, 32, planner="megatron", top=top,
                     rerank=lambda p: -p.estimate.iteration_time_s if p.estimate else 0.0)
    got_estimates = [p.estimate.iteration_time_s for p in backwards if p.estimate]
    assert got_estimates == sorted(estimates, reverse=True)[:top]
