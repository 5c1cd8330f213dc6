"""The Megatron-LM README scaling records (experiments/validation/megatron_readme_2020.py and
megatron_h100_2024.py): the published columns agree with the definitions the records use, and
the plans are the configurations the sources state."""

from __future__ import annotations

import pytest

from experiments.validation import megatron_h100_2024 as h100
from experiments.validation import megatron_readme_2020 as r2020
from pipesim.plan import Recompute
from pipesim.profiles.costmodels.sharding import Sharding
from pipesim.profiles.inputs import resolve_inputs

# model_table.png's MFU column (percent), in _TABLE's order
_H100_MFU_PERCENT = (41, 47, 49, 46, 42, 43, 44, 48, 47)


def test_h100_table_rates_over_the_bf16_peak_give_its_mfu_column() -> None:
    # the per-GPU rates are over the dense bf16 peak (989 TFLOP/s), so the runs are bf16, not fp8
    for row, mfu in zip(h100._TABLE, _H100_MFU_PERCENT, strict=True):
        assert round(100 * row[-1] * 1e12 / h100._H100_BF16_PEAK) == mfu, row[0]


def test_h100_models_are_untied_and_of_the_tables_size() -> None:
    # the table's labels are the parameter counts of an untied output layer (1.7B: 1.75B untied,
    # 1.48B tied), rounded down to the label's digits
    for label, heads, hidden, layers, *_ in h100._TABLE:
        spec = f"gpt:layers={layers},hidden={hidden},heads={heads},seq=4096,vocab=131072,flash=1"
        untied, _ = resolve_inputs(spec + ",untie=1", "dgx-h100-x4", dtype="bf16")
        tied, _ = resolve_inputs(spec, "dgx-h100-x4", dtype="bf16")
        billions = float(label.rstrip("b"))
        assert untied.parameter_count / 1e9 == pytest.approx(billions, rel=0.035), label
        assert abs(untied.parameter_count / 1e9 - billions) < abs(tied.parameter_count / 1e9 - billions)


def test_h100_model_flop_is_megatron_r080s_count() -> None:
    # 12 B s l h^2 (6 + s/h + V/(2 l h)): 1.7B at batch 192 (hand-expanded: 72 B s l h^2 (1 + s/(6h)
    # + V/(12 l h)) is the same count)
    b, s, n, h, v = 192, 4096, 24, 2048, 131072
    expected = 72 * b * s * n * h * h * (1 + s / (6 * h) + v / (12 * n * h))
    assert h100.model_flop(h, n, b) == pytest.approx(expected, rel=1e-12)


def test_h100_plans_interleave_one_layer_per_virtual_stage() -> None:
    for label, _heads, _hidden, layers, t, p, gpus, batch, _ in h100._TABLE:
        plan = h100._plan(layers + 2, layers, t, p, gpus // (t * p), batch)
        assert plan.num_microbatches == batch // 48
        assert plan.recompute is Recompute.NONE
        assert all(st.sharding is Sharding.DISTRIBUTED and st.replicas == 48 for st in plan.stages)
        assert all(st.sequence_parallel == st.tp_comm_overlap == (t > 1) for st in plan.stages)
        if p == 1:
            assert plan.schedule.value == "1f1b"
            assert len(plan.stages) == 1
            continue
        assert plan.schedule.value == "interleaved"
        assert plan.chunks == layers // p
        assert plan.num_microbatches % p == 0, label  # as Megatron's interleaved schedule requires
        # one block per virtual stage, the embedding with the first, the output layer with the last
        assert [st.num_layers for st in plan.stages] == [2] + [1] * (layers - 2) + [2]


def test_readme_2020_scaling_column_is_parameters_per_partition_times_the_time_ratio() -> None:
    # the records' ratio definition reproduces every published scaling figure from the table's times
    for (system, case), (_, time_ms, scaling) in r2020._TABLE.items():
        params, t = r2020._CASES[case][3], r2020._CASES[case][4]
        base_ms = r2020._TABLE[(r2020._BASELINE[system], "1b")][1]
        assert params / t / r2020._CASES["1b"][3] * base_ms / time_ms == pytest.approx(scaling, rel=0.004)


def test_readme_2020_teraflops_column_counts_the_recomputation() -> None:
    # scaling-mp.png: 1B on one V100, batch 8, 1121 ms -> 71.9 TFLOP/s with the 96 B s l h^2 count
    b, s, n, h, v = 8, 1024, 24, 1920, 51200
    flop = 96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    assert flop / 1.121 / 1e12 == pytest.approx(71.9, abs=0.05)


def test_readme_2020_data_parallelism_adds_the_gradient_all_reduce() -> None:
    # the same 1B model and per-replica batch: 128 replicas add the gradient all-reduce after the
    # backward to the single A100's iteration, and the V100 is slower than the A100
    single = r2020.iteration_time_s("dgx-a100", "1b")
    assert r2020.iteration_time_s("dgx-a100-dp128", "1b") > single
    assert r2020.iteration_time_s("dgx2-v100", "1b") > single
    # the tensor-parallel 8B on one server: slower than on free links (its TP all-reduces)
    assert r2020.scaling("dgx-a100", "8b") < r2020.scaling("dgx-a100", "2b") < 1.0
