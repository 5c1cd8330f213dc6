"""The estimate's least route latency between two stages' devices: the per-class shortcut on
interchangeable servers equals the minimum over every device pair."""

from __future__ import annotations

import random

import pytest

from pipesim.planner.route_latency import LeastLatency
from pipesim.profiles import get_cluster, with_overrides


@pytest.mark.parametrize(
    ("cluster_name", "overrides"),
    [("dapple-2x8-v100", {"servers": 4}), ("dgx1-v100", {"servers": 3}), ("dgx-a100-1024", {"servers": 4})],
)
def test_the_class_shortcut_equals_every_pair(cluster_name: str, overrides: dict[str, int]) -> None:
    # dgx-a100-1024 is a rail fat-tree (servers not interchangeable): the pairwise minimum itself
    cluster = with_overrides(get_cluster(cluster_name), overrides)
    assert cluster.servers_interchangeable == (cluster_name != "dgx-a100-1024")
    model = LeastLatency(cluster)
    rng = random.Random(7)
    n = cluster.num_devices
    cases = 0
    for _ in range(300):
        src = rng.sample(range(n), rng.randint(1, n // 2))
        rest = [d for d in range(n) if d not in src] if rng.random() < 0.8 else list(range(n))
        dst = rng.sample(rest, rng.randint(1, min(len(rest), n // 2)))
        got = model(src, dst)
        want = model.pairwise(src, dst)
        assert got == want, (src, dst)
        cases += got > 0
    assert cases > 100  # most pairs are disjoint: the shortcut is exercised, not the early 0


def test_one_server_and_shared_devices() -> None:
    cluster = get_cluster("dapple-2x8-v100")
    model = LeastLatency(cluster)
    assert model([0, 1], [1, 2]) == 0.0
    assert model([0], [1]) == model.pairwise([0], [1]) > 0
    assert model(range(8), range(8, 16)) == model.pairwise(range(8), range(8, 16))
