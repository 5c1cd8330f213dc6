"""Network: flow-level transfers over directed links shared max-min fairly, on a SimPy clock.

The model
---------
A cluster's interconnect is a set of *directed* links, each with an effective bandwidth (bytes/s,
per direction: the two directions of a cable are two links) and a latency (seconds). A transfer
sends ``nbytes`` along a *route*, a tuple of link indices, and takes::

    overhead_s + sum(latency_s[l] for l in route)  +  the time its bytes take to flow

The latency (and the optional fixed per-transfer software overhead) is paid once, before any byte
flows; the bytes then flow over every link of the route at once (a fluid, cut-through model: no
store-and-forward per hop). While bytes flow, the transfer is a *flow*, and the concurrent flows
share each link *max-min fairly*: rates are the progressive-filling allocation (raise every rate
together, freeze the flows of a link when the link fills, go on with the rest), re-computed
whenever a flow starts or ends. Two equal flows on one link therefore take twice as long as one.

Special cases: a transfer with an empty route (same device) completes after zero time (no
overhead either); a zero-byte transfer completes after the route's latency plus the overhead;
links of infinite bandwidth never constrain a rate; ``free_links=True`` makes every transfer
complete after zero time (closed-form checks of compute-only timelines).


The flows themselves (max-min re-fills, completion timer, delivery) live in
:mod:`pipesim.simulator.flow_sharing`, whose :class:`~pipesim.simulator.flow_sharing.FlowSharing`
this class derives from.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

import simpy

from pipesim.errors import check_nonneg, check_positive, invalid
from pipesim.profiles.costmodels.nccl_protocol import LinkClass, link_classes
from pipesim.profiles.hardware.fabric import LinkTable
from pipesim.simulator.flow_sharing import FlowSharing
from pipesim.simulator.link_records import LinkInterval, LinkStretches, NetworkStats, TransferRecord
from pipesim.simulator.maxmin import Flow

__all__ = ["LinkInterval", "LinkStretches", "Network", "NetworkStats", "TransferRecord"]

logger = logging.getLogger(__name__)


class Network(FlowSharing):
    """Directed links shared max-min fairly by concurrent transfers, driven by a SimPy environment.

    Args:
        env: the SimPy environment whose clock (seconds) the network runs on.
        bandwidth_bytes_per_s: effective bandwidth of each directed link, bytes/s, > 0
            (``math.inf`` allowed: such a link never limits a rate).
        latency_s: latency of each link, seconds, finite and >= 0; same length.
        link_names: optional display names of the links (for traces); default ``link<i>``.
        overhead_s: fixed software overhead added to every transfer over a non-empty route,
            seconds, >= 0; default 0.
        free_links: if true, every transfer completes after zero time (infinite bandwidth, zero
            latency, no overhead).
        contention: if false, links are not shared: every transfer gets its route's bottleneck
            bandwidth whatever else is in flight (the contention-free model of the analytic
            evaluator in :mod:`pipesim.schedules`); default true (max-min fair sharing).
        on_transfer: called with a :class:`TransferRecord` when each transfer is delivered.
        on_link_interval: called with a :class:`LinkInterval` each time a link's total rate
            changes after being > 0 (per-link utilisation tracks). Costs one pass over the
            re-filled links per re-fill; leave ``None`` when not needed.
        on_link_stretch: the same records as plain arguments ``(link, start_s, end_s,
            bytes_per_s)``, without building a :class:`LinkInterval` per record.
        link_stretches: the same records appended, in columns, to this
            :class:`~pipesim.simulator.link_records.LinkStretches` (no call and no object per
            record: for callers that keep hundreds of thousands of them, such as the engine's
            trace). At most one of ``on_link_interval``, ``on_link_stretch`` and
            ``link_stretches``.
        link_classes: NCCL's class of each link (NVLink, PCIe, network), for collectives: with
            them a collective's step pays NCCL's hand-off for its class and only its network
            links' latency (:mod:`pipesim.profiles.costmodels.nccl_protocol`); without them
            (default) its routes' latency and the protocol's NVLink figure. Point-to-point
            transfers are not affected.

    Raises:
        InputError: a bandwidth, latency or the overhead breaks its rule, the lengths differ, or
            ``link_names`` has the wrong length.
    """

    def __init__(
        self,
        env: simpy.Environment,
        bandwidth_bytes_per_s: Sequence[float],
        latency_s: Sequence[float],
        *,
        link_names: Sequence[str] | None = None,
        overhead_s: float = 0.0,
        free_links: bool = False,
        contention: bool = True,
        on_transfer: Callable[[TransferRecord], None] | None = None,
        on_link_interval: Callable[[LinkInterval], None] | None = None,
        on_link_stretch: Callable[[int, float, float, float], None] | None = None,
        link_stretches: LinkStretches | None = None,
        link_classes: Sequence[LinkClass] | None = None,
    ) -> None:
        cap = [
            check_positive(f"bandwidth_bytes_per_s[{i}]", v, allow_inf=True)
            for i, v in enumerate(bandwidth_bytes_per_s)
        ]
        self._lat = [check_nonneg(f"latency_s[{i}]", v) for i, v in enumerate(latency_s)]
        if len(self._lat) != len(cap):
            raise invalid(
                "latency_s", f"<{len(self._lat)} values>", f"must have one value per link ({len(cap)})"
            )
        n_links = len(cap)
        if link_names is None:
            self._names = tuple(f"link{i}" for i in range(n_links))
        else:
            self._names = tuple(str(s) for s in link_names)
            if len(self._names) != n_links:
                raise invalid(
                    "link_names", f"<{len(self._names)} names>", f"must name each of {n_links} links"
                )
        self._overhead = check_nonneg("overhead_s", overhead_s)
        self._free = bool(free_links)
        self._contention = bool(contention)
        given = [on_link_interval, on_link_stretch, link_stretches]
        if sum(x is not None for x in given) > 1:
            raise invalid(
                "on_link_stretch",
                "several link recorders",
                "give at most one of on_link_interval, on_link_stretch and link_stretches",
            )
        # Every recorder is fed the stretches closed at one instant as one flat list:
        # link, start_s, end_s, bytes_per_s for each.
        on_link: Callable[[list[float]], None] | None = None
        if link_stretches is not None:
            on_link = link_stretches.data.fromlist
        elif on_link_interval is not None:
            interval = on_link_interval

            def emit_interval(recs: list[float]) -> None:
                for k in range(0, len(recs), 4):
                    link, start, end, rate = recs[k : k + 4]
                    interval(LinkInterval(link=int(link), start_s=start, end_s=end, bytes_per_s=rate))

            on_link = emit_interval
        elif on_link_stretch is not None:
            stretch = on_link_stretch

            def emit_stretch(recs: list[float]) -> None:
                for k in range(0, len(recs), 4):
                    stretch(int(recs[k]), recs[k + 1], recs[k + 2], recs[k + 3])

            on_link = emit_stretch
        self._classes: tuple[LinkClass, ...] | None = None
        if link_classes is not None:
            self._classes = tuple(LinkClass(c) for c in link_classes)
            if len(self._classes) != n_links:
                raise invalid(
                    "link_classes",
                    f"<{len(self._classes)} values>",
                    f"must give one class per link ({n_links})",
                )
        self._wire_latency: dict[tuple[int, ...], float] = {}
        super().__init__(env, cap, on_transfer=on_transfer, on_link=on_link)
        # route -> (latency incl. overhead, links that constrain the rate: finite, deduplicated)
        self._routes: dict[tuple[int, ...], tuple[float, tuple[int, ...]]] = {}

    @classmethod
    def over_links(
        cls, env: simpy.Environment, links: LinkTable, *, nccl_tuner: bool = True, **options: Any
    ) -> Network:
        """The network of a cluster's ``links``: their bandwidths and latencies, and (``nccl_tuner``,
        NCCL 2.5 or later) their NCCL link classes, so collectives charge NCCL's hand-off per link
        class as the planner's curves do; ``options`` are :class:`Network`'s keyword arguments.

        Raises:
            InputError: as :class:`Network`.
        """
        return cls(
            env,
            links.bandwidths_bytes_per_s(),
            links.latencies_s(),
            link_classes=link_classes(links) if nccl_tuner else None,
            **options,
        )

    # ------------------------------------------------------------------ queries
    @property
    def env(self) -> simpy.Environment:
        """The SimPy environment the network runs on."""
        return self._env

    @property
    def n_links(self) -> int:
        """Number of directed links."""
        return len(self._cap)

    @property
    def free_links(self) -> bool:
        """Whether transfers are free (complete after zero time)."""
        return self._free

    @property
    def contention(self) -> bool:
        """Whether concurrent flows share the links they cross (``False``: each gets its route's
        bottleneck bandwidth)."""
        return self._contention

    @property
    def overhead_s(self) -> float:
        """Fixed per-transfer software overhead, seconds."""
        return self._overhead

    def bandwidth_bytes_per_s(self, link: int) -> float:
        """Bandwidth of link ``link``, bytes/s (``inf`` under ``free_links``)."""
        return math.inf if self._free else self._cap[link]

    def latency_s(self, link: int) -> float:
        """Latency of link ``link``, seconds (0 under ``free_links``)."""
        return 0.0 if self._free else self._lat[link]

    @property
    def has_link_classes(self) -> bool:
        """Whether the network knows NCCL's class of each link (``link_classes``)."""
        return self._classes is not None

    def link_class(self, link: int) -> LinkClass:
        """NCCL's class of link ``link`` (NVLink where the network was given no classes)."""
        return LinkClass.NVLINK if self._classes is None else self._classes[link]

    def collective_latency_s(self, route: tuple[int, ...]) -> float:
        """Latency a collective's chunk over ``route`` pays besides its step's hand-off, seconds:
        with link classes, its network links' latency only (NCCL's hand-off covers the rest,
        overhead included); without them, :meth:`route_latency_s`.

        Raises:
            InputError: a link index is out of range.
        """
        if self._classes is None or not route or self._free:
            return self.route_latency_s(route)
        found = self._wire_latency.get(route)
        if found is None:
            self._route_info(route)  # checks the indices
            classes, lat = self._classes, self._lat
            found = self._wire_latency[route] = sum(lat[x] for x in route if classes[x] is LinkClass.NET)
        return found

    def link_name(self, link: int) -> str:
        """Display name of link ``link``."""
        return self._names[link]

    def route_latency_s(self, route: tuple[int, ...]) -> float:
        """Time a transfer over ``route`` waits before its bytes flow: link latencies plus the
        overhead, seconds; 0 for an empty route or under ``free_links``.

        Raises:
            InputError: a link index is out of range.
        """
        if not route or self._free:
            return 0.0
        info = self._routes.get(route)
        return (info or self._route_info(route))[0]

    def route_bandwidth_bytes_per_s(self, route: tuple[int, ...]) -> float:
        """Bandwidth of the route's slowest link, bytes/s, when alone (``inf`` for an empty route).

        Raises:
            InputError: a link index is out of range.
        """
        if not route or self._free:
            return math.inf
        links = self._route_info(route)[1]
        return min((self._cap[link] for link in links), default=math.inf)

    def route_links(self, route: tuple[int, ...]) -> tuple[int, ...]:
        """The links of ``route`` whose bandwidth a flow over it shares: those of finite
        bandwidth, each once, in route order.

        Raises:
            InputError: a link index is out of range.
        """
        return self._route_info(route)[1] if route else ()

    # ------------------------------------------------------------------ transfers
    def transfer(
        self, route: tuple[int, ...], nbytes: float, *, tag: object = None, latency_s: float | None = None
    ) -> simpy.Event:
        """Start sending ``nbytes`` over ``route`` now; the returned event succeeds on delivery.

        Call it when the data exists: the transfer starts at the current simulated time.

        Args:
            route: link indices from source to destination (``()`` for the same device).
            nbytes: bytes to send, finite and >= 0.
            tag: any object, passed back in the :class:`TransferRecord`.
            latency_s: seconds before the bytes flow; ``None`` (default) for the route's latency
                and overhead. Less for a transfer whose latency overlapped earlier traffic: ``0``
                for the continuation of a transfer whose first bytes already paid it (the bytes
                held back by a rendezvous, :class:`~pipesim.simulator.options.SimOptions`), the
                part not yet elapsed for a send queued behind another on its stream.

        Returns:
            A SimPy event (value ``None``) that succeeds when the last byte has arrived.

        Raises:
            InputError: ``nbytes`` is negative or not finite, or a link index is out of range.
        """
        if type(route) is not tuple:
            route = tuple(route)
        return self._transfer(route, nbytes, tag, latency_s)

    def lockstep_transfer(
        self, routes: Sequence[tuple[int, ...]], nbytes: float, *, tag: object = None, latency_s: float = 0.0
    ) -> simpy.Event:
        """Start sending ``nbytes`` over each of ``routes`` now, in lock step: one flow on the
        links of all of them (each link once) whose rate, the same on every route, is its
        max-min share (the share of its most loaded route), as a ring collective's hops move
        (:func:`~pipesim.simulator.collective_steps.ring_flow`). Alone on links that no two of
        the routes share, it ends when a transfer over its slowest route would.

        Args:
            routes: the routes, each a tuple of link indices.
            nbytes: bytes sent over each route, finite and >= 0.
            tag: as in :meth:`transfer`.
            latency_s: seconds before the bytes flow.

        Returns:
            A SimPy event that succeeds when the last byte has arrived on every route.

        Raises:
            InputError: ``nbytes`` is negative or not finite, or a link index is out of range.
        """
        return self._transfer(tuple(link for r in routes for link in r), nbytes, tag, latency_s)

    def _transfer(
        self, route: tuple[int, ...], nbytes: float, tag: object, latency_s: float | None
    ) -> simpy.Event:
        if not (isinstance(nbytes, (int, float)) and nbytes >= 0 and math.isfinite(nbytes)):
            raise invalid("nbytes", nbytes, "must be a finite number >= 0")
        env = self._env
        tid = self._next_id
        self._next_id = tid + 1
        event = simpy.Event(env)
        if not route or self._free:
            if route:
                self._route_info(route)
            self._deliver_now(event, tid, route, nbytes, env.now, tag)
            return event
        latency, links = self._routes.get(route) or self._route_info(route)
        if latency_s is not None:
            latency = latency_s
        if not self._contention and links:
            rate = min(self._cap[link] for link in links)
            start = env.now
            timer = simpy.Timeout(env, latency + nbytes / rate)
            timer.callbacks.append(lambda _ev: self._deliver_now(event, tid, route, nbytes, start, tag))
            return event
        if nbytes == 0 or not links:
            if latency > 0:
                start = env.now
                timer = simpy.Timeout(env, latency)
                timer.callbacks.append(lambda _ev: self._deliver_now(event, tid, route, nbytes, start, tag))
            else:
                self._deliver_now(event, tid, route, nbytes, env.now, tag)
            return event
        flow = Flow(tid, route, links, nbytes, env.now, tag, event)
        self._n_flows += 1
        if latency > 0:
            simpy.Timeout(env, latency, flow).callbacks.append(self._latency_done)
        else:
            self._start_flow(flow)
        return event

    def _route_info(self, route: tuple[int, ...]) -> tuple[float, tuple[int, ...]]:
        info = self._routes.get(route)
        if info is None:
            n = len(self._cap)
            for link in route:
                if not (isinstance(link, int) and 0 <= link < n):
                    raise invalid("route", route, f"link indices must be integers in [0, {n})")
            latency = sum(self._lat[link] for link in route) + self._overhead
            links = tuple(link for link in dict.fromkeys(route) if math.isfinite(self._cap[link]))
            info = (latency, links)
            self._routes[route] = info
        return info
