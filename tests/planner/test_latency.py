"""Closed forms of the planner's analytic estimate: exact for equal stages and free links."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel, StageCosts
from pipesim.planner.latency import (
    backward_end_times,
    gpipe_time_s,
    looped_time_s,
    nic_sharing_end_s,
    pipeline_time_s,
)
from pipesim.profiles import get_cluster
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.schedules import evaluate, make_schedule

CLUSTER = get_cluster("dapple-2x8-v100")


class _Equal(CostModel):
    """A cost model whose stages all cost the same and whose links are free."""

    def __init__(self, fwd: float, bwd: float, wgrad: float, layers: int, allreduce: float = 0.0) -> None:
        profile = ModelProfile(
            name="equal",
            layers=tuple(
                Layer(name=f"l{i}", fwd_time_s=1e-3, bwd_time_s=2e-3, activation_bytes=0, parameter_bytes=0)
                for i in range(layers)
            ),
            profile_batch_size=1,
        )
        super().__init__(profile, CLUSTER)
        self.costs = StageCosts(
            fwd_s=fwd, bwd_s=bwd, wgrad_s=wgrad, allreduce_s=allreduce, send_fwd_s=0.0, send_bwd_s=0.0
        )

    def stage_costs(self, plan: Plan) -> list[StageCosts]:
        return [self.costs] * plan.num_stages


def _plan(schedule: str, p: int, m: int, v: int = 1) -> Plan:
    return Plan(
        stages=tuple(
            StagePlan(first_layer=s, last_layer=s, replicas=1, devices=(s % p,)) for s in range(p * v)
        ),
        global_batch_size=m,
        num_microbatches=m,
        schedule=schedule,
        chunks=v,
    )


def _time(
    schedule: str, p: int, m: int, f: Fraction, b: Fraction, w: Fraction = Fraction(0), v: int = 1
) -> object:
    model = _Equal(f, b, w, p * v)  # type: ignore[arg-type]
    return model.estimate(_plan(schedule, p, m, v)).iteration_time_s


@pytest.mark.parametrize("schedule", ["dapple", "1f1b", "gpipe"])
@pytest.mark.parametrize(("p", "m"), [(1, 1), (1, 5), (4, 1), (4, 8), (3, 2), (6, 16)])
def test_flush_schedules_equal_stages(schedule: str, p: int, m: int) -> None:
    f, b = Fraction(3), Fraction(5)
    assert _time(schedule, p, m, f, b) == (m + p - 1) * (f + b)
    assert pipeline_time_s([f] * p, [b] * p, [0] * p, m) == (m + p - 1) * (f + b)  # type: ignore[list-item]


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 16, 3), (3, 6, 4)])
def test_interleaved_equal_stages(p: int, m: int, v: int) -> None:
    # Megatron-LM (SC'21, Sec. 2.2.2): (m + (p - 1)/v)(t_f + t_b) with t_f, t_b per rank (all chunks)
    f, b = Fraction(3), Fraction(5)  # per chunk
    got = _time("interleaved", p, m, f, b, v=v)
    assert got == (m + Fraction(p - 1, v)) * v * (f + b)
    sched = make_schedule("interleaved", num_ranks=p, num_microbatches=m, chunks=v)
    assert evaluate(sched, fwd_time_s=f, bwd_time_s=b).makespan == got


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 12), (3, 5), (4, 7)])
@pytest.mark.parametrize(("f", "i", "w"), [(1, 1, 1), (2, 1, 1), (3, 3, 1), (2, 3, 2)])
def test_zb_h1_equal_stages(p: int, m: int, f: int, i: int, w: int) -> None:
    # Qi et al. (ICLR 2024, Sec. 3.1): m(T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W), T_W <= T_F
    got = _time("zb-h1", p, m, Fraction(f), Fraction(i + w), Fraction(w))
    assert got == m * (f + i + w) + (p - 1) * (f + i - w)
    sched = make_schedule("zb-h1", num_ranks=p, num_microbatches=m)
    assert evaluate(sched, fwd_time_s=f, bwd_time_s=i + w, wgrad_time_s=w).makespan == got


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 12), (3, 5), (4, 7)])
def test_zb_h2_equal_stages(p: int, m: int) -> None:
    # ibid., Sec. 3.2: with T_F = T_B = T_W no rank idles between its first and last action
    t = Fraction(2)
    got = _time("zb-h2", p, m, t, 2 * t, t)
    assert got == m * 3 * t + (p - 1) * t
    sched = make_schedule("zb-h2", num_ranks=p, num_microbatches=m)
    assert evaluate(sched, fwd_time_s=t, bwd_time_s=2 * t, wgrad_time_s=t).makespan == got


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (5, 3)])
def test_gpipe_with_links(p: int, m: int) -> None:
    # (m + p - 1)(t_f + t_b) + (p - 1)(c_f + c_b): transfer pseudo-stages cheaper than compute
    tf, tb, cf, cb = Fraction(4), Fraction(7), Fraction(1), Fraction(2)
    fwd: list[Fraction] = []
    bwd: list[Fraction] = []
    for s in range(p):
        if s:
            fwd.append(cf)
            bwd.append(cb)
        fwd.append(tf)
        bwd.append(tb)
    zero = [Fraction(0)] * len(fwd)
    want = (m + p - 1) * (tf + tb) + (p - 1) * (cf + cb)
    assert gpipe_time_s(fwd, bwd, zero, m) == want
    assert pipeline_time_s(fwd, bwd, zero, m) == want  # DAPPLE's form, pseudo-stages alone
    sched = make_schedule("gpipe", num_ranks=p, num_microbatches=m)
    assert (
        evaluate(sched, fwd_time_s=tf, bwd_time_s=tb, fwd_comm_time_s=cf, bwd_comm_time_s=cb).makespan == want
    )


def test_allreduce_overlaps_the_drain() -> None:
    # one stage: F + (M-1)(F+B) + B + AR; two: the first stage's all-reduce after its last B
    assert pipeline_time_s([1.0], [2.0], [10.0], 3) == pytest.approx(1 + 2 * 3 + 2 + 10)
    assert backward_end_times([1.0, 1.0], [2.0, 2.0], 2, "dapple") == [pytest.approx(9.0), pytest.approx(7.0)]
    # equal stages: stage 0 ends last, so its all-reduce ends the iteration
    model = _Equal(Fraction(1), Fraction(2), Fraction(0), 4, allreduce=Fraction(5))  # type: ignore[arg-type]
    assert model.estimate(_plan("dapple", 4, 8)).iteration_time_s == (8 + 3) * 3 + 5
    assert model.estimate(_plan("gpipe", 4, 8)).iteration_time_s == (8 + 3) * 3 + 5


def test_independent_of_the_microbatch_count() -> None:
    # the closed forms cost O(stages): a million micro-batches take no longer than ten
    model = _Equal(Fraction(1), Fraction(2), Fraction(1), 4)  # type: ignore[arg-type]
    for schedule in ("dapple", "gpipe", "zb-h1", "zb-h2"):
        assert model.estimate(_plan(schedule, 4, 10**6)).iteration_time_s > 10**6


def test_slow_links_close_the_1f1b_loop() -> None:
    # 1F1B keeps K_i = p - i micro-batches in flight; a round trip through slow links longer than
    # K_i stage times slows the steady phase, as the schedule evaluator shows
    p, m, f, b, c = 2, 16, Fraction(1), Fraction(2), Fraction(3)
    sched = make_schedule("1f1b", num_ranks=p, num_microbatches=m)
    exact = evaluate(sched, fwd_time_s=f, bwd_time_s=b, fwd_comm_time_s=c, bwd_comm_time_s=c).makespan
    model = _Equal(f, b, Fraction(0), p)  # type: ignore[arg-type]
    model.costs = StageCosts(fwd_s=f, bwd_s=b, wgrad_s=0, allreduce_s=0, send_fwd_s=c, send_bwd_s=c)  # type: ignore[arg-type]

    def last_free(plan: Plan) -> list[StageCosts]:
        return [model.costs] * (plan.num_stages - 1) + [
            StageCosts(fwd_s=f, bwd_s=b, wgrad_s=0, allreduce_s=0, send_fwd_s=0, send_bwd_s=0)  # type: ignore[arg-type]
        ]

    model.stage_costs = last_free  # type: ignore[method-assign]
    got = model.estimate(_plan("1f1b", p, m)).iteration_time_s
    dapple_form = (m + p - 1) * (f + b) + (p - 1) * 2 * c
    assert dapple_form < exact <= got  # DAPPLE's pseudo-stages alone miss 42%
    assert got == pytest.approx(float(exact), rel=0.04)


def test_nic_sharing_bound() -> None:
    link = frozenset({7})
    assert nic_sharing_end_s([(0.0, 1.0, link), (0.0, 1.0, link)]) == pytest.approx(2.0)
    assert nic_sharing_end_s([(0.0, 1.0, link), (0.0, 1.0, frozenset({8}))]) == pytest.approx(1.0)
    assert nic_sharing_end_s([(0.0, 1.0, link), (0.5, 1.0, link)]) == pytest.approx(2.0)
    assert nic_sharing_end_s([(0.0, 1.0, link), (5.0, 1.0, link)]) == pytest.approx(6.0)
    assert nic_sharing_end_s([]) == 0.0


def test_errors() -> None:
    with pytest.raises(InputError, match="num_microbatches"):
        pipeline_time_s([1.0], [1.0], [0.0], 0)
    with pytest.raises(InputError, match="fwd_s"):
        gpipe_time_s([1.0, 2.0], [1.0], [0.0], 1)
    with pytest.raises(InputError, match="rank_busy_s"):
        looped_time_s([], [], [], 0.0, 1)
    model = _Equal(1.0, 2.0, 0.0, 4)
    with pytest.raises(InputError, match="chunks"):
        model.estimate(_plan("gpipe", 2, 4, v=2))


@pytest.mark.parametrize("schedule", ["gpipe", "dapple", "1f1b", "interleaved", "zb-h1", "zb-h2"])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 8, 12])
def test_in_flight_counts_match_the_schedules(schedule: str, p: int, m: int) -> None:
    # the one memory model's in-flight counts are each schedule's peak stash (one chunk)
    from pipesim.profiles.costmodels.memory import in_flight_microbatches

    options = {"chunks": 1} if schedule in ("interleaved", "zb-h1") else {}
    sched = make_schedule(schedule, num_ranks=p, num_microbatches=m, **options)
    split = schedule.startswith("zb")
    timeline = evaluate(sched, fwd_time_s=1, bwd_time_s=2, wgrad_time_s=1 if split else 0)
    assert tuple(timeline.peak_stashed) == tuple(in_flight_microbatches(schedule, r, p, m) for r in range(p))
    if schedule == "dapple":
        slow = make_schedule("dapple", num_ranks=p, num_microbatches=m, warmup="slow-link")
        peaks = evaluate(slow, fwd_time_s=1, bwd_time_s=2).peak_stashed
        assert tuple(peaks) == tuple(
            in_flight_microbatches("dapple", r, p, m, warmup="slow-link") for r in range(p)
        )
