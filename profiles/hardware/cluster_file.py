"""Cluster files: TOML in the config vocabulary of :mod:`pipesim.profiles.hardware.cluster_config`.

The schema, with examples, is in ``docs/hardware.md``. Reading reports every problem as a
:class:`~pipesim.errors.FormatError` naming the file, the line (where it can tell), the key and
what was expected; writing is atomic and round-trips exactly (SI keys, every figure explicit).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

from pipesim.errors import FormatError, InputError, UnknownNameError
from pipesim.profiles.hardware.cluster import Cluster, cluster_names, get_cluster
from pipesim.profiles.hardware.cluster_config import (
    PARTS,
    ConfigError,
    cluster_from_config,
    cluster_to_config,
    flatten_config,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["cluster_to_toml", "load_cluster", "load_cluster_file", "save_cluster"]


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def cluster_to_toml(cluster: Cluster) -> str:
    """``cluster`` as TOML text in the file schema (SI keys, every figure explicit)."""
    config = cluster_to_config(cluster)
    lines = ["# pipesim cluster (schema: docs/hardware.md)"]
    tables: list[str] = []
    for key, value in config.items():
        if isinstance(value, Mapping) and key in PARTS:
            tables.append(key)
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key in tables:
        table = config[key]
        assert isinstance(table, Mapping)
        lines.append("")
        lines.append(f"[{key}]")
        lines.extend(f"{sub} = {_toml_value(v)}" for sub, v in table.items())
    return "\n".join(lines) + "\n"


def save_cluster(cluster: Cluster, path: str | Path) -> None:
    """Write ``cluster`` as a TOML file, atomically (temporary file, then ``os.replace``).

    Raises:
        OSError: the file cannot be written.
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(cluster_to_toml(cluster))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_HEADER = re.compile(r"^\s*\[\s*([^\]\s]+)\s*\]")


def _find_line(text: str, where: tuple[str | None, str] | None) -> int | None:
    """1-based line of ``key`` inside ``table`` (``None``: top level), or ``None`` if not found."""
    if where is None:
        return None
    table, key = where
    pattern = re.compile(rf'^\s*"?{re.escape(key)}"?\s*=')
    current: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        header = _HEADER.match(line)
        if header is not None:
            current = header.group(1).strip('"')
            if current == key and table is None:
                return number
            continue
        if current == table and pattern.match(line):
            return number
    return None


def load_cluster_file(path: str | Path) -> Cluster:
    """Read a cluster from a TOML file (schema in ``docs/hardware.md``); ``name`` defaults to the file stem.

    Raises:
        InputError: the file does not exist.
        FormatError: the file is not valid TOML, or breaks the schema (unknown key, bad value,
            unknown catalog name, ...); the message names the file, the line where it can tell,
            the key and what was expected.
        OSError: the file exists but cannot be read.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"cluster file {str(file)!r} does not exist") from None
    except UnicodeDecodeError as exc:
        raise FormatError(file, None, f"not UTF-8 text ({exc.reason})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line: int | None = getattr(exc, "lineno", None)
        message = str(getattr(exc, "msg", "")) or str(exc)
        found = re.search(r"\(at line (\d+), column \d+\)", str(exc))
        if line is None and found is not None:
            line = int(found.group(1))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", message)
        raise FormatError(file, line, f"not valid TOML: {message}") from None
    origin: dict[str, tuple[str | None, str]] = {}
    try:
        flat, origin = flatten_config(data)
        flat.setdefault("name", file.stem)
        return cluster_from_config(flat)
    except ConfigError as exc:
        where = origin.get(exc.key) if exc.key is not None else None
        message = str(exc)
        if where is not None and where[0] is not None:
            message += f" (key {where[1]!r} of table [{where[0]}])"
        raise FormatError(file, _find_line(text, where), message) from None
    except InputError as exc:
        raise FormatError(file, None, str(exc)) from None


def load_cluster(spec: str) -> Cluster:
    """A cluster from a preset name or a TOML file path.

    A ``spec`` that ends with ``.toml`` or contains a path separator is a file; otherwise a preset
    name (case-insensitive), or failing that an existing file of that name.

    Raises:
        InputError: ``spec`` looks like a file that does not exist.
        FormatError: the file is malformed (see :func:`load_cluster_file`).
        UnknownNameError: neither a preset nor a file; the message lists the presets.
    """
    looks_like_file = spec.lower().endswith(".toml") or "/" in spec or os.sep in spec
    if looks_like_file:
        if not Path(spec).exists():
            raise InputError(
                f"cluster file {spec!r} does not exist (preset clusters: {', '.join(cluster_names())})"
            )
        return load_cluster_file(spec)
    try:
        return get_cluster(spec)
    except UnknownNameError:
        if Path(spec).is_file():
            return load_cluster_file(spec)
        raise
