"""Helpers shared by the CLI sub-commands: common arguments, tables and JSON output."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipesim.profiles.hardware.cluster import Cluster
    from pipesim.profiles.models.profile import ModelProfile

log = logging.getLogger(__name__)

__all__ = [
    "add_cluster_arg",
    "add_model_args",
    "add_set_arg",
    "format_table",
    "inputs_of",
    "override_item",
    "overrides_of",
    "positive_int",
    "print_json",
]


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def add_model_args(
    parser: argparse.ArgumentParser, *, required: bool = True, default: str | None = None
) -> None:
    """Add ``--model`` (zoo name, gpt:..., or profile file) and ``--pbs``."""
    parser.add_argument(
        "--model",
        required=required,
        default=default,
        help="zoo model name (see `pipesim models`), gpt:layers=..,hidden=.., or a profile file "
        "(pipesim JSON/TOML or TorchGraph .txt)" + (f" (default: {default})" if default else ""),
    )
    parser.add_argument(
        "--pbs",
        type=positive_int,
        default=None,
        help="profile batch size of a TorchGraph file whose name carries no -pbs-N",
    )


def add_cluster_arg(
    parser: argparse.ArgumentParser, *, required: bool = True, default: str | None = None
) -> None:
    """Add ``--cluster`` (preset name or cluster TOML file)."""
    parser.add_argument(
        "--cluster",
        required=required,
        default=default,
        help="cluster preset (see `pipesim clusters`) or a cluster TOML file"
        + (f" (default: {default})" if default else ""),
    )
    add_set_arg(parser)


def add_set_arg(parser: argparse.ArgumentParser, *, note: str = "") -> None:
    """Add ``--set KEY=VALUE`` (repeatable what-if changes to the cluster; :func:`overrides_of`)."""
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=override_item,
        help="what-if change to the cluster, repeatable: device=A100-80GB, nic=100GbE, servers=4, "
        "gpus_per_server=8, intra=nvswitch, nic_latency_us=5, ... (see docs/hardware.md); a new "
        "device re-targets the model profile to it with a per-layer roofline" + note,
    )


def override_item(text: str) -> tuple[str, object]:
    """argparse type of one ``--set KEY=VALUE``: ``"servers=4"`` -> ``("servers", 4)``.

    Values that read as integers or floats become numbers; everything else stays a string. The
    key and value are checked against the cluster later, by
    :func:`pipesim.profiles.inputs.resolve_cluster` (the one input path).

    Raises:
        argparse.ArgumentTypeError: an item without ``=`` or with an empty key or value.
    """
    key, sep, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if not sep or not key or not raw:
        raise argparse.ArgumentTypeError(f"{text!r} must be KEY=VALUE, e.g. nic=100GbE")
    value: object = raw
    for kind in (int, float):
        try:
            value = kind(raw)
            break
        except ValueError:
            continue
    return key, value


def overrides_of(args: argparse.Namespace) -> dict[str, object]:
    """The ``--set`` items of parsed arguments as a mapping (a key given twice: the last wins)."""
    return dict(getattr(args, "overrides", None) or [])


def inputs_of(args: argparse.Namespace) -> tuple[ModelProfile, Cluster]:
    """``--model``/``--pbs`` and ``--cluster``/``--set`` through the one input path
    (:func:`pipesim.profiles.inputs.resolve_inputs`): the profile re-targeted to the cluster's
    device, and the cluster with the overrides applied.

    Raises:
        PipesimError: an unknown name, a malformed file, or a bad override.
    """
    from pipesim.profiles.inputs import resolve_inputs

    pbs = getattr(args, "pbs", None)
    return resolve_inputs(args.model, args.cluster, overrides=overrides_of(args), pbs=pbs)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on stdout."""
    json.dump(data, sys.stdout, indent=2)
    sys.stdout.write("\n")


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], *, align: str | None = None
) -> str:
    """Format rows as a plain-text table; ``align`` has one ``l``/``r`` per column (default: r)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = align or "r" * len(headers)
    lines = []
    for k, row in enumerate(cells):
        parts = [c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align, strict=True)]
        lines.append("  ".join(parts).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
