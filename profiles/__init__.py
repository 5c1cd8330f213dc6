"""Model profiles and hardware: what a model costs per layer, and what it runs on.

This layer imports no other pipesim layer (only :mod:`pipesim.errors` and :mod:`pipesim.units`).
"""

from pipesim.profiles.hardware.catalog import (
    DeviceSpec,
    LinkSpec,
    device_names,
    get_device,
    get_link,
    link_names,
)
from pipesim.profiles.hardware.cluster import (
    Cluster,
    cluster_names,
    cluster_to_dict,
    describe_cluster,
    get_cluster,
    load_cluster,
    with_overrides,
)
from pipesim.profiles.hardware.topology import Link, LinkKind, Topology
from pipesim.profiles.models.fileformat import (
    load_profile_file,
    profile_from_dict,
    profile_to_dict,
    save_profile,
)
from pipesim.profiles.models.loader import convert_torchgraph, load_model
from pipesim.profiles.models.profile import DTYPE_BYTES, DTYPES, BatchPoint, Cut, Layer, ModelProfile
from pipesim.profiles.models.torchgraph import load_torchgraph, parse_torchgraph
from pipesim.profiles.models.zoo import zoo_descriptions, zoo_model, zoo_names

__all__ = [
    "DTYPES",
    "DTYPE_BYTES",
    "BatchPoint",
    "Cluster",
    "Cut",
    "DeviceSpec",
    "Layer",
    "Link",
    "LinkKind",
    "LinkSpec",
    "ModelProfile",
    "Topology",
    "cluster_names",
    "cluster_to_dict",
    "convert_torchgraph",
    "describe_cluster",
    "device_names",
    "get_cluster",
    "get_device",
    "get_link",
    "link_names",
    "load_cluster",
    "load_model",
    "load_profile_file",
    "load_torchgraph",
    "parse_torchgraph",
    "profile_from_dict",
    "profile_to_dict",
    "save_profile",
    "with_overrides",
    "zoo_descriptions",
    "zoo_model",
    "zoo_names",
]
