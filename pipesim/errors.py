"""The error taxonomy shared by every pipesim layer.

One base class, :class:`PipesimError`; :class:`InputError` (also a ``ValueError``) for bad input,
with :class:`UnknownNameError` and :class:`FormatError` as its common shapes; and
:class:`Infeasible` for well-formed requests that cannot run (a plan that does not fit in memory,
more stages than layers), which searches catch to prune. The CLI turns any :class:`PipesimError`
into one message on stderr and exit code 2.

This module imports nothing from pipesim, so every layer may import it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "FormatError",
    "Infeasible",
    "InputError",
    "PipesimError",
    "UnknownNameError",
    "invalid",
]


class PipesimError(Exception):
    """Base class of every error pipesim raises on purpose."""


class InputError(PipesimError, ValueError):
    """A user-supplied value breaks a rule; the message names the field, the value and the rule."""


class UnknownNameError(InputError):
    """A name (model, cluster, schedule, device, ...) is not in its registry.

    Attributes:
        kind: what was looked up, e.g. ``"schedule"``.
        name: the name that was asked for.
        valid: the names that would have been accepted, sorted.
    """

    def __init__(self, kind: str, name: str, valid: Iterable[str]) -> None:
        self.kind = kind
        self.name = name
        self.valid = tuple(sorted(valid))
        super().__init__(f"unknown {kind} {name!r}; valid {kind} names: {', '.join(self.valid)}")


class FormatError(InputError):
    """A file does not follow its format; the message names the file, the line and what was expected.

    Attributes:
        path: the file, or ``None`` for text that came from no file.
        line: 1-based line number, or ``None`` when the problem is not tied to a line.
    """

    def __init__(self, path: str | Path | None, line: int | None, message: str) -> None:
        self.path = None if path is None else str(path)
        self.line = line
        where = self.path if self.path is not None else "<text>"
        if line is not None:
            where = f"{where}:{line}"
        super().__init__(f"{where}: {message}")


class Infeasible(PipesimError):
    """A well-formed request that cannot run: out of memory, more stages than layers, too few devices."""


def invalid(field: str, value: object, rule: str) -> InputError:
    """Build the standard bad-value error: ``field=value: rule``.

    Args:
        field: the name of the field or argument, e.g. ``"fwd_time_s"``.
        value: the offending value (shown with ``repr``).
        rule: what the value must satisfy, e.g. ``"must be >= 0"``.

    Returns:
        An :class:`InputError` to raise.
    """
    return InputError(f"{field}={value!r}: {rule}")
