"""NCCL all-reduce bus bandwidth inside one server, and across two DGX A100s on the ring
(nccl-tests ``all_reduce_perf``), against pipesim's collective model on the matching cluster preset.

nccl-tests reports, for an all-reduce of S bytes per rank over n ranks taking t seconds,
``algbw = S / t`` and ``busbw = algbw * 2 (n - 1) / n`` (the per-link rate of a ring; nccl-tests
``doc/PERFORMANCE.md``). pipesim's prediction runs the simulator's all-reduce
(:func:`pipesim.simulator.collectives.allreduce`, made of transfers over the preset's links,
alone on the network) and converts its time the same way. Link bandwidths are the catalog's
peak times ``achievable_fraction`` (``profiles/hardware/data/links.toml``); nothing here is fitted
to a record.

H100's default all-reduce is NVLink SHARP (NVLS, the reduction inside the NVSwitch), modelled
as ``algorithm="nvls"`` with one share, :data:`~pipesim.profiles.costmodels.collective.NVLS_FRACTION`,
taken from the NCCL maintainer's 8-GPU figure (NVIDIA/nccl-tests issue 212); the NVLS records
here are other GPU counts (NVIDIA/nccl issue 1455) and H200 (NVIDIA/nccl-tests issue 272), not
that figure. DGX-1 (hybrid cube-mesh, NCCL's several rings over disjoint NVLinks, modelled by
:func:`~pipesim.profiles.costmodels.ring_topology.ring_set`: 3 edge-disjoint Hamiltonian cycles, each
both ways, 6 rings on the 6 NVLinks of every GPU) is held to two 8 x V100-SXM2-16GB NVLink servers
of the same topology: Oracle Cloud's BM.GPU3.8, measured at 1 GiB in an Oracle tutorial, and a
server whose ``nvidia-smi topo -m`` (printed with the run) is the hybrid cube-mesh up to GPU
numbering, measured up to 128 MiB in a 2019 blog post. The two set NVLink2's achievable fraction
(0.9, ``links.toml``); NVLink3/4 keep 0.8, which the A100 and H100 records hold.

The 2019 run is held along its curve, not at one point: 8 bytes (latency-bound, NCCL's LL
protocol), 4, 16, 32, 64 and 128 MiB (bandwidth still rising, Simple). It was measured with an
NCCL before 2.5 (the post is from 2019-09; 2.5.6, 2019-11, is the first release with the tuner's
per-link-class latencies and LL128), so it is computed without link classes
(``nccl_tuner=False``): per call NCCL's launch, per step the route latencies plus the NVLink
hand-off. Every other record runs with the cluster's link classes, as the simulator does
(:mod:`pipesim.profiles.costmodels.nccl_protocol`: a step inside a server costs NCCL's own
hand-off for its link class, LL128 where the routes are NVLink and the GPUs Volta or later, LL's
bus bandwidth capped at NCCL's ``llMaxBws``), and small messages are held on a DGX H100: 8 bytes
in 13.7 us, 4, 64 and 256 KiB, and 1 MiB in 27.4 us, measured with one process per GPU
(NVIDIA/dgxc-benchmarking, ``nccl/README.md``).
"""

from __future__ import annotations

import simpy

from experiments.validation.record import Record
from pipesim.profiles.hardware.cluster import Cluster, get_cluster
from pipesim.simulator.collectives import allreduce
from pipesim.simulator.network import Network

__all__ = ["allreduce_busbw_gb_per_s", "allreduce_time_s", "records"]


def allreduce_time_s(
    cluster: Cluster, members: int, nbytes: float, algorithm: str = "auto", *, nccl_tuner: bool = True
) -> float:
    """Seconds the simulator's all-reduce of ``nbytes`` per rank among devices ``0 .. members - 1``
    of ``cluster`` takes, alone on its links.

    ``nccl_tuner``: NCCL 2.5 or later (the network knows its links' classes: NCCL's hand-off per
    link class, LL128); false for an older NCCL (route latencies plus the NVLink hand-off).
    """
    env = simpy.Environment()
    network = Network.over_links(env, cluster.links, nccl_tuner=nccl_tuner)
    body = allreduce(
        env,
        network,
        list(range(members)),
        nbytes,
        cluster.route,
        server_of=cluster.server_of,
        algorithm=algorithm,
    )
    env.process(body)
    env.run()
    return float(env.now)


def allreduce_busbw_gb_per_s(
    cluster: Cluster, members: int, nbytes: float, algorithm: str = "auto", *, nccl_tuner: bool = True
) -> float:
    """nccl-tests bus bandwidth, GB/s (1e9 bytes/s), of an all-reduce of ``nbytes`` per rank among
    devices ``0 .. members - 1`` of ``cluster``, simulated alone on its links (``nccl_tuner``: as
    in :func:`allreduce_time_s`)."""
    algbw = nbytes / allreduce_time_s(cluster, members, nbytes, algorithm, nccl_tuner=nccl_tuner)
    return algbw * 2 * (members - 1) / members / 1e9


def _busbw(
    preset: str, members: int, nbytes: float, algorithm: str = "auto", *, nccl_tuner: bool = True
) -> float:
    return allreduce_busbw_gb_per_s(get_cluster(preset), members, nbytes, algorithm, nccl_tuner=nccl_tuner)


def _time_us(preset: str, members: int, nbytes: float, *, nccl_tuner: bool = True) -> float:
    return allreduce_time_s(get_cluster(preset), members, nbytes, nccl_tuner=nccl_tuner) * 1e6


_DGXC = (
    "NVIDIA/dgxc-benchmarking (github.com/NVIDIA/dgxc-benchmarking), nccl/README.md (commit 46e4201), "
    "'View sample output (AllReduce excerpt)': all_reduce_perf -b 8 -e 16G on 8 x NVIDIA H100 80GB "
    "HBM3 of one server (one process per GPU)"
)


def _h100_small_record(
    nbytes: int,
    label: str,
    published: float,
    note: str,
    *,
    column: str = "out-of-place",
    known_miss: str = "",
) -> Record:
    """A row of NVIDIA's DGX H100 all_reduce_perf sample output: the time of a small all-reduce."""
    return Record(
        name=f"nccl-h100-8gpu-allreduce-{label}-latency",
        source=f"{_DGXC}, {nbytes}-byte row: {column} time {published:g} us",
        known_miss=known_miss,
        quantity=f"all-reduce time of {nbytes} bytes per rank, 8 x H100 on NVSwitch (us)",
        kind="absolute",
        published=published,
        predict=lambda: _time_us("dgx-h100-x4", 8, nbytes),
        tolerance=0.15,
        note=(
            "devices 0-7 of dgx-h100-x4, with link classes: NCCL's ring LL, launch 6.6 us and 14 "
            "steps of NCCL's NVLink hand-off (0.6 us, the route's own latency inside it), its bus "
            "bandwidth capped at Hopper's llMaxBws, 141 GB/s (NVIDIA/nccl src/graph/tuning.cc at 5067397); "
            + note
            + "; held to 15%, the tolerance of the latency-dominated records"
        ),
    )


def _cubemesh_record(mib: int, published: float, row: str, why: str) -> Record:
    """A row of the 2019 post's all_reduce_perf run on an 8 x V100 hybrid cube-mesh."""
    return Record(
        name=f"nccl-v100-cubemesh-8gpu-allreduce-busbw-{mib}m",
        source=(
            "konnase/konnase.github.io (github.com/konnase/konnase.github.io), "
            "source/_posts/deep_learning/NCCL.md (2019-09-26), section 性能测试: all_reduce_perf "
            f"-b 8 -e 128M -f 2 -g 8 on 8 x Tesla V100-SXM2-16GB (hybrid cube-mesh), {row}-byte "
            f"row: out-of-place busbw {published:.2f} GB/s"
        ),
        quantity=f"all-reduce bus bandwidth, 8 x V100 hybrid cube-mesh, {mib} MiB per rank (GB/s)",
        kind="absolute",
        published=published,
        predict=lambda: _busbw("dgx1-v100", 8, mib * (1 << 20), nccl_tuner=False),
        tolerance=0.10,
        note=(
            "devices 0-7 of dgx1-v100, as the 128 MiB record; the curve below the bandwidth "
            "asymptote: NCCL's per-call launch and per-step hand-off (Simple protocol, "
            "profiles/costmodels/nccl_protocol.py), NCCL before 2.5 (no link classes, no LL128)"
            + (f"; {why}" if why else "")
        ),
    )


def _nvls_record(gpus: int, published: float) -> Record:
    return Record(
        name=f"nccl-h100-{gpus}gpu-nvls-allreduce-busbw",
        source=(
            "NVIDIA/nccl issue 1455 (github.com/NVIDIA/nccl/issues/1455), description "
            "(2024-09-19): 8 x H100 SXM, NCCL_ALGO=NVLS all_reduce_perf -b 2G -e 4G; busbw "
            f"'increase from 370 to 420, 440, 460, and 480 GBps when gpus increase from 4 to 5, "
            f"6, 7, and 8'; {gpus} GPUs: {published:g}"
        ),
        quantity=f"NVLS all-reduce bus bandwidth, {gpus} GPUs, 4 GiB per rank (GB/s)",
        kind="absolute",
        published=published,
        predict=lambda: _busbw("dgx-h100-x4", gpus, 4 * _GIB, "nvls"),
        tolerance=0.10,
        note=f"devices 0-{gpus - 1} of dgx-h100-x4, algorithm nvls",
    )


_GIB = 1 << 30


def records() -> list[Record]:
    """Intra-server all-reduce bus bandwidths of DGX/HGX A100 and H100 (NVSwitch), ring and NVLS,
    and of two 8 x V100 NVLink cube-meshes (DGX-1 topology)."""
    return [
        _nvls_record(5, 420.0),
        _nvls_record(6, 440.0),
        _nvls_record(7, 460.0),
        Record(
            name="nccl-h200-8gpu-nvls-allreduce-busbw",
            source=(
                "NVIDIA/nccl-tests issue 272 (github.com/NVIDIA/nccl-tests/issues/272), description "
                "(2024-11-27): 8 x H200 on NVLink4, NCCL 2.20.3 default algorithm (NVLS), "
                "all_reduce_perf -b 64k -e 4G, 'peak bandwidth of 475 GB/s'"
            ),
            quantity="NVLS all-reduce bus bandwidth, 8 x H200, 4 GiB per rank (GB/s)",
            kind="absolute",
            published=475.0,
            predict=lambda: _busbw("dgx-h100-x4", 8, 4 * _GIB, "nvls"),
            tolerance=0.10,
            note=(
                "devices 0-7 of dgx-h100-x4: H200 has H100's NVLink4 port (18 links, 450 GB/s per "
                "direction) and NVSwitch; the all-reduce does not depend on the GPU's memory"
            ),
        ),
        Record(
            name="nccl-v100-dgx1-8gpu-allreduce-busbw",
            source=(
                "oracle-japan/ocitutorials (github.com/oracle-japan/ocitutorials), "
                "tutorials/_hpc/spinup-ml-instance-cntnd.md, section 5 (NCCL Tests), BM.GPU3.8 "
                "(8 x Tesla V100-SXM2-16GB, NVLink): all_reduce_perf -b 1G -e 1G -f 2 -t 1 -g 8, "
                "out-of-place busbw 135.50 GB/s (in-place 135.41)"
            ),
            quantity="all-reduce bus bandwidth, 8 x V100 hybrid cube-mesh, 1 GiB per rank (GB/s)",
            kind="absolute",
            published=135.50,
            predict=lambda: _busbw("dgx1-v100", 8, _GIB),
            tolerance=0.10,
            note=(
                "devices 0-7 of dgx1-v100 (one server; NVLink2 cube-mesh, 0.9 achievable); "
                "BM.GPU3.8 taken as a DGX-1-topology server (8 SXM2 V100s on NVLink, no NVSwitch)"
            ),
        ),
        Record(
            name="nccl-v100-cubemesh-8gpu-allreduce-busbw-128m",
            source=(
                "konnase/konnase.github.io (github.com/konnase/konnase.github.io), "
                "source/_posts/deep_learning/NCCL.md (2019-09-26), section 性能测试: 8 x Tesla "
                "V100-SXM2-16GB, nvidia-smi topo -m a hybrid cube-mesh (each GPU NV2, NV2, NV1, NV1 "
                "to four peers), all_reduce_perf -b 8 -e 128M -f 2 -g 8, 134217728-byte row: "
                "out-of-place busbw 129.14 GB/s (in-place 128.92)"
            ),
            quantity="all-reduce bus bandwidth, 8 x V100 hybrid cube-mesh, 128 MiB per rank (GB/s)",
            kind="absolute",
            published=129.14,
            predict=lambda: _busbw("dgx1-v100", 8, 128 * (1 << 20), nccl_tuner=False),
            tolerance=0.10,
            note=(
                "devices 0-7 of dgx1-v100: the post's topology is the DGX-1 mesh with the second "
                "quad numbered 6, 7, 4, 5 (the pairs 0-6, 1-7 doubled instead of 0-4, 1-5); "
                "all-reduce time does not depend on the numbering. Its busbw still rises at the "
                "largest size (118.3 at 64 MiB)"
            ),
        ),
        _cubemesh_record(16, 90.59, "16777216", "a DDP gradient bucket's size (25 MB)"),
        _cubemesh_record(32, 106.62, "33554432", ""),
        _cubemesh_record(64, 118.30, "67108864", ""),
        _cubemesh_record(4, 49.79, "4194304", "the Simple protocol from here up in pipesim"),
        Record(
            name="nccl-v100-cubemesh-8gpu-allreduce-8b-latency",
            source=(
                "konnase/konnase.github.io, source/_posts/deep_learning/NCCL.md (2019-09-26), the same "
                "all_reduce_perf run on 8 x Tesla V100-SXM2-16GB (hybrid cube-mesh), 8-byte row: "
                "out-of-place time 48.46 us (in-place 48.17; 48.1-49.4 us up to 8 KiB)"
            ),
            quantity="all-reduce time of 8 bytes per rank, 8 x V100 hybrid cube-mesh (us)",
            kind="absolute",
            published=48.46,
            predict=lambda: _time_us("dgx1-v100", 8, 8, nccl_tuner=False),
            tolerance=0.15,
            note=(
                "devices 0-7 of dgx1-v100, NCCL before 2.5 (no link classes): pipesim runs LL here "
                "(launch 6.6 us, 14 ring steps of 2 us route latency and 0.6 us hand-off: 43 us). "
                "nccl-tests with -g 8 drives all 8 GPUs from one thread, whose serial kernel launches "
                "add to the measured time (not modelled; NCCL 2.5's own estimate for this call is "
                "15 us, as the DGX H100 record measures with one process per GPU); held to 15%, the "
                "tolerance of the latency-dominated timing records of slow_network.py"
            ),
        ),
        _h100_small_record(
            8,
            "8b",
            13.67,
            "NCCL's tuner estimate is 15.0 us (was 43 us with the route latency added per step)",
        ),
        _h100_small_record(
            1 << 20,
            "1m",
            27.37,
            "the 1 MiB row: 2 x 7/8 MiB of bus bytes at LL's 141 GB/s cap add 13 us (LL's doubled "
            "wire at the ring's NVLink rate, 180 GB/s, added 10: -7.9% before the cap)",
        ),
        # rows chosen by one rule on the published table (4, 64 and 256 KiB: the powers of 4 in
        # the range where NCCL runs ring LL on this server; 1 MiB and up the default is NVLS or
        # LL128), not on pipesim's figures
        _h100_small_record(
            4096,
            "4k",
            16.46,
            "the in-place column: the out-of-place 4 KiB time, 23.59 us, is one slow row against its "
            "neighbours' 17.14 (2 KiB) and 17.40 us (8 KiB), and its own in-place run",
            column="in-place",
        ),
        _h100_small_record(
            1 << 16,
            "64k",
            19.54,
            "its bus bytes at LL's 141 GB/s cap take 0.8 us (0.6 before the cap)",
            known_miss=(
                "NCCL runs a call this small on few channels (src/enqueue.cc at 5067397: ring LL drops "
                "channels until each of up to 512 threads carries NCCL_LL_THREAD_THRESHOLD x nRanks = "
                "64 bytes: 2 channels at 64 KiB), each at LL's per-channel rate; pipesim has no "
                "channel count, its LL call runs at the whole ring's rate: 15.8 us against 19.5 "
                "measured (the measured time grows 5.9 us from 8 B to 64 KiB)"
            ),
        ),
        _h100_small_record(
            1 << 18, "256k", 20.43, "its bus bytes at LL's 141 GB/s cap take 3.3 us (2.5 before the cap)"
        ),
        Record(
            name="nccl-a100-8gpu-allreduce-busbw",
            source=(
                "NVIDIA/nccl-tests issue 149 (github.com/NVIDIA/nccl-tests/issues/149), comment by "
                "the NCCL maintainer (sjeaugey, 2023-07-05): 8 x A100 SXM on NVSwitch, all_reduce_perf "
                "up to 8 GB 'should reach 230 GB/s' busbw (12 NVLinks x ~20 GB/s effective = 240 "
                "GB/s, other GPU bottlenecks limit it to ~230)"
            ),
            quantity="all-reduce bus bandwidth, 8 GPUs, 8 GiB per rank (GB/s)",
            kind="absolute",
            published=230.0,
            predict=lambda: _busbw("dgx-a100-x2", 8, 8 * _GIB),
            tolerance=0.10,
            note="devices 0-7 of dgx-a100-x2 (one server; NVLink3-x12 to NVSwitch, 0.8 achievable)",
        ),
        Record(
            name="nccl-a100-8gpu-allreduce-busbw-4g",
            source=(
                "NVIDIA/nccl-tests issue 175 (github.com/NVIDIA/nccl-tests/issues/175), description "
                "(2023-10-29): one server of 8 x A100, all_reduce_perf -b 8 -e 4G -f 2 -g 8, result "
                "232.54 GB/s"
            ),
            quantity="all-reduce bus bandwidth, 8 GPUs, 4 GiB per rank (GB/s)",
            kind="absolute",
            published=232.54,
            predict=lambda: _busbw("dgx-a100-x2", 8, 4 * _GIB),
            tolerance=0.10,
            note="devices 0-7 of dgx-a100-x2 (one server); the issue's server is taken as an HGX A100",
        ),
        Record(
            name="nccl-a100-oci-8gpu-allreduce-busbw-10g",
            source=(
                "oracle-japan/ocitutorials (github.com/oracle-japan/ocitutorials), "
                "tutorials/_hpc/spinup-ml-instance-cntnd.md, section 5 (NCCL Tests), BM.GPU4.8 "
                "(8 x NVIDIA A100-SXM4-40GB): all_reduce_perf -b 10G -e 10G -f 2 -t 1 -g 8, "
                "out-of-place busbw 232.04 GB/s (in-place 231.54)"
            ),
            quantity="all-reduce bus bandwidth, 8 x A100 on NVSwitch, 10 GiB per rank (GB/s)",
            kind="absolute",
            published=232.04,
            predict=lambda: _busbw("dgx-a100-x2", 8, 10 * _GIB),
            tolerance=0.10,
            note=(
                "devices 0-7 of dgx-a100-x2 (one server; NVLink3-x12 to NVSwitch, 0.8 achievable); "
                "BM.GPU4.8 is an HGX A100 8-GPU server; the all-reduce does not depend on the memory size"
            ),
        ),
        Record(
            name="nccl-a100-2node-16gpu-ring-allreduce-busbw",
            source=(
                "NVIDIA/nccl issue 812 (github.com/NVIDIA/nccl/issues/812), comment by AddyLaddy "
                "(NVIDIA, 2023-03-31), on forcing NCCL_ALGO=RING across DGX A100s: 'On an Nvidia "
                "DGX-A100 system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce "
                "BusBW'"
            ),
            quantity=(
                "ring all-reduce bus bandwidth across DGX A100 servers (8 x 200 Gb/s HDR each), "
                "large messages (GB/s)"
            ),
            kind="absolute",
            published=192.0,
            predict=lambda: _busbw("dgx-a100-x2", 16, 8 * _GIB, "ring"),
            tolerance=0.10,
            note=(
                "devices 0-15 of dgx-a100-x2 (two servers, one HDR NIC per GPU), algorithm ring, 8 "
                "GiB per rank (chosen before the prediction: the thread's ring at scale, nccl-tests' "
                "usual largest size); NCCL's ring channels across servers, one per NIC "
                "(ring_topology.server_rings): every step's chunk crosses a NIC at 1/8 of the "
                "NVSwitch port's load, so the bus bandwidth is the 8 NICs' achievable rate "
                "(one ring over the servers in order: one NIC's 24 GB/s; the hierarchical form "
                "150). Missed (-11.9%) at the catalog's former HDR fraction 0.85, which took 4-NIC "
                "servers' 86 of 100 GB/s (nccl-tests issue 175, whose single NIC reached 24 GB/s "
                "alone) for the NIC's; at 0.96, the NCCL maintainer's 24 of 25 GB/s per HDR NIC "
                "(links.toml IB-HDR), it is held"
            ),
        ),
        Record(
            name="nccl-h100-8gpu-ring-allreduce-busbw",
            source=(
                "NVIDIA/nccl issue 1455 (github.com/NVIDIA/nccl/issues/1455), description "
                "(2024-09-19): 8 x H100 SXM, NCCL_ALGO=RING all_reduce_perf -b 2G -e 4G, busbw "
                "'about 365-370 GBps when gpus from 2 to 8'; midpoint 367.5. Also NVIDIA/nccl-tests "
                "issue 212 (sjeaugey): ~370 GB/s effective NVLink bandwidth with NCCL_ALGO=RING"
            ),
            quantity="ring all-reduce bus bandwidth, 8 GPUs, 4 GiB per rank (GB/s)",
            kind="absolute",
            published=367.5,
            predict=lambda: _busbw("dgx-h100-x4", 8, 4 * _GIB),
            tolerance=0.10,
            note="devices 0-7 of dgx-h100-x4 (one server; NVLink4-x18 to NVSwitch, 0.8 achievable)",
        ),
        Record(
            name="nccl-h100-2gpu-ring-allreduce-busbw",
            source=(
                "NVIDIA/nccl issue 1455 (github.com/NVIDIA/nccl/issues/1455), description "
                "(2024-09-19): NCCL_ALGO=RING busbw about 365-370 GB/s for 2 to 8 GPUs; 2 GPUs, "
                "midpoint 367.5"
            ),
            quantity="ring all-reduce bus bandwidth, 2 GPUs, 4 GiB per rank (GB/s)",
            kind="absolute",
            published=367.5,
            predict=lambda: _busbw("dgx-h100-x4", 2, 4 * _GIB),
            tolerance=0.10,
            note="devices 0-1 of dgx-h100-x4",
        ),
        Record(
            name="nccl-h100-4gpu-ring-allreduce-busbw",
            source=(
                "NVIDIA/nccl issue 1455 (github.com/NVIDIA/nccl/issues/1455), description "
                "(2024-09-19): NCCL_ALGO=RING busbw about 365-370 GB/s for 2 to 8 GPUs; 4 GPUs, "
                "midpoint 367.5"
            ),
            quantity="ring all-reduce bus bandwidth, 4 GPUs, 4 GiB per rank (GB/s)",
            kind="absolute",
            published=367.5,
            predict=lambda: _busbw("dgx-h100-x4", 4, 4 * _GIB),
            tolerance=0.10,
            note="devices 0-3 of dgx-h100-x4",
        ),
    ]
