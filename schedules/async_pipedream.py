"""Asynchronous PipeDream (weight stashing, no flush) and PipeDream-2BW (double-buffered weights).

Neither flushes the pipeline between iterations: the next iteration's forwards fill the drain of
this one, so the pipeline stays in 1F1B's steady state. Within one iteration of ``m``
micro-batches each rank runs the 1F1B order (PipeDream, Harlap et al. 2018 / Narayanan et al.,
SOSP 2019: "1F1B-RR" with one worker per stage); what differs from the flushed 1F1B is

- the time per iteration in steady state, :func:`steady_iteration_time`: the makespan of ``2m``
  micro-batches run back to back minus that of ``m`` (``m (t_f + t_b)`` with equal stages and
  free links, against 1F1B's ``(m + p - 1)(t_f + t_b)``): the fill and drain are paid once for
  the whole run, not once per iteration;
- the weights kept (:func:`pipesim.profiles.costmodels.memory.weight_versions`, which the
  simulator adds to each device's static memory): asynchronous PipeDream stashes one weight version
  per in-flight micro-batch, ``min(p - i, m)`` on stage ``i`` (PipeDream, sec. 3.3, "weight
  stashing"); PipeDream-2BW keeps two, the one being updated and the one in use (Narayanan et al.,
  "Memory-Efficient Pipeline-Parallel DNN Training", ICML 2021, sec. 3.1), with gradients
  accumulated over the iteration's ``m`` micro-batches.

A simulated iteration (``pipesim simulate``) runs the order of one iteration from an empty
pipeline, so its time is the flushed one; :func:`steady_iteration_time` gives the steady state.
"""

from __future__ import annotations

from pipesim.errors import check_count
from pipesim.schedules import generators
from pipesim.schedules.schedule import Schedule, ScheduleStream
from pipesim.schedules.timing import Time, evaluate

__all__ = ["pipedream_2bw", "pipedream_async", "steady_iteration_time"]


def _renamed(name: str, p: int, m: int) -> ScheduleStream:
    base = generators.stream_of(generators.one_f_one_b)(num_ranks=p, num_microbatches=m)
    return ScheduleStream(
        name=name, num_ranks=p, num_stages=p, num_microbatches=m, rows=base.rows, placement="looped"
    )


def pipedream_async(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """Asynchronous PipeDream: one iteration's order is 1F1B's (``min(p - i, m)`` warm-up
    forwards on stage ``i``); no flush, weight stashing. Unit-cost slots for p=4, m=8: those of
    :func:`~pipesim.schedules.generators.one_f_one_b`.

    Raises:
        InputError: a count below 1.
    """
    return _pipedream_async(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _pipedream_async(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    return _renamed("pipedream-async", num_ranks, num_microbatches)


def pipedream_2bw(*, num_ranks: int, num_microbatches: int) -> Schedule:
    """PipeDream-2BW: 1F1B's order, no flush, two weight versions per stage. Unit-cost slots
    for p=4, m=8: those of :func:`~pipesim.schedules.generators.one_f_one_b`.

    Raises:
        InputError: a count below 1.
    """
    return _pipedream_2bw(num_ranks=num_ranks, num_microbatches=num_microbatches).materialize()


def _pipedream_2bw(*, num_ranks: int, num_microbatches: int) -> ScheduleStream:
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    return _renamed("pipedream-2bw", num_ranks, num_microbatches)


def steady_iteration_time(
    *,
    num_ranks: int,
    num_microbatches: int,
    fwd_time_s: Time,
    bwd_time_s: Time,
    comm_time_s: Time = 0,
) -> Time:
    """Seconds per iteration of ``m`` micro-batches once a flush-free 1F1B pipeline is full.

    The analytic evaluator runs ``2m`` micro-batches back to back in the 1F1B order and ``m``
    micro-batches alone; the difference is the time one more iteration adds. Exact with
    ``int``/``Fraction`` costs: ``m (t_f + t_b)`` with equal stages and free links.

    Raises:
        InputError: a count below 1 or a negative cost.
    """
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    times = []
    for m in (num_microbatches, 2 * num_microbatches):
        order = generators.one_f_one_b(num_ranks=num_ranks, num_microbatches=m)
        timeline = evaluate(
            order,
            fwd_time_s=fwd_time_s,
            bwd_time_s=bwd_time_s,
            fwd_comm_time_s=comm_time_s,
            bwd_comm_time_s=comm_time_s,
            check=False,
        )
        times.append(timeline.makespan)
    return times[1] - times[0]
