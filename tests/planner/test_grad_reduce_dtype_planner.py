"""The planners' estimates count the gradient collectives' dtype and ZeRO-1's collective as the
simulator does (Plan.grad_reduce_dtype, Plan.zero1_grad_collective)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cli import main
from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner import plan as make_plans
from pipesim.planner.estimate import CostModel
from pipesim.planner.megatron import estimate_3d
from pipesim.profiles.costmodels.collective import AllReduceOverlap
from pipesim.profiles.costmodels.tied_embeddings import without_ties
from pipesim.profiles.inputs import resolve_inputs
from pipesim.simulator import SimOptions, simulate

SPEC = "gpt:layers=8,hidden=1024,heads=16,seq=512,vocab=32000"


def _inputs(dtype: str = "bf16"):  # type: ignore[no-untyped-def]
    return resolve_inputs(SPEC, "dgx-a100-x2", dtype=dtype)


def _plan(sharding: str = "none", tp: int = 2, **kwargs: object) -> Plan:
    profile, _ = _inputs()
    half = profile.num_layers // 2
    stages = (
        StagePlan(first_layer=0, last_layer=half - 1, replicas=4, tensor_parallel=tp, sharding=sharding),
        StagePlan(first_layer=half, last_layer=profile.num_layers - 1, replicas=4, tensor_parallel=tp,
                  sharding=sharding),
    )
    return Plan(stages=stages, global_batch_size=32, num_microbatches=4, schedule="1f1b", **kwargs)  # type: ignore[arg-type]


def test_cost_model_allreduce_moves_fp32_gradients_of_bf16() -> None:
    profile, cluster = _inputs()
    profile = without_ties(profile)  # the stages' own (the tied pair's: tests/simulator/test_tied_grads.py)
    plan = _plan(tp=1)
    default = CostModel(profile, cluster).stage_costs(plan)
    halved = CostModel(profile, cluster).stage_costs(replace(plan, grad_reduce_dtype="bf16"))
    model = CostModel(profile, cluster)
    for s, (d, h) in enumerate(zip(default, halved, strict=True)):
        devices = plan.placement(cluster.num_devices)[s]
        params = model.parameter_bytes(plan.stages[s].first_layer, plan.stages[s].last_layer)
        assert d.allreduce_s == model.allreduce_s(devices, 2.0 * params)
        assert h.allreduce_s == model.allreduce_s(devices, params)
    assert CostModel(profile, cluster).grad_bytes == 2.0
    assert CostModel(profile, cluster, grad_reduce_dtype="bf16").grad_bytes == 1.0


def test_cost_model_memory_follows_the_grad_dtype() -> None:
    profile, cluster = _inputs()
    fp32 = CostModel(profile, cluster).static_bytes(0, 3)
    bf16 = CostModel(profile, cluster, grad_reduce_dtype="bf16").static_bytes(0, 3)
    assert fp32 / bf16 == pytest.approx(18 / 16)


@pytest.mark.parametrize("sharding", ["none", "zero1", "distributed", "zero2"])
def test_estimate_3d_counts_the_grad_dtype(sharding: str) -> None:
    profile, cluster = _inputs()
    plan = _plan(sharding)
    fp32 = estimate_3d(plan, profile, cluster)
    bf16 = estimate_3d(replace(plan, grad_reduce_dtype="bf16"), profile, cluster)
    assert fp32.iteration_time_s > bf16.iteration_time_s
    assert fp32.peak_memory_bytes > bf16.peak_memory_bytes


def test_estimate_3d_zero1_all_reduce() -> None:
    profile, cluster = _inputs()
    plan = _plan("zero1")
    scatter = estimate_3d(plan, profile, cluster)
    reduce = estimate_3d(replace(plan, zero1_grad_collective="all-reduce"), profile, cluster)
    assert reduce.iteration_time_s > scatter.iteration_time_s
    assert reduce.peak_memory_bytes == scatter.peak_memory_bytes
    # the distributed optimizer keeps its reduce-scatter
    dist = _plan("distributed")
    assert estimate_3d(replace(dist, zero1_grad_collective="all-reduce"), profile, cluster) == estimate_3d(
        dist, profile, cluster
    )


def test_estimate_3d_and_simulation_move_together() -> None:
    """The all-reduce's extra time over the reduce-scatter is the same order in both (they model
    the collectives alike: ring halves over the same routes)."""
    profile, cluster = _inputs()
    plan = _plan("zero1")
    options = SimOptions(allreduce_overlap=AllReduceOverlap.END)
    reduce = replace(plan, zero1_grad_collective="all-reduce")
    est = (estimate_3d(reduce, profile, cluster).iteration_time_s
           - estimate_3d(plan, profile, cluster).iteration_time_s)
    sim = (simulate(reduce, profile, cluster, options).iteration_time_s
           - simulate(plan, profile, cluster, options).iteration_time_s)
    assert est > 0
    assert sim == pytest.approx(est, rel=0.25)


def test_planners_carry_the_setting() -> None:
    profile, cluster = _inputs()
    for planner in ("dapple", "megatron"):
        plans = make_plans(profile, cluster, 32, planner=planner, top=2, grad_reduce_dtype="bf16")
        assert all(p.grad_reduce_dtype == "bfloat16" for p in plans)
    with pytest.raises(InputError, match="grad_reduce_dtype"):
        make_plans(profile, cluster, 32, grad_reduce_dtype="fp64")
    with pytest.raises(InputError, match="zero1_grad_collective"):
        make_plans(profile, cluster, 32, zero1_grad_collective="all-gather")


def test_plan_cli_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", SPEC, "--cluster", "dgx-a100-x2", "--gbs", "32", "--rerank", "none"]
    assert main([*argv, "--grad-reduce-dtype", "fp64"]) == 2
    assert "grad_reduce_dtype" in capsys.readouterr().err
    assert main([*argv, "--grad-reduce-dtype", "bf16", "--json"]) == 0
    assert '"grad_reduce_dtype": "bfloat16"' in capsys.readouterr().out
