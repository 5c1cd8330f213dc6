"""Training precision (``--dtype``): re-targeting measured profiles, the zoo per device, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipesim.cli import main
from pipesim.errors import InputError
from pipesim.profiles.costmodels.compute import gemm_efficiency
from pipesim.profiles.costmodels.retarget import GEMM_SHARE_WITHOUT_FLOP, retarget_precision
from pipesim.profiles.hardware.catalog import get_device
from pipesim.profiles.inputs import resolve_inputs
from pipesim.profiles.models.profile import BatchPoint, Layer, ModelProfile
from pipesim.profiles.models.zoo import zoo_model

A100 = get_device("A100-80GB")
_NODE = (
    "{} -- {} -- forward_compute_time={}, backward_compute_time={}, activation_size={}, parameter_size={}\n"
)
GRAPH = (
    _NODE.format("node1", "input", 0.0, 0.0, 1000.0, 0.0)
    + _NODE.format("node2", "dense", 4.0, 8.0, 4000.0, 400.0)
    + _NODE.format("node3", "relu", 1.0, 1.0, 4000.0, 0.0)
    + "\tnode1 -- node2\n\tnode2 -- node3\n"
)


def _profile() -> ModelProfile:
    gemm = Layer(
        name="gemm", fwd_time_s=0.1, bwd_time_s=0.2, activation_bytes=400, parameter_bytes=800,
        saved_activation_bytes=400, fwd_flop=1e15, bwd_flop=2e15, fwd_memory_bytes=1e3, bwd_memory_bytes=2e3,
    )
    norm = Layer(name="norm", fwd_time_s=0.01, bwd_time_s=0.02, activation_bytes=400, parameter_bytes=0)
    dense = Layer(name="dense", fwd_time_s=0.05, bwd_time_s=0.1, activation_bytes=40, parameter_bytes=80)
    point = BatchPoint(batch_size=4, fwd_time_s=(0.06, 0.006, 0.03), bwd_time_s=(0.12, 0.012, 0.06),
                       activation_bytes=(200, 200, 20))
    return ModelProfile(name="p", layers=(gemm, norm, dense), profile_batch_size=8, batch_points=(point,),
                        reference_device=A100.name)


def test_gemm_share_follows_the_rate_ratio_and_the_rest_the_element_size() -> None:
    out = retarget_precision(_profile(), "bf16")
    r_gemm = (19.5e12 * gemm_efficiency(A100, "float32")) / (312e12 * gemm_efficiency(A100, "bfloat16"))
    gemm, norm, dense = out.layers
    assert gemm.fwd_time_s == pytest.approx(0.1 * r_gemm, rel=1e-9)  # compute-bound: all GEMM
    assert norm.fwd_time_s == pytest.approx(0.01 * 0.5)  # no FLOP, no parameters: memory-bound
    g = GEMM_SHARE_WITHOUT_FLOP
    assert dense.bwd_time_s == pytest.approx(0.1 * (g * r_gemm + (1 - g) * 0.5))
    assert (gemm.activation_bytes, gemm.parameter_bytes, gemm.saved_activation_bytes) == (200, 400, 200)
    assert out.dtype == "bfloat16"
    assert out.batch_points[0].fwd_time_s[1] == pytest.approx(0.006 * 0.5)
    assert out.batch_points[0].activation_bytes == (100, 100, 10)


def test_tf32_keeps_sizes_and_same_precision_is_identity() -> None:
    base = _profile()
    tf32 = retarget_precision(base, "tf32")
    assert tf32.dtype == "float32"
    assert [x.activation_bytes for x in tf32.layers] == [x.activation_bytes for x in base.layers]
    assert tf32.layers[0].fwd_time_s < 0.2 * base.layers[0].fwd_time_s
    assert tf32.layers[1].fwd_time_s == pytest.approx(base.layers[1].fwd_time_s)
    assert retarget_precision(base, "fp32") is base


def test_a_precision_the_device_lacks_is_refused() -> None:
    v100 = ModelProfile(name="v", layers=_profile().layers, profile_batch_size=8, reference_device="V100")
    with pytest.raises(InputError, match=r"dtype='bfloat16': V100-SXM2-16GB cannot train in it"):
        retarget_precision(v100, "bf16")


def test_resolve_inputs_costs_the_zoo_on_the_device_in_the_precision() -> None:
    profile, cluster = resolve_inputs("bert48", "dgx-a100-x2", dtype="bf16")
    assert profile == zoo_model("bert48", dtype="bf16", device=cluster.device)
    assert profile.reference_device == "A100-80GB"
    assert profile.dtype == "bfloat16"
    again, _ = resolve_inputs(profile, cluster)  # idempotent
    assert again is profile
    with pytest.raises(InputError, match=r"dtype='float16': only applies to a model given by name or path"):
        resolve_inputs(profile, cluster, dtype="fp16")
    with pytest.raises(InputError, match=r"dtype='bfloat16': V100-SXM2-16GB cannot train in it"):
        resolve_inputs("bert48", "dgx1-v100", dtype="bf16")
    with pytest.raises(InputError, match=r"dtype='float8': A100-80GB cannot train in it"):
        resolve_inputs("bert48", "dgx-a100-x2", dtype="fp8")


def test_resolve_inputs_retargets_a_measured_file_to_the_precision(tmp_path: Path) -> None:
    path = tmp_path / "toy-pbs-4.txt"
    path.write_text(GRAPH)
    fp32, _ = resolve_inputs(str(path), "dgx-a100-x2")
    bf16, _ = resolve_inputs(str(path), "dgx-a100-x2", dtype="bf16")
    assert fp32.dtype == "float32"
    assert bf16.dtype == "bfloat16"
    dense = next(x for x in bf16.layers if x.name == "dense")
    dense32 = next(x for x in fp32.layers if x.name == "dense")
    assert dense.fwd_time_s < 0.3 * dense32.fwd_time_s
    assert dense.activation_bytes * 2 == dense32.activation_bytes


def test_cli_dtype_equals_the_input_path(capsys: pytest.CaptureFixture[str]) -> None:
    import pipesim

    model = "gpt:layers=4,hidden=512,heads=8,seq=256,vocab=1000"
    argv = ["simulate", "--model", model, "--cluster", "dgx-a100-x2", "--gbs", "32", "--microbatches", "4",
            "--stages", "2", "--json"]
    capsys.readouterr()
    assert main([*argv, "--dtype", "bf16"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    fp32 = json.loads(capsys.readouterr().out)
    profile, cluster = resolve_inputs(model, "dgx-a100-x2", dtype="bfloat16")
    plan = pipesim.make_plan(profile, cluster, global_batch_size=32, num_microbatches=4, stages=2)
    want = pipesim.simulate(plan, profile, cluster, options=pipesim.SimOptions(record_trace=False))
    assert got["iteration_time_s"] == want.iteration_time_s
    assert got["iteration_time_s"] < 0.5 * fp32["iteration_time_s"]


def test_cli_dtype_errors_are_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "bert48", "--cluster", "dgx1-v100", "--gbs", "32", "--dtype", "bf16"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pipesim: error: dtype='bfloat16': V100-SXM2-16GB cannot train in it; it supports "
                   "float32, float16"]
    assert main([*argv[:-1], "int8"]) == 2
    assert "invalid choice: 'int8'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "device",
    ["T4", "A10", "L4", "L40S", "A100-PCIe-40GB", "A100-PCIe-80GB", "H100-PCIe", "H200", "B200", "MI250X",
     "MI300X", "P40"],
)
def test_new_devices_are_selectable_with_set(device: str) -> None:
    profile, cluster = resolve_inputs("gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000", "dgx1-v100",
                                      overrides={"device": device})
    assert cluster.device.name == device
    assert profile.reference_device == device
