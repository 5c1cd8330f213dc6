"""Micro-benchmark of pipesim.simulator.network and collectives: wall time and flows per second.

Scenarios (all seeded, deterministic):

* ``random``: N flows (default 5,000) over L links (default 1,000), routes of 1-3 random links,
  sizes 1-100 MB, arrivals spread over ``--window`` seconds (default 0.01: about 2,600 flows at
  once, which on random links form one big component, the hard case), 10-100 GB/s links with
  1-5 us latency.
* ``pipeline``: the traffic of benchmark (b) without compute: 128 servers x 8 GPUs, 16 stages x 64
  replicas (stage i on servers 8i..8i+7), 64 micro-batches, GPipe order with real dependencies
  (1 ms forward, 2 ms backward per micro-batch; an 8 MB activation or gradient crosses each
  stage boundary per micro-batch and replica), then every stage runs a hierarchical all-reduce
  of 1 GB among its 64 replicas. Per GPU an
  up and a down NVLink-switch link (300 GB/s), per server a NIC up and down (25 GB/s).

Usage: ``python benchmarks/bench_network.py [random|pipeline|all] [--flows N] [--links L] [--window S]``
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Generator
from typing import Any

import simpy

from pipesim.simulator.collectives import hierarchical_allreduce
from pipesim.simulator.network import Network


def bench_random(n_flows: int, n_links: int, window_s: float = 0.01, seed: int = 0) -> tuple[float, Network]:
    """Run the random scenario; return (wall seconds, network)."""
    rng = random.Random(seed)
    env = simpy.Environment()
    caps = [rng.uniform(10e9, 100e9) for _ in range(n_links)]
    lats = [rng.uniform(1e-6, 5e-6) for _ in range(n_links)]
    net = Network(env, caps, lats)
    jobs = sorted(
        (
            rng.uniform(0.0, window_s),
            tuple(rng.sample(range(n_links), rng.randint(1, 3))),
            rng.uniform(1e6, 1e8),
        )
        for _ in range(n_flows)
    )

    def source() -> Generator[Any, Any, None]:
        for at, route, nbytes in jobs:
            if at > env.now:
                yield env.timeout(at - env.now)
            net.transfer(route, nbytes)

    env.process(source())
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, net


def bench_pipeline(
    n_servers: int = 128, gpus: int = 8, stages: int = 16, microbatches: int = 64
) -> tuple[float, Network]:
    """Run the pipeline-traffic scenario; return (wall seconds, network)."""
    n_dev = n_servers * gpus
    up = list(range(n_dev))
    down = list(range(n_dev, 2 * n_dev))
    nic_up = list(range(2 * n_dev, 2 * n_dev + n_servers))
    nic_down = list(range(2 * n_dev + n_servers, 2 * n_dev + 2 * n_servers))
    caps = [300e9] * (2 * n_dev) + [25e9] * (2 * n_servers)
    lats = [2e-6] * (2 * n_dev) + [5e-6] * (2 * n_servers)
    env = simpy.Environment()
    net = Network(env, caps, lats)

    def server_of(d: int) -> int:
        return d // gpus

    def route(a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return ()
        sa, sb = a // gpus, b // gpus
        if sa == sb:
            return (up[a], down[b])
        return (up[a], nic_up[sa], nic_down[sb], down[b])

    per_stage = n_dev // stages
    stage_devs = [list(range(s * per_stage, (s + 1) * per_stage)) for s in range(stages)]
    act_bytes = 8e6
    grad_bytes = 1e9
    fwd_s, bwd_s = 1e-3, 2e-3

    recv: dict[tuple[int, int, int, int], Any] = {}

    def arrival(key: tuple[int, int, int, int]) -> Any:
        if key not in recv:
            recv[key] = env.event()
        return recv[key]

    def send(src: int, dst: int, key: tuple[int, int, int, int]) -> None:
        done = arrival(key)
        net.transfer(route(src, dst), act_bytes).callbacks.append(lambda _ev: done.succeed())

    def replica(s: int, r: int) -> Generator[Any, Any, None]:
        me = stage_devs[s][r]
        for m in range(microbatches):  # forward: wait for the activation, compute, send on
            if s > 0:
                yield arrival((0, s, r, m))
            yield env.timeout(fwd_s)
            if s + 1 < stages:
                send(me, stage_devs[s + 1][r], (0, s + 1, r, m))
        for m in range(microbatches):  # backward: wait for the gradient, compute, send back
            if s + 1 < stages:
                yield arrival((1, s, r, m))
            yield env.timeout(bwd_s)
            if s > 0:
                send(me, stage_devs[s - 1][r], (1, s - 1, r, m))

    def stage(s: int) -> Generator[Any, Any, None]:
        yield simpy.AllOf(env, [env.process(replica(s, r)) for r in range(per_stage)])
        yield env.process(hierarchical_allreduce(env, net, stage_devs[s], grad_bytes, route, server_of))

    for s in range(stages):
        env.process(stage(s))
    t0 = time.perf_counter()
    env.run()
    return time.perf_counter() - t0, net


def _report(name: str, wall: float, net: Network) -> None:
    st = net.stats
    print(
        f"{name}: wall {wall:.3f} s, {st.transfers} transfers, {st.flows} flows, "
        f"{st.flows / wall:,.0f} flows/s, {st.refills} re-fills, "
        f"{st.refilled_flows / max(st.refills, 1):.1f} flows per re-fill, "
        f"peak {st.peak_active_flows} concurrent flows, sim end {net.env.now:.6f} s"
    )


def main() -> None:
    """Parse arguments and run the chosen scenarios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", nargs="?", default="all", choices=["random", "pipeline", "all"])
    parser.add_argument("--flows", type=int, default=5000)
    parser.add_argument("--links", type=int, default=1000)
    parser.add_argument("--window", type=float, default=0.01, help="arrival window, seconds")
    args = parser.parse_args()
    if args.scenario in ("random", "all"):
        wall, net = bench_random(args.flows, args.links, args.window)
        _report("random", wall, net)
    if args.scenario in ("pipeline", "all"):
        wall, net = bench_pipeline()
        _report("pipeline", wall, net)


if __name__ == "__main__":
    main()
