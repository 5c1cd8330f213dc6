"""Activation bytes per transformer layer with and without selective recomputation.

Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023,
arXiv:2205.05198), Sec. 4 (Eq. 1) and Table 2 give the bytes a transformer layer keeps for its
backward in fp16 without tensor parallelism: ``s b h (34 + 5 a s / h)`` without recomputation and
``34 s b h`` with selective recomputation of the attention core. The records hold the zoo's GPT
block and the memory model's ``selective`` mode to those figures at GPT-3 175B's shape (Brown et
al., NeurIPS 2020, Table 2.1: 96 heads, d_model 12288, context 2048), per ``s b h`` (bytes per
token per hidden unit).
"""

from __future__ import annotations

from experiments.validation.record import Record
from pipesim.profiles.costmodels.memory import layer_kept_bytes
from pipesim.profiles.models.zoo import zoo_model

_S, _H, _A, _B = 2048, 12288, 96, 1
_SOURCE = "Korthikanti et al., MLSys 2023 (arXiv:2205.05198), Sec. 4.1 Eq. 1, Table 2, at GPT-3 175B's shape"


def _bytes_per_sbh(mode: str) -> float:
    profile = zoo_model(
        f"gpt:layers=1,hidden={_H},heads={_A},seq={_S},vocab=1000", dtype="float16", batch_size=_B
    )
    return layer_kept_bytes(profile, _B, mode)[1] / (_S * _B * _H)


def records() -> list[Record]:
    """The two per-layer activation figures."""
    return [
        Record(
            name="korthikanti-2022-eq1-gpt3-layer-bytes-per-sbh",
            source=_SOURCE + " (no recomputation, no tensor parallelism)",
            quantity="activation bytes kept per layer / (s b h)",
            kind="absolute",
            published=34 + 5 * _A * _S / _H,
            predict=lambda: _bytes_per_sbh("none"),
            tolerance=0.01,
            note="fp16 with 1-byte dropout masks; zoo gpt block at batch 1",
        ),
        Record(
            name="korthikanti-2022-t2-gpt3-selective-bytes-per-sbh",
            source=_SOURCE + " (selective activation recomputation, no tensor parallelism)",
            quantity="activation bytes kept per layer / (s b h)",
            kind="absolute",
            published=34.0,
            predict=lambda: _bytes_per_sbh("selective"),
            tolerance=0.01,
            note="the attention core (softmax and dropout outputs, mask) dropped and replayed",
        ),
    ]
