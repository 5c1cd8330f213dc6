"""Read a whole per-rank order written in torch's token form into a Schedule.

Accepted texts (``parse_order``):

- JSON: ``{"0": ["0F0", "0F1", ...], "1": [...]}`` (keys are ranks), a list of lists, or the
  object ``pipesim schedule show --json`` prints (its ``"ranks"`` member is read);
- lines: one rank per line, tokens separated by blanks and/or commas, optionally led by
  ``0:`` or ``rank 0:``; ``#`` starts a comment. torch's CSV dump (``_dump_csv``) is of this
  form; its empty cells (torch's idle steps) are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pipesim.errors import FormatError, InputError
from pipesim.fileio import parse_ascii_int
from pipesim.schedules.action import Action
from pipesim.schedules.schedule import Schedule
from pipesim.schedules.validate import validate

__all__ = ["parse_order", "schedule_from_order"]

_RANK_PREFIX = re.compile(r"\s*(?:rank\s*)?([0-9]{1,18})\s*:")


def _action(token: str, line: int | None) -> Action:
    try:
        return Action.parse(token)
    except InputError as exc:
        raise FormatError(None, line, str(exc)) from None


def _rank_key(key: object) -> int | None:
    if isinstance(key, str):
        return parse_ascii_int(key)
    return key if isinstance(key, int) and not isinstance(key, bool) else None


def _from_json(data: Any) -> list[list[Action]]:
    if isinstance(data, Mapping) and "ranks" in data:
        data = data["ranks"]
    if isinstance(data, Mapping):
        keys = {k: _rank_key(k) for k in data}
        if any(rank is None for rank in keys.values()):
            raise FormatError(None, None, f"rank keys must be integers, got {sorted(map(str, data))}")
        if len(set(keys.values())) != len(keys):
            raise FormatError(None, None, f"rank keys name a rank twice: {sorted(map(str, data))}")
        keyed = {rank: data[k] for k, rank in keys.items() if rank is not None}
        if sorted(keyed) != list(range(len(keyed))):
            raise FormatError(None, None, f"rank keys must be 0..{len(keyed) - 1}, got {sorted(keyed)}")
        data = [keyed[r] for r in range(len(keyed))]
    if not isinstance(data, list) or not all(isinstance(row, list) for row in data):
        raise FormatError(None, None, "JSON order must map ranks to lists of tokens, e.g. {\"0\": [\"0F0\"]}")
    rows = []
    for row in data:
        tokens = []
        for token in row:
            if token is None or token == "":
                continue  # torch's idle step
            if not isinstance(token, str):
                raise FormatError(None, None, f"token {token!r} must be a string like '0F1'")
            tokens.append(_action(token, None))
        rows.append(tokens)
    return rows


def _from_lines(text: str) -> list[list[Action]]:
    rows: dict[int, list[Action]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0]
        if not line.strip():
            continue
        prefix = _RANK_PREFIX.match(line)
        rank = len(rows)
        if prefix is not None:
            rank = int(prefix.group(1))
            line = line[prefix.end():]
        if rank in rows:
            raise FormatError(None, number, f"rank {rank} appears twice")
        rows[rank] = [_action(tok, number) for tok in re.split(r"[\s,]+", line) if tok]
    if sorted(rows) != list(range(len(rows))):
        raise FormatError(None, None, f"ranks must be 0..{len(rows) - 1}, got {sorted(rows)}")
    return [rows[r] for r in range(len(rows))]


def parse_order(text: str) -> list[list[Action]]:
    """Parse a per-rank order (JSON or lines, see the module doc) into lists of actions.

    Raises:
        FormatError: malformed JSON structure, a bad token (with its line), or ranks that are not
            ``0..p-1``.
    """
    if text.lstrip().startswith(("{", "[")):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise FormatError(None, exc.lineno, f"invalid JSON: {exc.msg}") from None
        except ValueError as exc:  # int() of a number over 4300 digits
            raise FormatError(None, None, f"invalid JSON: {exc}") from None
        rows = _from_json(data)
    else:
        rows = _from_lines(text)
    if not rows:
        raise FormatError(None, None, "the order has no ranks")
    return rows


def schedule_from_order(
    order: str | Mapping[str, Sequence[str]] | Sequence[Sequence[str]],
    *,
    name: str = "custom",
    num_stages: int | None = None,
    num_microbatches: int | None = None,
    microbatch_sizes: Sequence[int] | None = None,
) -> Schedule:
    """Build and validate a Schedule from a pasted order (text, or the parsed JSON mapping/list).

    The number of ranks is the number of rows; the stage and micro-batch counts default to one more
    than the largest index that appears (give them to check against).

    Raises:
        FormatError: the text cannot be read.
        ScheduleError: the order is not a valid schedule (the message shows its grid).
        InputError: counts that do not fit the order.
    """
    rows = parse_order(order) if isinstance(order, str) else _from_json(order)
    actions = [a for row in rows for a in row]
    stages = num_stages if num_stages is not None else max((a.stage for a in actions), default=0) + 1
    if num_microbatches is None:
        num_microbatches = max((a.microbatch for a in actions if a.microbatch is not None), default=0) + 1
    # pad the stage count to a multiple of the rank count only when it was inferred
    p = len(rows)
    if num_stages is None and stages % p:
        stages += p - stages % p
    schedule = Schedule(
        name=name,
        num_ranks=p,
        num_stages=stages,
        num_microbatches=num_microbatches,
        ranks=tuple(tuple(row) for row in rows),
        microbatch_sizes=None if microbatch_sizes is None else tuple(microbatch_sizes),
    )
    validate(schedule)
    return schedule
