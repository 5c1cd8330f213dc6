"""``plan`` without a schedule ranks the DAPPLE search's own proposals by their estimates, with
the other schedules' plans: they used to carry none and sorted last, so a DAPPLE (1F1B) plan as
fast as any other never led the shortlist and could fall out of it."""

from __future__ import annotations

from pipesim.plan import ScheduleName
from pipesim.planner import plan


def test_dapple_proposals_rank_by_their_estimate_among_every_schedule() -> None:
    # vgg19 at batch 512 on 2 x 8 V100: DAPPLE's best plan (15 | 1 replicas) is in the shortlist
    # at its own estimate, behind only plans estimated faster (zb-h2 on 13 | 2 | 1: estimated
    # and simulated 0.2% faster, 0.20884 s against 0.20926 s, once the estimate walks the
    # transfers that share links, planner/link_walk.py), and first among equal estimates
    alone = plan("vgg19", "dapple-2x8-v100", 512, schedule="dapple", top=1)[0]
    shortlist = plan("vgg19", "dapple-2x8-v100", 512, top=3)
    times = [p.estimate.iteration_time_s for p in shortlist if p.estimate is not None]
    assert len(times) == len(shortlist)
    assert times == sorted(times)
    assert alone.estimate is not None
    first = next(i for i, p in enumerate(shortlist) if p.schedule is ScheduleName.DAPPLE)
    assert times[first] == alone.estimate.iteration_time_s
    assert all(t < times[first] for t in times[:first])
