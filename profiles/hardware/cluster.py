"""Clusters, in one place: the :class:`Cluster` type, presets, cluster files and what-if copies.

This module only gathers the public names; each lives in the module of its concept, and the
imports go one way (``cluster`` -> ``cluster_file`` -> ``cluster_config`` -> ``cluster_type``,
``catalog``, ``parts``, ``specs``):

- :mod:`pipesim.profiles.hardware.cluster_type`: the type (server groups, links, routes);
- :mod:`pipesim.profiles.hardware.cluster_views`: its JSON and text views;
- :mod:`pipesim.profiles.hardware.cluster_config`: clusters from key/value configs and what-ifs;
- :mod:`pipesim.profiles.hardware.cluster_file`: TOML files and the packaged presets
  (``data/clusters/*.toml``, read by the same loader as a user's file).
"""

from __future__ import annotations

from pipesim.profiles.hardware.cluster_config import with_overrides
from pipesim.profiles.hardware.cluster_file import cluster_names, get_cluster, load_cluster
from pipesim.profiles.hardware.cluster_type import MAX_DEVICES, Cluster
from pipesim.profiles.hardware.cluster_views import (
    cluster_to_dict,
    describe_cluster,
    device_spec_to_dict,
    link_spec_to_dict,
)

__all__ = [
    "MAX_DEVICES",
    "Cluster",
    "cluster_names",
    "cluster_to_dict",
    "describe_cluster",
    "device_spec_to_dict",
    "get_cluster",
    "link_spec_to_dict",
    "load_cluster",
    "with_overrides",
]
