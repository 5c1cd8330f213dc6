"""Which of a tensor-parallel replica's ranks run their own flows in the simulation.

The TP lowering (:mod:`pipesim.simulator.tp_lowering`) keeps one instruction stream per replica,
on its first device, and lets the first rank's transfers stand for every rank's where each rank's
flow has links of its own (a NIC per GPU, rails). Where the ranks' flows meet on a link too narrow
for all of them (servers with fewer NICs than GPUs), every rank's flow runs, at once, beside the
first's. This mixin of :class:`~pipesim.simulator.tp_lowering.TpLowering` decides that for the
four flow sets a replica has: its TP ranks' data-parallel rings (:meth:`RankFlows.dp_rings`), its
ranks' pipeline sends (:meth:`RankFlows.rank_sends`, every replica's transfers between two stages
decided together: the replicas run in lock step), its CP ranks' TP collectives
(:meth:`RankFlows.cp_rank_groups`) and its TP ranks' CP ring exchanges
(:meth:`RankFlows.tp_rank_rings`), bandwidth-aware by
:mod:`~pipesim.profiles.costmodels.dp_rings`, as the 3D estimate decides them.
"""

from __future__ import annotations

from pipesim.plan import Plan
from pipesim.profiles.costmodels.dp_rings import (
    hop_links,
    link_loads,
    rank_groups,
    ranks_apart,
    replica_sends,
)
from pipesim.profiles.hardware.cluster import Cluster

__all__ = ["RankFlows"]


class RankFlows:
    """The rank-flow decisions of :class:`~pipesim.simulator.tp_lowering.TpLowering` (module
    docstring); the attributes are set by its constructor."""

    plan: Plan
    cluster: Cluster
    groups: tuple[tuple[tuple[int, ...], ...], ...]
    cp_rings: tuple[tuple[tuple[int, ...], ...], ...]
    _rank_of: tuple[int, ...]
    _free: bool
    _bw: list[float]
    _dp_rings: dict[tuple[int, tuple[int, ...]], tuple[tuple[int, ...], ...]]
    _rank_sends: dict[tuple[int, int], dict[tuple[int, int], tuple[tuple[int, int], ...]]]
    _apart: dict[tuple[str, int], tuple[bool, ...]]

    def dp_rings(self, stage: int, first: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
        """The data-parallel groups of ``stage``'s TP ranks ``1 .. t - 1`` whose first rank's group
        is ``first`` (rank ``r``'s: ``first`` shifted by ``r``, Megatron-LM's data-parallel group
        of that TP rank) where the ``t`` groups' rings share a link (:meth:`shared_rings`);
        ``()`` where ``t = 1``, links are free or every rank's group has links of its own."""
        t = self.plan.stages[stage].tensor_parallel
        if t < 2 or self._free or len(first) < 2:
            return ()
        found = self._dp_rings.get((stage, first))
        if found is None:
            found = self._dp_rings[(stage, first)] = self.shared_rings(rank_groups(first, t))
        return found

    def shared_rings(self, groups: list[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
        """``groups[1:]`` where two of ``groups`` (one per TP rank, the first rank's first) have
        ring steps on one link (:func:`~pipesim.profiles.costmodels.dp_rings.link_loads`:
        fewer NICs than GPUs per server), else ``()``: where each rank's group has links of its
        own its collective takes the first rank's time, and the first rank's group stands for
        all of them; where they share, each runs as a collective of its own beside the first
        rank's, of the full per-rank bytes
        (:attr:`~pipesim.simulator.dp_collectives.Collective.rings`)."""
        if self._free or len(groups) < 2:
            return ()
        if link_loads(groups, self.cluster.route, self.cluster.server_of) is None:
            return ()
        return tuple(groups[1:])

    def send_divisor(self, src: int, dst: int) -> int:
        """How many ways a transfer between stages ``src`` and ``dst`` is split over TP (and CP)
        ranks: each rank sends its share of its sequence chunk on its own route."""
        stages = self.plan.stages
        return min(stages[src].replica_width, stages[dst].replica_width)

    def rank_sends(self, src: int, dst: int, src_device: int, dst_device: int) -> tuple[tuple[int, int], ...]:
        """Every TP (and CP) rank's ``(sender, receiver)`` devices of a transfer from stage
        ``src``'s replica led by ``src_device`` to stage ``dst``'s led by ``dst_device``, rank
        ``r``'s ``(src_device + r, dst_device + r)`` for the :meth:`send_divisor` ranks, where
        one of its other ranks' routes crosses a link too narrow for every send crossing it,
        every replica's at once (:func:`~pipesim.profiles.costmodels.dp_rings.replica_sends`);
        ``()`` where the first rank's transfer stands for all, on free links, between two
        stages of one device or with one rank."""
        ranks = self.send_divisor(src, dst)
        if ranks < 2 or self._free or src_device == dst_device:
            return ()
        found = self._rank_sends.get((src, dst))
        if found is None:
            found = self._rank_sends[(src, dst)] = self._replica_sends(src, dst, ranks, ())
        pair = (src_device, dst_device)
        if pair not in found:  # a piece between replicas of uneven shares: decided with it (once:
            found[pair] = self._replica_sends(src, dst, ranks, (pair,))[pair]  # senders and receivers agree)
        return found[pair]

    def _replica_sends(
        self, src: int, dst: int, ranks: int, extra: tuple[tuple[int, int], ...]
    ) -> dict[tuple[int, int], tuple[tuple[int, int], ...]]:
        """:func:`~pipesim.profiles.costmodels.dp_rings.replica_sends` of the transfers from
        stage ``src``'s replicas to ``dst``'s (replica ``j`` to every ``k`` whose share of the
        micro-batch overlaps ``j``'s in proportion; :func:`~pipesim.plan.resplit` cuts whole
        samples, which ``extra`` pairs add), by ``(sender, receiver)`` first devices."""
        firsts = [[g[0] for g in self.groups[self._rank_of[s]]] for s in (src, dst)]
        ns, nd = len(firsts[0]), len(firsts[1])
        pairs = [(a, b) for j, a in enumerate(firsts[0]) for k, b in enumerate(firsts[1])
                 if j * nd < (k + 1) * ns and k * ns < (j + 1) * nd and a != b]
        pairs = list(dict.fromkeys([*pairs, *extra]))
        sends = replica_sends(pairs, ranks, self.cluster.route, self._bw.__getitem__)
        return dict(zip(pairs, sends, strict=True))

    def cp_rank_groups(self, stage: int, replica: int) -> tuple[tuple[int, ...], ...]:
        """The TP groups of ``replica``'s context-parallel ranks ``1 .. c - 1`` on ``stage`` (CP
        rank ``k``'s: the first one's shifted by ``k t``, Megatron-LM's ``tp-cp`` order), where
        one of them crosses a link that cannot carry every TP ring crossing it at its own rate
        (:meth:`_ranks_apart`: their groups leave their servers through one NIC); ``()`` where
        the first CP rank's TP collectives stand for all (each group's ring at its own rate), on
        free links or without TP or CP."""
        if not self._ranks_apart("tp", stage)[replica]:
            return ()
        t, c = self.plan.stages[stage].tensor_parallel, self.plan.stages[stage].context_parallel
        group = self.groups[self._rank_of[stage]][replica]
        return tuple(tuple(x + k * t for x in group) for k in range(1, c))

    def tp_rank_rings(self, stage: int, replica: int) -> tuple[tuple[int, ...], ...]:
        """The context-parallel rings of ``replica``'s TP ranks ``1 .. t - 1`` on ``stage``
        (rank ``r``'s: the first one's shifted by ``r``), where one of them crosses a link that
        cannot carry every CP ring crossing it at its own rate (:meth:`_ranks_apart`: rings that
        leave their servers through one NIC); ``()`` where the first TP rank's ring exchange
        stands for all, on free links or without TP or CP."""
        if not self._ranks_apart("cp", stage)[replica]:
            return ()
        ring = self.cp_rings[self._rank_of[stage]][replica]
        t = self.plan.stages[stage].tensor_parallel
        return tuple(tuple(x + r for x in ring) for r in range(1, t))

    def _ranks_apart(self, what: str, stage: int) -> tuple[bool, ...]:
        """Per replica of ``stage``, whether its other ranks' rings run beside the first's
        (:func:`~pipesim.profiles.costmodels.dp_rings.ranks_apart` over every replica at once,
        the replicas in lock step, each ring one flow over its hops' links,
        :func:`~pipesim.profiles.costmodels.dp_rings.hop_links`): ``what`` ``"tp"`` the CP
        ranks' TP groups, ``"cp"`` the TP ranks' CP rings."""
        key = (what, stage)
        found = self._apart.get(key)
        if found is None:
            spec = self.plan.stages[stage]
            t, c = spec.tensor_parallel, spec.context_parallel
            groups = self.groups[self._rank_of[stage]]
            if t < 2 or c < 2 or self._free:
                found = tuple(False for _ in groups)
            else:
                route = self.cluster.route
                if what == "tp":
                    units = [[hop_links([x + k * t for x in g], route) for k in range(c)] for g in groups]
                else:
                    units = [[hop_links([x + r for x in ring], route) for r in range(t)]
                             for ring in self.cp_rings[self._rank_of[stage]]]
                found = ranks_apart(units, self._bw.__getitem__).units
            self._apart[key] = found
        return found
