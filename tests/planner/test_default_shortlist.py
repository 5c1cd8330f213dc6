"""``plan`` without a schedule ranks the DAPPLE search's own proposals by their estimates, with
the other schedules' plans: they used to carry none and sorted last, so a DAPPLE (1F1B) plan as
fast as any other never led the shortlist and could fall out of it."""

from __future__ import annotations

from pipesim.plan import ScheduleName
from pipesim.planner import plan


def test_dapple_proposals_rank_by_their_estimate_among_every_schedule() -> None:
    # vgg19 at batch 512 on 2 x 8 V100: DAPPLE's best plan is as fast as any other schedule's
    # (zb-auto's best ties it), and comes first on the tie (the DAPPLE proposals are listed first)
    alone = plan("vgg19", "dapple-2x8-v100", 512, schedule="dapple", top=1)[0]
    shortlist = plan("vgg19", "dapple-2x8-v100", 512, top=3)
    times = [p.estimate.iteration_time_s for p in shortlist if p.estimate is not None]
    assert len(times) == len(shortlist)
    assert times == sorted(times)
    assert alone.estimate is not None
    assert shortlist[0].schedule is ScheduleName.DAPPLE
    assert times[0] == alone.estimate.iteration_time_s
