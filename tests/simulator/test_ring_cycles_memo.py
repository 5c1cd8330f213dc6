"""The kept edge-disjoint cycle search (``ring_topology.disjoint_cycles``): the same answer as
the search run afresh, by hand on a small mesh, and one search for every server of a kind."""

from __future__ import annotations

from pipesim.profiles.costmodels.ring_topology import disjoint_cycles, ring_set
from pipesim.profiles.hardware.cluster import get_cluster, with_overrides


def test_four_members_with_two_doubled_pairs_pack_two_cycles_by_hand() -> None:
    """K4 with 0-3 and 1-2 doubled: the cycles from 0 (second member below the last) are
    0-1-2-3, 0-1-3-2 and 0-2-1-3; the first takes 0-1 and 2-3, whose single links then block
    the second, and the third fits (0-2, 1-2 twice, 1-3, 0-3 twice)."""
    capacity = (((0, 1), 1), ((0, 2), 1), ((0, 3), 2), ((1, 2), 2), ((1, 3), 1), ((2, 3), 1))
    disjoint_cycles.cache_clear()
    assert disjoint_cycles(4, capacity) == ((0, 1, 2, 3), (0, 2, 1, 3))
    assert disjoint_cycles(4, capacity) == disjoint_cycles.__wrapped__(4, capacity)
    # a plain triangle with one pair missing has no cycle
    assert disjoint_cycles(3, (((0, 1), 1), ((1, 2), 1))) == ()


def test_every_server_of_a_kind_gets_the_rings_of_the_first_from_one_search() -> None:
    cluster = with_overrides(get_cluster("dapple-2x8-v100"), {"servers": 4})

    def bandwidth(link: int) -> float:
        return float(cluster.links[link].bandwidth_bytes_per_s)

    disjoint_cycles.cache_clear()
    first = ring_set(range(8), cluster.route, bandwidth)
    assert len(first) == 6  # a DGX-1's three cycles, both ways
    for server in range(1, 4):
        members = [8 * server + i for i in range(8)]
        shifted = tuple(tuple(m + 8 * server for m in ring) for ring in first)
        assert ring_set(members, cluster.route, bandwidth) == shifted
    info = disjoint_cycles.cache_info()
    assert (info.misses, info.hits) == (1, 3)
    # members in another order: positions differ, so a search of its own, same answer as afresh
    order = [3, 1, 4, 0, 5, 2, 7, 6]
    rings = ring_set(order, cluster.route, bandwidth)
    disjoint_cycles.cache_clear()
    assert ring_set(order, cluster.route, bandwidth) == rings
