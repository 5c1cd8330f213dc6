"""ModelProfile, Layer, BatchPoint: validation, batch scaling and interpolation, cut points."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.profiles.models.profile import BatchPoint, Cut, Layer, ModelProfile


def _layer(name: str, act: int = 100, *, fwd: float = 1.0, bwd: float = 2.0, params: int = 0) -> Layer:
    return Layer(name=name, fwd_time_s=fwd, bwd_time_s=bwd, activation_bytes=act, parameter_bytes=params)


def _profile(acts: list[int], edges: tuple[tuple[int, int], ...] | None = None, **kw: object) -> ModelProfile:
    layers = tuple(_layer(f"l{i}", a) for i, a in enumerate(acts))
    return ModelProfile(name="m", layers=layers, profile_batch_size=kw.pop("pbs", 32), edges=edges, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Layer
def test_layer_defaults() -> None:
    layer = _layer("a", 10, params=8)
    assert layer.stashed_bytes == 10
    assert layer.weight_grad_fraction == 0.5
    assert _layer("b", 10).weight_grad_fraction == 0.0
    saved = Layer(
        name="c",
        fwd_time_s=0,
        bwd_time_s=0,
        activation_bytes=10,
        parameter_bytes=0,
        saved_activation_bytes=30,
        wgrad_fraction=0.25,
    )
    assert saved.stashed_bytes == 30
    assert saved.weight_grad_fraction == 0.25


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, r"name='': must be a non-empty string"),
        ({"fwd_time_s": -1.0}, r"a\.fwd_time_s=-1\.0: must be a finite number >= 0"),
        ({"bwd_time_s": math.nan}, r"a\.bwd_time_s=nan: must be a finite"),
        ({"fwd_time_s": math.inf}, r"a\.fwd_time_s=inf"),
        ({"fwd_time_s": True}, r"a\.fwd_time_s=True"),
        ({"activation_bytes": -1}, r"a\.activation_bytes=-1: must be an integer >= 0"),
        ({"activation_bytes": 1.5}, r"a\.activation_bytes=1\.5: must be an integer"),
        ({"parameter_bytes": True}, r"a\.parameter_bytes=True"),
        ({"saved_activation_bytes": -5}, r"a\.saved_activation_bytes=-5"),
        ({"fwd_flop": -1.0}, r"a\.fwd_flop=-1\.0"),
        ({"bwd_memory_bytes": math.inf}, r"a\.bwd_memory_bytes=inf"),
        ({"wgrad_fraction": 1.5}, r"a\.wgrad_fraction=1\.5: must be <= 1"),
        ({"wgrad_fraction": -0.1}, r"a\.wgrad_fraction=-0\.1"),
    ],
)
def test_layer_rejects(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {
        "name": "a",
        "fwd_time_s": 1.0,
        "bwd_time_s": 1.0,
        "activation_bytes": 1,
        "parameter_bytes": 1,
    }
    with pytest.raises(InputError, match=match):
        Layer(**{**base, **kwargs})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# BatchPoint and ModelProfile validation
def test_batch_point_rejects() -> None:
    with pytest.raises(InputError, match=r"batch_size=0: must be an integer >= 1"):
        BatchPoint(batch_size=0, fwd_time_s=(1.0,), bwd_time_s=(1.0,), activation_bytes=(1,))
    with pytest.raises(InputError, match=r"bwd_time_s=.2 entries.: must have one entry per layer \(1\)"):
        BatchPoint(batch_size=4, fwd_time_s=(1.0,), bwd_time_s=(1.0, 2.0), activation_bytes=(1,))
    with pytest.raises(InputError, match=r"batch_points\[batch_size=4\]\.activation_bytes=-1"):
        BatchPoint(batch_size=4, fwd_time_s=(1.0,), bwd_time_s=(1.0,), activation_bytes=(-1,))
    with pytest.raises(InputError, match=r"saved_activation_bytes"):
        BatchPoint(
            batch_size=4,
            fwd_time_s=(1.0,),
            bwd_time_s=(1.0,),
            activation_bytes=(1,),
            saved_activation_bytes=(1, 2),
        )


def _point(bs: int, n: int = 2, scale: float = 1.0) -> BatchPoint:
    return BatchPoint(
        batch_size=bs, fwd_time_s=(scale,) * n, bwd_time_s=(scale,) * n, activation_bytes=(int(scale),) * n
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": ""}, r"name='': must be a non-empty string"),
        ({"layers": ()}, r"a profile needs at least one layer"),
        ({"profile_batch_size": 0}, r"profile_batch_size=0: must be an integer >= 1"),
        ({"profile_batch_size": 2.0}, r"profile_batch_size=2\.0"),
        ({"dtype": "int8"}, r"dtype='int8': must be one of float32, float16, bfloat16"),
        ({"seq_len": 0}, r"seq_len=0"),
        ({"layers": (_layer("x"), _layer("x"))}, r"layers\.name='x': layer names must be unique"),
        ({"edges": ((0, 2),)}, r"edges=\(0, 2\): both ends must be layer indices in 0\.\.1"),
        ({"edges": ((-1, 1),)}, r"edges=\(-1, 1\)"),
        ({"edges": ((1, 0),)}, r"must go forward in the layer order"),
        ({"edges": ((1, 1),)}, r"must go forward in the layer order"),
        ({"edges": ((0, 1.0),)}, r"pair of integer layer indices"),
        ({"edges": ((0, 1, 1),)}, r"pair of integer layer indices"),
        ({"batch_points": (_point(64), _point(16))}, r"batch sizes must be distinct and ascending"),
        ({"batch_points": (_point(16), _point(16))}, r"batch sizes must be distinct and ascending"),
        ({"batch_points": (_point(32),)}, r"batch_points=32: must not repeat the profile batch size"),
        ({"batch_points": (_point(16, n=3),)}, r"must have one entry per layer \(2\)"),
        ({"stage_ids": (0,)}, r"stage_ids='1 entries': must have one entry per layer \(2\)"),
        ({"stage_ids": (0, -1)}, r"stage_ids\[1\]=-1: must be an integer >= 0"),
        ({"stage_ids": (0, True)}, r"stage_ids\[1\]=True"),
    ],
)
def test_profile_rejects(kwargs: dict[str, object], match: str) -> None:
    base: dict[str, object] = {"name": "m", "layers": (_layer("a"), _layer("b")), "profile_batch_size": 32}
    with pytest.raises(InputError, match=match):
        ModelProfile(**{**base, **kwargs})  # type: ignore[arg-type]


def test_profile_totals_and_stage_ids() -> None:
    layers = (_layer("a", params=400), _layer("b", params=800))
    p = ModelProfile(name="m", layers=layers, profile_batch_size=8, stage_ids=(0, 1))
    assert p.num_layers == 2
    assert p.parameter_bytes == 1200
    assert p.parameter_count == 300
    assert ModelProfile(name="m", layers=layers, profile_batch_size=8, dtype="float16").parameter_count == 600
    assert p.stage_ids == (0, 1)
    assert p.is_chain


# ---------------------------------------------------------------------------------------------
# Batch scaling
def test_linear_scaling_without_batch_points() -> None:
    layers = (
        Layer(
            name="a",
            fwd_time_s=0.5,
            bwd_time_s=1.0,
            activation_bytes=100,
            parameter_bytes=0,
            saved_activation_bytes=300,
        ),
        Layer(name="b", fwd_time_s=0.25, bwd_time_s=0.75, activation_bytes=40, parameter_bytes=0),
    )
    p = ModelProfile(name="m", layers=layers, profile_batch_size=32)
    assert p.fwd_times_s(32) == [0.5, 0.25]
    assert p.fwd_times_s(64) == [1.0, 0.5]
    assert p.bwd_times_s(16) == [0.5, 0.375]
    assert p.activation_bytes(8) == [25.0, 10.0]
    assert p.stashed_bytes(64) == [600.0, 80.0]
    assert p.fwd_times_s(1) == [0.5 / 32, 0.25 / 32]


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf])
def test_scaling_rejects_bad_batch(bad: float) -> None:
    p = _profile([1, 2])
    for method in (p.fwd_times_s, p.bwd_times_s, p.activation_bytes, p.stashed_bytes):
        with pytest.raises(InputError, match=r"batch_size=.*: must be a finite number > 0"):
            method(bad)


def _interp_profile() -> ModelProfile:
    # One layer measured at 16 (fwd 2), 32 (profile, fwd 3) and 64 (fwd 7).
    layer = Layer(
        name="a",
        fwd_time_s=3.0,
        bwd_time_s=6.0,
        activation_bytes=320,
        parameter_bytes=0,
        saved_activation_bytes=640,
    )
    points = (
        BatchPoint(
            batch_size=16,
            fwd_time_s=(2.0,),
            bwd_time_s=(4.0,),
            activation_bytes=(160,),
            saved_activation_bytes=(400,),
        ),
        BatchPoint(batch_size=64, fwd_time_s=(7.0,), bwd_time_s=(10.0,), activation_bytes=(640,)),
    )
    return ModelProfile(name="m", layers=(layer,), profile_batch_size=32, batch_points=points)


def test_piecewise_linear_interpolation() -> None:
    p = _interp_profile()
    # exact at measured sizes
    assert p.fwd_times_s(16) == [2.0]
    assert p.fwd_times_s(32) == [3.0]
    assert p.fwd_times_s(64) == [7.0]
    # between measurements
    assert p.fwd_times_s(24) == [2.5]
    assert p.fwd_times_s(48) == [5.0]
    assert p.bwd_times_s(48) == [8.0]
    # below the smallest: linear towards zero from the smallest measurement
    assert p.fwd_times_s(8) == [1.0]
    assert p.activation_bytes(4) == [40.0]
    # above the largest: along the last segment (slope 4/32 per sample)
    assert p.fwd_times_s(96) == [11.0]
    # saved bytes: measured at 16, linear from the profile at 64 (640 * 2)
    assert p.stashed_bytes(16) == [400.0]
    assert p.stashed_bytes(64) == [1280.0]
    assert p.stashed_bytes(48) == [960.0]


def test_extrapolation_is_clamped_at_zero() -> None:
    layer = _layer("a", fwd=10.0)
    points = (BatchPoint(batch_size=64, fwd_time_s=(1.0,), bwd_time_s=(2.0,), activation_bytes=(100,)),)
    p = ModelProfile(name="m", layers=(layer,), profile_batch_size=32, batch_points=points)
    assert p.fwd_times_s(48) == [5.5]
    assert p.fwd_times_s(1000) == [0.0]


# ---------------------------------------------------------------------------------------------
# Cuts
def test_chain_cuts() -> None:
    p = _profile([10, 20, 30, 40])
    assert p.cuts() == (Cut(0, 10), Cut(1, 20), Cut(2, 30))
    assert _profile([5]).cuts() == ()
    # the explicit chain gives the same cuts as edges=None
    assert _profile([10, 20, 30, 40], ((0, 1), (1, 2), (2, 3))).cuts() == p.cuts()


def test_diamond_counts_each_tensor_once() -> None:
    #   0 -> 1 -> 3,  0 -> 2 -> 3
    p = _profile([1, 10, 100, 1000], ((0, 1), (0, 2), (1, 3), (2, 3)))
    assert [c.crossing_bytes for c in p.cuts()] == [1, 1 + 10, 10 + 100]
    assert not p.is_chain


def test_skip_connection() -> None:
    # residual: 0 -> 1 -> 2 -> 3 and 0 -> 3
    p = _profile([1, 10, 100, 1000], ((0, 1), (1, 2), (2, 3), (0, 3)))
    assert [c.crossing_bytes for c in p.cuts()] == [1, 1 + 10, 1 + 100]


def test_node_consumed_by_many_later_nodes() -> None:
    # node 1 (say an attention mask) feeds every later node; node 0 feeds 2 only.
    edges = ((0, 2), (1, 2), (1, 3), (1, 4), (2, 3), (3, 4))
    p = _profile([1, 10, 100, 1000, 10000], edges)
    assert [c.crossing_bytes for c in p.cuts()] == [1, 1 + 10, 10 + 100, 10 + 1000]


def test_sinks_do_not_cross() -> None:
    # 1 and 3 are sinks (no consumer); 0 feeds 1 and 2; 2 feeds 4.
    p = _profile([1, 10, 100, 1000, 10000], ((0, 1), (0, 2), (2, 4)))
    assert [c.crossing_bytes for c in p.cuts()] == [1, 1, 100, 100]
    # a graph with no edges at all: nothing ever crosses
    assert [c.crossing_bytes for c in _profile([1, 2, 3], ()).cuts()] == [0, 0]


@st.composite
def _dags(draw: st.DrawFn) -> tuple[list[int], tuple[tuple[int, int], ...]]:
    n = draw(st.integers(1, 12))
    acts = draw(st.lists(st.integers(0, 10**9), min_size=n, max_size=n))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    edges = draw(st.lists(st.sampled_from(pairs), unique=True) if pairs else st.just([]))
    return acts, tuple(edges)


@settings(max_examples=200, deadline=None)
@given(_dags())
def test_cuts_match_brute_force(dag: tuple[list[int], tuple[tuple[int, int], ...]]) -> None:
    acts, edges = dag
    p = _profile(acts, edges)
    n = len(acts)
    expected = []
    for k in range(n - 1):
        before, after = set(range(k + 1)), set(range(k + 1, n))
        crossing = {src for src, dst in edges if src in before and dst in after}
        expected.append(Cut(k, sum(acts[i] for i in crossing)))
    assert p.cuts() == tuple(expected)
