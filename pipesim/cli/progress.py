"""A status line on stderr for CLI work that takes a while (planning, simulating, verifying).

Library code never prints; the CLI wraps a long call in :class:`Status`::

    with Status("planning bert48 on dgx-h100-x4") as status:
        plans = plan(...)
        status.update("simulating plan 2 of 5")

When stderr is a terminal and the block runs longer than ``delay_s`` (2 s by default), a timer
thread writes one line, ``pipesim: planning bert48 on dgx-h100-x4 ... 3 s``, and rewrites it in
place every ``interval_s``; the line is erased when the block ends, so the command's own output
(on stdout) is all that stays. When stderr is not a terminal (a pipe, a file, a test capturing
it), or when ``-v`` sends log lines to stderr (they would run into the status line), nothing is
written at all.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["DELAY_S", "INTERVAL_S", "Status"]

DELAY_S = 2.0
"""Seconds a block runs before its status line appears."""
INTERVAL_S = 0.5
"""Seconds between rewrites of the status line."""

_ERASE = "\r\033[K"
"""Carriage return and ANSI "erase to end of line": back to column 0 on an empty line."""


class Status:
    """A context manager that shows what is being done on stderr once it takes longer than ``delay_s``.

    Args:
        text: what is being done, e.g. ``"planning bert48 on dgx-h100-x4"``.
        delay_s: seconds before the line first appears (default :data:`DELAY_S`).
        interval_s: seconds between rewrites (default :data:`INTERVAL_S`).
        stream: where to write (default ``sys.stderr`` at the time the block starts).

    Attributes:
        shown: whether the line was written at least once.
    """

    def __init__(
        self,
        text: str,
        *,
        delay_s: float = DELAY_S,
        interval_s: float = INTERVAL_S,
        stream: TextIO | None = None,
    ) -> None:
        self._text = text
        self._delay_s = delay_s
        self._interval_s = interval_s
        self._stream = stream
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self.shown = False

    def update(self, text: str) -> None:
        """Say what is being done now (shown at the next rewrite)."""
        with self._lock:
            self._text = text

    def __enter__(self) -> Status:
        stream = self._stream if self._stream is not None else sys.stderr
        self._stream = stream
        self._started = time.monotonic()
        isatty = getattr(stream, "isatty", None)
        verbose = logging.getLogger().isEnabledFor(logging.INFO)
        if callable(isatty) and isatty() and not verbose:
            self._thread = threading.Thread(target=self._run, name="pipesim-status", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            if self.shown and self._stream is not None:
                self._stream.write(_ERASE)
                self._stream.flush()

    def _run(self) -> None:
        if self._stop.wait(self._delay_s):
            return
        while True:
            with self._lock:
                if self._stop.is_set():
                    return
                elapsed = time.monotonic() - self._started
                assert self._stream is not None
                self._stream.write(f"{_ERASE}pipesim: {self._text} ... {elapsed:.0f} s")
                self._stream.flush()
                self.shown = True
            if self._stop.wait(self._interval_s):
                return
