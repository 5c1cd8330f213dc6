"""``pipesim report``: a comparison as one self-contained HTML page to share or attach."""

from __future__ import annotations

import argparse

from pipesim.cli._common import add_cluster_arg, add_model_args, inputs_of, positive_int
from pipesim.cli.progress import Status

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``report``."""
    from pipesim.cli.compare import DEFAULT_CLUSTER, DEFAULT_GBS, DEFAULT_MODEL

    p = subparsers.add_parser(
        "report",
        help="write a comparison as one self-contained HTML page (table, Gantt, memory, plan)",
        description="Plan the model on the cluster, simulate the plan under each schedule (as "
        "`pipesim compare`) and write one HTML file with the table, the Gantt chart, the memory "
        "chart and the plan; the images are embedded, so the file opens offline.",
    )
    add_model_args(p, required=False, default=DEFAULT_MODEL)
    add_cluster_arg(p, required=False, default=DEFAULT_CLUSTER)
    p.add_argument(
        "--gbs", type=positive_int, default=DEFAULT_GBS, help=f"global batch size (default {DEFAULT_GBS})"
    )
    p.add_argument(
        "--schedules", default="gpipe,dapple", help="comma-separated schedules (default gpipe,dapple)"
    )
    p.add_argument("--planner", default="dapple", help="planner whose best plan is compared (default dapple)")
    p.add_argument("--plan", help="report on this plan file instead of planning")
    p.add_argument(
        "-o", "--out", default="pipesim-report.html", help="the HTML file (default pipesim-report.html)"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from pipesim.compare import compare
    from pipesim.errors import invalid
    from pipesim.plan_file import load_plan
    from pipesim.reports.html import write_compare_report

    if not str(args.out).lower().endswith((".html", ".htm")):
        raise invalid("--out", args.out, "must end in .html or .htm")
    profile, cluster = inputs_of(args)
    schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    base = load_plan(args.plan) if args.plan else None
    title = f"{profile.name} on {cluster.name}"
    with Status(f"comparing {', '.join(schedules)} for {title}"):
        rows = compare(
            profile,
            cluster,
            base.global_batch_size if base else args.gbs,
            schedules=schedules,
            planner=args.planner,
            base_plan=base,
        )
        path = write_compare_report(rows, args.out, title=title)
    print(f"wrote {path}")
    return 0
