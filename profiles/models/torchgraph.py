"""Importer for the PipeDream/DAPPLE "TorchGraph" text profile format.

The format (as written by PipeDream's profiler and read by its optimizer) has one line per graph
node and one line per edge, e.g. (``<TAB>`` is a tab character)::

    node4 -- Split -- forward_compute_time=0.2, backward_compute_time=0.3, activation_size=[1.0; 2.0], ...
    <TAB>node3 -- node4

* node line: ``ID -- DESC -- forward_compute_time=F, backward_compute_time=B, activation_size=A,
  parameter_size=P`` with an optional `` -- stage_id=N``. ``F`` and ``B`` are milliseconds for the
  whole profile batch; ``A`` is the bytes of the node's output for that batch, or a list
  ``[a; b; ...]`` of several outputs, which are summed; ``P`` is parameter bytes (fp32).
* edge line: starts with a tab or space, then ``SRC -- DST`` (``DST`` consumes ``SRC``'s output).
* blank lines are ignored; lines may end in CRLF or trailing spaces; edges may name nodes defined
  further down.

The profile batch size is not in the file: it comes from a ``-pbs-N`` part of the file name
(``vgg-19-pbs-32.txt``) or from the caller. Nodes are ordered topologically with Kahn's algorithm,
ties broken by the order the nodes appear in the file, so a file listed in execution order keeps
its order.
"""

from __future__ import annotations

import heapq
import logging
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from pipesim.errors import FormatError, InputError, invalid
from pipesim.fileio import read_input_bytes
from pipesim.profiles.models.profile import Layer, ModelProfile
from pipesim.units import MS

__all__ = [
    "DEFAULT_REFERENCE_DEVICE",
    "load_torchgraph",
    "parse_torchgraph",
    "pbs_from_filename",
]

log = logging.getLogger(__name__)

DEFAULT_REFERENCE_DEVICE = "V100-SXM2-16GB"
"""Device assumed for TorchGraph times: the PipeDream profiles were measured on V100 GPUs
(Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN Training", SOSP 2019, §5.1)."""

_NODE_SYNTAX = (
    "'ID -- DESC -- forward_compute_time=F, backward_compute_time=B, activation_size=A, "
    "parameter_size=P' (optionally followed by ' -- stage_id=N')"
)
_EDGE_SYNTAX = "'SRC -- DST' after leading whitespace"
_KEYS = ("forward_compute_time", "backward_compute_time", "activation_size", "parameter_size")

_EDGE = re.compile(r"[ \t]+(\S+)\s+--\s+(\S+)")
_STAGE = re.compile(r"\s+--\s+stage_id=(\S*)$")
_META_START = re.compile(r"\s+--\s+(?=forward_compute_time=)")
_HEAD = re.compile(r"(\S+)\s+--(?:\s+(.*))?")
_FIELD_SPLIT = re.compile(r",\s*(?=[A-Za-z_]\w*=)")
# ASCII digits only (``\d`` would take any Unicode digit, which float() and int() then accept).
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?(?i:inf|infinity|nan)")
_PBS = re.compile(r"-pbs-([0-9]{1,18})(?:[^0-9]|$)")


@dataclass(frozen=True, slots=True)
class _Node:
    node_id: str
    desc: str
    line: int
    fwd_ms: float
    bwd_ms: float
    activation: float
    parameters: float
    stage_id: int | None


def pbs_from_filename(path: str | os.PathLike[str]) -> int | None:
    """The profile batch size in a TorchGraph file name (``vgg-19-pbs-32.txt`` -> 32), or ``None``."""
    found = _PBS.search(Path(path).name)
    return int(found.group(1)) if found else None


def _model_name(path: str | os.PathLike[str] | None) -> str:
    if path is None:
        return "torchgraph"
    stem = Path(path).stem
    return re.sub(r"-pbs-[0-9]+", "", stem) or stem or "torchgraph"


class _Parser:
    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = path

    def error(self, line: int | None, message: str) -> FormatError:
        return FormatError(None if self.path is None else os.fspath(self.path), line, message)

    def number(self, text: str, key: str, line: int) -> float:
        if not _NUMBER.fullmatch(text):
            raise self.error(line, f"{key}={text!r}: expected a number")
        value = float(text)
        if not math.isfinite(value) or value < 0:
            raise self.error(line, f"{key}={text!r}: must be a finite number >= 0")
        return value

    def activation(self, text: str, line: int) -> float:
        if not text.startswith("["):
            return self.number(text, "activation_size", line)
        if not text.endswith("]"):
            raise self.error(line, f"activation_size={text!r}: expected a number or a list '[a; b; ...]'")
        inner = text[1:-1].strip()
        if not inner:
            return 0.0
        return math.fsum(
            self.number(item.strip(), "activation_size", line) for item in re.split(r"[;,]", inner)
        )

    def node(self, text: str, line: int) -> _Node:
        stage_id: int | None = None
        stage = _STAGE.search(text)
        if stage is not None:
            if not re.fullmatch(r"[0-9]{1,18}", stage.group(1)):
                raise self.error(line, f"stage_id={stage.group(1)!r}: expected an integer >= 0")
            stage_id = int(stage.group(1))
            text = text[: stage.start()]
        starts = list(_META_START.finditer(text))
        if not starts:
            raise self.error(line, f"expected a node line {_NODE_SYNTAX}, got {text!r}")
        meta_at = starts[-1]
        head = _HEAD.fullmatch(text[: meta_at.start()])
        if head is None:
            message = f"expected 'ID -- DESC' before the measurements in a node line {_NODE_SYNTAX}"
            raise self.error(line, message)
        fields: dict[str, str] = {}
        for part in _FIELD_SPLIT.split(text[meta_at.end() :]):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in _KEYS:
                raise self.error(line, f"unexpected field {part.strip()!r}; expected {', '.join(_KEYS)}")
            if key in fields:
                raise self.error(line, f"field {key!r} given twice")
            fields[key] = value.strip()
        missing = [key for key in _KEYS if key not in fields]
        if missing:
            raise self.error(line, f"missing {', '.join(missing)}; expected a node line {_NODE_SYNTAX}")
        return _Node(
            node_id=head.group(1),
            desc=(head.group(2) or "").strip(),
            line=line,
            fwd_ms=self.number(fields["forward_compute_time"], "forward_compute_time", line),
            bwd_ms=self.number(fields["backward_compute_time"], "backward_compute_time", line),
            activation=self.activation(fields["activation_size"], line),
            parameters=self.number(fields["parameter_size"], "parameter_size", line),
            stage_id=stage_id,
        )

    def parse(self, text: str) -> tuple[list[_Node], list[tuple[str, str, int]]]:
        nodes: list[_Node] = []
        edges: list[tuple[str, str, int]] = []
        for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), start=1):
            line = raw.rstrip()  # CR of CRLF, trailing spaces and tabs
            if not line:
                continue
            if line[0] in " \t":
                edge = _EDGE.fullmatch(line)
                if edge is None:
                    raise self.error(number, f"expected an edge line {_EDGE_SYNTAX}, got {line.strip()!r}")
                edges.append((edge.group(1), edge.group(2), number))
            else:
                nodes.append(self.node(line, number))
        return nodes, edges


def _find_cycle(remaining: set[int], preds: list[list[int]]) -> list[int]:
    """A cycle among ``remaining`` nodes (each has a remaining predecessor), in edge order,
    starting at its node listed first."""
    start = min(remaining)
    seen: dict[int, int] = {}
    walk: list[int] = []
    current = start
    while current not in seen:
        seen[current] = len(walk)
        walk.append(current)
        current = min(p for p in preds[current] if p in remaining)
    cycle = walk[seen[current] :]
    cycle.reverse()  # walked backwards along edges
    first = cycle.index(min(cycle))  # start at the node listed first in the file
    return cycle[first:] + cycle[:first]


def _layer_names(nodes: list[_Node]) -> list[str]:
    """DESC when unique, else ``DESC [ID]``; an empty DESC gives the ID; leftover clashes get ``#k``."""
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node.desc] = counts.get(node.desc, 0) + 1
    names: list[str] = []
    used: set[str] = set()
    for node in nodes:
        if not node.desc:
            name = node.node_id
        elif counts[node.desc] == 1:
            name = node.desc
        else:
            name = f"{node.desc} [{node.node_id}]"
        base, k = name, 2
        while name in used:
            name = f"{base}#{k}"
            k += 1
        used.add(name)
        names.append(name)
    return names


def _to_bytes(value: float) -> int:
    return round(value)


def parse_torchgraph(
    text: str,
    *,
    path: str | os.PathLike[str] | None = None,
    pbs: int | None = None,
    name: str | None = None,
    reference_device: str = DEFAULT_REFERENCE_DEVICE,
) -> ModelProfile:
    """Parse the text of a TorchGraph profile into a :class:`ModelProfile`.

    Times are converted from milliseconds to seconds; activation and parameter sizes are rounded
    to whole bytes; the dtype is ``float32`` (the PipeDream profiles are fp32). Layer names are
    the node descriptions, made unique with `` [ID]`` where several nodes share one. When the
    edges are exactly the chain through the topological order (or there is one node) the
    profile's ``edges`` is ``None``; otherwise it holds every edge (deduplicated, sorted).
    ``stage_id`` suffixes become ``stage_ids`` (all nodes or none must carry one).

    Args:
        text: the file's contents.
        path: the file it came from, for error messages, the default ``pbs`` and the default name.
        pbs: the profile batch size (samples); overrides a ``-pbs-N`` in ``path``'s name.
        name: the model name (default: the file's stem without ``-pbs-N``, or ``"torchgraph"``).
        reference_device: catalog name of the device the times were measured on.

    Returns:
        The profile, layers in topological order.

    Raises:
        FormatError: a malformed node or edge line (with its line number and the expected form),
            a negative or non-finite value, a duplicate node id, an edge naming an unknown node,
            a cycle, stage ids on only some nodes, or no nodes at all.
        InputError: no batch size: ``pbs`` not given and no ``-pbs-N`` in the file name, or a
            ``pbs`` that is not an integer >= 1.
    """
    parser = _Parser(path)
    nodes, raw_edges = parser.parse(text)
    if not nodes:
        raise parser.error(None, f"no node lines found; expected lines like {_NODE_SYNTAX}")
    batch = _resolve_pbs(path, pbs)

    index: dict[str, int] = {}
    for i, node in enumerate(nodes):
        if node.node_id in index:
            first = nodes[index[node.node_id]].line
            message = f"duplicate node id {node.node_id!r} (first defined on line {first})"
            raise parser.error(node.line, message)
        index[node.node_id] = i
    n = len(nodes)
    succs: list[set[int]] = [set() for _ in range(n)]
    preds: list[list[int]] = [[] for _ in range(n)]
    edge_line: dict[tuple[int, int], int] = {}
    for src, dst, line in raw_edges:
        for end in (src, dst):
            if end not in index:
                raise parser.error(line, f"edge {src} -- {dst} names unknown node {end!r}")
        s, d = index[src], index[dst]
        if d in succs[s]:
            log.debug("%s:%d: duplicate edge %s -- %s ignored", path, line, src, dst)
            continue
        succs[s].add(d)
        preds[d].append(s)
        edge_line[(s, d)] = line

    # Kahn's algorithm; the ready node that appears first in the file goes first.
    indegree = [len(p) for p in preds]
    ready = [i for i in range(n) if indegree[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in succs[i]:
            indegree[j] -= 1
            if indegree[j] == 0:
                heapq.heappush(ready, j)
    if len(order) < n:
        remaining = set(range(n)) - set(order)
        cycle = _find_cycle(remaining, preds)
        path_text = " -> ".join(nodes[i].node_id for i in [*cycle, cycle[0]])
        line = edge_line[(cycle[-1], cycle[0])]
        raise parser.error(line, f"the graph has a cycle: {path_text}")

    position = {node: k for k, node in enumerate(order)}
    edges = sorted((position[s], position[d]) for (s, d) in edge_line)
    chain = [(k, k + 1) for k in range(n - 1)]
    ordered = [nodes[i] for i in order]

    stage_ids: tuple[int, ...] | None = None
    if any(node.stage_id is not None for node in nodes):
        for node in nodes:
            if node.stage_id is None:
                raise parser.error(node.line, f"node {node.node_id!r} has no stage_id but other nodes do")
        stage_ids = tuple(node.stage_id for node in ordered if node.stage_id is not None)

    layers = tuple(
        Layer(
            name=layer_name,
            fwd_time_s=node.fwd_ms * MS,
            bwd_time_s=node.bwd_ms * MS,
            activation_bytes=_to_bytes(node.activation),
            parameter_bytes=_to_bytes(node.parameters),
        )
        for node, layer_name in zip(ordered, _layer_names(ordered), strict=True)
    )
    source = Path(path).name if path is not None else "text"
    return ModelProfile(
        name=name or _model_name(path),
        layers=layers,
        profile_batch_size=batch,
        reference_device=reference_device,
        dtype="float32",
        edges=None if edges == chain else tuple(edges),
        stage_ids=stage_ids,
        description=f"imported from TorchGraph profile {source} (profile batch {batch})",
    )


def _resolve_pbs(path: str | os.PathLike[str] | None, pbs: int | None) -> int:
    from_name = pbs_from_filename(path) if path is not None else None
    if pbs is None:
        if from_name is None:
            where = f"{str(path)!r}" if path is not None else "TorchGraph text"
            raise InputError(
                f"profile batch size of {where} unknown: the file name has no '-pbs-N' part "
                "and no pbs was given (pass --pbs N)"
            )
        return from_name
    if isinstance(pbs, bool) or not isinstance(pbs, int) or pbs < 1:
        raise invalid("pbs", pbs, "must be an integer >= 1")
    if from_name is not None and from_name != pbs:
        log.info("%s: using pbs=%d from the caller, not %d from the file name", path, pbs, from_name)
    return pbs


def load_torchgraph(
    path: str | os.PathLike[str],
    *,
    pbs: int | None = None,
    name: str | None = None,
    reference_device: str = DEFAULT_REFERENCE_DEVICE,
) -> ModelProfile:
    """Read a TorchGraph profile file (UTF-8) into a :class:`ModelProfile`.

    See :func:`parse_torchgraph` for the conversion and the arguments.

    Raises:
        FormatError: the file is not UTF-8 text or breaks the grammar (see :func:`parse_torchgraph`).
        InputError: no profile batch size (neither ``pbs`` nor ``-pbs-N`` in the file name).
        OSError: the file cannot be read.
    """
    raw = read_input_bytes(path, what="TorchGraph profile")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise FormatError(os.fspath(path), line, f"not UTF-8 text: {exc.reason}") from exc
    return parse_torchgraph(text, path=path, pbs=pbs, name=name, reference_device=reference_device)
