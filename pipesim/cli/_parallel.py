"""The ``--tp``, ``--sp``, ``--cp`` and ``--zero`` options: tensor, sequence and context
parallelism and data-parallel sharding pinned by the user (``simulate``, ``plan``, ``compare``, ``sweep``),
and ``--grad-reduce-dtype`` and ``--zero1-grad-collective``: the data-parallel gradient
collectives' dtype and ZeRO-1's gradient collective (:class:`~pipesim.plan.Plan`)."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING

from pipesim.cli._common import positive_int
from pipesim.errors import InputError
from pipesim.profiles.costmodels.sharding import SHARDINGS, GradCollective, parse_grad_reduce_dtype

if TYPE_CHECKING:
    from pipesim.plan import Plan
    from pipesim.planner.megatron import MegatronPins

__all__ = ["add_gradient_args", "add_parallel_args", "apply_parallel", "parallel_text", "pins_of"]


def add_parallel_args(
    p: argparse.ArgumentParser, *, overlap: bool = False, gradients: bool = False, param_gather: bool = False
) -> None:
    """Add ``--tp``, ``--sp``, ``--cp`` and ``--zero`` (and ``--tp-overlap`` with ``overlap``, for
    commands that run a given plan; ``--grad-reduce-dtype`` and ``--zero1-grad-collective`` with
    ``gradients``; ``--overlap-param-gather`` with ``param_gather``, for commands that run a given
    plan through :func:`apply_parallel`)."""
    p.add_argument(
        "--tp",
        type=positive_int,
        default=None,
        help="tensor-parallel degree of every stage (Megatron-LM; the model's layers need shapes)",
    )
    p.add_argument(
        "--sp",
        action="store_const",
        const=True,
        default=None,
        help="sequence parallelism with --tp (reduce-scatter/all-gather instead of all-reduce)",
    )
    p.add_argument(
        "--cp",
        type=positive_int,
        default=None,
        help="context-parallel degree of every stage: the sequence split over CP ranks with ring "
        "attention (Megatron-LM's --context-parallel-size; it must divide the sequence length)",
    )
    p.add_argument(
        "--zero",
        choices=(*SHARDINGS, "0", "1", "2", "3"),
        default=None,
        help="data-parallel sharding: none, zero1 (optimizer state), zero2 (+gradients), "
        "zero3 (+parameters), distributed (Megatron-LM's distributed optimizer); 0-3 name ZeRO stages",
    )
    if gradients:
        add_gradient_args(p)
    if param_gather:
        p.add_argument(
            "--overlap-param-gather",
            action="store_const",
            const=True,
            default=None,
            help="the distributed optimizer's parameter all-gather per bucket overlapped with the next "
            "forward (Megatron-LM's --overlap-param-gather; needs --zero distributed; docs/parallelism.md)",
        )
    if overlap:
        p.add_argument(
            "--tp-overlap",
            action="store_const",
            const=True,
            default=None,
            help="with --sp, overlap the TP all-gathers and reduce-scatters with the GEMMs by ring "
            "exchange (Megatron-LM's tp_comm_overlap; docs/parallelism.md)",
        )


def add_gradient_args(p: argparse.ArgumentParser) -> None:
    """Add ``--grad-reduce-dtype`` and ``--zero1-grad-collective`` (:func:`apply_parallel` sets them)."""
    p.add_argument(
        "--grad-reduce-dtype",
        type=_grad_dtype,
        default=None,
        help="dtype the data-parallel gradients are kept and reduced in: fp32, bf16 or fp16 (default: "
        "Megatron-LM's rule, fp32 for bf16 training, else the training dtype)",
    )
    p.add_argument(
        "--zero1-grad-collective",
        type=_grad_collective,
        default=None,
        help="ZeRO-1's gradient collective: reduce-scatter (default) or all-reduce (DeepSpeed's "
        "BF16_Optimizer; then the updated parameters are all-gathered either way)",
    )


def _grad_dtype(text: str) -> str | None:
    try:
        return parse_grad_reduce_dtype(text)
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _grad_collective(text: str) -> str:
    try:
        return GradCollective.parse(text).value
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def pins_of(args: argparse.Namespace) -> MegatronPins | None:
    """The planner pins the options give, or ``None`` when none is given.

    Raises:
        InputError: ``--sp`` without ``--tp`` > 1 given as 1.
    """
    from pipesim.planner.megatron import MegatronPins

    if args.tp is None and args.sp is None and args.zero is None and args.cp is None:
        return None
    return MegatronPins(tensor_parallel=args.tp, sequence_parallel=args.sp, sharding=args.zero,
                        context_parallel=args.cp)


def apply_parallel(plan: Plan, args: argparse.Namespace) -> Plan:
    """``plan`` with every stage's tensor, sequence and context parallelism and sharding, and the
    plan's gradient reduction dtype, ZeRO-1 gradient collective and ``overlap_param_gather``, set
    as the options say
    (options not given leave the plan's values). A stage whose tensor- or
    context-parallel degree changes is placed anew (its device list dropped).

    Raises:
        InputError: a combination a stage refuses (``--sp`` without ``--tp`` > 1), or
            ``--overlap-param-gather`` without the distributed optimizer on every stage.
    """
    plan = _apply_parallel(plan, args)
    if getattr(args, "overlap_param_gather", None):
        plan = replace(plan, overlap_param_gather=True, estimate=None)
    return plan


def _apply_parallel(plan: Plan, args: argparse.Namespace) -> Plan:
    tp_overlap = getattr(args, "tp_overlap", None)
    grad_dtype = getattr(args, "grad_reduce_dtype", None)
    collective = getattr(args, "zero1_grad_collective", None)
    if grad_dtype is not None or collective is not None:
        plan = replace(
            plan,
            grad_reduce_dtype=plan.grad_reduce_dtype if grad_dtype is None else grad_dtype,
            zero1_grad_collective=plan.zero1_grad_collective if collective is None else collective,
            estimate=None,
        )
    if args.tp is None and args.sp is None and args.zero is None and tp_overlap is None and args.cp is None:
        return plan
    stages = []
    for stage in plan.stages:
        t = stage.tensor_parallel if args.tp is None else args.tp
        c = stage.context_parallel if args.cp is None else args.cp
        stages.append(
            replace(
                stage,
                tensor_parallel=t,
                sequence_parallel=stage.sequence_parallel if args.sp is None else args.sp,
                sharding=stage.sharding if args.zero is None else args.zero,
                tp_comm_overlap=stage.tp_comm_overlap if tp_overlap is None else tp_overlap,
                context_parallel=c,
                devices=stage.devices if (t, c) == (stage.tensor_parallel, stage.context_parallel) else None,
            )
        )
    return replace(plan, stages=tuple(stages), estimate=None)


def parallel_text(plan: Plan) -> str:
    """``", tensor parallel 4,4, sequence parallel, sharding zero1"`` for a plan with tensor
    parallelism, sequence parallelism or sharding (per rank), else ``""`` (the summary line)."""
    ranks = plan.stages[: plan.num_ranks]
    parts = []
    if any(s.tensor_parallel > 1 for s in ranks):
        parts.append("tensor parallel " + ",".join(str(s.tensor_parallel) for s in ranks))
    if any(s.sequence_parallel for s in plan.stages):
        parts.append("sequence parallel")
    if any(s.context_parallel > 1 for s in ranks):
        parts.append("context parallel " + ",".join(str(s.context_parallel) for s in ranks))
    shardings = sorted({s.sharding.value for s in plan.stages} - {"none"})
    if shardings:
        parts.append("sharding " + ",".join(shardings))
    if any(s.tp_comm_overlap for s in plan.stages):
        parts.append("TP overlap")
    if plan.grad_reduce_dtype is not None:
        parts.append(f"{plan.grad_reduce_dtype} gradients")
    if plan.zero1_grad_collective.value != "reduce-scatter" and "zero1" in shardings:
        parts.append(f"ZeRO-1 gradient {plan.zero1_grad_collective.value}")
    if plan.overlap_param_gather:
        parts.append("parameter all-gather overlapped")
    return "".join(", " + p for p in parts)
