"""AmoebaNet-D as DAPPLE's TensorFlow 1.x code builds it (``amoebanet36:framework=tf1``)."""

from __future__ import annotations

import pytest

from pipesim.errors import InputError
from pipesim.profiles.models.zoo import zoo_model
from pipesim.profiles.models.zoo.amoebanet_tf1 import STEM_FILTERS, TF_NUM_CLASSES, amoebanet_d_tf1
from pipesim.profiles.models.zoo.roofline import roofline_for

# github.com/AlibabaPAI/DAPPLE, profiling_results/amoeba-18-pbs-8.txt: parameter_size (bytes) of the
# convolution and classifier weights, and the output activation bytes, per node (batch 8, fp32).
DAPPLE_18_WEIGHT_BYTES = {
    "stem": 3456, "cell_stem_0": 245760, "cell_stem_1": 1327104, "cell_0": 8388608, "cell_1": 11796480,
    "cell_2": 14417920, "reduction_cell_0": 31195136, "cell_6": 45088768, "cell_7": 53477376,
    "cell_8": 57671680, "reduction_cell_1": 124780544, "cell_12": 180355072, "cell_13": 213909504,
    "cell_14": 230686720, "final_layer": 32804772,
}
DAPPLE_18_OUTPUT_BYTES = {
    "stem": 12616704, "cell_stem_0": 38535168, "cell_stem_1": 19267584, "cell_0": 51380224,
    "reduction_cell_0": 19267584, "cell_6": 25690112, "reduction_cell_1": 9633792, "cell_12": 12845056,
    "final_layer": 32032,
}


def _batch_norm_channels(name: str, f: int) -> int:
    """Channels of the batch norms of one cell (2 parameters each), by hand from network_utils.py."""
    q = f // 4
    if name == "stem":
        return STEM_FILTERS
    if name == "cell_stem_0":  # base; 3x3 (pre, mid, post); 1x7_7x1 (pre, 1x7, 7x1, post); pool+1x1; 1x1
        return f + (q + q + f) + (q + q + q + f) + f + f
    if name.startswith("reduction") or name == "cell_stem_1":  # + the input two back, reduced
        return f + f + (q + q + f) + (q + q + q + f) + f
    # normal: input two back reduced (factorized or 1x1), base, three 1x1, two 1x7_7x1
    return f + f + 3 * f + 2 * (q + q + q + f)


def test_weights_and_activations_equal_the_measured_file() -> None:
    profile = amoebanet_d_tf1(roofline_for("float32"), 8, normal_cells=18, filters=512, name="a18")
    layers = {layer.name: layer for layer in profile.layers}
    assert [layer.name for layer in profile.layers[:4]] == ["stem", "cell_stem_0", "cell_stem_1", "cell_0"]
    assert profile.layers[9].name == "reduction_cell_0"
    assert profile.layers[16].name == "reduction_cell_1"
    assert profile.layers[-1].name == "final_layer"
    assert len(profile.layers) == 18 + 6
    filters = {"stem": 0, "cell_stem_0": 128, "cell_stem_1": 256, "cell_0": 512, "cell_1": 512, "cell_2": 512,
               "reduction_cell_0": 1024, "cell_6": 1024, "cell_7": 1024, "cell_8": 1024,
               "reduction_cell_1": 2048, "cell_12": 2048, "cell_13": 2048, "cell_14": 2048}
    for name, weight_bytes in DAPPLE_18_WEIGHT_BYTES.items():
        if name == "final_layer":  # the classifier: weights and biases, no batch norm
            assert layers[name].parameter_bytes == weight_bytes
            continue
        bn = 2 * _batch_norm_channels(name, filters[name])
        assert layers[name].parameter_bytes == weight_bytes + 4 * bn, name
    for name, out_bytes in DAPPLE_18_OUTPUT_BYTES.items():
        assert layers[name].activation_bytes == out_bytes, name
    assert layers["final_layer"].activation_bytes == 8 * TF_NUM_CLASSES * 4


def test_zoo_name_form() -> None:
    tf1 = zoo_model("amoebanet36:framework=tf1")
    torch = zoo_model("amoebanet36")
    assert tf1.name == "amoebanet36:framework=tf1"
    assert tf1.num_layers == torch.num_layers == 42
    assert tf1.edges == torch.edges  # each cell reads the two before it
    assert tf1.parameter_count == 933_558_345  # DAPPLE quotes ~933M for AmoebaNet-36
    assert tf1.profile_batch_size == 16
    assert tf1.batch_points  # costed at other batch sizes too
    # the smaller TensorFlow stem makes the stem cells cheaper than the PyTorch port's
    assert tf1.layers[1].fwd_time_s < torch.layers[1].fwd_time_s


@pytest.mark.parametrize(("cells", "filters"), [(4, 512), (0, 512), (6, 12), (6, 0)])
def test_bad_shape(cells: int, filters: int) -> None:
    with pytest.raises(InputError, match=r"normal_cells|filters"):
        amoebanet_d_tf1(roofline_for("float32"), 1, normal_cells=cells, filters=filters, name="x")
