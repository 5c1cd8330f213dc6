"""Every published measurement in experiments/validation is reproduced within its tolerance."""

from __future__ import annotations

import pytest

from experiments.validation.record import Record, all_records, relative_error
from pipesim.profiles.costmodels.compute import compute_model
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.models.zoo.roofline import Roofline

RECORDS = all_records()


def test_records_have_sources_and_unique_names() -> None:
    assert len({r.name for r in RECORDS}) == len(RECORDS)
    for r in RECORDS:
        assert r.source.strip()
        assert r.quantity.strip()


@pytest.mark.parametrize(
    "record",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=r.known_miss)) if r.known_miss else r
        for r in RECORDS
    ],
    ids=lambda r: r.name,
)
def test_published_measurement_within_tolerance(record: Record) -> None:
    predicted = record.predict()
    error = relative_error(predicted, record.published)
    assert abs(error) <= record.tolerance, (
        f"{record.name}: published {record.published:.4g}, predicted {predicted:.4g} "
        f"({error:+.1%}, tolerance {record.tolerance:.0%}); {record.source}"
    )


def test_record_rejects_bad_fields() -> None:
    with pytest.raises(ValueError, match="kind"):
        Record(name="x", source="s", quantity="q", kind="other", published=1.0, predict=lambda: 1.0,
               tolerance=0.1)
    with pytest.raises(ValueError, match="tolerance"):
        Record(name="x", source="s", quantity="q", kind="ratio", published=1.0, predict=lambda: 1.0,
               tolerance=1.5)


def test_tensor_parallel_full_recompute_replays_the_forward() -> None:
    # One TP stage, one micro-batch: full recomputation adds the blocks' forward (their TP
    # collectives included) to the backward, not the embedding's or the LM head's, which
    # Megatron-LM does not checkpoint (memory.full_replays); the Megatron-LM records rely on it.
    from experiments.validation.korthikanti_2022 import fwd_bwd_s

    fwd_none, bwd_none = fwd_bwd_s(2, False, "none")
    fwd_full, bwd_full = fwd_bwd_s(2, False, "full")
    assert fwd_full == pytest.approx(fwd_none, rel=1e-12)
    one_none, one_bwd_none = fwd_bwd_s(1, False, "none")
    _, one_bwd_full = fwd_bwd_s(1, False, "full")
    block_fwd = fwd_none - one_none  # one block's forward under TP with its two all-reduces
    # one more block replays one more block's forward (within 1%: the replay is timed at the
    # stage's TP ratio, whose head share differs between the 1- and 2-block models, 0.5% here)
    assert (bwd_full - bwd_none) - (one_bwd_full - one_bwd_none) == pytest.approx(block_fwd, rel=1e-2)
    # the head's logits GEMM and loss are not replayed: the replay is shorter than the forward by
    # more than the 2-block model's share of its head (a 51,200-entry vocabulary on 6,144 hidden)
    assert bwd_full - bwd_none < fwd_none - 0.5 * (fwd_none - 2 * block_fwd)


def test_slow_network_pipeline_slows_with_the_link() -> None:
    # DT-FM's GPipe records: the same pipeline takes longer on a slower or longer link, and at
    # 1 Gb/s the 8 MB activations (68 ms each) bind it: 96 sends each way take longer than the
    # compute-bound iteration at 10 Gb/s.
    from experiments.validation.slow_network import pipeline_iteration_time_s

    key = "gpt3xl-fp16-gpipe"
    fast = pipeline_iteration_time_s(key, 0.1, 10.0)
    slow = pipeline_iteration_time_s(key, 10.0, 1.0)
    slower = pipeline_iteration_time_s(key, 50.0, 1.0)
    assert fast < pipeline_iteration_time_s(key, 5.0, 2.0) < slow < slower
    wire_s = 8 * 2**20 / (1e9 / 8 * 0.99)
    assert slow > 2 * 96 * wire_s > fast


def test_torchgpipe_amoebanet_matches_the_benchmark_model() -> None:
    # torchgpipe's amoebanetd(num_layers=18, num_filters=256) is a 24-module nn.Sequential (a stem,
    # two stem reductions, 3 x 6 normal cells with 2 reductions between, the classifier); every
    # balance of the benchmark sums to 24, so the zoo builder must give 24 layers in that order.
    from experiments.validation.torchgpipe_2020 import EXPERIMENTS, amoebanet_d18
    from pipesim.errors import InputError
    from pipesim.profiles.models.zoo.amoebanet import amoebanet_d

    profile = amoebanet_d18(8)
    assert profile.num_layers == 24
    names = [layer.name for layer in profile.layers]
    assert names[:3] == ["stem", "stem_reduce1", "stem_reduce2"]
    assert (names[9], names[16], names[-1]) == ("reduce1", "reduce2", "head")
    assert all(sum(balance) == 24 for _, _, balance in EXPERIMENTS.values())
    # the 36-cell zoo model is the same builder at (36, 512)
    from pipesim.profiles.models.zoo import zoo_model

    zoo36 = zoo_model("amoebanet36", batch_size=2, device="P40")
    assert zoo36.parameter_count == amoebanet_d(
        _p40_roofline(), 2, normal_cells=36, filters=512, name="amoebanet36").parameter_count
    with pytest.raises(InputError, match="normal_cells"):
        amoebanet_d(_p40_roofline(), 2, normal_cells=20, filters=256, name="x")
    with pytest.raises(InputError, match="filters"):
        amoebanet_d(_p40_roofline(), 2, normal_cells=18, filters=250, name="x")


def test_torchgpipe_more_microbatches_fill_the_pipeline() -> None:
    # GPipe's bubble: at a fixed partition count, more micro-batches raise the simulated throughput.
    from experiments.validation.torchgpipe_2020 import throughput_per_s

    for parts in (2, 4, 8):
        one, four, many = (throughput_per_s(f"n{parts}m{m}") for m in (1, 4, 32))
        assert one < four < many


def _p40_roofline() -> Roofline:
    return Roofline(model=compute_model(get_device("P40"), "float32"))
