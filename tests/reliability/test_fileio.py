"""Issue 17, findings 1, 4, 5, 8: writes never replace special files, reads are bounded, JSON is
strict, temporary files are cleaned and never named in errors, numbers are ASCII."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import pipesim.fileio as fileio
from pipesim.errors import FormatError, InputError, PipesimError
from pipesim.fileio import (
    atomic_write_text,
    json_text,
    parse_ascii_float,
    parse_ascii_int,
    read_input_bytes,
    read_input_text,
)


def test_write_through_symlink_to_device_keeps_both(tmp_path: Path) -> None:
    if not Path("/dev/null").is_char_device():
        pytest.skip("no /dev/null character device")
    link = tmp_path / "out.json"
    link.symlink_to("/dev/null")
    atomic_write_text(link, "{}\n")
    assert link.is_symlink()
    assert os.readlink(link) == "/dev/null"
    assert Path("/dev/null").is_char_device()
    assert list(tmp_path.iterdir()) == [link]  # no temporary file left


def test_write_to_fifo_writes_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())

    thread = threading.Thread(target=reader)
    thread.start()
    atomic_write_text(fifo, "hello\n")
    thread.join(timeout=10)
    assert got == [b"hello\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]


def test_write_through_symlink_to_file_updates_the_target(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_text("old")
    target.chmod(0o600)
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    atomic_write_text(link, "new")
    assert link.is_symlink()
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600


def test_errors_name_the_users_path_not_the_temporary_file(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "out.json"
    with pytest.raises(FileNotFoundError) as info:
        atomic_write_text(missing, "x")
    assert info.value.filename == str(missing)
    with pytest.raises(IsADirectoryError) as dir_info:
        atomic_write_text(tmp_path, "x")
    assert dir_info.value.filename == str(tmp_path)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temporary_files_of_the_same_target_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "plan.json"
    stale = tmp_path / f".plan.json.pipesim-{_dead_pid()}-abc123.tmp"
    stale.write_text("half")
    live = tmp_path / f".plan.json.pipesim-{os.getppid()}-def456.tmp"  # a live process's write
    live.write_text("busy")
    other = tmp_path / f".other.json.pipesim-{_dead_pid()}-x.tmp"  # another target's: left alone
    other.write_text("x")
    atomic_write_text(target, "{}")
    assert target.read_text() == "{}"
    assert not stale.exists()
    assert live.exists()
    assert other.exists()


def test_bounded_reader_refuses_big_files_and_endless_devices(tmp_path: Path) -> None:
    small = tmp_path / "small.txt"
    small.write_bytes(b"12345")
    assert read_input_bytes(small, limit=5) == b"12345"
    with pytest.raises(InputError, match=r"larger than 4 bytes"):
        read_input_bytes(small, limit=4)
    if Path("/dev/zero").is_char_device():
        with pytest.raises(InputError, match=r"plan file '/dev/zero' is larger than 1024 bytes"):
            read_input_bytes("/dev/zero", what="plan file", limit=1024)
    with pytest.raises(InputError, match="does not exist"):
        read_input_bytes(tmp_path / "nope")
    with pytest.raises(InputError, match="is a directory"):
        read_input_bytes(tmp_path)


def test_default_limit_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10)
    monkeypatch.setattr(fileio, "MAX_INPUT_BYTES", 9)
    with pytest.raises(InputError, match="larger than 9 bytes"):
        read_input_bytes(path)


def test_text_reader_names_the_line_of_bad_utf8(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b"a = 1\nb = '\xff'\n")
    with pytest.raises(FormatError, match=r"c\.toml:2: not UTF-8 text"):
        read_input_text(path)
    path.write_bytes("\ufeffa = 1\n".encode())
    assert read_input_text(path) == "a = 1\n"


def test_json_text_refuses_nan_and_infinity_naming_the_field() -> None:
    assert json_text({"a": [1.5, None]}, indent=None) == '{"a": [1.5, null]}'
    with pytest.raises(PipesimError, match=r"result\[1\]\.throughput_samples_per_s is not a finite number"):
        json_text({"result": [{}, {"throughput_samples_per_s": float("inf")}]})
    with pytest.raises(PipesimError, match=r"cannot write rows\.json: x is not a finite"):
        json_text({"x": float("nan")}, what="rows.json")


@pytest.mark.parametrize(
    ("text", "value"),
    [("12", 12), (" -3 ", -3), ("+7", 7), ("\u0663", None), ("1_000", None), ("1.0", None), ("", None)],
)
def test_parse_ascii_int(text: str, value: int | None) -> None:
    assert parse_ascii_int(text) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5", 1.5), ("1e3", 1000.0), (".5", 0.5), ("inf", None), ("nan", None), ("1e999", None),
     ("\u0661.5", None), ("1_0", None)],
)
def test_parse_ascii_float(text: str, value: float | None) -> None:
    assert parse_ascii_float(text) == value


def test_ascii_int_has_pythons_digit_limit() -> None:
    assert parse_ascii_int("9" * 5000) is None


def test_nul_in_a_name_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="NUL"):
        read_input_bytes(f"{tmp_path}/a\x00b")
    with pytest.raises(InputError, match="NUL"):
        atomic_write_text(f"{tmp_path}/a\x00b", "x")
