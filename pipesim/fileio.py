"""Atomic file writes: a failure never leaves a half-written file.

A base module (imports nothing from pipesim), so every layer writes files the same way.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text"]


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, then ``os.replace``.

    A failure at any point leaves ``path`` as it was (absent or with its old content) and no
    temporary file behind. The new file gets the usual mode of a new file (0644), or keeps the
    mode of the file it replaces.

    Raises:
        OSError: the directory does not exist or is not writable, the disk is full, ...
    """
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, target.stat().st_mode & 0o777 if target.exists() else 0o644)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` as UTF-8 with ``\\n`` line ends to ``path`` atomically (see :func:`atomic_write_bytes`).

    Raises:
        OSError: as for :func:`atomic_write_bytes`.
    """
    atomic_write_bytes(path, text.encode("utf-8"))
