"""Length inputs: file formats, mixtures and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.planner.dynamic import (
    LengthBatch,
    check_lengths,
    generate_mix,
    load_lengths,
    mix_names,
    parse_lengths,
)


def test_text_one_per_line_with_comments() -> None:
    batch = parse_lengths("# lengths\n12\n\n40  # a long one\n7\n")
    assert batch.inputs == (12, 40, 7)
    assert batch.targets is None
    assert batch.tokens == (12, 40, 7)
    assert batch.total_tokens == 59


def test_text_pairs_count_input_plus_target() -> None:
    batch = parse_lengths("10 2\n20,5\n30\t0\n")
    assert batch.inputs == (10, 20, 30)
    assert batch.targets == (2, 5, 0)
    assert batch.tokens == (12, 25, 30)


@pytest.mark.parametrize(
    ("text", "inputs", "targets"),
    [
        ("[3, 4, 5]", (3, 4, 5), None),
        ("[[3, 1], [4, 2]]", (3, 4), (1, 2)),
        ('{"lengths": [9, 8]}', (9, 8), None),
    ],
)
def test_json_forms(text: str, inputs: tuple[int, ...], targets: tuple[int, ...] | None) -> None:
    batch = parse_lengths(text)
    assert batch.inputs == inputs
    assert batch.targets == targets


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("12\nabc\n", r"<text>:2: 'abc' is not an integer"),
        ("12\n3 4\n", r":2: mixes single lengths"),
        ("1 2 3\n", r":1: expected 'length'"),
        ("0\n", r":1: lengths must be >= 1"),
        ("[1, [2]]", "entry 1"),
        ("[1, 2", "invalid JSON"),
        ('{"x": 1}', "lengths"),
    ],
)
def test_malformed_files_name_the_line(text: str, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        parse_lengths(text)


@pytest.mark.parametrize("text", ["", "# nothing\n\n", "[]", '{"lengths": []}'])
def test_empty_batches_are_rejected(text: str) -> None:
    with pytest.raises(InputError, match="empty"):
        parse_lengths(text)


def test_load_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("5\n6\n", encoding="utf-8")
    batch = load_lengths(path)
    assert batch.inputs == (5, 6)
    assert batch.source == str(path)


def test_too_long_samples_are_named() -> None:
    batch = LengthBatch(inputs=(10, 600, 20))
    with pytest.raises(InputError, match=r"lengths\[1\]=600: sample is longer than bert48's maximum .*512"):
        check_lengths(batch, 512, model="bert48")
    check_lengths(batch, 600)


def test_mixtures_are_seeded_and_bounded() -> None:
    assert set(mix_names()) >= {"flan-like", "glue-like"}
    a = generate_mix("glue-like", 500, seed=3, max_len=128)
    assert a == generate_mix("glue-like", 500, seed=3, max_len=128)
    assert a != generate_mix("glue-like", 500, seed=4, max_len=128)
    assert len(a) == 500
    assert max(a.tokens) <= 128
    assert min(a.tokens) >= 1
    flan = generate_mix("flan-like", 2000, seed=0, max_len=512)
    assert flan.targets is not None
    assert max(flan.tokens) <= 512
    # a multi-task mixture spreads lengths widely
    tokens = sorted(flan.tokens)
    assert tokens[int(0.9 * len(tokens))] > 4 * tokens[int(0.1 * len(tokens))]
    uniform = generate_mix("uniform", 10, seed=0)
    assert set(uniform.tokens) == {128}


def test_mixture_errors() -> None:
    with pytest.raises(UnknownNameError, match="valid mix names: flan-like"):
        generate_mix("c4", 10)
    with pytest.raises(InputError, match="samples"):
        generate_mix("glue-like", 0)
