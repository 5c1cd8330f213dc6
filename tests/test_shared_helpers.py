"""The shared helpers every layer uses: value checks, re-splitting micro-batches, the input path."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import InputError, check_count, check_fraction, check_nonneg, check_positive
from pipesim.plan import block_stage_ranges, resplit, split_samples
from pipesim.profiles.inputs import resolve_inputs


@pytest.mark.parametrize("bad", [0, -1, math.nan, "3", True, None, math.inf])
def test_check_positive_rejects(bad: object) -> None:
    with pytest.raises(InputError, match=r"^x="):
        check_positive("x", bad)


def test_check_positive_infinity_when_allowed() -> None:
    assert check_positive("x", math.inf, allow_inf=True) == math.inf
    assert check_positive("x", 2) == 2.0


@pytest.mark.parametrize("bad", [-1e-9, math.nan, math.inf])
def test_check_nonneg_rejects(bad: float) -> None:
    with pytest.raises(InputError, match="x="):
        check_nonneg("x", bad)
    assert check_nonneg("x", 0) == 0.0


@pytest.mark.parametrize(("bad", "rule"), [(0, r"in \(0, 1\]"), (1.5, r"in \(0, 1\]"), (math.nan, "NaN")])
def test_check_fraction_rejects(bad: float, rule: str) -> None:
    with pytest.raises(InputError, match=rule):
        check_fraction("eff", bad)
    assert check_fraction("eff", 1) == 1.0


def test_check_count_bounds() -> None:
    assert check_count("n", 3, maximum=3) == 3
    for bad, rule in ((0, ">= 1"), (4, "<= 3"), (2.0, "integer"), (True, "integer")):
        with pytest.raises(InputError, match=rule):
            check_count("n", bad, maximum=3)


def test_resplit_exact_small_case() -> None:
    assert resplit(split_samples(10, 3), split_samples(10, 4)) == (
        (0, 0, 3),
        (0, 1, 1),
        (1, 1, 2),
        (1, 2, 1),
        (2, 2, 1),
        (2, 3, 2),
    )


@given(st.integers(1, 64), st.integers(1, 8), st.integers(1, 8))
def test_resplit_conserves_samples(samples: int, ra: int, rb: int) -> None:
    if samples < max(ra, rb):
        return
    src, dst = split_samples(samples, ra), split_samples(samples, rb)
    pieces = resplit(src, dst)
    assert len(pieces) <= ra + rb - 1
    for i, (a, b) in enumerate(src):
        assert sum(n for s, _, n in pieces if s == i) == b - a
    for k, (c, d) in enumerate(dst):
        assert sum(n for _, t, n in pieces if t == k) == d - c


def test_resplit_rejects_mismatched_ranges() -> None:
    with pytest.raises(InputError, match="same samples"):
        resplit(split_samples(10, 2), split_samples(12, 2))


def test_resolve_inputs_retargets_to_the_cluster_device() -> None:
    profile, cluster = resolve_inputs("bert48", "dapple-2x8-v100", overrides={"device": "A100-80GB"})
    assert cluster.device.name == "A100-80GB"
    assert profile.reference_device == "A100-80GB"
    again, _ = resolve_inputs(profile, cluster)
    assert again is profile


def test_resolve_inputs_rejects_unknown_override() -> None:
    with pytest.raises(InputError, match="foo"):
        resolve_inputs("bert48", "dapple-2x8-v100", overrides={"foo": "bar"})


def test_resolve_inputs_is_idempotent_for_a_changed_device(caplog: pytest.LogCaptureFixture) -> None:
    """A device with a changed field is no catalog device ("V100-SXM2-16GB*"): the profile is
    re-targeted to it once, and resolving the result again changes nothing and warns nothing."""
    profile, cluster = resolve_inputs("bert48", "dgx1-v100", overrides={"device_compute_efficiency": 0.5})
    assert cluster.device.name.endswith("*")
    assert profile.reference_device == cluster.device.name
    base = resolve_inputs("bert48", "dgx1-v100")[0]
    # 0.4 -> 0.5: the GEMMs run 1.25x faster, the memory-bound kernels as before
    assert base.layers[5].fwd_time_s / 1.25 < profile.layers[5].fwd_time_s < base.layers[5].fwd_time_s / 1.1
    caplog.clear()
    again, same = resolve_inputs(profile, cluster)
    assert again is profile
    assert same is cluster
    assert not caplog.records


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"model": "bert48", "cluster": "dgx1-v100", "overrides": ["nic=100GbE"]}, "overrides=.*mapping"),
        ({"model": 3, "cluster": "dgx1-v100"}, "model=int: must be a ModelProfile"),
        ({"model": "bert48", "cluster": 3}, "cluster=int: must be a Cluster"),
        ({"model": "bert48", "cluster": "dgx1-v100", "overrides": {"servers": 0}}, r"^servers=0: must be"),
        (
            {"model": "bert48", "cluster": "dgx1-v100", "overrides": {"foo": 1}},
            r"^overrides foo=1: unknown key",
        ),
    ],
)
def test_resolve_inputs_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(InputError, match=match):
        resolve_inputs(**kwargs)  # type: ignore[arg-type]


def test_resolve_inputs_pbs_only_for_paths() -> None:
    profile, _ = resolve_inputs("bert48", "dgx1-v100")
    with pytest.raises(InputError, match="pbs=4"):
        resolve_inputs(profile, "dgx1-v100", pbs=4)


def test_every_entry_point_refuses_a_model_without_compute() -> None:
    from pipesim.planner import plan
    from tests.simulator.builders import equal_profile

    idle = equal_profile(4, fwd_s=0.0, bwd_s=0.0)
    with pytest.raises(InputError, match="has no compute time"):
        resolve_inputs(idle, "dapple-2x8-v100")
    with pytest.raises(InputError, match="has no compute time"):
        plan(idle, "dapple-2x8-v100", 32)


def test_block_stage_ranges_put_embedding_first_and_head_last() -> None:
    # 1 embedding + 6 blocks + 1 head = 8 layers over stages of 2, 3 and 1 blocks
    assert block_stage_ranges([2, 3, 1], 8) == [(0, 2), (3, 5), (6, 7)]
    # blocks no stage names go with the last stage (as Megatron-LM's remainder would not exist)
    assert block_stage_ranges([2, 2], 8) == [(0, 2), (3, 7)]
    # no layer before the blocks; one stage takes everything
    assert block_stage_ranges([3], 5, first_block=0) == [(0, 4)]


@pytest.mark.parametrize(("blocks", "layers", "first", "match"), [
    ([], 8, 1, "blocks"), ([2, 0], 8, 1, "blocks"), ([4, 4], 8, 1, "blocks"), ([1], 8, -1, "first_block"),
])
def test_block_stage_ranges_reject(blocks: list[int], layers: int, first: int, match: str) -> None:
    with pytest.raises(InputError, match=match):
        block_stage_ranges(blocks, layers, first_block=first)
