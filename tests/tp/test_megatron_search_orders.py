"""The 3D estimate of the 1F1B family (1f1b, dapple, gpipe, interleaved) timed by its order over
the chunks' per-op times (``schedule_time.order_time_s``), as the zero-bubble schedules are: with
the embedding on the first chunk and the LM head on the last the stages are unequal, and the
closed form ``(m + (p - 1)/v)(t_f + t_b)`` of the slowest rank was 3-23% above the simulation on
these plans."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipesim.plan import Plan, StagePlan
from pipesim.planner import three_d
from pipesim.planner.megatron import estimate_3d
from pipesim.planner.schedule_time import order_time_s
from pipesim.planner.three_d import ThreeDCosts, chunk_ranges
from pipesim.profiles.costmodels.memory import Recompute
from pipesim.profiles.costmodels.tied_embeddings import without_ties
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate

CLUSTER = "dgx-a100-x2"
SMALL = "gpt:layers=8,hidden=1024,heads=16,seq=1024,vocab=50257"  # the head is 1.6 blocks' forward
TOLERANCE = 0.015
"""Estimate vs simulation of the plans below (measured: -0.9% to +1.0%; the closed form of the
slowest rank: +0.9% to +23.2%)."""


def _plan(profile_spec: str, schedule: str, p: int, v: int, t: int, d: int, sharding: str, m: int,
          recompute: str = "none", sp: bool = False) -> tuple[Plan, object, object]:
    profile, cluster = resolve_inputs(profile_spec, CLUSTER, dtype="fp16")
    model = ThreeDCosts(profile, cluster, Recompute.NONE)
    stages = tuple(StagePlan(first_layer=a, last_layer=b, tensor_parallel=t, replicas=d, sharding=sharding,
                             sequence_parallel=sp)
                   for a, b in chunk_ranges(model, p, v))
    plan = Plan(stages=stages, global_batch_size=2 * m * d, num_microbatches=m, schedule=schedule, chunks=v,
                recompute=recompute)
    return plan, profile, cluster


@pytest.mark.parametrize(
    ("schedule", "p", "v", "t", "d", "sharding", "m", "recompute"),
    [
        ("1f1b", 4, 1, 2, 2, "none", 8, "none"),
        ("1f1b", 8, 1, 2, 1, "zero1", 16, "none"),
        ("gpipe", 4, 1, 2, 2, "none", 8, "none"),
        ("dapple", 4, 1, 1, 4, "none", 16, "none"),
        ("interleaved", 4, 2, 2, 2, "none", 8, "none"),
        ("interleaved", 2, 4, 2, 4, "zero1", 8, "none"),
        ("1f1b", 4, 1, 2, 2, "zero2", 8, "none"),
        ("1f1b", 4, 1, 2, 2, "zero3", 8, "none"),
        ("1f1b", 4, 1, 2, 2, "none", 8, "full"),
    ],
)
def test_the_1f1b_family_follows_the_simulation_with_unequal_stages(
    schedule: str, p: int, v: int, t: int, d: int, sharding: str, m: int, recompute: str
) -> None:
    plan, profile, cluster = _plan(SMALL, schedule, p, v, t, d, sharding, m, recompute)
    est = estimate_3d(plan, profile, cluster)  # type: ignore[arg-type]
    sim = simulate(plan, profile, cluster, SimOptions(record_trace=False))  # type: ignore[arg-type]
    assert est.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=TOLERANCE)


def test_the_stages_are_unequal_and_the_old_closed_form_overshoots() -> None:
    """What the test above guards: the last chunk (with the head) is slower than the others, and
    charging every rank its time (the closed form of equal stages) is well above the simulation."""
    plan, profile, cluster = _plan(SMALL, "1f1b", 4, 1, 2, 2, "none", 8)
    profile = without_ties(profile)  # type: ignore[arg-type]  # the pipeline's ops alone, no drain tail
    model = ThreeDCosts(profile, cluster, Recompute.NONE)  # type: ignore[arg-type]
    ring = model.auto_ring(2, 1, 2, 0)
    times = [model.times(a, b, 2, 2, False, False, 1, ring, model.auto_cp_hop(2, 1, 2, 0))
             for a, b in chunk_ranges(model, 4, 1)]
    per_op = [x.fwd_tp_s + x.fwd_comm_s + x.bwd_tp_s + x.bwd_comm_s for x in times]
    assert per_op[-1] > 1.5 * per_op[1]
    sim = simulate(plan, profile, cluster, SimOptions(record_trace=False))  # type: ignore[arg-type]
    assert (8 + 3) * max(per_op) > 1.05 * sim.iteration_time_s
    assert estimate_3d(plan, profile, cluster).iteration_time_s < 1.01 * sim.iteration_time_s  # type: ignore[arg-type]


@pytest.mark.parametrize(("schedule", "v"),
                         [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 3)])
def test_equal_stages_on_free_links_give_the_closed_forms(schedule: str, v: int) -> None:
    """The orders the estimate evaluates, exact (Fractions): ``(m + p - 1)(F + B)`` for 1F1B and
    GPipe, ``(m + (p - 1)/v)(F + B)`` for interleaved (per chunk ``F/v``, ``B/v``)."""
    p, m = 4, 8
    f, b = Fraction(3, v), Fraction(5, v)
    ends = order_time_s(schedule, num_ranks=p, num_microbatches=m, chunks=v, fwd_s=[f] * (p * v),
                        bwd_s=[b] * (p * v), wgrad_s=[0] * (p * v), send_fwd_s=[0] * (p * v - 1),
                        send_bwd_s=[0] * (p * v - 1))
    assert ends.makespan_s == (m + Fraction(p - 1, v)) * 8


def test_one_rank_keeps_the_closed_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """One pipeline rank: ``m (t_f + t_b)`` plus the gradient collective and the update, no order
    evaluated."""
    plan, profile, cluster = _plan(SMALL, "1f1b", 1, 1, 8, 2, "none", 4)

    def refused(*args: object, **kwargs: object) -> object:
        raise AssertionError("the order was evaluated")

    monkeypatch.setattr(three_d, "order_time_s", refused)
    est = estimate_3d(plan, profile, cluster)  # type: ignore[arg-type]
    sim = simulate(plan, profile, cluster, SimOptions(record_trace=False))  # type: ignore[arg-type]
    assert est.iteration_time_s == pytest.approx(sim.iteration_time_s, rel=TOLERANCE)
