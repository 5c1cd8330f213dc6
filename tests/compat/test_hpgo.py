"""pipesim.compat.hpgo: HPGO's API, HPGO's meanings (speedup over one GPU, state numbering)."""

from __future__ import annotations

import ast
import itertools
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pipesim.compat.hpgo as HPGO  # noqa: N812 (the name scripts use)
from pipesim.errors import InputError

PBS = 4
GBS = 64
FWD_MS = (0.0, 2.0, 3.0, 4.0, 2.0, 3.0, 4.0, 2.0, 3.0, 0.5)


def _profile(tmp_path: Path, *, branch: bool = False) -> Path:
    """Input -> 8 layers -> __getitem__ sink: HPGO keeps the 8 layers as its states."""
    descs = ["Input0", *(f"Linear{i}" for i in range(1, 9)), "__getitem__"]
    lines = [
        f"node{i} -- {desc} -- forward_compute_time={FWD_MS[i]}, backward_compute_time={2 * FWD_MS[i]}, "
        f"activation_size={4194304.0 * (1 + i % 3)}, parameter_size={67108864.0 * (i % 4)}"
        for i, desc in enumerate(descs)
    ]
    lines += [f"\tnode{i} -- node{i + 1}" for i in range(9)]
    if branch:
        lines.append("\tnode2 -- node5")
    path = tmp_path / f"toy-pbs-{PBS}.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_script_written_for_hpgo_runs_with_only_its_import_changed(tmp_path: Path) -> None:
    profile = _profile(tmp_path)
    script = tmp_path / "plan.py"
    # DAPPLE README, "Example Usage of Python API", with the import line changed.
    script.write_text(
        textwrap.dedent(
            f"""\
            import pipesim.compat.hpgo as HPGO
            conductor = HPGO.conductor_from_torch_graph_and_seps({str(profile)!r}, {PBS}, {GBS}, [8, 16])
            result = conductor.py_orchestrate()
            print(result)
            m = HPGO.model_from_torch_graph({str(profile)!r}, {PBS}, {GBS})
            d = HPGO.devices_from_seps([8, 16])
            print(len(m.layers), len(conductor.m.layers), len(conductor.res) > 0)
            """
        )
    )
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, check=True, timeout=120
    )
    first, second = run.stdout.strip().splitlines()
    speedup, stages = ast.literal_eval(first)
    assert second == "8 8 True"
    assert speedup > 1.0
    assert stages[0][0] == 0
    assert stages[-1][1] == 7  # HPGO reports the last stage's end as the last state, L - 1
    used = [g for stage in stages for g in stage[3]]
    assert len(set(used)) == len(used)
    assert set(used) <= set(range(16))


def test_speedup_is_over_one_gpu_as_hpgo_computes_it(tmp_path: Path) -> None:
    conductor = HPGO.conductor_from_torch_graph_and_seps(str(_profile(tmp_path)), PBS, GBS, [8, 16])
    speedup, _ = conductor.py_orchestrate()
    single_s = sum(f + 2 * f for f in FWD_MS[1:9]) * 1e-3 * GBS / PBS  # states only
    best = max(conductor.res, key=lambda r: r.speedup)
    assert best.plan.estimate is not None
    assert speedup == pytest.approx(single_s / best.plan.estimate.iteration_time_s, rel=1e-12)
    assert speedup == pytest.approx(
        sum(layer.compute_time for layer in conductor.m.layers) / best.plan.estimate.iteration_time_s
    )
    # not the figure pipesim's planner reports (over the best data-parallel plan)
    assert best.plan.estimate.speedup_vs_dp is not None
    assert speedup != pytest.approx(best.plan.estimate.speedup_vs_dp)


def test_stages_index_hpgo_states(tmp_path: Path) -> None:
    conductor = HPGO.conductor_from_torch_graph_and_seps(str(_profile(tmp_path)), PBS, GBS, [8, 16])
    conductor.py_orchestrate()
    assert conductor.m.states == tuple(range(1, 9))  # Input0 and __getitem__ dropped
    assert [layer.desc for layer in conductor.m.layers] == [f"Linear{i}" for i in range(1, 9)]
    for result in conductor.res:
        plan_stages = result.plan.stages
        assert result.rp == math.gcd(*(s.replicas for s in plan_stages))
        for n, ((start, end, mp, gpus), st) in enumerate(zip(result.stages, plan_stages, strict=True)):
            assert start == max(0, st.first_layer - 1)  # one dropped node (the input) before
            if n < len(plan_stages) - 1:
                assert end == min(st.last_layer, 8)  # exclusive end in state numbers
            else:
                assert end == 7
            assert mp * result.rp == st.replicas == len(gpus)


def test_model_is_normalised_to_the_global_batch(tmp_path: Path) -> None:
    m = HPGO.model_from_torch_graph(str(_profile(tmp_path)), PBS, GBS)
    assert [layer.id for layer in m.layers] == list(range(8))
    assert m.layers[0].compute_time == pytest.approx(3 * FWD_MS[1] * 1e-3 * GBS / PBS)
    assert m.layers[0].activation_size == pytest.approx(4194304.0 * 2 * GBS / PBS)
    assert m.layers[0].parameter_size == 67108864.0
    assert m.min_micro_batch_size == 1


def test_uneven_servers_are_planned(tmp_path: Path) -> None:
    d = HPGO.devices_from_seps([8, 12])
    assert (d.num_gpus, d.num_machines, d.server_sizes) == (12, 2, (8, 4))
    conductor = HPGO.conductor_from_torch_graph_and_seps(str(_profile(tmp_path)), PBS, GBS, [8, 12])
    assert len(conductor.m.layers) == 8
    assert conductor.cluster.server_gpu_counts == (8, 4)
    speedup, stages = conductor.py_orchestrate()
    assert speedup > 0
    devices = [d for *_, ids in stages for d in ids]
    assert len(devices) == len(set(devices))
    assert set(devices) <= set(range(12))
    for bad in ([16, 8], [], [0, 8], [8, 8]):
        with pytest.raises(InputError, match="devices"):
            HPGO.devices_from_seps(bad)


def test_branching_graphs_need_pipesim_numbering(tmp_path: Path) -> None:
    path = str(_profile(tmp_path, branch=True))
    with pytest.raises(InputError, match="numbering='pipesim'"):
        HPGO.conductor_from_torch_graph_and_seps(path, PBS, GBS, [8, 16])
    conductor = HPGO.conductor_from_torch_graph_and_seps(path, PBS, GBS, [8, 16], numbering="pipesim")
    _, stages = conductor.py_orchestrate()
    assert stages[0][0] == 0
    assert stages[-1][1] == 10
    for (_, end, _, _), (start, _, _, _) in itertools.pairwise(stages):
        assert end == start
