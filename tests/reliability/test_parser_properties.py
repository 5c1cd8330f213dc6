"""Property tests of every user-input parser (issue 17): whatever the input, the parser returns a
valid result or raises a :class:`PipesimError` with a message; never another exception.

Each property runs twice: a few dozen derandomized examples in the default suite (fast, the same
every run) and many more under ``pytest -m slow``. Inputs are grammar-shaped (valid lines and
tokens with one part replaced by junk) as well as arbitrary text, so both the happy path and each
error branch are reached. docs/reliability.md lists what is tried and what was found.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipesim.cli._common import override_item
from pipesim.errors import PipesimError
from pipesim.profiles.models.fileformat import load_profile_file, profile_from_dict, profile_to_dict
from pipesim.profiles.models.profile import ModelProfile
from pipesim.profiles.models.torchgraph import parse_torchgraph
from pipesim.profiles.models.zoo import zoo_model
from pipesim.schedules.action import Action
from pipesim.schedules.order_text import parse_order, schedule_from_order
from pipesim.sweep import SweepConfig, load_sweep_config, parse_sweep_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FAST = settings(
    max_examples=100, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None
)
SLOW = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), database=None)


def accepts_or_refuses(parse: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``parse(*args)``; a PipesimError must carry a message; anything else propagates (a bug)."""
    try:
        return parse(*args, **kwargs)
    except PipesimError as exc:
        message = str(exc)
    assert message.strip(), "a PipesimError without a message"
    return None


def pair(strategy: st.SearchStrategy[Any], check: Callable[[Any], None]) -> tuple[Any, Any]:
    """The fast (default suite) and slow (``-m slow``) tests of one property."""
    fast = FAST(given(strategy)(check))
    slow = pytest.mark.slow(SLOW(given(strategy)(check)))
    return fast, slow


junk_text = st.text(max_size=40)
ascii_junk = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=20)
numbers_text = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["", "1e999", "-0", "nan", "inf", "\u0663", "1_0", "0x10", " 7 ", "1.5.2", "9" * 5000]),
)


def one_of_junk(valid: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """A valid piece most of the time, junk text or a junk number otherwise."""
    return st.one_of(valid, valid, valid, junk_text, numbers_text)


# --- TorchGraph text ---------------------------------------------------------------------------

node_ids = st.sampled_from(["node1", "node2", "node3", "node4"])
node_line = st.builds(
    lambda i, d, f, b, a, p, stage: (
        f"{i} -- {d} -- forward_compute_time={f}, backward_compute_time={b}, "
        f"activation_size={a}, parameter_size={p}{stage}"
    ),
    one_of_junk(node_ids),
    one_of_junk(st.sampled_from(["Linear", "ReLU()", "Conv2d(3, 64)", "Add"])),
    one_of_junk(st.floats(0, 100).map(repr)),
    one_of_junk(st.floats(0, 100).map(repr)),
    one_of_junk(st.sampled_from(["1024.0", "[1.0; 2.0]", "[]", "[1.0,"])),
    one_of_junk(st.sampled_from(["0.0", "4096.0"])),
    st.sampled_from(["", "", " -- stage_id=0", " -- stage_id=1", " -- stage_id=x", " -- stage_id=\u0661"]),
)
edge_line = st.builds(lambda a, b: f"\t{a} -- {b}", one_of_junk(node_ids), one_of_junk(node_ids))
torchgraph_text = st.lists(st.one_of(node_line, node_line, edge_line, junk_text), max_size=8).map("\n".join)


def check_torchgraph(text: str) -> None:
    profile = accepts_or_refuses(parse_torchgraph, text, pbs=4)
    if profile is not None:
        assert isinstance(profile, ModelProfile)
        assert profile.num_layers >= 1
        assert all(math.isfinite(a.fwd_time_s) and a.fwd_time_s >= 0 for a in profile.layers)


test_torchgraph_text_fast, test_torchgraph_text_slow = pair(torchgraph_text, check_torchgraph)


# --- pipesim profile JSON/TOML -----------------------------------------------------------------

_BASE_PROFILE = profile_to_dict(zoo_model("gpt:layers=2,hidden=64,heads=2,seq=16,vocab=100"))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


@st.composite
def mutated_profile(draw: st.DrawFn) -> dict[str, Any]:
    """The valid profile dict with a few values (top level or in a layer) replaced by junk."""
    data = json.loads(json.dumps(_BASE_PROFILE))
    for _ in range(draw(st.integers(1, 3))):
        layers = data.get("layers")
        if draw(st.booleans()) or not (isinstance(layers, list) and layers and isinstance(layers[0], dict)):
            key = draw(st.sampled_from([*sorted(data), "extra_key"]))
            data[key] = draw(json_values)
        else:
            layer = layers[draw(st.integers(0, len(layers) - 1))]
            if not isinstance(layer, dict):
                continue
            key = draw(st.sampled_from([*sorted(layer), "extra_key"]))
            layer[key] = draw(json_values)
    return data


def check_profile_dict(data: Any) -> None:
    profile = accepts_or_refuses(profile_from_dict, data)
    if profile is not None:
        assert isinstance(profile, ModelProfile)


test_profile_dict_fast, test_profile_dict_slow = pair(
    st.one_of(mutated_profile(), json_values), check_profile_dict
)


def _file_of(text: str, suffix: str) -> str:
    fd, path = tempfile.mkstemp(suffix=suffix)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(text)
    return path


profile_text = st.one_of(
    mutated_profile().map(lambda d: (json.dumps(d), ".json")),
    st.tuples(junk_text, st.sampled_from([".json", ".toml"])),
    st.tuples(
        st.lists(
            st.builds(
                lambda k, v: f"{k} = {v}",
                one_of_junk(st.sampled_from(["name", "format", "layers"])),
                one_of_junk(st.sampled_from(['"x"', "1", "[]", "{}", "nan", "inf"])),
            ),
            max_size=5,
        ).map("\n".join),
        st.just(".toml"),
    ),
)


def check_profile_file(item: tuple[str, str]) -> None:
    text, suffix = item
    path = _file_of(text, suffix)
    try:
        profile = accepts_or_refuses(load_profile_file, path)
        if profile is not None:
            assert isinstance(profile, ModelProfile)
    finally:
        os.unlink(path)


test_profile_file_fast, test_profile_file_slow = pair(profile_text, check_profile_file)


# --- sweep config TOML -------------------------------------------------------------------------

_SWEEP_VALUES = [
    '["bert48"]',
    '"bert48"',
    '["dgx1-v100"]',
    "[8, 16]",
    "[[8]]",
    "8",
    "[0]",
    "[1e308]",
    "1e308",
    "nan",
    "inf",
    "-1",
    '["dapple"]',
    '["gpipe", "1f1b"]',
    '[{device = "A100-80GB"}]',
    "[{servers = nan}]",
    "[{servers = 1e300}]",
    "[]",
    "true",
    '"\u0663"',
    "[8, 8]",
]
sweep_line = st.builds(
    lambda k, v: f"{k} = {v}",
    one_of_junk(
        st.sampled_from(
            [
                "models",
                "clusters",
                "global_batch_sizes",
                "planners",
                "schedules",
                "overrides",
                "price_per_device_hour_usd",
            ]
        )
    ),
    one_of_junk(st.sampled_from(_SWEEP_VALUES)),
)
sweep_text = st.lists(st.one_of(sweep_line, sweep_line, sweep_line, junk_text), max_size=8).map("\n".join)


def check_sweep_text(text: str) -> None:
    path = _file_of(text, ".toml")
    try:
        config = accepts_or_refuses(load_sweep_config, path)
        if config is not None:
            assert isinstance(config, SweepConfig)
            assert config.points()
    finally:
        os.unlink(path)


def check_sweep_data(data: Any) -> None:
    if not isinstance(data, dict):
        data = {"models": data}
    config = accepts_or_refuses(parse_sweep_config, data)
    if config is not None:
        assert isinstance(config, SweepConfig)


test_sweep_text_fast, test_sweep_text_slow = pair(sweep_text, check_sweep_text)
test_sweep_data_fast, test_sweep_data_slow = pair(
    st.dictionaries(
        st.sampled_from(
            ["models", "clusters", "global_batch_sizes", "overrides", "price_per_device_hour_usd"]
        ),
        json_values,
    ),
    check_sweep_data,
)


def test_every_sweep_value_of_the_list_parses_or_is_refused() -> None:
    """Each listed value in each key (a fixed grid, besides the random one)."""
    base = {"models": '["bert48"]', "clusters": '["dgx1-v100"]', "global_batch_sizes": "[8]"}
    keys = [*base, "planners", "schedules", "overrides", "price_per_device_hour_usd"]
    for key in keys:
        for value in _SWEEP_VALUES:
            text = "\n".join(f"{k} = {v}" for k, v in {**base, key: value}.items())
            accepts_or_refuses(parse_sweep_config, tomllib.loads(text))


# --- gpt: specs --------------------------------------------------------------------------------

gpt_item = st.builds(
    lambda k, v: f"{k}={v}",
    one_of_junk(st.sampled_from(["layers", "hidden", "heads", "seq", "vocab", "LAYERS", " seq "])),
    st.one_of(
        st.integers(-2, 70).map(str), st.sampled_from(["4096", "4097", "1048577", "64", "128"]), numbers_text
    ),
)
gpt_spec = st.one_of(
    st.lists(gpt_item, max_size=5).map(lambda items: "gpt:" + ",".join(items)),
    junk_text.map(lambda t: "gpt:" + t),
    junk_text,
)


def check_gpt(spec: str) -> None:
    profile = accepts_or_refuses(zoo_model, spec)
    if profile is not None:
        assert isinstance(profile, ModelProfile)


test_gpt_spec_fast, test_gpt_spec_slow = pair(gpt_spec, check_gpt)


# --- --set items -------------------------------------------------------------------------------

set_item = st.one_of(
    st.builds(
        lambda k, v: f"{k}={v}",
        one_of_junk(
            st.sampled_from(
                [
                    "servers",
                    "gpus_per_server",
                    "device",
                    "nic",
                    "intra",
                    "nic_latency_us",
                    "device_memory_gib",
                    "device_compute_efficiency",
                ]
            )
        ),
        st.one_of(numbers_text, st.sampled_from(["A100-80GB", "100GbE", "nvswitch", "4", "0", "-1"])),
    ),
    junk_text,
)


def check_set_item(text: str) -> None:
    from pipesim.profiles.inputs import resolve_cluster

    try:
        key, value = override_item(text)
    except argparse.ArgumentTypeError as exc:  # argparse reports it as one line, exit 2
        message = str(exc)
    else:
        assert not (isinstance(value, float) and not math.isfinite(value))
        accepts_or_refuses(resolve_cluster, "dgx1-v100", {key: value})
        return
    assert message


test_set_item_fast, test_set_item_slow = pair(set_item, check_set_item)


# --- schedule tokens and orders ----------------------------------------------------------------

token = st.builds(
    lambda s, op, m: f"{s}{op}{m}",
    one_of_junk(st.integers(0, 5).map(str)),
    st.sampled_from(["F", "B", "I", "W", "SEND_F", "RECV_B", "ALL_REDUCE", "REDUCE_GRAD", "X", ""]),
    st.one_of(st.integers(0, 5).map(str), st.just(""), numbers_text),
)


def check_token(text: str) -> None:
    action = accepts_or_refuses(Action.parse, text)
    if action is not None:
        assert Action.parse(str(action)) == action


order_text = st.one_of(
    st.lists(
        st.builds(
            lambda prefix, tokens: prefix + " ".join(tokens),
            st.sampled_from(["", "0: ", "rank 1: ", "2:", "\u0661: ", "x: "]),
            st.lists(token, max_size=4),
        ),
        max_size=4,
    ).map("\n".join),
    st.dictionaries(
        st.one_of(st.sampled_from(["0", "1", "00", "-1", "\u0660"]), junk_text),
        st.lists(st.one_of(token, st.none()), max_size=4),
        max_size=3,
    ).map(json.dumps),
    junk_text,
)


def check_order(text: str) -> None:
    accepts_or_refuses(parse_order, text)
    accepts_or_refuses(schedule_from_order, text)


test_schedule_token_fast, test_schedule_token_slow = pair(st.one_of(token, junk_text), check_token)
test_schedule_order_fast, test_schedule_order_slow = pair(order_text, check_order)


# --- command-line numbers and model specs ------------------------------------------------------


def check_int_arg(text: str) -> None:
    from pipesim.cli._common import batch_int, jitter_float, positive_int

    for parse in (positive_int, batch_int, jitter_float):
        try:
            value = parse(text)
        except argparse.ArgumentTypeError as exc:
            value = None
            message = str(exc)
        if value is None:
            assert message
        else:
            assert text.strip().isascii()
            assert math.isfinite(value)


def check_model_spec(spec: str) -> None:
    from pipesim.profiles.models.loader import load_model

    profile = accepts_or_refuses(load_model, spec)
    if profile is not None:
        assert isinstance(profile, ModelProfile)


test_cli_numbers_fast, test_cli_numbers_slow = pair(st.one_of(numbers_text, junk_text), check_int_arg)
test_model_spec_fast, test_model_spec_slow = pair(
    st.one_of(
        gpt_spec, st.sampled_from(["bert48", "BERT48", "vgg16:x", "nope.json", "a/b.txt", "."]), junk_text
    ),
    check_model_spec,
)


# ---------------------------------------------------------------- cluster TOML files

_CLUSTER_BASE = {
    "name": '"c"',
    "servers": "2",
    "gpus_per_server": "8",
    "intra": '"dgx1"',
    "device": '"V100-SXM2-16GB"',
    "nic": '"25GbE"',
    "nics_per_server": "1",
}
_CLUSTER_KEYS = (
    *_CLUSTER_BASE,
    "description",
    "gpus_per_pcie_switch",
    "intra_link",
    "pcie",
    "device_memory_gib",
    "device_compute_efficiency",
    "nic_bandwidth_gbit_per_s",
    "nic_latency_us",
    "speed",
)
_TOML_VALUES = st.sampled_from(
    [
        '"x"',
        "0",
        "-1",
        "1e999",
        "nan",
        "inf",
        "1" * 5000,
        "true",
        "[8]",
        "{a = 1}",
        '"٣"',
        "0.5",
        "2",
        "1e300",
        '"nvswitch"',
        '"pcie"',
        '"NVLink3"',
        '"H100-SXM"',
        '"A100-80GB"',
        "65537",
        "100000",
    ]
)


def _check_cluster_toml(lines: dict[str, str]) -> None:
    from pipesim.profiles.hardware.cluster_file import cluster_from_toml

    text = "\n".join(f"{key} = {value}" for key, value in lines.items())
    accepts_or_refuses(cluster_from_toml, text, path="c.toml")


test_cluster_toml_fast, test_cluster_toml_slow = pair(
    st.dictionaries(st.sampled_from(_CLUSTER_KEYS), _TOML_VALUES, max_size=4).map(
        lambda changes: {**_CLUSTER_BASE, **changes}
    ),
    _check_cluster_toml,
)


def _check_cluster_text(text: str) -> None:
    from pipesim.profiles.hardware.cluster_file import cluster_from_toml

    accepts_or_refuses(cluster_from_toml, text, path="c.toml")


test_cluster_text_fast, test_cluster_text_slow = pair(st.text(max_size=200), _check_cluster_text)
