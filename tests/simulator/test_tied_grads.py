"""Tied word embeddings across pipeline stages (profiles/costmodels/tied_embeddings.py): the profile
field, the copy's static memory (simulator and planner estimates), and the pair all-reduce of the
copies' gradients (simulator, pipeline estimate, 3D estimate)."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.planner.estimate import CostModel
from pipesim.planner.three_d import estimate_3d
from pipesim.profiles.costmodels.memory import static_memory_bytes, static_memory_multiplier
from pipesim.profiles.costmodels.sharding import sharded_memory_multiplier
from pipesim.profiles.costmodels.tied_embeddings import (
    held_copies,
    stage_pairs,
    tied_grad_bytes,
    without_ties,
)
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.profiles.models.fileformat import profile_from_dict, profile_to_dict
from pipesim.profiles.models.loader import load_model
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.profiles.models.zoo.transformers import parse_gpt_spec
from pipesim.simulator import SimOptions, simulate
from pipesim.simulator.fast_links import Transfers
from pipesim.simulator.lowering import lower
from tests.simulator.builders import equal_profile

SPEC = "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=8192"
CLUSTER = get_cluster("dapple-2x8-v100")


def _untied(profile: ModelProfile) -> ModelProfile:
    """``profile`` with its tied fields removed (the same layers and bytes otherwise)."""
    out = without_ties(profile)
    assert out is not profile
    assert all(x.tied_to is None for x in out.layers)
    return out


def _two_stages(profile: ModelProfile, *, replicas: int = 1, t: int = 1, sharding: str = "none",
                m: int = 4) -> Plan:
    n = profile.num_layers
    stages = (StagePlan(first_layer=0, last_layer=1, replicas=replicas, tensor_parallel=t, sharding=sharding),
              StagePlan(first_layer=2, last_layer=n - 1, replicas=replicas, tensor_parallel=t,
                        sharding=sharding))
    return Plan(stages=stages, global_batch_size=2 * m * replicas, num_microbatches=m, schedule="1f1b")


def test_gpt_ties_its_head_by_default_and_untie_gives_it_the_matrix() -> None:
    tied, untied = load_model(SPEC), load_model(SPEC + ",untie=1")
    head = tied.layers[-1]
    matrix = 8192 * 256 * 4  # vocab x hidden, float32
    assert head.tied_to == "embeddings"
    assert head.tied_parameter_bytes == matrix
    assert untied.layers[-1].tied_to is None
    assert untied.layers[-1].parameter_bytes == head.parameter_bytes + matrix
    assert untied.name == SPEC + ",untie=1"
    assert parse_gpt_spec(untied.name).untie == 1
    with pytest.raises(InputError, match=r"gpt\.untie"):
        parse_gpt_spec(SPEC + ",untie=2")


def test_profile_checks_the_tied_fields() -> None:
    base = equal_profile(3)
    layers = list(base.layers)

    def with_last(**kw: object) -> ModelProfile:
        return dataclasses.replace(base, layers=(*layers[:2], dataclasses.replace(layers[2], **kw)))

    assert with_last(tied_to="layer0", tied_parameter_bytes=1 << 20).layers[2].tied_to == "layer0"
    with pytest.raises(InputError, match="must name an earlier layer"):
        with_last(tied_to="nope", tied_parameter_bytes=1)
    with pytest.raises(InputError, match="must name an earlier layer"):
        with_last(tied_to="layer2", tied_parameter_bytes=1)
    with pytest.raises(InputError, match="tied_parameter_bytes"):
        with_last(tied_to="layer0", tied_parameter_bytes=(1 << 24) + 1)
    with pytest.raises(InputError, match="tied_parameter_bytes"):
        Layer(name="x", fwd_time_s=0, bwd_time_s=0, activation_bytes=0, parameter_bytes=0, tied_to="y")


def test_file_format_keeps_the_tied_fields_and_reads_old_files() -> None:
    tied = load_model(SPEC)
    data = profile_to_dict(tied)
    assert data["layers"][-1]["tied_to"] == "embeddings"
    assert profile_from_dict(data) == tied
    old = profile_to_dict(_untied(tied))
    assert "tied_to" not in old["layers"][-1]
    assert profile_from_dict(old) == _untied(tied)
    data["layers"][-1]["tied_to"] = 5
    with pytest.raises(InputError, match="must be a string"):
        profile_from_dict(data)
    data["layers"][-1]["tied_to"] = "nope"
    with pytest.raises(InputError, match="must name an earlier layer"):
        profile_from_dict(data)


def test_untied_model_lowers_as_before() -> None:
    """Differential: a model without tied layers gets no copy and no extra collective."""
    profile = equal_profile(4)
    plan = _two_stages(profile, replicas=2)
    program = lower(plan, profile, CLUSTER, SimOptions())
    assert all(c.shared_with is None for c in program.collectives)
    for st in program.stages:
        for device in st.devices:
            expected = static_memory_bytes(profile, st.layers, plan.optimizer)
            assert program.static_memory_bytes[device] == expected


def test_last_stage_holds_the_copy_exactly() -> None:
    tied = load_model(SPEC)
    plan = _two_stages(tied, replicas=2)
    a = lower(plan, tied, CLUSTER, SimOptions()).static_memory_bytes
    b = lower(plan, _untied(tied), CLUSTER, SimOptions()).static_memory_bytes
    copy = tied.layers[-1].tied_parameter_bytes
    assert copy is not None
    extra = copy * static_memory_multiplier(tied.dtype, plan.optimizer)
    assert {d: a[d] - b[d] for d in a} == {0: 0.0, 1: 0.0, 2: extra, 3: extra}
    # the planner's memory estimate adds the same bytes
    peak_a = CostModel(tied, CLUSTER).estimate(plan).device_peak_memory_bytes
    peak_b = CostModel(_untied(tied), CLUSTER).estimate(plan).device_peak_memory_bytes
    assert peak_a[2] - peak_b[2] == pytest.approx(extra, rel=1e-12)
    assert peak_a[0] == peak_b[0]


def test_copy_is_split_by_tp_and_sharded_by_zero() -> None:
    tied = load_model(SPEC)
    plan = _two_stages(tied, replicas=2, t=2, sharding="zero1")
    a = lower(plan, tied, CLUSTER, SimOptions()).static_memory_bytes
    b = lower(plan, _untied(tied), CLUSTER, SimOptions()).static_memory_bytes
    copy = tied.layers[-1].tied_parameter_bytes
    assert copy is not None
    extra = copy / 2 * sharded_memory_multiplier(tied.dtype, plan.optimizer, "zero1", 2)
    diffs = sorted(a[d] - b[d] for d in a)
    assert diffs == pytest.approx([0.0, 0.0, extra, extra], rel=1e-12)
    # the 3D estimate's peak is the simulated one (here the last rank's, with the copy)
    for profile in (tied, _untied(tied)):
        simulated = max(d.peak_memory_bytes for d in simulate(plan, profile, CLUSTER, SimOptions()).devices)
        assert estimate_3d(plan, profile, CLUSTER).peak_memory_bytes == pytest.approx(simulated, rel=1e-12)
    with_copy = estimate_3d(plan, tied, CLUSTER).peak_memory_bytes
    assert with_copy > estimate_3d(plan, _untied(tied), CLUSTER).peak_memory_bytes


def test_one_device_holding_both_ends_holds_no_copy() -> None:
    tied = load_model(SPEC)
    n = tied.num_layers
    assert held_copies(tied, [(0, n - 1)]) == (0,)
    assert held_copies(tied, [(0, 1), (2, n - 1)]) == (0, 0)  # both stages on one device
    assert held_copies(tied, [(2, n - 1)]) == (tied.layers[-1].tied_parameter_bytes,)
    assert stage_pairs(tied, [(0, 1), (2, n - 1)], [0, 0]) == ()
    plan = Plan(stages=(StagePlan(first_layer=0, last_layer=n - 1, replicas=2),), global_batch_size=8,
                num_microbatches=2, schedule="1f1b")
    a = lower(plan, tied, CLUSTER, SimOptions())
    b = lower(plan, _untied(tied), CLUSTER, SimOptions())
    assert a.static_memory_bytes == b.static_memory_bytes
    assert a.collectives == b.collectives


@pytest.mark.parametrize("optimizer_step", [False, True])
def test_iteration_grows_by_the_exposed_pair_allreduce(optimizer_step: bool) -> None:
    tied = load_model(SPEC)
    plan = _two_stages(tied)
    opts = SimOptions(optimizer_step=optimizer_step)
    program = lower(plan, tied, CLUSTER, opts)
    (pair,) = [c for c in program.collectives if c.shared_with is not None]
    copy = tied.layers[-1].tied_parameter_bytes
    assert copy is not None
    assert pair.members == (0, 1)
    assert pair.nbytes == tied_grad_bytes(copy, 1, tied.dtype, None)
    links = Transfers(CLUSTER, free_links=False)
    alone = links.collective_s(pair.kind, pair.members, pair.nbytes, pair.algorithm)
    a = simulate(plan, tied, CLUSTER, opts)
    b = simulate(plan, _untied(tied), CLUSTER, opts)
    # the first stage finishes last, with the longer update: the pair's all-reduce is exposed whole
    assert a.iteration_time_s - b.iteration_time_s == pytest.approx(alone, rel=1e-9)
    est_a = CostModel(tied, CLUSTER, optimizer_step=optimizer_step).estimate(plan).iteration_time_s
    est_b = CostModel(_untied(tied), CLUSTER, optimizer_step=optimizer_step).estimate(plan).iteration_time_s
    assert est_a - est_b == pytest.approx(alone, rel=1e-6)
    assert est_a == pytest.approx(a.iteration_time_s, rel=0.01)


def test_3d_estimate_adds_the_pair_allreduce() -> None:
    tied = load_model(SPEC)
    plan = _two_stages(tied, replicas=2, t=2)
    est_a = estimate_3d(plan, tied, CLUSTER).iteration_time_s
    est_b = estimate_3d(plan, _untied(tied), CLUSTER).iteration_time_s
    sim_a = simulate(plan, tied, CLUSTER, SimOptions()).iteration_time_s
    assert est_a > est_b
    assert est_a == pytest.approx(sim_a, rel=0.1)
