"""Read the compute order torch 2.13's pipelining schedules run, without a process group.

Single-stage schedules (``ScheduleGPipe``, ``Schedule1F1B``) are traced: their
``_step_microbatches`` runs against a fake stage that records each ``forward_one_chunk`` and
``backward_one_chunk`` call and whose communication op lists are empty. (Their ``pipeline_order``
IR is not used: in torch 2.13 ``Schedule1F1B._get_pipeline_order`` starts the last rank at
micro-batch 1, which is not what it runs.) Multi-stage schedules (``ScheduleInterleaved1F1B``,
``ScheduleInterleavedZeroBubble``) run their ``pipeline_order_with_comms``, whose compute actions
are read in order. Only used by the tests; needs torch.
"""

from __future__ import annotations

from typing import Any

COMPUTE = ("F", "B", "I", "W")
CLASSES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved": "ScheduleInterleaved1F1B",
    "zb-h1": "ScheduleInterleavedZeroBubble",
}
"""pipesim schedule name -> the torch class whose order it must equal."""


class _FakeStage:
    """Just enough of a torch ``_PipelineStageBase`` for the schedules' order logic."""

    def __init__(self, stage_index: int, num_stages: int, rank: int, group_size: int) -> None:
        import torch

        self.stage_index = stage_index
        self.num_stages = num_stages
        self.group_rank = rank
        self.group_size = group_size
        self.is_first = stage_index == 0
        self.is_last = stage_index == num_stages - 1
        self.submod = torch.nn.Module()
        self.output_chunks: list[Any] = []
        self.log: list[str] = []

    def forward_one_chunk(self, mb: int, *args: Any, **kwargs: Any) -> None:
        self.log.append(f"{self.stage_index}F{mb}")

    def backward_one_chunk(self, mb: int, *args: Any, **kwargs: Any) -> None:
        self.log.append(f"{self.stage_index}B{mb}")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("get_"):  # communication op lists: nothing to send or receive
            return lambda *args, **kwargs: []
        return lambda *args, **kwargs: None


def torch_order(name: str, p: int, m: int, v: int = 1) -> list[list[str]]:
    """The per-rank compute tokens torch runs for pipesim's schedule ``name``.

    Raises whatever torch raises for configurations it rejects (e.g. 1F1B with m < p).
    """
    from torch.distributed.pipelining import schedules

    cls = getattr(schedules, CLASSES[name])
    if name in ("gpipe", "1f1b"):
        rows = []
        for rank in range(p):
            stage = _FakeStage(rank, p, rank, p)
            schedule = cls(stage, m)
            schedule._initialize_stage = lambda *args, **kwargs: None
            schedule._step_microbatches()
            rows.append(stage.log)
        return rows
    stages = [_FakeStage(c * p, p * v, 0, p) for c in range(v)]
    schedule = cls(stages, m)
    order = schedule.pipeline_order_with_comms
    return [
        [str(a) for a in order[r] if a is not None and a.computation_type.value in COMPUTE]
        for r in sorted(order)
    ]
