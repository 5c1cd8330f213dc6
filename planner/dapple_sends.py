"""The DAPPLE search's transfer times across a cut whose micro-batch the replicas split unevenly
(:func:`uneven_lines`): the estimate's own pieces (:meth:`CostModel.transfer_s`), as lines of the
bytes per sample, with what does not depend on the micro-batch size kept per placement."""

from __future__ import annotations

import math
from typing import NamedTuple

from pipesim.plan import resplit, split_samples
from pipesim.planner.cost_tables import canonical_groups
from pipesim.planner.estimate import CostModel
from pipesim.planner.placement import placement_unit
from pipesim.profiles.costmodels.lines import Lines, prune_lines

__all__ = ["TransferClasses", "transfer_classes", "uneven_lines"]


class _Classes(NamedTuple):
    """The links of one direction of a placement's transfer, by the device pairs they carry.

    ``pairs[i * len(dst) + k]``: for source replica ``i`` and destination replica ``k``,
    ``None`` for the same device, else ``(route latency, whether no link of the route is finite,
    the classes of its finite links)``. A *class*: the finite links that carry the same set of
    device pairs; ``bandwidth[c]`` is the least bandwidth among class ``c``'s links (bytes/s).
    """

    pairs: tuple[tuple[float, bool, tuple[int, ...]] | None, ...]
    bandwidth: tuple[float, ...]
    replicas: tuple[int, int]  # of the source and of the destination


TransferClasses = tuple[_Classes, _Classes]
"""The link classes of a placement's transfer forward and of the one back (:func:`transfer_classes`)."""

_Pieces = tuple[tuple[int, int, int], ...]
"""``(source replica, destination replica, samples)`` per piece of a re-split micro-batch."""


def _classes(model: CostModel, src: tuple[int, ...], dst: tuple[int, ...]) -> _Classes:
    """:class:`_Classes` of the transfer from ``src`` to ``dst`` (every pair of their replicas)."""
    facts, stride, route = model._pair_facts, model.cluster.num_devices, model.cluster.route
    carried: dict[int, list[int]] = {}  # link -> the pairs it carries
    pair_facts: list[tuple[float, float, tuple[int, ...]] | None] = []
    for i, a in enumerate(src):
        for k, z in enumerate(dst):
            if a == z:
                pair_facts.append(None)
                continue
            fact = facts.get(a * stride + z)
            if fact is None:
                fact = facts[a * stride + z] = model._facts(route(a, z))
            pair_facts.append(fact)
            for link in fact[2]:
                carried.setdefault(link, []).append(i * len(dst) + k)
    bw = model._bw
    index: dict[tuple[int, ...], int] = {}  # pair set -> class
    bandwidth: list[float] = []
    of_link: dict[int, int] = {}
    for link, pairs in carried.items():
        c = index.setdefault(tuple(pairs), len(index))
        if c == len(bandwidth):
            bandwidth.append(bw[link])
        elif bw[link] < bandwidth[c]:
            bandwidth[c] = bw[link]
        of_link[link] = c
    out: list[tuple[float, bool, tuple[int, ...]] | None] = []
    for fact in pair_facts:
        if fact is None:
            out.append(None)
        else:
            latency, slowest, finite = fact
            out.append((latency, slowest == math.inf, tuple(dict.fromkeys(of_link[link] for link in finite))))
    return _Classes(pairs=tuple(out), bandwidth=tuple(bandwidth), replicas=(len(src), len(dst)))


def _lines(classes: _Classes, pieces: _Pieces, width: int) -> Lines:
    """:meth:`CostModel._fact_lines` of ``pieces`` ``(source, destination, samples)`` over
    ``classes`` (``width``: the destination replicas), as lines of the bytes per sample.

    The same lines: a piece with no finite link adds ``(its latency, 0)``; every link carrying
    some piece adds ``(the latest latency among them, their samples over its bandwidth)``. Links
    of one class carry the same pieces, so their lines share the intercept and the one of least
    bandwidth is the steepest: :func:`prune_lines` keeps it alone (sample counts sum exactly).
    """
    count = len(classes.bandwidth)
    totals = [0.0] * count
    latest = [-math.inf] * count
    lines: list[tuple[float, float]] = []
    for i, k, n in pieces:
        pair = classes.pairs[i * width + k]
        if pair is None:
            continue
        latency, unlimited, links = pair
        if unlimited:
            lines.append((latency, 0.0))
        for c in links:
            totals[c] += n
            if latency > latest[c]:
                latest[c] = latency
    bandwidth = classes.bandwidth
    lines.extend((latest[c], totals[c] / bandwidth[c]) for c in range(count) if totals[c] > 0.0)
    return prune_lines(lines)


def transfer_classes(model: CostModel, src: tuple[int, ...], dst: tuple[int, ...]) -> TransferClasses:
    """The link classes (:class:`_Classes`) of a transfer from ``src`` to ``dst`` replicas and of
    the one back, costed on the devices renumbered as :meth:`CostModel.transfer_lines` costs
    them; kept in ``model.memo`` per placement up to that renumbering."""
    cache: dict[tuple[tuple[int, ...], ...], TransferClasses]
    cache = model.memo.setdefault(("dapple-uneven-classes",), {})  # type: ignore[assignment]
    cluster = model.cluster
    groups = canonical_groups(src, dst, g=placement_unit(cluster), renumber=cluster.servers_interchangeable)
    found = cache.get(groups)
    if found is None:
        if cluster.servers_interchangeable:
            src, dst = groups  # the renumbered devices cost the same (see CostModel.transfer_lines)
        found = cache[groups] = (_classes(model, src, dst), _classes(model, dst, src))
    return found


def uneven_lines(model: CostModel, classes: TransferClasses, samples: int) -> tuple[Lines, Lines]:
    """:meth:`CostModel.transfer_s` of a micro-batch of ``samples`` split unevenly, forward and
    back, over a placement's :func:`transfer_classes`, as lines of the bytes per sample (the
    same pieces: the time is linear in every piece's bytes; the pieces back are the same
    overlaps, each the other way). The pieces are kept in ``model.memo`` per replica counts."""
    fwd, bwd = classes
    ra, rb = fwd.replicas
    cache: dict[tuple[int, int, int], tuple[_Pieces, _Pieces]]
    cache = model.memo.setdefault(("dapple-uneven-pieces",), {})  # type: ignore[assignment]
    key = (samples, ra, rb)
    pieces = cache.get(key)
    if pieces is None:
        there = resplit(split_samples(samples, ra), split_samples(samples, rb))
        pieces = cache[key] = (there, tuple((k, i, n) for i, k, n in there))
    return _lines(fwd, pieces[0], rb), _lines(bwd, pieces[1], ra)
