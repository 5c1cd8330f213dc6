"""What the 3D estimate (:mod:`pipesim.planner.three_d`) takes as given: the schedules it times
and where a plan's ranks sit (:class:`Placed3d`)."""

from __future__ import annotations

from typing import NamedTuple

from pipesim.planner.nic_sharing import RingSharers

__all__ = ["FULL_AND_SPLIT", "THREE_D_SCHEDULES", "ZERO_BUBBLE_3D", "Placed3d"]

ZERO_BUBBLE_3D: tuple[str, ...] = ("zb-h1", "zb-h2", "zbv", "v-half", "interleaved-zb", "v-min", "dualpipev")
"""Split-backward schedules :func:`~pipesim.planner.three_d.estimate_3d` times by evaluating their
order over the chunks' per-op ``F``, ``I`` and ``W`` times
(:func:`~pipesim.planner.schedule_time.order_time_s`; module docstring): within 1% of the simulation
on DGX plans, 2% with ZeRO-2/3 (DualPipeV: 3.1% low with ZeRO-2/3, not searched with them;
``tests/tp/test_zbv_estimate.py``)."""

FULL_AND_SPLIT: tuple[str, ...] = ("dualpipev",)
"""Split-backward orders that also run full backwards ``B`` (DualPipeV's overlapped pairs and its
steady phase): under TP a ``B`` hides the input-gradient collectives an ``I`` exposes, so it is
timed apart from ``I + W`` (:func:`~pipesim.planner.schedule_time.order_time_s` ``input_s``)."""

THREE_D_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved", *ZERO_BUBBLE_3D)
"""Schedules :func:`~pipesim.planner.three_d.estimate_3d` models, each timed by its order (module
docstring; DAPPLE's is 1F1B's): GPipe, DAPPLE and 1F1B share the time ``(m + p - 1)(t_f + t_b)`` of
equal stages on free links, and their memory differs by the in-flight count."""


class Placed3d(NamedTuple):
    """Where a plan's ranks sit, as :func:`~pipesim.planner.three_d.estimate_config` costs them:
    ``rings`` per rank its TP ring (:meth:`~pipesim.planner.three_d_costs.ThreeDCosts.ring`),
    ``dp_group`` rank 0's gradient collective's members (every replica's CP ranks' first devices,
    replica by replica, as the simulator's lowering groups them), ``hop`` the first devices of ranks
    0 and 1 (the pipeline transfer), ``cp_hops`` per rank its context-parallel ring's hop
    (:meth:`~pipesim.planner.three_d_costs.ThreeDCosts.cp_hop`) and ``shared`` per rank whether its
    TP rings' bottleneck links carry its data-parallel ring too
    (:func:`~pipesim.planner.nic_sharing.shares_ring_link`; ``None``: automatic placement's,
    :meth:`~pipesim.planner.three_d_costs.ThreeDCosts.auto_shared`), ``sharers`` the other ranks' TP
    and gradient rings on those links (:func:`~pipesim.planner.nic_sharing.ring_sharers`; ``None``:
    automatic placement's, :meth:`~pipesim.planner.three_d_costs.ThreeDCosts.auto_sharers`),
    ``sends`` every replica's pipeline hop between ranks 0 and 1 (their first devices; none given:
    ``hop`` alone), ``firsts`` per rank its replicas' first devices (the tied matrices' gradient
    all-reduces, :mod:`pipesim.profiles.costmodels.tied_embeddings`; none given: automatic
    placement's)."""

    rings: tuple[int, ...]
    dp_group: tuple[int, ...]
    hop: tuple[int, int]
    cp_hops: tuple[int, ...]
    shared: tuple[bool, ...] | None = None
    sharers: RingSharers | None = None
    sends: tuple[tuple[int, int], ...] = ()
    firsts: tuple[tuple[int, ...], ...] = ()
