"""The max-min fair allocator: progressive filling of link capacity among flows (one home).

Rates are raised together; when a link fills, the flows on it freeze at its fair share; the rest
go on (Bertsekas and Gallager, *Data Networks*, 2nd ed., sec. 6.5.2). :class:`Flow` is the state
one transfer carries while its bytes move; :class:`~pipesim.simulator.network.Network` owns the
flows and calls :func:`progressive_fill` around the links whose flows changed.
"""

from __future__ import annotations

import heapq
import math

import simpy

__all__ = ["Flow", "progressive_fill"]

_REL_TOL = 1e-9
"""Relative tolerance of the bottleneck checks (saturation, "nobody faster")."""


class Flow:
    """Mutable state of one transfer while its bytes flow (owned by a ``Network``)."""

    # fmt: off
    __slots__ = ("bott", "done", "event", "finish", "fixed", "id", "links", "mark", "nbytes",
                 "new_bott", "new_rate", "rate", "remaining", "route", "start_s", "t_last", "tag",
                 "version")
    # fmt: on

    def __init__(
        self,
        flow_id: int,
        route: tuple[int, ...],
        links: tuple[int, ...],
        nbytes: float,
        start_s: float,
        tag: object,
        event: simpy.Event,
    ) -> None:
        self.id = flow_id
        self.route = route
        self.links = links
        self.nbytes = nbytes
        self.remaining = float(nbytes)
        self.start_s = start_s
        self.tag = tag
        self.event = event
        self.rate = 0.0
        self.new_rate = 0.0
        self.t_last = 0.0
        self.finish = math.inf
        self.version = 0
        self.mark = -1
        self.fixed = -1
        self.done = False
        self.bott = -1
        self.new_bott = -1


def progressive_fill(
    region: list[int],
    gen: int,
    cap: list[float],
    link_flows: list[list[Flow]],
    link_mark: list[int],
    rem: list[float],
    cnt: list[int],
) -> tuple[list[Flow], list[int]]:
    """Max-min rates of the flows on ``region`` by progressive filling, every other flow fixed.

    Args:
        region: the links whose flows are re-rated.
        gen: a number never passed before (marks flows and links seen in this call).
        cap: capacity of each link, bytes/s.
        link_flows: per link, its flows in the order they started.
        link_mark: per link, scratch marks (compared with ``gen``).
        rem: per link, scratch: capacity left.
        cnt: per link, scratch: unfrozen region flows.

    Returns:
        The region's flows (``new_rate`` and ``new_bott`` set) and the links outside the region
        where the result is not max-min (a kept flow lost its bottleneck there).
    """
    # A link only one flow is on (a GPU's own port, most of a ring's hops) is queued only where
    # it is that flow's first of least capacity: its share stays its capacity until the flow
    # freezes, so that one freezes the flow (if no other link did before) and every other such
    # link of the flow would be popped with nothing left to freeze.
    # Links are marked once their count and capacity left are set: the region's links that more
    # than one flow is on here, the others as the flows' links are walked (a link one flow is on
    # is never marked: it is looked at as a candidate for that flow's own link).
    flows: list[Flow] = []
    queue: list[tuple[float, int]] = []
    for link in region:
        on = link_flows[link]
        n = len(on)
        cnt[link] = n
        if n:
            rem[link] = cap[link]
            if n > 1:
                link_mark[link] = gen
                queue.append((cap[link] / n, link))
            for f in on:
                if f.mark != gen:
                    f.mark = gen
                    flows.append(f)
    outside: list[int] = []  # the links outside the region that kept flows are on too
    for f in flows:
        own = -1
        own_cap = math.inf
        for link in f.links:
            if link_mark[link] == gen:
                continue  # (its count and capacity left are set)
            on = link_flows[link]
            if len(on) == 1:
                c = cap[link]
                if c < own_cap or (c == own_cap and link < own):
                    own, own_cap = link, c
                cnt[link] = 1
                rem[link] = c
            else:
                link_mark[link] = gen
                left = cap[link]
                n = 0
                for g in on:
                    if g.mark == gen:
                        n += 1
                    else:
                        left -= g.rate
                if n < len(on):  # (only a link a kept flow is on can leave one without bottleneck)
                    outside.append(link)
                if left < 0.0:
                    left = 0.0
                rem[link] = left
                cnt[link] = n
                queue.append((left / n, link))
        if own >= 0:
            queue.append((own_cap, own))

    # Progressive filling: repeatedly take the link with the smallest fair share of its
    # remaining capacity and freeze its unfrozen flows at that share. Freezing flows at the
    # smallest share never lowers another link's share, so a queued key can only be too
    # small: a popped link whose share grew goes back in with its current share.
    # Once every region flow is frozen, each queued link left has none to freeze: stop there.
    heapq.heapify(queue)
    heappop = heapq.heappop
    heappush = heapq.heappush
    unfrozen = len(flows)
    while unfrozen and queue:
        key, link = heappop(queue)
        c = cnt[link]
        if c == 0:
            continue
        share = rem[link] / c
        if share > key:
            heappush(queue, (share, link))
            continue
        if share < 0.0:
            share = 0.0  # rounding
        for f in link_flows[link]:
            if f.mark == gen and f.fixed != gen:
                f.fixed = gen
                f.new_rate = share
                f.new_bott = link
                unfrozen -= 1
                for other in f.links:
                    cnt[other] -= 1
                    rem[other] -= share

    # Outside links: every flow there must keep a bottleneck (saturated, nobody faster). Only
    # links a kept flow is on are checked: a region flow's bottleneck can only be broken by a
    # faster kept flow.
    grow: list[int] = []
    for link in outside:
        total = 0.0
        fastest_in = 0.0
        fastest_out = 0.0
        for g in link_flows[link]:
            if g.mark == gen:
                x = g.new_rate
                if x > fastest_in:
                    fastest_in = x
            else:
                x = g.rate
                if x > fastest_out:
                    fastest_out = x
            total += x
        saturated = total >= cap[link] * (1.0 - _REL_TOL)
        fastest = max(fastest_in, fastest_out)
        for g in link_flows[link]:
            if g.mark == gen:
                bad = g.new_bott == link and fastest_out > g.new_rate * (1.0 + _REL_TOL)
            else:
                bad = g.bott == link and (not saturated or g.rate < fastest * (1.0 - _REL_TOL))
            if bad:
                grow.append(link)
                break
    return flows, grow
