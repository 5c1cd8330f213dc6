"""Plan fields for 3D parallelism: validation, placement of tensor-parallel groups, plan and profile files."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.errors import Infeasible, InputError, UnknownNameError
from pipesim.plan import Plan, Sharding, StagePlan
from pipesim.plan_file import plan_from_dict, plan_to_dict
from pipesim.profiles.models.fileformat import (
    dump_profile,
    load_profile_file,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)
from pipesim.profiles.models.zoo import zoo_model


def test_stage_fields_and_defaults() -> None:
    stage = StagePlan(first_layer=0, last_layer=3, replicas=2, tensor_parallel=4, sequence_parallel=True,
                      sharding="ZeRO1")
    assert stage.sharding is Sharding.ZERO1
    assert stage.group_devices == 8
    assert StagePlan(first_layer=0, last_layer=0).sharding is Sharding.NONE
    assert StagePlan(first_layer=0, last_layer=0, sharding=3).sharding is Sharding.ZERO3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tensor_parallel": 0}, "tensor_parallel"),
        ({"tensor_parallel": True}, "tensor_parallel"),
        ({"sequence_parallel": True}, "sequence_parallel"),
        ({"tensor_parallel": 2, "sequence_parallel": "yes"}, "sequence_parallel"),
        ({"replicas": 2, "tensor_parallel": 4, "devices": (0, 2)}, "devices"),
    ],
)
def test_bad_stage_fields_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InputError, match=field):
        StagePlan(first_layer=0, last_layer=1, **kwargs)  # type: ignore[arg-type]


def test_unknown_sharding_lists_the_names() -> None:
    with pytest.raises(UnknownNameError, match="zero3"):
        StagePlan(first_layer=0, last_layer=1, sharding="zero4")


def test_placement_gives_consecutive_groups() -> None:
    stages = (
        StagePlan(first_layer=0, last_layer=1, replicas=2, tensor_parallel=4),
        StagePlan(first_layer=2, last_layer=3, replicas=1, tensor_parallel=8),
    )
    plan = Plan(stages=stages, global_batch_size=8, num_microbatches=4)
    assert plan.num_devices == 16
    assert plan.placement(16) == ((0, 4), (8,))
    assert plan.tp_groups(16) == (((0, 1, 2, 3), (4, 5, 6, 7)), ((8, 9, 10, 11, 12, 13, 14, 15),))
    with pytest.raises(Infeasible):
        plan.placement(15)


def test_listed_groups_must_not_collide_across_stages() -> None:
    stages = (
        StagePlan(first_layer=0, last_layer=1, replicas=1, tensor_parallel=4, devices=(0,)),
        StagePlan(first_layer=2, last_layer=3, replicas=1, tensor_parallel=4, devices=(2,)),
    )
    with pytest.raises(InputError, match="already used"):
        Plan(stages=stages, global_batch_size=8, num_microbatches=4)


def test_virtual_stages_share_the_tensor_parallel_degree() -> None:
    stages = (
        StagePlan(first_layer=0, last_layer=0, tensor_parallel=2),
        StagePlan(first_layer=1, last_layer=1, tensor_parallel=2),
        StagePlan(first_layer=2, last_layer=2, tensor_parallel=2),
        StagePlan(first_layer=3, last_layer=3, tensor_parallel=4),
    )
    with pytest.raises(InputError, match="tensor_parallel"):
        Plan(stages=stages, global_batch_size=8, num_microbatches=2, schedule="interleaved", chunks=2)


def test_plan_file_round_trip_and_old_files() -> None:
    stages = (
        StagePlan(first_layer=0, last_layer=3, replicas=2, tensor_parallel=4, sequence_parallel=True,
                  sharding="distributed"),
        StagePlan(first_layer=4, last_layer=7, replicas=2),
    )
    plan = Plan(stages=stages, global_batch_size=8, num_microbatches=4)
    data = plan_to_dict(plan)
    assert data["stages"][0]["tensor_parallel"] == 4
    assert data["stages"][0]["sharding"] == "distributed"
    assert "tensor_parallel" not in data["stages"][1]  # defaults are not written
    assert plan_from_dict(data) == plan
    data["stages"][0]["sequence_parallel"] = "true"
    with pytest.raises(InputError, match="sequence_parallel"):
        plan_from_dict(data)


def test_profile_file_keeps_shapes() -> None:
    profile = zoo_model("gpt:layers=2,hidden=256,heads=4,seq=64,vocab=1000")
    data = profile_to_dict(profile)
    assert data["layers"][1]["shape"]["kind"] == "block"
    again = profile_from_dict(data)
    assert [layer.shape for layer in again.layers] == [layer.shape for layer in profile.layers]
    assert "shape = { kind = " in dump_profile(profile, "toml")
    data["layers"][1]["shape"]["heads"] = 3
    with pytest.raises(InputError, match="heads"):
        profile_from_dict(data)


def test_toml_profile_file_keeps_shapes(tmp_path: Path) -> None:
    profile = zoo_model("gpt:layers=2,hidden=256,heads=4,seq=64,vocab=1000")
    path = tmp_path / "gpt.toml"
    save_profile(profile, path)
    again = load_profile_file(path)
    assert [layer.shape for layer in again.layers] == [layer.shape for layer in profile.layers]
