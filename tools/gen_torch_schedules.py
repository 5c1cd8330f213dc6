"""Record the compute orders torch's pipelining schedules generate, as golden files for the tests.

Run it with a Python that has torch 2.13 (never imported by pipesim or its tests)::

    python tools/gen_torch_schedules.py [--out tests/schedules/golden/torch]

For each (class, p, m) it builds the schedule object on stub stages (no process group: the
multi-stage classes compute ``pipeline_order`` for every rank in their constructor from the
stages' ``stage_index``, ``num_stages``, ``group_rank`` and ``group_size`` alone, which is what
torch's own schedule tests rely on when they build schedules from mock stages) and writes
``pipeline_order`` with the idle steps (``None``) left out, one rank per line
(``0: 0F0 0F1 ...``). ``OVERLAP_F_B`` (DualPipeV's overlapped forward and backward) is written
as its sub-actions, the forward first. A configuration torch rejects is skipped.

It also writes, for a few cases, torch's own ``_dump_csv`` of the order with communication
(``*_comms.csv``) and without (``*_compute.csv``), the files ``--schedule FILE.csv`` reads.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

CLASSES = {
    "looped-bfs": ("ScheduleLoopedBFS", "loop", (2, 3)),
    "interleaved-zb": ("ScheduleInterleavedZeroBubble", "loop", (1, 2, 3)),
    "zbv": ("ScheduleZBVZeroBubble", "v", (2,)),
    "dualpipev": ("ScheduleDualPipeV", "v", (2,)),
}
"""pipesim name -> (torch class, stage placement style, stages per rank recorded)."""
RANKS = (2, 4, 8)
MICROBATCHES = (1, 2, 3, 4, 6, 8, 12, 16, 24)
CSV_CASES = (("zbv", 2, 4, 2), ("interleaved-zb", 2, 4, 2), ("looped-bfs", 2, 4, 2), ("dualpipev", 2, 4, 2))


class _StubStage:
    """The attributes of a torch ``_PipelineStageBase`` that the schedules' order logic reads."""

    def __init__(self, stage_index: int, num_stages: int, rank: int, group_size: int) -> None:
        import torch

        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_rank = rank
        self.group_size = group_size
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = torch.nn.Module()
        self.stage_index_to_group_rank: dict[int, int] = {}

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


def build(name: str, p: int, m: int, v: int) -> Any:
    """The torch schedule object for pipesim's ``name`` with ``p`` ranks, ``m`` micro-batches and
    ``v`` stages per rank (rank 0's stages; every rank's order is computed anyway)."""
    from torch.distributed.pipelining import _utils, schedules

    cls_name, style, _ = CLASSES[name]
    mapping = _utils.generate_rank_to_stage_mapping(p, p * v, style=style)
    stages = [_StubStage(s, p * v, 0, p) for s in mapping[0]]
    return getattr(schedules, cls_name)(stages, m)


def compute_order(name: str, p: int, m: int, v: int) -> list[list[str]]:
    """Per-rank compute tokens of torch's ``pipeline_order`` (idle steps left out)."""
    schedule = build(name, p, m, v)
    rows = []
    for rank in sorted(schedule.pipeline_order):
        tokens = []
        for action in schedule.pipeline_order[rank]:
            if action is None:
                continue
            subs = action.sub_actions if action.sub_actions is not None else (action,)
            tokens.extend(str(a) for a in subs)
        rows.append(tokens)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="tests/schedules/golden/torch", help="output folder")
    args = parser.parse_args(argv)
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for name, (_, _, chunk_counts) in CLASSES.items():
        for v in chunk_counts:
            for p in RANKS:
                for m in MICROBATCHES:
                    try:
                        rows = compute_order(name, p, m, v)
                    except (ValueError, RuntimeError, AssertionError):
                        continue  # torch rejects this configuration
                    header = f"# torch {torch.__version__} {CLASSES[name][0]} p={p} m={m} v={v}\n"
                    body = "".join(f"{r}: {' '.join(row)}\n" for r, row in enumerate(rows))
                    (out / f"{name}_p{p}_m{m}_v{v}.txt").write_text(header + body)
                    written += 1
    for name, p, m, v in CSV_CASES:
        schedule = build(name, p, m, v)
        for fmt, suffix in (("compute_only", "compute"), ("compute_comms", "comms")):
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "order.csv")
                schedule._dump_csv(path, format=fmt)
                text = Path(path).read_text()
            (out / f"{name}_p{p}_m{m}_v{v}_{suffix}.csv").write_text(text)
    sys.stdout.write(f"wrote {written} orders and {2 * len(CSV_CASES)} CSV dumps to {out}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
