"""The PyTorch profiler: parsing and statistics without torch; exact bytes, FLOP and shapes with it.

Tests that need torch take the ``torch`` fixture, which skips them when torch is not installed
(``pip install 'pipesim[torch]'``); CI has no torch, so the first half of this file is what runs
there. Timing tests use one CPU thread: on a busy two-core machine a second torch thread can cost
a whole scheduler tick per operation.
"""

from __future__ import annotations

import math
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipesim.errors import InputError
from pipesim.profiles.profiler.blocks import (
    TORCH_MISSING,
    build_model,
    load_factory,
    parse_input_shape,
    require_torch,
    split_factory_spec,
)
from pipesim.profiles.profiler.torch_profiler import (
    TimeStats,
    parse_batch_sizes,
    profile_factory,
    profile_module,
    scaling_linearity,
)

F32 = 4  # bytes per float32 element
I64 = 8  # bytes per int64 element
FAST: dict[str, Any] = {"repeats": 3, "warmup": 1, "threads": 1}


# --------------------------------------------------------------------------------------------
# Without torch
def test_importing_the_profiler_does_not_import_torch() -> None:
    import subprocess

    code = (
        "import sys, pipesim.profiles.profiler.torch_profiler, pipesim.cli.profile; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_require_torch_names_the_extra_when_torch_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    with pytest.raises(InputError) as info:
        require_torch()
    assert str(info.value) == TORCH_MISSING == "torch is not installed: pip install 'pipesim[torch]'"
    with pytest.raises(InputError, match="pipesim\\[torch\\]"):
        profile_factory("nets:make", batch_sizes=[2])


@pytest.mark.parametrize(
    ("text", "shape"),
    [("3x32x32", (3, 32, 32)), ("3,32,32", (3, 32, 32)), ("128", (128,)), (" 4 x 5 ", (4, 5))],
)
def test_parse_input_shape(text: str, shape: tuple[int, ...]) -> None:
    assert parse_input_shape(text) == shape


@pytest.mark.parametrize(
    ("text", "rule"), [("", "per-sample"), ("3xa", "'a' is not an integer"), ("3x0", ">= 1")]
)
def test_parse_input_shape_rejects(text: str, rule: str) -> None:
    with pytest.raises(InputError, match=rule):
        parse_input_shape(text)


@given(st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=5), st.sampled_from("x,"))
def test_parse_input_shape_round_trips(dims: list[int], sep: str) -> None:
    assert parse_input_shape(sep.join(map(str, dims))) == tuple(dims)


def test_parse_batch_sizes() -> None:
    assert parse_batch_sizes("8") == (8,)
    assert parse_batch_sizes("8,1, 4,2") == (1, 2, 4, 8)
    for bad, rule in [
        ("", "comma-separated"),
        ("2,x", "'x' is not an integer"),
        ("0", ">= 1"),
        ("2,2", "distinct"),
    ]:
        with pytest.raises(InputError, match=rule):
            parse_batch_sizes(bad)


def test_split_factory_spec() -> None:
    assert split_factory_spec("pkg.models:make_mlp") == ("pkg.models", "make_mlp")
    assert split_factory_spec("C:/nets/cnn.py:Zoo.small") == ("C:/nets/cnn.py", "Zoo.small")
    for bad in ("nocolon", ":make", "mod:", "mod:1abc", "mod:a-b"):
        with pytest.raises(InputError, match="factory"):
            split_factory_spec(bad)


def test_scaling_linearity_of_proportional_affine_and_single_points() -> None:
    exact = scaling_linearity("t", [1, 2, 4, 8], [0.5, 1.0, 2.0, 4.0], 8)
    assert exact.r_squared == pytest.approx(1.0)
    assert exact.max_deviation == pytest.approx(0.0)
    # y = 1 + b: a perfect line (R^2 = 1) but not proportional; the worst point is b = 1, where
    # proportional scaling from b = 8 predicts 9/8 against a measured 2.
    affine = scaling_linearity("t", [1, 2, 4, 8], [2.0, 3.0, 5.0, 9.0], 8)
    assert affine.r_squared == pytest.approx(1.0)
    assert affine.max_deviation == pytest.approx((2.0 - 9.0 / 8) / 2.0)
    # Flat: no variance to explain; proportional scaling from b = 4 predicts 0.75 at b = 1.
    flat = scaling_linearity("t", [1, 4], [3.0, 3.0], 4)
    assert flat.r_squared is None
    assert flat.max_deviation == pytest.approx(0.75)
    single = scaling_linearity("t", [4], [3.0], 4)
    assert single.r_squared is None
    assert single.max_deviation is None
    bent = scaling_linearity("t", [1, 2, 3], [1.0, 4.0, 9.0], 3)  # y = b^2: R^2 = 1 - 2/3 / 32.67
    assert bent.r_squared == pytest.approx(1 - (2 / 3) / (98 / 3))
    with pytest.raises(InputError, match="profile_batch_size"):
        scaling_linearity("t", [1, 2], [1.0, 2.0], 4)


@given(st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=2, max_size=6, unique=True))
def test_scaling_linearity_is_exact_for_any_proportional_measurement(slopes: list[float]) -> None:
    sizes = [1, 2, 3, 5, 8, 13][: len(slopes)]
    lin = scaling_linearity("t", sizes, [slopes[0] * b for b in sizes], sizes[-1])
    assert lin.r_squared == pytest.approx(1.0)
    assert lin.max_deviation == pytest.approx(0.0, abs=1e-12)


def test_time_stats() -> None:
    stats = TimeStats.of([3.0, 1.0, 2.0, 10.0])
    assert (stats.median_s, stats.min_s, stats.max_s) == (2.5, 1.0, 10.0)
    assert stats.spread == pytest.approx(9.0 / 2.5)
    assert TimeStats.of([0.0]).spread == 0.0


def test_load_factory_errors_without_running_a_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "plain.py").write_text("VALUE = 3\n\ndef make():\n    return 1\n")
    (tmp_path / "broken.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(InputError, match="does not exist"):
        load_factory(f"{tmp_path}/missing.py:make")
    with pytest.raises(InputError, match=r"has no 'nope'.*VALUE, make"):
        load_factory(f"{tmp_path}/plain.py:nope")
    with pytest.raises(InputError, match="is a int, not a callable"):
        load_factory(f"{tmp_path}/plain.py:VALUE")
    with pytest.raises(InputError, match="raised RuntimeError: boom"):
        load_factory(f"{tmp_path}/broken.py:make")
    with pytest.raises(InputError, match="'no_such_module_xyz' not found"):
        load_factory("no_such_module_xyz:make")
    assert load_factory(f"{tmp_path}/plain.py:make")() == 1


# --------------------------------------------------------------------------------------------
# With torch
@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch")


def _mlp(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def test_mlp_bytes_flop_and_batch_points_are_exact(torch: Any) -> None:
    torch.manual_seed(0)
    result = profile_module(_mlp(torch), name="mlp", batch_sizes=[4, 2], **FAST)
    profile = result.profile
    assert profile.profile_batch_size == 4
    assert [layer.name for layer in profile.layers] == ["linear0", "relu1", "linear2"]
    b = 4
    assert [layer.activation_bytes for layer in profile.layers] == [b * 32 * F32, b * 32 * F32, b * 4 * F32]
    assert [layer.parameter_bytes for layer in profile.layers] == [
        (16 * 32 + 32) * F32,
        0,
        (32 * 4 + 4) * F32,
    ]
    # A Linear keeps its input (the weight is a parameter, not an activation); ReLU its output.
    assert [layer.saved_activation_bytes for layer in profile.layers] == [
        b * 16 * F32,
        b * 32 * F32,
        b * 32 * F32,
    ]
    # 2 m n k per matrix multiply; the first Linear's input needs no gradient, so its backward
    # is the weight gradient alone, while the last one computes input and weight gradients.
    assert [layer.fwd_flop for layer in profile.layers] == [2 * b * 16 * 32, 0, 2 * b * 32 * 4]
    assert [layer.bwd_flop for layer in profile.layers] == [2 * b * 16 * 32, 0, 2 * 2 * b * 32 * 4]
    (point,) = profile.batch_points
    assert point.batch_size == 2
    assert point.activation_bytes == (2 * 32 * F32, 2 * 32 * F32, 2 * 4 * F32)
    assert point.saved_activation_bytes == (2 * 16 * F32, 2 * 32 * F32, 2 * 32 * F32)
    assert [m.output_shapes for m in result.measurements[0]] == [((2, 32),), ((2, 32),), ((2, 4),)]
    for row in result.measurements:
        for m in row:
            assert m.fwd.median_s > 0
            assert m.bwd.median_s > 0
            assert m.fwd.min_s <= m.fwd.median_s <= m.fwd.max_s
    saved = next(lin for lin in result.linearity if lin.quantity == "saved_activation_bytes")
    assert saved.r_squared == pytest.approx(1.0)
    assert saved.max_deviation == pytest.approx(0.0)
    assert "Batch scaling over 2,4" in profile.description
    assert "R^2" in profile.description
    assert "spread" in profile.description
    assert profile.reference_device == "cpu"


class _CNN:
    """A small CNN that names its blocks with pipeline_blocks() (built inside the torch tests)."""

    @staticmethod
    def make(torch: Any) -> Any:
        nn = torch.nn

        class CNN(nn.Module):  # type: ignore[misc]
            def __init__(self) -> None:
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
                self.pool = nn.MaxPool2d(2)
                self.head = nn.Sequential(nn.Flatten(), nn.Linear(8 * 4 * 4, 10))

            def pipeline_blocks(self) -> list[tuple[str, Any]]:
                return [("stem", self.stem), ("pool", self.pool), ("head", self.head)]

        return CNN()


def test_cnn_saved_bytes_count_each_storage_once(torch: Any) -> None:
    result = profile_module(_CNN.make(torch), name="cnn", batch_sizes=[2], input_shape=(3, 8, 8), **FAST)
    stem, pool, head = result.profile.layers
    b, image, feature, pooled = 2, 3 * 8 * 8, 8 * 8 * 8, 8 * 4 * 4
    assert [stem.name, pool.name, head.name] == ["stem", "pool", "head"]
    assert (stem.activation_bytes, pool.activation_bytes, head.activation_bytes) == (
        b * feature * F32,
        b * pooled * F32,
        b * 10 * F32,
    )
    assert stem.parameter_bytes == (3 * 8 * 9 + 8 + 2 * 8) * F32  # conv weight + bias, BN affine
    # Conv keeps its input, BatchNorm the conv output and its per-channel mean and 1/std,
    # ReLU its output; running statistics are buffers, not activations.
    assert stem.saved_activation_bytes == b * image * F32 + 2 * b * feature * F32 + 2 * 8 * F32
    # Max-pooling keeps its input and the int64 indices of the maxima.
    assert pool.saved_activation_bytes == b * feature * F32 + b * pooled * I64
    # Flatten is a view: the Linear keeps the same storage as the block's input, counted once.
    assert head.saved_activation_bytes == b * pooled * F32
    assert stem.fwd_flop == 2 * b * 8 * 8 * 8 * 3 * 9  # 2 * outputs * (in channels * kernel)
    assert result.profile.batch_points == ()


def test_two_layer_transformer_with_token_input(torch: Any) -> None:
    nn = torch.nn

    class Tiny(nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            layer = {"d_model": 32, "nhead": 4, "dim_feedforward": 64, "dropout": 0.0, "batch_first": True}
            self.blocks = nn.ModuleList(
                [
                    nn.Embedding(100, 32),
                    nn.TransformerEncoderLayer(**layer),
                    nn.TransformerEncoderLayer(**layer),
                    nn.Linear(32, 100),
                ]
            )

    model = Tiny()
    expected_params = [sum(p.numel() for p in block.parameters()) * F32 for block in model.blocks]
    result = profile_module(model, name="tiny", batch_sizes=[2], input_shape=(16,), **FAST)
    layers = result.profile.layers
    b, seq = 2, 16
    assert [layer.name for layer in layers] == [
        "embedding0",
        "transformerencoderlayer1",
        "transformerencoderlayer2",
        "linear3",
    ]
    assert [layer.parameter_bytes for layer in layers] == expected_params
    assert [layer.activation_bytes for layer in layers] == [b * seq * 32 * F32] * 3 + [b * seq * 100 * F32]
    assert layers[0].saved_activation_bytes == b * seq * I64  # the token ids (auto: long input)
    assert layers[3].saved_activation_bytes == b * seq * 32 * F32
    tokens = b * seq
    linear_flop = 2 * tokens * 32 * (3 * 32 + 32 + 64 + 64)  # qkv, out-projection, feed-forward
    for layer in layers[1:3]:
        assert layer.saved_activation_bytes is not None
        assert layer.saved_activation_bytes > b * seq * 32 * F32
        assert layer.fwd_flop is not None
        assert layer.fwd_flop >= linear_flop
    assert result.measurements[0][3].output_shapes == ((b, seq, 100),)


def test_bfloat16_halves_parameter_and_activation_bytes(torch: Any) -> None:
    result = profile_module(_mlp(torch), name="mlp", batch_sizes=[4], dtype="bfloat16", **FAST)
    assert result.profile.dtype == "bfloat16"
    assert result.profile.layers[0].parameter_bytes == (16 * 32 + 32) * 2
    assert result.profile.layers[0].activation_bytes == 4 * 32 * 2


def test_timings_are_positive_and_stable(torch: Any) -> None:
    """Stated tolerance: the heavy block's median agrees within a factor of 3 between two runs."""
    nn = torch.nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU())
    options: dict[str, Any] = {"batch_sizes": [64], "repeats": 5, "warmup": 2, "threads": 1}
    first = profile_module(model, name="m", **options).profile.layers
    second = profile_module(model, name="m", **options).profile.layers
    assert all(layer.fwd_time_s > 0 and layer.bwd_time_s > 0 for layer in (*first, *second))
    ratio = first[0].fwd_time_s / second[0].fwd_time_s
    assert 1 / 3 < ratio < 3, ratio
    bwd_ratio = first[0].bwd_time_s / second[0].bwd_time_s
    assert 1 / 3 < bwd_ratio < 3, bwd_ratio


def test_profile_loads_and_simulates(torch: Any, tmp_path: Path) -> None:
    from pipesim.plan import Plan, StagePlan
    from pipesim.profiles import get_cluster, load_model, save_profile
    from pipesim.simulator import simulate

    profile = profile_module(_mlp(torch), name="mlp", batch_sizes=[1, 2], **FAST).profile
    path = tmp_path / "mlp.json"
    save_profile(profile, path)
    loaded = load_model(str(path))
    assert loaded == profile
    plan = Plan(
        stages=(StagePlan(first_layer=0, last_layer=1), StagePlan(first_layer=2, last_layer=2)),
        global_batch_size=8,
        num_microbatches=4,
    )
    result = simulate(plan, loaded, get_cluster("dgx1-v100"))
    assert result.iteration_time_s > 0
    assert math.isfinite(result.iteration_time_s)
    assert result.fits


def test_shape_mismatch_is_rephrased(torch: Any) -> None:
    with pytest.raises(
        InputError, match=r"block 0 'linear0' \(Linear\).*\(2, 8\).*--input-shape is per sample"
    ):
        profile_module(_mlp(torch), name="mlp", batch_sizes=[2], input_shape=(8,), **FAST)
    nn = torch.nn
    bad_chain = nn.Sequential(nn.Linear(4, 6), nn.Linear(5, 2))
    with pytest.raises(InputError, match=r"block 1 'linear1'.*output of block 0.*\(3, 6\)"):
        profile_module(bad_chain, name="m", batch_sizes=[3], **FAST)


def test_input_shape_needed_when_it_cannot_be_inferred(torch: Any) -> None:
    with pytest.raises(InputError, match=r"cannot infer the input shape.*Conv2d.*--input-shape"):
        profile_module(_CNN.make(torch), name="cnn", batch_sizes=[2], **FAST)


def test_models_without_blocks_and_bad_options(torch: Any) -> None:
    nn = torch.nn

    class Opaque(nn.Module):  # type: ignore[misc]
        def forward(self, x: Any) -> Any:
            return x

    with pytest.raises(InputError, match="neither a pipeline_blocks"):
        profile_module(Opaque(), name="o", batch_sizes=[1], input_shape=(2,))
    with pytest.raises(InputError, match="lists no block"):
        profile_module(nn.Sequential(), name="o", batch_sizes=[1], input_shape=(2,))
    with pytest.raises(InputError, match="device"):
        profile_module(_mlp(torch), name="o", batch_sizes=[1], device="tpu")
    with pytest.raises(InputError, match="repeats"):
        profile_module(_mlp(torch), name="o", batch_sizes=[1], repeats=0)


def test_build_model_checks_the_factory_result(
    torch: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))
    source = textwrap.dedent(
        """
        import torch.nn as nn

        def make():
            return nn.Sequential(nn.Linear(3, 3))

        def not_a_module():
            return [1, 2]

        def fails():
            raise ValueError("bad config")
        """
    )
    (tmp_path / "user_nets.py").write_text(source)
    assert isinstance(build_model(f"{tmp_path}/user_nets.py:make"), torch.nn.Sequential)
    with pytest.raises(InputError, match=r"returned a list, not a torch\.nn\.Module"):
        build_model(f"{tmp_path}/user_nets.py:not_a_module")
    with pytest.raises(InputError, match="raised ValueError: bad config"):
        build_model(f"{tmp_path}/user_nets.py:fails")
    result = profile_factory(f"{tmp_path}/user_nets.py:make", batch_sizes=[2], **FAST)
    assert result.profile.name == "make"
    assert result.profile.layers[0].parameter_bytes == (9 + 3) * F32
