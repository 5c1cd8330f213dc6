"""Running a sweep: every point of a config, in parallel processes or on a Dask cluster.

The points that share a model, cluster, overrides, batch size, planner, recompute mode,
precision, parallelism pins and plan options (optimizer, all-reduce algorithm, gradient reduction dtype,
ZeRO-1's collective, ZeRO-3's runtime) form one task: the task plans once and simulates the plan
under each of its schedules, schedule options and simulator options (as ``pipesim compare`` does).
Tasks run in worker processes (or Dask workers); the parent process writes each finished row to
the results file (:class:`~pipesim.sweep.store.ResultsWriter`).
"""

from __future__ import annotations

import importlib
import logging
import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

from pipesim.errors import FormatError, Infeasible, InputError, PipesimError, UnknownNameError, invalid
from pipesim.profiles.hardware.cluster import Cluster
from pipesim.profiles.inputs import resolve_cluster, resolve_inputs
from pipesim.profiles.models.profile import ModelProfile
from pipesim.schedules.order_text import is_schedule_file, read_schedule_file
from pipesim.sweep.config import (
    PLAN_OPTIONS,
    SCHEDULE_OPTIONS,
    SIM_OPTIONS,
    Overrides,
    SweepConfig,
    SweepPoint,
    overrides_text,
)
from pipesim.sweep.store import ResultsWriter, point_key

__all__ = ["SweepSummary", "SweepTask", "default_workers", "run_sweep", "run_task"]

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
"""``progress(done, total)``: called after each finished task with the points done so far."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepTask:
    """The unit of work sent to a worker: one planning problem and the schedules to simulate.

    Attributes:
        points: the points (same model, cluster, overrides, batch size, planner,
            recompute mode, precision, parallelism pins and plan options; one per schedule and
            simulator options).
        keys: each point's results key, in the same order.
        profile: the loaded model, or a zoo spec (costed on the cluster's device by the worker)
            (re-targeted to the cluster's device by the worker, through
            :func:`~pipesim.profiles.inputs.resolve_inputs`, so that a device that cannot run
            the model's dtype becomes an ``invalid`` row rather than stopping the sweep).
        cluster: the cluster with the overrides applied
            (:func:`~pipesim.profiles.inputs.resolve_cluster`).
        price_per_device_hour_usd: the price override of the config, or ``None`` for the
            cluster device's price.
    """

    points: tuple[SweepPoint, ...]
    keys: tuple[str, ...]
    profile: ModelProfile | str
    cluster: Cluster
    price_per_device_hour_usd: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepSummary:
    """What a sweep did.

    Attributes:
        path: the results file.
        points: points in the config's grid.
        skipped: points already in the file (``resume``).
        ran: points evaluated by this run.
        statuses: rows written by this run per status (``ok``, ``infeasible``, ``invalid``).
    """

    path: Path
    points: int
    skipped: int
    ran: int
    statuses: Mapping[str, int]


def default_workers() -> int:
    """The CPUs this process may use (the default number of worker processes)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _base_row(point: SweepPoint, key: str) -> dict[str, object]:
    return {
        "model": point.model,
        "cluster": point.cluster,
        "overrides": overrides_text(point.overrides),
        "global_batch_size": point.global_batch_size,
        "planner": point.planner,
        "schedule": point.schedule,
        "recompute": point.recompute,
        "tensor_parallel": point.tensor_parallel,
        "sequence_parallel": point.sequence_parallel,
        "sharding": point.sharding,
        "dtype": point.dtype,
        "context_parallel": point.context_parallel,
        "tp_comm_overlap": point.tp_comm_overlap,
        **{name: getattr(point, name) for name in (*PLAN_OPTIONS, *SIM_OPTIONS, *SCHEDULE_OPTIONS)},
        "key": key,
    }


def _failed(row: dict[str, object], exc: PipesimError) -> dict[str, object]:
    return {**row, "status": "infeasible" if isinstance(exc, Infeasible) else "invalid", "error": str(exc)}


def run_task(task: SweepTask) -> list[dict[str, object]]:
    """Plan once and simulate each schedule: one row per point of the task (a worker's job).

    A top-level function, so worker processes started with ``spawn`` and Dask workers can run it.
    A point whose planning or simulation raises :class:`~pipesim.errors.Infeasible` or
    :class:`~pipesim.errors.InputError` becomes a row with status ``infeasible`` or ``invalid``
    and the message in ``error``.

    Returns:
        Rows (column -> value) in the order of ``task.points``.
    """
    from pipesim.compare import compare
    from pipesim.planner import plan
    from pipesim.planner.megatron import MegatronPins
    from pipesim.simulator import SimOptions

    first = task.points[0]
    rows = [_base_row(p, k) for p, k in zip(task.points, task.keys, strict=True)]
    price = task.price_per_device_hour_usd
    if price is None:
        price = task.cluster.device.price_per_hour_usd
    try:
        profile, cluster = _inputs_of(task, first.dtype)
        pins = None
        if first.pinned:
            pins = MegatronPins(tensor_parallel=first.tensor_parallel,
                                sequence_parallel=first.sequence_parallel, sharding=first.sharding,
                                context_parallel=first.context_parallel,
                                tp_comm_overlap=first.tp_comm_overlap)
        held = "dapple" if first.planner == "dapple" else None  # every schedule on DAPPLE's plan
        base = plan(profile, cluster, first.global_batch_size, planner=first.planner, top=1,
                    recompute=first.recompute, pins=pins, schedule=held, optimizer=first.optimizer,
                    allreduce=first.allreduce,
                    grad_reduce_dtype=first.grad_reduce_dtype,
                    zero1_grad_collective=first.zero1_grad_collective,
                    zero3_runtime=first.zero3_runtime)[0]
    except (Infeasible, InputError) as exc:
        return [_failed(row, exc) for row in rows]
    out: list[dict[str, object]] = []
    for point, row in zip(task.points, rows, strict=True):
        try:
            options = SimOptions(record_trace=False, **{name: getattr(point, name) for name in SIM_OPTIONS})
            (done,) = compare(
                profile,
                cluster,
                point.global_batch_size,
                schedules=[
                    read_schedule_file(point.schedule) if is_schedule_file(point.schedule) else point.schedule
                ],
                base_plan=base,
                options=options,
                price_per_device_hour_usd=price,
                schedule_options=None if point.fb_overlap is None else {"fb_overlap": point.fb_overlap},
            )
        except (Infeasible, InputError) as exc:
            out.append(_failed(row, exc))
            continue
        summary = done.to_dict()
        done_row: dict[str, object] = {
            **row,
            "num_stages": done.plan.num_stages,
            "num_microbatches": done.plan.num_microbatches,
            "num_devices": done.plan.num_devices,
            "iteration_time_s": done.result.iteration_time_s,
            "throughput_samples_per_s": done.result.throughput_samples_per_s,
            "bubble_fraction": done.result.bubble_fraction,
            "peak_memory_bytes": summary["peak_memory_bytes"],
            "fits": done.result.fits,
            "estimated_iteration_time_s": done.estimated_iteration_time_s,
            "price_per_device_hour_usd": price,
            "cost_per_million_samples_usd": summary["cost_per_million_samples_usd"],
            "status": "ok",
            "error": "",
        }
        out.append(_finite_or_invalid(done_row))
    return out


def _inputs_of(task: SweepTask, dtype: str | None) -> tuple[ModelProfile, Cluster]:
    """The task's model and cluster in precision ``dtype`` (``None``: the model's own): a zoo
    model is costed in it on the cluster's device, a loaded file re-targeted to it."""
    from pipesim.profiles.costmodels.retarget import retarget_precision

    if isinstance(task.profile, str):
        return resolve_inputs(task.profile, task.cluster, dtype=dtype)
    profile, cluster = resolve_inputs(task.profile, task.cluster)
    if dtype is not None and dtype != profile.dtype:
        profile = retarget_precision(profile, dtype, cluster.device)
    return profile, cluster


def _finite_or_invalid(row: dict[str, object]) -> dict[str, object]:
    """``row``, or the row marked ``invalid`` when a number in it is NaN or infinite (a degenerate
    input, e.g. a model with no compute time): a results file never holds ``inf`` or ``nan``."""
    for column, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            message = f"{column}={value!r}: not a finite number; the inputs of this point are degenerate"
            cleared = {
                c: (None if isinstance(v, float) and not math.isfinite(v) else v) for c, v in row.items()
            }
            return {**cleared, "status": "invalid", "error": message}
    return row


def _load_inputs(
    config: SweepConfig,
) -> tuple[dict[str, ModelProfile | str], dict[tuple[str, Overrides], Cluster]]:
    """Load every model and every cluster with every override set once, in the parent.

    Raises:
        FormatError: a model, cluster or override set that cannot be loaded or applied; the
            message names the config key and the value.
    """
    from pipesim.profiles.hardware.catalog import get_device
    from pipesim.profiles.models.loader import load_model
    from pipesim.profiles.models.zoo import is_zoo_spec

    def fail(key: str, value: object, exc: Exception) -> FormatError:
        return FormatError(config.source, None, f"{key}: {value!r}: {exc}")

    models: dict[str, ModelProfile | str] = {}
    for spec in config.models:
        resolved = config.resolve_path(spec)
        try:
            loaded = load_model(resolved)
        except PipesimError as exc:
            raise fail("models", spec, exc) from None
        # a zoo model travels by name: the worker costs it on each cluster's own device
        models[spec] = resolved if is_zoo_spec(resolved) and not Path(resolved).exists() else loaded
        try:
            get_device(loaded.reference_device)
        except UnknownNameError:
            log.warning(
                "model %s was measured on %r, which is not in the device catalog: its times are used "
                "as they are on every cluster",
                spec,
                loaded.reference_device,
            )
    clusters: dict[tuple[str, Overrides], Cluster] = {}
    for spec in config.clusters:
        try:
            base = resolve_cluster(config.resolve_path(spec))
        except PipesimError as exc:
            raise fail("clusters", spec, exc) from None
        for overrides in config.overrides:
            try:
                clusters[spec, overrides] = resolve_cluster(base, dict(overrides))
            except PipesimError as exc:
                raise fail("overrides", dict(overrides), exc) from None
    return models, clusters


def _tasks(
    config: SweepConfig,
    done: set[str],
    inputs: tuple[dict[str, ModelProfile | str], dict[tuple[str, Overrides], Cluster]],
) -> tuple[list[SweepTask], int]:
    """The tasks for the points not yet done, and how many points were skipped.

    ``inputs`` is :func:`_load_inputs`' result: the models and clusters the points name.
    """
    models, clusters = inputs
    groups: dict[tuple[Any, ...], list[tuple[SweepPoint, str]]] = {}
    skipped = 0
    for point in config.points():
        key = point_key(point, config.price_per_device_hour_usd)
        if key in done:
            skipped += 1
            continue
        group = (
            point.model,
            point.cluster,
            point.overrides,
            point.global_batch_size,
            point.planner,
            point.recompute,
            point.dtype,
            point.tensor_parallel,
            point.sequence_parallel,
            point.sharding,
            point.context_parallel,
            point.tp_comm_overlap,
            *(getattr(point, name) for name in PLAN_OPTIONS),
        )
        groups.setdefault(group, []).append((point, key))
    tasks = [
        SweepTask(
            points=tuple(p for p, _ in members),
            keys=tuple(k for _, k in members),
            profile=models[members[0][0].model],
            cluster=clusters[members[0][0].cluster, members[0][0].overrides],
            price_per_device_hour_usd=config.price_per_device_hour_usd,
        )
        for members in groups.values()
    ]
    return tasks, skipped


def _run_inline(tasks: Iterable[SweepTask]) -> Iterator[list[dict[str, object]]]:
    for task in tasks:
        yield run_task(task)


PARENT_POLL_S = 0.5
"""How often a worker process checks that the sweep that started it is still alive, seconds."""


def _exit_with_parent(parent_pid: int) -> None:
    """Worker initializer: exit when the parent dies (killed, even with SIGKILL), instead of
    running on as an orphan; a worker blocked on its task queue would never notice otherwise."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="pipesim-sweep-parent-watch", daemon=True).start()


def _run_processes(tasks: list[SweepTask], workers: int) -> Iterator[list[dict[str, object]]]:
    # Spawned (not forked) workers: the same behaviour on every OS, and no inherited locks or threads.
    # At most 4 tasks per worker are queued, so a huge sweep does not pickle every task up front.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_exit_with_parent, initargs=(os.getpid(),)
    ) as pool:
        queue = iter(tasks)
        pending = {pool.submit(run_task, task) for task in islice(queue, 4 * workers)}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()
                pending |= {pool.submit(run_task, task) for task in islice(queue, len(finished))}
        finally:
            for future in pending:
                future.cancel()


def _run_dask(tasks: list[SweepTask], address: str) -> Iterator[list[dict[str, object]]]:
    try:  # typed as Any: an optional dependency, untyped where it is installed
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise InputError(
            "--dask-scheduler needs Dask's distributed scheduler: pip install 'pipesim[dask]'"
        ) from None
    with distributed.Client(address) as client:
        # At most 4 tasks per worker thread are queued, as for local processes.
        limit = max(16, 4 * sum(client.nthreads().values()))
        queue = iter(tasks)
        running = distributed.as_completed(
            [client.submit(run_task, task, pure=False) for task in islice(queue, limit)]
        )
        try:
            for future in running:
                rows: list[dict[str, object]] = future.result()
                yield rows
                task = next(queue, None)
                if task is not None:
                    running.add(client.submit(run_task, task, pure=False))
        finally:
            running.clear()


def run_sweep(
    config: SweepConfig,
    out: str | Path,
    *,
    workers: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    dask_scheduler: str | None = None,
    progress: Progress | None = None,
) -> SweepSummary:
    """Run every point of ``config`` and append one row per point to the CSV file ``out``.

    Rows arrive in completion order; their content does not depend on the order, the number of
    workers or the executor. An interrupted sweep keeps every finished row; ``resume`` skips them.

    Args:
        config: the grid (see :func:`~pipesim.sweep.config.load_sweep_config`).
        out: the results CSV (columns: :data:`~pipesim.sweep.store.COLUMNS`).
        workers: worker processes (default: the CPUs available); 1 runs in this process.
        resume: keep the rows already in ``out`` and run only the missing points.
        overwrite: replace an existing ``out`` instead of refusing.
        dask_scheduler: address of a Dask distributed scheduler (``tcp://host:8786``) to run the
            tasks on instead of local processes; ``workers`` is then ignored.
        progress: called as ``progress(done, total)`` with the points of this run.

    Returns:
        A summary of the points skipped and run, and the statuses written.

    Raises:
        FormatError: a model, cluster or override set in the config cannot be loaded.
        InputError: ``workers`` < 1, ``out`` has rows and neither ``resume`` nor ``overwrite``,
            or Dask is not installed.
        OSError: the results file cannot be written; a Dask scheduler cannot be reached.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise invalid("workers", workers, "must be an integer >= 1")
    # The inputs load before the results file opens: a model or cluster that cannot be loaded
    # leaves ``out`` as it was (no header-only file, no truncated results on --overwrite).
    inputs = _load_inputs(config)
    with ResultsWriter(out, resume=resume, overwrite=overwrite) as writer:
        tasks, skipped = _tasks(config, writer.done_keys, inputs)
        total = sum(len(t.points) for t in tasks)
        log.info("sweep %s: %d points, %d already done, %d tasks", out, total + skipped, skipped, len(tasks))
        if dask_scheduler is not None:
            results = _run_dask(tasks, dask_scheduler)
        else:
            count = min(workers or default_workers(), max(1, len(tasks)))
            results = _run_inline(tasks) if count == 1 else _run_processes(tasks, count)
        statuses: dict[str, int] = {}
        done = 0
        if progress is not None:
            progress(0, total)
        try:
            for rows in results:
                for row in rows:
                    writer.append(row)
                    status = str(row["status"])
                    statuses[status] = statuses.get(status, 0) + 1
                done += len(rows)
                if progress is not None:
                    progress(done, total)
        finally:
            close = getattr(results, "close", None)
            if close is not None:
                close()
    return SweepSummary(
        path=Path(out),
        points=total + skipped,
        skipped=skipped,
        ran=done,
        statuses=dict(sorted(statuses.items())),
    )
