"""Point-to-point streams: transfers from one device to another go one at a time, in issue order
(FIFO, as NCCL runs them on one stream); different streams share links max-min fairly."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.plan import Plan, StagePlan
from pipesim.profiles.hardware.cluster import get_cluster
from pipesim.simulator import SimOptions, SimulationResult, simulate
from pipesim.simulator.trace import EventKind
from tests.simulator.builders import equal_profile

CLUSTER = get_cluster("dapple-2x8-v100")  # 16 GPUs on 2 servers: NVLink inside, 25 GbE between


def pipeline(devices: tuple[int, ...], m: int, schedule: str = "gpipe", batch: int = 4) -> Plan:
    return Plan(
        stages=tuple(StagePlan(first_layer=i, last_layer=i, devices=(d,)) for i, d in enumerate(devices)),
        global_batch_size=m * batch,
        num_microbatches=m,
        schedule=schedule,
    )


def route_time(src: int, dst: int, nbytes: float) -> tuple[float, float]:
    """(latency s, seconds of bytes) of one transfer alone over the route src -> dst."""
    route = CLUSTER.route(src, dst)
    latency = sum(CLUSTER.links[i].latency_s for i in route)
    bandwidth = min(CLUSTER.links[i].bandwidth_bytes_per_s for i in route)
    return latency, nbytes / bandwidth


def sends(result: SimulationResult, kind: EventKind) -> list[tuple[int, float, float]]:
    return sorted(
        (e.microbatch or 0, e.start_s, e.end_s)
        for e in result.events
        if e.kind is kind and e.device is not None
    )


@pytest.mark.parametrize("executor", ["simpy", "fast"])
def test_sends_between_two_devices_go_one_at_a_time_in_order(executor: str) -> None:
    # activations far slower to send than to compute, across the NIC: micro-batch j arrives after
    # one latency and j + 1 transfers' bytes (the stream is pipelined: each later send's latency
    # overlaps the bytes ahead of it), not after m transfers sharing the link
    tf, nbytes, m = 1e-6, 1 << 28, 4
    profile = equal_profile(2, fwd_s=tf, bwd_s=2 * tf, activation_bytes=nbytes)
    plan = pipeline((0, 8), m)
    options = SimOptions(contention=executor == "simpy")
    result = simulate(plan, profile, CLUSTER, options, executor=executor)
    latency, wire = route_time(0, 8, nbytes)
    acts = sends(result, EventKind.SEND_ACTIVATION)
    assert [mb for mb, _, _ in acts] == list(range(m))
    for j, (_, start, end) in enumerate(acts):
        assert start == pytest.approx(tf + j * wire, rel=1e-12)  # as the previous bytes left
        assert end == pytest.approx(tf + latency + (j + 1) * wire, rel=1e-12)


def test_opposite_directions_are_separate_streams() -> None:
    # 1F1B over the NIC: gradients (8 -> 0) go out at once while activations (0 -> 8) still queue
    tf, nbytes, m = 1e-6, 1 << 28, 6
    profile = equal_profile(2, fwd_s=tf, bwd_s=2 * tf, activation_bytes=nbytes)
    result = simulate(pipeline((0, 8), m, schedule="1f1b"), profile, CLUSTER, SimOptions())
    backward_end = {
        e.microbatch: e.end_s for e in result.events if e.kind is EventKind.BACKWARD and e.stage == 1
    }
    grads = sends(result, EventKind.SEND_GRADIENT)
    acts = sends(result, EventKind.SEND_ACTIVATION)
    assert len(grads) == m
    overlapping = 0
    for mb, start, end in grads:
        assert start == pytest.approx(backward_end[mb], rel=1e-12)  # its stream was free
        overlapping += any(a_start < end and start < a_end for _, a_start, a_end in acts)
    assert overlapping > 0  # while the other direction was busy


def test_a_pipeline_bound_by_its_link_is_the_fifo_closed_form() -> None:
    # GPipe, 2 stages across the NIC, transfers dominate: the pipeline is the link's FIFO queue,
    # m activations then m gradients (the other direction), each direction one latency plus m
    # transfers' bytes / bandwidth (the later sends' latencies overlap the bytes ahead of them)
    tf, nbytes, m = 1e-6, 1 << 27, 8
    profile = equal_profile(2, fwd_s=tf, bwd_s=2 * tf, activation_bytes=nbytes)
    options = SimOptions(record_trace=False, optimizer_step=False)  # the closed form has no update
    result = simulate(pipeline((0, 8), m), profile, CLUSTER, options)
    latency, wire = route_time(0, 8, nbytes)
    back_latency, back_wire = route_time(8, 0, nbytes)
    # stage 1 runs F of the last micro-batch when it arrives, then its m backwards (one gradient
    # sent after each), the last gradient arrives m transfers later, then stage 0's last B
    expected = tf + latency + m * wire + tf + 2 * tf + back_latency + m * back_wire + 2 * tf
    assert result.iteration_time_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("channels", [2, 3])
def test_channels_split_a_transfer_into_equal_flows(channels: int) -> None:
    # one stream alone, or two streams of equal channels on one link: the same times as one channel
    for devices in ((0, 8), (0, 8, 1, 9)):
        profile = equal_profile(len(devices), fwd_s=1e-6, bwd_s=2e-6, activation_bytes=1 << 26)
        plan = pipeline(devices, 3)
        one = simulate(plan, profile, CLUSTER, SimOptions(), executor="simpy")
        many = simulate(plan, profile, CLUSTER, SimOptions(p2p_channels=channels), executor="simpy")
        assert many.iteration_time_s == pytest.approx(one.iteration_time_s, rel=1e-9)
        assert many.num_events == one.num_events


@pytest.mark.parametrize("value", [0, 65, True, 1.5])
def test_bad_channel_counts_are_refused(value: object) -> None:
    with pytest.raises(InputError, match="p2p_channels"):
        SimOptions(p2p_channels=value)  # type: ignore[arg-type]


def test_more_channels_win_a_larger_share_against_a_collective() -> None:
    # the last stage's replicas (1 and 8) all-reduce across the NICs right as replica 8 sends its
    # last gradient to stage 0 (device 0) over the same uplink: with 4 channels the gradient's
    # flows hold 4 of 5 max-min shares instead of 1 of 2, and it arrives sooner
    profile = equal_profile(2, fwd_s=1e-3, bwd_s=2e-3, activation_bytes=1 << 26, parameter_bytes=1 << 28)
    plan = Plan(
        stages=(
            StagePlan(first_layer=0, last_layer=0, devices=(0,)),
            StagePlan(first_layer=1, last_layer=1, replicas=2, devices=(1, 8)),
        ),
        global_batch_size=8,
        num_microbatches=2,
        schedule="1f1b",
    )
    ends = {}
    for channels in (1, 4):
        result = simulate(plan, profile, CLUSTER, SimOptions(p2p_channels=channels), executor="simpy")
        grads = [e for e in result.events if e.kind is EventKind.SEND_GRADIENT and e.device == 8]
        ends[channels] = sorted(e.end_s for e in grads)
    assert ends[4][0] == pytest.approx(ends[1][0], rel=1e-12)  # alone on the link: the same
    assert ends[4][1] < ends[1][1] * 0.9
