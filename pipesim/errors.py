"""The error taxonomy shared by every pipesim layer.

One base class, :class:`PipesimError`; :class:`InputError` (also a ``ValueError``) for bad input,
with :class:`UnknownNameError` and :class:`FormatError` as its common shapes; and
:class:`Infeasible` for well-formed requests that cannot run (a plan that does not fit in memory,
more stages than layers), which searches catch to prune. The CLI turns any :class:`PipesimError`
into one message on stderr and exit code 2.

This module imports nothing from pipesim, so every layer may import it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import TypeVar

__all__ = [
    "FormatError",
    "Infeasible",
    "InputError",
    "PipesimError",
    "UnknownNameError",
    "check_count",
    "check_fraction",
    "check_nonneg",
    "check_positive",
    "invalid",
    "parse_name",
    "vocabulary",
]

_E = TypeVar("_E", bound=Enum)


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


def _number(field: str, value: object, rule: str) -> float:
    """``value`` as a float; booleans, non-numbers and NaN are refused with ``rule``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise invalid(field, value, rule)
    if isinstance(value, int) and abs(value) > 1e300:
        raise invalid(field, value, f"{rule} (at most 1e300 in magnitude)")
    number = float(value)
    if math.isnan(number):
        raise invalid(field, value, f"{rule}, not NaN")
    return number


def check_positive(field: str, value: object, *, allow_inf: bool = False) -> float:
    """``value`` as a float after checking it is > 0 (and finite unless ``allow_inf``).

    Every failure gives one message stating the whole rule, e.g.
    ``bandwidth_bytes_per_s=-1: must be a finite number > 0``.

    Raises:
        InputError: a non-number (booleans included), NaN, a value <= 0, or infinity when it
            is not allowed.
    """
    rule = "must be a number > 0" if allow_inf else "must be a finite number > 0"
    number = _number(field, value, rule)
    if not number > 0 or (math.isinf(number) and not allow_inf):
        raise invalid(field, value, rule)
    return number


def check_nonneg(field: str, value: object, *, allow_inf: bool = False) -> float:
    """``value`` as a float after checking it is >= 0 (and finite unless ``allow_inf``).

    Raises:
        InputError: a non-number (booleans included), NaN, a negative value, or infinity when
            it is not allowed; the message states the whole rule.
    """
    rule = "must be a number >= 0" if allow_inf else "must be a finite number >= 0"
    number = _number(field, value, rule)
    if number < 0 or (math.isinf(number) and not allow_inf):
        raise invalid(field, value, rule)
    return number


def check_fraction(field: str, value: object) -> float:
    """``value`` as a float after checking ``0 < value <= 1`` (an efficiency, a share).

    Raises:
        InputError: a non-number, NaN or a value outside (0, 1].
    """
    rule = "must be a number in (0, 1]"
    number = _number(field, value, rule)
    if not 0 < number <= 1:
        raise invalid(field, value, rule)
    return number


def check_count(field: str, value: object, *, minimum: int = 1, maximum: int | None = None) -> int:
    """``value`` after checking it is an integer (not a bool) in ``[minimum, maximum]``.

    Raises:
        InputError: a non-integer or a value outside the bounds; the message states the whole
            rule (``must be an integer >= 1``, ``must be an integer >= 1 and <= 8``).
    """
    rule = f"must be an integer >= {minimum}" + ("" if maximum is None else f" and <= {maximum}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, value, rule)
    if value < minimum or (maximum is not None and value > maximum):
        raise invalid(field, value, rule)
    return value


def parse_name(kind: str, enum: type[_E], value: object) -> _E:
    """The member of a closed vocabulary (a ``str`` enum) called ``value``.

    Args:
        kind: what is named, for the message, e.g. ``"optimizer"``.
        enum: the enum whose member values are the valid names (lower case).
        value: a member of ``enum``, or its name (case-insensitive, surrounding blanks ignored).

    Raises:
        UnknownNameError: ``value`` names no member (or is not a string); the message lists
            the valid names.
    """
    if isinstance(value, enum):
        return value
    if isinstance(value, str):
        try:  # the enum's own value lookup (a dictionary), not a walk over its members
            return enum(value.strip().lower())
        except ValueError:
            pass
    valid = [str(member.value) for member in enum]
    raise UnknownNameError(kind, value if isinstance(value, str) else repr(value), valid)


def vocabulary(enum: type[Enum]) -> tuple[str, ...]:
    """The names of a closed vocabulary (a ``str`` enum's values), in definition order.

    For CLI ``choices`` and messages, so the names are written once, in the enum.
    """
    return tuple(str(member.value) for member in enum)
