"""Chimera (Li & Hoefler, SC 2021) on the ``dual`` placement: order, refusals, closed forms,
activation memory, the simulator (both executors), 2x parameters, the pair all-reduce and the
planner's estimate."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel
from pipesim.profiles.costmodels.memory import in_flight_microbatches
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.schedules import Op, evaluate, format_timeline, make_schedule, validate
from pipesim.schedules.chimera import chimera, chimera_unit_slots
from pipesim.simulator import SimOptions, simulate
from tests.schedules.dual_plans import dual_plan
from tests.simulator.builders import equal_profile

CLUSTER = get_cluster("dapple-2x8-v100")
FREE = SimOptions(free_links=True, optimizer_step=False)  # closed forms: no optimizer step
SIZES = [(p, c * p) for p in (2, 4, 8) for c in (1, 2, 3, 5)] + [(6, 6), (6, 18), (16, 32)]


def _plan(p: int, m: int, replicas: int = 1) -> Plan:
    return dual_plan("chimera", p, m, replicas)


def _makespan(p: int, m: int, f: float, b: float) -> float:
    """The closed form: p - 2 idle slots of min(F, B) per rank, plus (p - 2)|F - B| per unit."""
    return m * (f + b) + (p - 2) * (min(f, b) + (m // p) * abs(f - b))


@pytest.mark.parametrize(("p", "m"), SIZES)
def test_valid_and_each_microbatch_runs_its_own_chain(p: int, m: int) -> None:
    s = make_schedule("chimera", num_ranks=p, num_microbatches=m)
    validate(s)
    assert (s.placement, s.num_stages) == ("dual", 2 * p)
    for k in range(m):
        stages = sorted(a.stage for row in s.ranks for a in row if a.op is Op.F and a.microbatch == k)
        assert stages == list(range(p) if k < m // 2 else range(p, 2 * p))
    for r, row in enumerate(s.ranks):  # two stage replicas per rank: down r and up copy of p - 1 - r
        assert {a.stage for a in row} == {r, 2 * p - 1 - r}
        assert {a.op for a in row} == {Op.F, Op.B}


@pytest.mark.parametrize("p", [2, 4, 6, 8, 16])
def test_the_merged_unit_has_no_conflict_and_d_minus_2_bubbles(p: int) -> None:
    """The paper's unit slots (F = B = one slot): the two directions never share a slot on a rank
    and every rank ends by slot 3D - 2, i.e. D - 2 idle slots of 3D - 2 (1F1B: 2(D - 1))."""
    for r in range(p):
        slots = [slot for slot, _ in chimera_unit_slots(p, r)]
        assert len(set(slots)) == len(slots) == 2 * p
        assert max(slots) + 1 <= 3 * p - 2
        # units shifted by 2p slots (unit u starts inside unit u - 1) still share no slot
        shifted = [slot + 2 * p * u for u in range(3) for slot in slots]
        assert len(set(shifted)) == len(shifted)
    t = evaluate(chimera(num_ranks=p, num_microbatches=p), fwd_time_s=1, bwd_time_s=1)
    assert t.makespan == 3 * p - 2
    assert t.idle == (p - 2,) * p


def test_refuses_what_chimera_cannot_run() -> None:
    with pytest.raises(InputError, match="num_ranks=3: must be even for chimera"):
        make_schedule("chimera", num_ranks=3, num_microbatches=6)
    with pytest.raises(InputError, match="num_microbatches=6: must be a multiple of p = 4 for chimera"):
        make_schedule("chimera", num_ranks=4, num_microbatches=6)
    with pytest.raises(InputError, match="num_microbatches=2: must be a multiple of p = 4"):
        make_schedule("chimera", num_ranks=4, num_microbatches=2)
    with pytest.raises(InputError, match="chunks=1"):
        make_schedule("chimera", num_ranks=4, num_microbatches=8, chunks=1)
    with pytest.raises(InputError, match="num_ranks=0"):
        make_schedule("chimera", num_ranks=0, num_microbatches=4)


@pytest.mark.parametrize(("p", "m"), SIZES)
def test_f_equal_b_leaves_d_minus_2_idle_slots_for_any_m(p: int, m: int) -> None:
    """Unit u starts in slot 2pu, inside unit u - 1: with F = B the ranks never idle between units."""
    t = evaluate(chimera(num_ranks=p, num_microbatches=m), fwd_time_s=1, bwd_time_s=1)
    assert t.makespan == 2 * m + p - 2
    assert t.idle == (p - 2,) * p


@pytest.mark.parametrize(("p", "m"), SIZES)
def test_closed_form_and_activations_in_the_evaluator(p: int, m: int) -> None:
    s = chimera(num_ranks=p, num_microbatches=m)
    for f, b in ((1, 1), (1, 2), (2, 3), (3, 1), (2, 2)):
        t = evaluate(s, fwd_time_s=f, bwd_time_s=b)
        assert t.makespan == _makespan(p, m, f, b)
        assert t.busy == (m * (f + b),) * p
    # activations: between D/2 + 1 (end ranks) and D (middle ranks) stage-micro-batches
    stashed = [t.peak_stashed[r] + t.peak_stashed[2 * p - 1 - r] for r in range(p)]
    assert stashed == [p // 2 + 1 + min(r, p - 1 - r) for r in range(p)]
    assert min(stashed) == p // 2 + 1
    assert max(stashed) == p
    assert [in_flight_microbatches("chimera", r, p, m, chunks=2) for r in range(p)] == stashed


def test_docstring_grid_is_the_rendered_one() -> None:
    t = evaluate(chimera(num_ranks=4, num_microbatches=8), fwd_time_s=1, bwd_time_s=2)
    grid = format_timeline(t, compact=True)
    assert chimera.__doc__ is not None
    doc = "\n".join(line.strip() for line in chimera.__doc__.splitlines())
    assert "\n".join(line.rstrip() for line in grid.splitlines()) in doc


@pytest.mark.parametrize("executor", ["simpy", "fast"])
@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 4), (4, 12), (8, 16)])
def test_simulator_closed_form_and_twice_the_parameters(executor: str, p: int, m: int) -> None:
    profile = equal_profile(p, fwd_s=1.0, bwd_s=2.0, parameter_bytes=1 << 20)
    result = simulate(_plan(p, m), profile, CLUSTER, FREE, executor=executor)
    assert result.iteration_time_s == pytest.approx(_makespan(p, m, 1.0, 2.0), rel=1e-12)
    one_f = Plan(stages=tuple(StagePlan(first_layer=i, last_layer=i) for i in range(p)),
                 global_batch_size=4 * m, num_microbatches=m, schedule="1f1b")
    base = simulate(one_f, profile, CLUSTER, FREE, executor=executor)
    assert sorted(d.static_memory_bytes for d in result.devices) == sorted(
        2 * d.static_memory_bytes for d in base.devices
    )


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 32), (8, 16)])
def test_estimate_equals_the_simulation(p: int, m: int) -> None:
    profile = equal_profile(p, fwd_s=1.0, bwd_s=2.0, parameter_bytes=1 << 20)
    plan = _plan(p, m)
    simulated = simulate(plan, profile, CLUSTER, SimOptions()).iteration_time_s
    estimated = CostModel(profile, CLUSTER).estimate(plan).iteration_time_s
    # compute is exact; the pair all-reduce (1 MiB over NVLink, ~1e-4 s) starts at its first
    # rank's end in the estimate, at both ranks' end in the simulator (as for dualpipe)
    assert estimated == pytest.approx(simulated, abs=1e-4)


@pytest.mark.parametrize(("p", "m"), [(2, 14), (4, 28), (4, 60), (6, 54)])
def test_estimate_extrapolation_equals_direct_evaluation(p: int, m: int) -> None:
    """Unequal model stages and slow links: the units repeat, so the estimate's two bounded
    evaluations give any m exactly."""
    from pipesim.planner.schedule_time import order_time_s, valid_microbatches

    model_f = [3 + (s * 7) % 5 for s in range(p)]
    fwd = model_f + model_f
    bwd = [2 * f + s % 3 for s, f in enumerate(fwd)]
    c_f = [1 + s % 2 for s in range(2 * p - 1)]
    c_b = [2 - s % 2 for s in range(2 * p - 1)]
    assert valid_microbatches("chimera", p, m, 2)
    assert not valid_microbatches("chimera", p, m + 1, 2)
    assert not valid_microbatches("chimera", p + 1, m, 2)
    got = order_time_s("chimera", num_ranks=p, num_microbatches=m, chunks=2, fwd_s=fwd, bwd_s=bwd,
                       wgrad_s=[0] * (2 * p), send_fwd_s=c_f, send_bwd_s=c_b)
    direct = evaluate(chimera(num_ranks=p, num_microbatches=m), fwd_time_s=fwd, bwd_time_s=bwd,
                      fwd_comm_time_s=c_f, bwd_comm_time_s=c_b)
    assert got.makespan_s == direct.makespan


def test_make_plan_adds_the_copies() -> None:
    from pipesim.api import make_plan

    profile = equal_profile(8)
    plan = make_plan(profile, global_batch_size=32, num_microbatches=8, stages=8, schedule="chimera",
                     chunks=2)
    assert plan.num_ranks == 4
    assert plan.num_model_stages == 4
    assert [(s.first_layer, s.last_layer) for s in plan.stages] == [(0, 1), (2, 3), (4, 5), (6, 7)] * 2
    f, b = 2.0, 4.0  # two layers per stage of equal_profile's defaults (F = 1, B = 2 per layer)
    assert simulate(plan, profile, CLUSTER, FREE).iteration_time_s == pytest.approx(_makespan(4, 8, f, b))


def test_cli_plan_compare_and_simulate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``plan --schedule chimera`` plans 2p stages with copies and a count that is a multiple of
    p; ``compare`` plans it for itself beside dualpipe; ``simulate`` refuses a bad count (exit 2)."""
    from pipesim.cli import main

    common = ["--model", "bert48", "--cluster", "dapple-2x8-v100", "--gbs", "64"]
    assert main(["plan", *common, "--schedule", "chimera", "--top", "2", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert plans
    for plan in plans:
        assert plan["schedule"] == "chimera"
        p = len(plan["stages"]) // 2
        stages = plan["stages"]
        for j in range(p):  # stage p + j copies stage j's layers, on the devices of rank p - 1 - j
            copy, original = stages[p + j], stages[j]
            assert (copy["layers"], copy["replicas"]) == (original["layers"], original["replicas"])
            assert stages[p + j]["devices"] == stages[p - 1 - j]["devices"]
        assert p % 2 == 0
        assert plan["microbatches"] % p == 0
    argv = ["compare", *common, "--schedules", "chimera,dualpipe", "--json", "--out", str(tmp_path / "o")]
    assert main(argv) == 0
    rows = {row["schedule"]: row for row in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"chimera", "dualpipe"}
    assert rows["chimera"]["microbatches"] % (rows["chimera"]["stages"] // 2) == 0
    assert all(math.isfinite(row["iteration_time_s"]) for row in rows.values())
    bad = ["simulate", *common, "--schedule", "chimera", "--stages", "8", "--microbatches", "2"]
    assert main(bad) == 2
    assert "num_microbatches=2: must be a multiple of p = 4 for chimera" in capsys.readouterr().err
