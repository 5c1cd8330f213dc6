"""The PyTorch profiler on BERT-large-shaped blocks agrees with the zoo's bert48 where it must.

Parameters, FLOP and saved bytes do not depend on the device, so a CPU run checks them; times do
and are not checked (the zoo is a V100 roofline). Agreement is exact once the differences of
convention are added back, each with its reason:

* parameters: the head's decoder is tied to the word embeddings; the profiler counts a tied
  parameter in every block holding it, the zoo once (in ``embeddings``);
* FLOP: ``FlopCounterMode`` counts GEMMs only; the zoo adds 5 FLOP per element for layer norm,
  softmax and the loss, 8 for GeLU, 1 for dropout, residual add and the embedding gather/sum
  (0.3 % of an encoder's or the head's FLOP);
* saved bytes: torch also keeps the layer norms' mean and 1/std, int64 token ids and targets and
  the pooler's tiny outputs (< 1 % of every kind's saved bytes), and on a CPU its unfused dropout
  keeps a dtype-sized mask where the zoo (and torch on CUDA) keeps 1 byte per element.

The tests that need torch take the ``torch`` fixture and skip without it (CI installs no torch);
the arithmetic ones (the zoo against the shape formulas) run everywhere. The torch run is the
``--small`` one: one encoder layer, batch 1, one timed run, about 6 s on a 2-core VM.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import pytest

from experiments import profiler_vs_zoo as pvz
from pipesim.errors import InputError
from pipesim.profiles.models.zoo import zoo_model

F32 = 4  # bytes per float32 element
ELEMENTWISE_SHARE = 0.005
"""The zoo's element-wise FLOP are under 0.5 % of an encoder's or the head's total FLOP."""
SMALL_EXTRA_SHARE = 0.01
"""Saved bytes torch keeps beyond the zoo, apart from CPU dropout masks: under 1 % of the zoo's (at
most 16 bytes per token on top of 3,072 for the fp16 embeddings, 0.52 %; 0.31 % in fp32)."""


# --------------------------------------------------------------------------------------------
# Without torch: the zoo against the shape formulas the comparison uses
@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("dtype", pvz.DTYPES)
def test_zoo_flop_is_gemm_plus_elementwise(batch: int, dtype: str) -> None:
    layers = {layer.name: layer for layer in zoo_model("bert48", dtype=dtype, batch_size=batch).layers}
    for kind in pvz.KINDS:
        zoo = layers["encoder0" if kind == "encoder" else kind]
        fwd, bwd = pvz.gemm_flop(kind, batch)
        elementwise = pvz.zoo_elementwise_flop(kind, batch)
        assert zoo.fwd_flop == pytest.approx(fwd + elementwise, rel=1e-12)
        assert zoo.bwd_flop == pytest.approx(bwd + elementwise, rel=1e-12)
        if kind != "embeddings":  # the embeddings have no GEMM: all their FLOP is element-wise
            assert elementwise < ELEMENTWISE_SHARE * fwd


@pytest.mark.parametrize("dtype", pvz.DTYPES)
def test_on_cuda_torch_should_save_what_the_zoo_counts(dtype: str) -> None:
    # The GPU prediction: with 1-byte dropout masks only the small extras are left.
    layers = {layer.name: layer for layer in zoo_model("bert48", dtype=dtype, batch_size=2).layers}
    for kind in pvz.KINDS:
        extra = pvz.torch_extra_saved_bytes(kind, 2, dtype, "cuda")
        assert extra["dropout_masks"] == 0
        zoo_saved = layers["encoder0" if kind == "encoder" else kind].saved_activation_bytes
        assert zoo_saved is not None
        assert 0 < sum(extra.values()) < SMALL_EXTRA_SHARE * zoo_saved


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(InputError, match="dtype"):
        pvz.Settings(dtype="bfloat16")
    with pytest.raises(InputError, match="device"):
        pvz.Settings(device="tpu")
    with pytest.raises(InputError, match="distinct and ascending"):
        pvz.Settings(batch_sizes=(2, 1))
    with pytest.raises(InputError, match="layers"):
        pvz.Settings(layers=0)
    with pytest.raises(InputError, match="unknown device 'nope'"):
        pvz.Settings(zoo_device="nope")
    with pytest.raises(InputError, match="kind"):
        pvz.gemm_flop("decoder", 1)
    assert pvz.Settings.for_device("cuda").batch_sizes == (1, 2, 4, 8)
    assert pvz.Settings.for_device("cuda", small=True, dtype="float16").layers == 1


def test_main_without_torch_gives_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # makes `import torch` raise ImportError
    assert pvz.main(["--small", "--out", str(tmp_path)]) == 2
    assert "pip install 'pipesim[torch]'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# --------------------------------------------------------------------------------------------
# With torch: the --small run on the CPU
@pytest.fixture(scope="module")
def torch() -> Any:
    return pytest.importorskip("torch")


@pytest.fixture(scope="module")
def rows(torch: Any) -> list[dict[str, Any]]:
    return pvz.run(small=True)


def by_kind(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    assert [r["kind"] for r in rows] == list(pvz.KINDS)
    assert {r["batch_size"] for r in rows} == {1}
    return {r["kind"]: r for r in rows}


def test_shapes_and_output_bytes_match(rows: list[dict[str, Any]]) -> None:
    r = by_kind(rows)
    assert r["embeddings"]["output_shape"] == r["encoder"]["output_shape"] == f"1x{pvz.SEQ}x{pvz.HIDDEN}"
    assert r["head"]["output_shape"] == f"1x{pvz.SEQ}"  # one loss per token, as the zoo's head
    for row in rows:
        assert row["measured_activation_bytes"] == row["zoo_activation_bytes"]
        assert row["time_comparable"] is False  # a CPU against the V100 roofline


def test_parameter_bytes_match_exactly(rows: list[dict[str, Any]]) -> None:
    r = by_kind(rows)
    assert r["embeddings"]["measured_parameter_bytes"] == r["embeddings"]["zoo_parameter_bytes"]
    assert r["encoder"]["measured_parameter_bytes"] == r["encoder"]["zoo_parameter_bytes"] == 12_596_224 * F32
    # The head also holds the word-embedding matrix its decoder is tied to (30522 x 1024).
    head = r["head"]
    assert head["tied_parameter_bytes"] == 30522 * 1024 * F32
    assert head["measured_parameter_bytes"] == head["zoo_parameter_bytes"] + head["tied_parameter_bytes"]
    assert r["encoder"]["tied_parameter_bytes"] == r["embeddings"]["tied_parameter_bytes"] == 0


def test_flop_is_the_zoo_without_its_elementwise_work(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        for direction in ("fwd", "bwd"):
            measured = row[f"measured_{direction}_flop"]
            assert measured == row[f"gemm_{direction}_flop"]  # FlopCounterMode: GEMMs, exactly
            assert measured == pytest.approx(row[f"zoo_gemm_{direction}_flop"], rel=1e-12)
            if row["kind"] == "embeddings":
                assert measured == 0.0  # gather, sum, layer norm, dropout: no GEMM
            else:  # within 0.5 %: the zoo also counts element-wise FLOP
                assert 1 - ELEMENTWISE_SHARE < row[f"{direction}_flop_ratio"] < 1


def test_saved_bytes_are_the_zoo_plus_the_itemised_extras(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        extra = pvz.torch_extra_saved_bytes(row["kind"], 1, "float32", "cpu")
        assert row["torch_extra_saved_bytes"] == sum(extra.values())
        assert row["measured_saved_bytes"] == row["zoo_saved_bytes"] + sum(extra.values())
        assert row["saved_unexplained_bytes"] == 0
        # Apart from CPU dropout masks, within 1 % of the zoo.
        without_masks = row["measured_saved_bytes"] - row["saved_dropout_mask_extra_bytes"]
        assert without_masks == pytest.approx(row["zoo_saved_bytes"], rel=SMALL_EXTRA_SHARE)
    # CPU dropout masks are 4-byte floats, not 1-byte: +20 % for an encoder layer in fp32
    # ((3 x 2sbh + 3 x as^2b) / (66 sbh + 9 as^2b)), +60 % for the embeddings (3 th / 5 th).
    r = by_kind(rows)
    assert r["encoder"]["saved_ratio"] == pytest.approx(1.2, abs=0.001)
    assert r["embeddings"]["saved_ratio"] == pytest.approx(1.6, abs=0.01)
    assert r["head"]["saved_ratio"] == pytest.approx(1.0, abs=0.001)


def test_embedding_ids_cover_the_vocabulary(torch: Any) -> None:
    # The profiler draws token ids for the first embedding (the word table), not for the
    # smallest one in the block (2 token types), which would make every id 0 or 1.
    from pipesim.profiles.profiler.blocks import first_input

    embeddings = pvz.bert_model(1).embeddings
    ids = first_input(embeddings, batch_size=2, input_shape=(pvz.SEQ,), input_dtype="auto",
                      device=torch.device("cpu"), dtype=torch.float32, seed=0)  # fmt: skip
    assert ids.dtype == torch.long
    assert 1000 < int(ids.max()) < pvz.VOCAB


def test_csv_and_figure(rows: list[dict[str, Any]], tmp_path: Path) -> None:
    from experiments import _common

    csv_path = _common.write_csv(rows, tmp_path / "out.csv")
    with csv_path.open() as f:
        read = list(csv.DictReader(f))
    assert [r["kind"] for r in read] == list(pvz.KINDS)
    assert read[1]["saved_unexplained_bytes"] == "0"
    png = _common.save_figure(pvz.figure(rows), tmp_path / "out.png")
    assert png.stat().st_size > 10_000
