"""The ``schedule`` sub-command: ``pipesim schedule show NAME -p P -m M [-v V] [--json]``."""

from __future__ import annotations

import argparse
from typing import Any

from pipesim.cli._common import positive_int, print_json
from pipesim.errors import invalid
from pipesim.fileio import parse_ascii_int
from pipesim.limits import MAX_COUNT
from pipesim.schedules import evaluate, format_timeline, make_schedule, schedule_names

__all__ = ["register"]

_FWD_SLOTS = 1
_BWD_SLOTS = 2
_WGRAD_SLOTS = 1
"""Unit costs of the text grid: F one slot, B two slots (I one and W one in the split form)."""


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``schedule`` with its sub-command ``show``."""
    schedule = subparsers.add_parser("schedule", help="show pipeline schedules")
    actions = schedule.add_subparsers(dest="schedule_command", metavar="{show}")
    actions.required = True
    show = actions.add_parser(
        "show",
        help="print a schedule as a grid of time slots (or its order as JSON)",
        description=(
            "Print the schedule as a grid: one row per rank, one column per time slot, timed with "
            f"unit costs: a forward F takes {_FWD_SLOTS} slot, a full backward B {_BWD_SLOTS} slots, "
            f"and in the split form the input gradient I and the weight gradient W "
            f"{_BWD_SLOTS - _WGRAD_SLOTS} slot each; '.' is idle. Tokens are torch's "
            "{stage}{op}{microbatch}, e.g. 1B0."
        ),
    )
    show.add_argument("name", help=f"schedule name: {', '.join(schedule_names())}")
    show.add_argument(
        "-p", "--ranks", type=positive_int, required=True, help="pipeline ranks (devices in a pipeline)"
    )
    show.add_argument(
        "-m", "--microbatches", type=positive_int, required=True, help="micro-batches per iteration"
    )
    show.add_argument(
        "-v",
        "--chunks",
        type=positive_int,
        default=None,
        help="stages per rank for interleaved (default 2) and zb-h1 (default 1)",
    )
    show.add_argument(
        "--warmup",
        default=None,
        help="dapple only: 'default', 'slow-link', or comma-separated per-stage warm-up counts",
    )
    show.add_argument(
        "--json",
        action="store_true",
        help='print {"schedule", "p", "m", "v", "ranks": {"0": ["0F0", ...]}} instead of the grid',
    )
    show.set_defaults(func=_show)


def _warmup(text: str) -> str | list[int]:
    if text in ("default", "slow-link"):
        return text
    counts = [parse_ascii_int(x) for x in text.split(",")]
    if any(c is None or not 0 <= c <= MAX_COUNT for c in counts):
        rule = f"must be 'default', 'slow-link' or comma-separated integers in 0..{MAX_COUNT}"
        raise invalid("--warmup", text, rule)
    return [c for c in counts if c is not None]


MAX_SHOWN_ACTIONS = 2**20
"""The most actions ``schedule show`` lays out (ranks x micro-batches x chunks x 3 passes, about):
a grid beyond it is unreadable and takes minutes to build."""


def _show(args: argparse.Namespace) -> int:
    size = args.ranks * args.microbatches * (args.chunks or 2)
    if size > MAX_SHOWN_ACTIONS:
        rule = f"ranks x micro-batches x chunks must be at most {MAX_SHOWN_ACTIONS} to show"
        raise invalid("-p/-m/-v", (args.ranks, args.microbatches, args.chunks), rule)
    options: dict[str, Any] = {} if args.warmup is None else {"warmup": _warmup(args.warmup)}
    schedule = make_schedule(
        args.name,
        num_ranks=args.ranks,
        num_microbatches=args.microbatches,
        chunks=args.chunks,
        **options,
    )
    if args.json:
        data = {
            "schedule": schedule.name,
            "p": schedule.num_ranks,
            "m": schedule.num_microbatches,
            "v": schedule.chunks,
            "ranks": schedule.to_order(),
        }
        print_json(data)
        return 0
    timeline = evaluate(schedule, fwd_time_s=_FWD_SLOTS, bwd_time_s=_BWD_SLOTS, wgrad_time_s=_WGRAD_SLOTS)
    print(
        f"{schedule.name}: p={schedule.num_ranks} m={schedule.num_microbatches} v={schedule.chunks}; "
        f"unit costs F={_FWD_SLOTS} B={_BWD_SLOTS} (I={_BWD_SLOTS - _WGRAD_SLOTS} W={_WGRAD_SLOTS})"
    )
    print(format_timeline(timeline))
    bubble = timeline.bubble_fraction
    print(
        f"makespan {timeline.makespan} slots, bubble {float(bubble):.1%} ({bubble}), "
        f"peak stashed micro-batches per stage: {', '.join(map(str, timeline.peak_stashed))}"
    )
    return 0
