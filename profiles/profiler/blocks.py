"""A user's PyTorch model as pipesim sees it: the factory, its list of blocks, and a synthetic input.

``pipesim profile MODULE:FACTORY`` imports ``MODULE`` (a dotted module importable from the current
directory, or a path to a ``.py`` file), calls ``FACTORY()`` with no arguments and splits the
``torch.nn.Module`` it returns into the blocks that become the profile's layers:

1. a ``pipeline_blocks()`` method, if the model has one: it returns a list of modules or of
   ``(name, module)`` pairs;
2. otherwise a ``blocks`` attribute holding a list, tuple, ``nn.ModuleList`` or ``nn.Sequential``;
3. otherwise the children of an ``nn.Sequential``.

Blocks run one after the other: the output of block ``i`` is the input of block ``i + 1`` (a tuple
or list of tensors is passed as positional arguments). torch is an optional extra, so this module
imports it only inside the functions that need it; everything that does not touch a model (spec
and shape parsing) works without it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from pipesim.errors import InputError, invalid

__all__ = [
    "INPUT_DTYPES",
    "TORCH_MISSING",
    "build_model",
    "first_input",
    "load_factory",
    "model_blocks",
    "parse_input_shape",
    "require_torch",
    "split_factory_spec",
]

log = logging.getLogger(__name__)

TORCH_MISSING = "torch is not installed: pip install 'pipesim[torch]'"
"""The message of the error raised when a function needs torch and it cannot be imported."""
INPUT_DTYPES: tuple[str, ...] = ("auto", "float", "long")
"""Kinds of synthetic input: ``auto`` picks ``long`` when the first block starts with an embedding."""

_IDENTIFIER_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_SHAPE_SEPARATORS = re.compile(r"[x,\s]+")


def require_torch() -> ModuleType:
    """Import torch, or fail with the install hint.

    Raises:
        InputError: torch cannot be imported; the message is :data:`TORCH_MISSING`.
    """
    try:
        import torch
    except ImportError:
        raise InputError(TORCH_MISSING) from None
    module: ModuleType = torch
    return module


# --------------------------------------------------------------------------------------------
# Specs and shapes (no torch needed)
def split_factory_spec(spec: str) -> tuple[str, str]:
    """Split ``MODULE:FACTORY`` into the module part and the factory's (dotted) name.

    The split is at the last colon, so a Windows path (``C:\\models\\net.py:make``) keeps its drive.

    Raises:
        InputError: no colon, an empty part, or a factory name that is not a dotted identifier.
    """
    module, sep, factory = spec.rpartition(":")
    if not sep or not module or not factory:
        raise invalid("factory", spec, "must be MODULE:FACTORY, e.g. mymodels:make_mlp or nets.py:make_cnn")
    if not _IDENTIFIER_PATH.match(factory):
        raise invalid("factory", spec, f"{factory!r} after the colon must be a (dotted) Python name")
    return module, factory


def parse_input_shape(text: str) -> tuple[int, ...]:
    """Parse a per-sample input shape such as ``3x32x32``, ``3,32,32`` or ``128``.

    The shape excludes the batch dimension, which the profiler prepends.

    Raises:
        InputError: an empty shape, or an entry that is not an integer >= 1.
    """
    parts = [p for p in _SHAPE_SEPARATORS.split(text.strip()) if p]
    if not parts:
        raise invalid("input_shape", text, "must list the per-sample dimensions, e.g. 3x32x32 or 128")
    dims: list[int] = []
    for part in parts:
        try:
            dim = int(part)
        except ValueError:
            raise invalid("input_shape", text, f"{part!r} is not an integer; use e.g. 3x32x32") from None
        if dim < 1:
            raise invalid("input_shape", text, f"every dimension must be >= 1, got {dim}")
        dims.append(dim)
    return tuple(dims)


# --------------------------------------------------------------------------------------------
# Importing the factory
def _import_path(path: Path) -> ModuleType:
    if not path.is_file():
        raise InputError(f"factory module file {str(path)!r} does not exist")
    if path.suffix != ".py":
        raise InputError(f"factory module file {str(path)!r} is not a .py file")
    name = "_pipesim_user_" + re.sub(r"\W", "_", path.resolve().with_suffix("").as_posix())
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"factory module file {str(path)!r} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    if folder not in sys.path:  # like `python path.py`: the file's siblings are importable
        sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise InputError(f"importing {str(path)!r} raised {type(exc).__name__}: {exc}") from exc
    return module


def _import_dotted(name: str) -> ModuleType:
    if not _IDENTIFIER_PATH.match(name):
        raise invalid("factory module", name, "must be a dotted module name or a path to a .py file")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:  # importable from the current directory
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise InputError(
                f"factory module {name!r} not found: it must be importable from the current "
                "directory or be a path to a .py file"
            ) from None
        raise InputError(f"importing {name!r} raised {type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise InputError(f"importing {name!r} raised {type(exc).__name__}: {exc}") from exc


def load_factory(spec: str) -> Callable[[], Any]:
    """Import the factory named by ``MODULE:FACTORY``.

    ``MODULE`` is a path to a ``.py`` file when it ends in ``.py`` or contains a path separator,
    otherwise a dotted module name imported with the current directory on ``sys.path``.

    Raises:
        InputError: a bad spec, a module that cannot be found or raises while importing, no
            such name in the module, or a name that is not callable.
    """
    module_part, factory = split_factory_spec(spec)
    is_path = module_part.endswith(".py") or "/" in module_part or os.sep in module_part
    module = _import_path(Path(module_part)) if is_path else _import_dotted(module_part)
    obj: Any = module
    for attr in factory.split("."):
        if not hasattr(obj, attr):
            names = sorted(n for n in vars(module) if not n.startswith("_"))
            raise InputError(
                f"factory {spec!r}: {module_part!r} has no {factory!r}; "
                f"public names there: {', '.join(names) or '(none)'}"
            )
        obj = getattr(obj, attr)
    if not callable(obj):
        raise InputError(
            f"factory {spec!r} is a {type(obj).__name__}, not a callable returning a torch.nn.Module"
        )
    factory_fn: Callable[[], Any] = obj
    return factory_fn


def build_model(spec: str) -> Any:
    """Import and call the factory ``MODULE:FACTORY``; return the ``torch.nn.Module`` it builds.

    Raises:
        InputError: torch is missing, the factory cannot be loaded (see :func:`load_factory`),
            calling it raises, or it returns something that is not a ``torch.nn.Module``.
    """
    torch = require_torch()
    factory = load_factory(spec)
    try:
        model = factory()
    except Exception as exc:
        raise InputError(f"factory {spec!r} raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(model, torch.nn.Module):
        raise InputError(
            f"factory {spec!r} returned a {type(model).__name__}, not a torch.nn.Module "
            "(return an nn.Sequential or a module with pipeline_blocks() or a blocks list)"
        )
    return model


# --------------------------------------------------------------------------------------------
# Blocks
def _block_entries(model: Any) -> tuple[str, Sequence[Any]]:
    torch = require_torch()
    nn = torch.nn
    method = getattr(model, "pipeline_blocks", None)
    if callable(method):
        return "pipeline_blocks()", list(method())
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, (nn.Sequential, nn.ModuleList)):
        return "blocks", list(blocks.named_children())
    if isinstance(blocks, (list, tuple)):
        return "blocks", list(blocks)
    if isinstance(model, nn.Sequential):
        return "nn.Sequential", list(model.named_children())
    raise InputError(
        f"model {type(model).__name__} is not an nn.Sequential and has neither a pipeline_blocks() "
        "method nor a blocks attribute listing its blocks in execution order"
    )


def model_blocks(model: Any) -> list[tuple[str, Any]]:
    """The model's blocks in execution order, each with a unique name.

    See the module docstring for the convention. A block given without a name (or named by its
    index, as ``nn.Sequential`` does) is called ``<class in lower case><index>``, e.g. ``linear0``.

    Raises:
        InputError: torch is missing, the model follows none of the conventions, it lists no
            block, or an entry is not an ``nn.Module`` (or a ``(name, nn.Module)`` pair).
    """
    torch = require_torch()
    where, entries = _block_entries(model)
    if not entries:
        raise InputError(f"model {type(model).__name__}: {where} lists no block")
    named: list[tuple[str, Any]] = []
    used: set[str] = set()
    for index, entry in enumerate(entries):
        name: str | None = None
        block = entry
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], str):
            name, block = entry
        if not isinstance(block, torch.nn.Module):
            raise InputError(
                f"model {type(model).__name__}: {where} entry {index} is a {type(block).__name__}, "
                "not a torch.nn.Module"
            )
        if not name or name.isdigit():
            name = f"{type(block).__name__.lower()}{index}"
        unique, k = name, 2
        while unique in used:
            unique, k = f"{name}_{k}", k + 1
        used.add(unique)
        named.append((unique, block))
    return named


def _first_leaf(block: Any) -> Any:
    for module in block.modules():
        if next(module.children(), None) is None:
            return module
    return block


def first_input(
    block: Any,
    *,
    batch_size: int,
    input_shape: Sequence[int] | None,
    input_dtype: str,
    device: Any,
    dtype: Any,
    seed: int,
) -> Any:
    """A synthetic input batch for the first block: ``(batch_size, *input_shape)``.

    Args:
        block: the first block.
        batch_size: samples.
        input_shape: the per-sample shape, or ``None`` to infer it (only when the first block
            starts with an ``nn.Linear``: ``(in_features,)``).
        input_dtype: ``"float"`` (standard normal values in ``dtype``), ``"long"`` (token ids in
            ``[0, num_embeddings)`` of the block's first embedding, or ``{0, 1}`` without one) or
            ``"auto"`` (``long`` when the block's first leaf module is an embedding).
        device: the torch device.
        dtype: the torch floating dtype of float inputs.
        seed: seed of the values (the same seed gives the same input).

    Raises:
        InputError: an unknown ``input_dtype``, or no shape given where it cannot be inferred.
    """
    torch = require_torch()
    nn = torch.nn
    if input_dtype not in INPUT_DTYPES:
        raise invalid("input_dtype", input_dtype, f"must be one of {', '.join(INPUT_DTYPES)}")
    leaf = _first_leaf(block)
    embeddings = [m for m in block.modules() if isinstance(m, (nn.Embedding, nn.EmbeddingBag))]
    kind = input_dtype
    if kind == "auto":
        kind = "long" if isinstance(leaf, (nn.Embedding, nn.EmbeddingBag)) else "float"
    if input_shape is None:
        if isinstance(leaf, nn.Linear):
            input_shape = (int(leaf.in_features),)
        else:
            raise InputError(
                f"cannot infer the input shape of a model whose first block starts with "
                f"{type(leaf).__name__}: give --input-shape (per sample, without the batch "
                "dimension, e.g. 3x32x32 for images or 128 for a sequence of 128 tokens)"
            )
    shape = (batch_size, *input_shape)
    generator = torch.Generator().manual_seed(seed)
    if kind == "long":
        # The first embedding (module order) reads the ids; a smaller table later in the block
        # (BERT's 2 token types) gets its indices elsewhere and must not narrow the ids.
        high = int(embeddings[0].num_embeddings) if embeddings else 2
        return torch.randint(0, high, shape, generator=generator, dtype=torch.long).to(device)
    return torch.randn(shape, generator=generator, dtype=torch.float32).to(device=device, dtype=dtype)
