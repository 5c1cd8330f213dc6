"""The memory model shared by the planner's estimates and the simulator.

Byte multipliers per parameter byte in the training dtype:

======================  ========  =========  ================================================
dtype                   weights   gradients  optimizer state (sgd / momentum / adam)
======================  ========  =========  ================================================
float32                 1         1          0 / 1 / 2   (momentum buffer; Adam's m and v)
float16 / bfloat16      1         1          2 / 4 / 6   (fp32 master copy = 2, plus fp32
(mixed precision)                                         momentum = 2, Adam m and v = 4)
======================  ========  =========  ================================================

So mixed-precision Adam costs 2 + 2 + 12 = 16 bytes per parameter, the figure of Rajbhandari et
al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC'20), Sec. 3.1;
fp32 Adam costs 4 + 4 + 8 = 16 bytes per parameter as well.

Activations: each in-flight micro-batch keeps, on a stage, the bytes its layers save for backward
(``Layer.saved_activation_bytes``, the PipeDream/DAPPLE convention being the layer outputs) plus
the stage's received input; with recomputation only the received input is kept and the rest is
re-materialised during the backward as a transient working set.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import Enum

from pipesim.errors import check_count, invalid, parse_name
from pipesim.profiles.models.profile import ModelProfile

__all__ = [
    "IN_FLIGHT_SCHEDULES",
    "IN_FLIGHT_SCHEDULES_ALL",
    "OPTIMIZERS",
    "OPTIMIZER_STATE_MULTIPLIER",
    "Optimizer",
    "Recompute",
    "in_flight_microbatches",
    "stage_activation_bytes",
    "static_memory_bytes",
    "static_memory_multiplier",
    "weight_versions",
]


class Optimizer(str, Enum):
    """The optimizers whose state the memory model knows (see the table above)."""

    SGD = "sgd"
    MOMENTUM = "momentum"
    ADAM = "adam"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, name: object) -> Optimizer:
        """The optimizer called ``name`` (case-insensitive).

        Raises:
            UnknownNameError: no such optimizer; the message lists the valid names.
        """
        return parse_name("optimizer", cls, name)


OPTIMIZERS: tuple[str, ...] = tuple(o.value for o in Optimizer)
"""Optimizer names, in :class:`Optimizer` order."""


class Recompute(str, Enum):
    """Activation recomputation: ``none`` stashes every saved activation of an in-flight
    micro-batch; ``full`` keeps only each stage's input and recomputes the rest in the backward."""

    NONE = "none"
    FULL = "full"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object) -> Recompute:
        """The mode for ``value``: a name (case-insensitive) or a boolean (``True`` is ``full``,
        ``False`` is ``none``, as older plan files and the ``recompute=True`` API write it).

        A string is never read as a boolean: ``"false"`` is refused, not taken as true.

        Raises:
            UnknownNameError: any other value; the message lists the valid names.
        """
        if isinstance(value, bool):
            return cls.FULL if value else cls.NONE
        return parse_name("recompute mode", cls, value)


OPTIMIZER_STATE_MULTIPLIER: dict[tuple[str, bool], float] = {
    # (optimizer, mixed precision) -> optimizer-state bytes per parameter byte in the training
    # dtype. fp32: momentum 1 buffer, Adam m and v. Mixed precision (fp16/bf16 weights): the fp32
    # master copy (2) plus fp32 momentum (2) or Adam m and v (4). Mixed-precision Adam is then
    # 2 + 2 + 12 = 16 bytes per parameter, the figure of Rajbhandari et al., "ZeRO: Memory
    # Optimizations Toward Training Trillion Parameter Models" (SC'20), Sec. 3.1.
    ("sgd", False): 0.0,
    ("momentum", False): 1.0,
    ("adam", False): 2.0,
    ("sgd", True): 2.0,
    ("momentum", True): 4.0,
    ("adam", True): 6.0,
}
"""Optimizer-state bytes per parameter byte, by (optimizer, mixed precision)."""


def static_memory_multiplier(dtype: str, optimizer: str | Optimizer) -> float:
    """Bytes of weights + gradients + optimizer state per parameter byte (see the table above).

    Raises:
        UnknownNameError: unknown optimizer (an :class:`~pipesim.errors.InputError`).
    """
    key = (Optimizer.parse(optimizer).value, dtype != "float32")
    return 2.0 + OPTIMIZER_STATE_MULTIPLIER[key]


def stage_activation_bytes(
    profile: ModelProfile, first_layer: int, last_layer: int, samples: float, recompute: Recompute | bool
) -> tuple[float, float]:
    """Activation memory of one replica of a stage for one micro-batch share of ``samples``, bytes.

    Returns ``(stash, work)``: ``stash`` is kept from the forward until the backward ends (the
    stage's received input, the cut's crossing bytes, plus every layer's saved bytes; with
    ``recompute = full`` only the input), ``work`` is the transient working set of the backward
    (the largest layer output; with ``full`` recomputation the re-materialised saved bytes). A device holding
    ``K`` micro-batches in flight peaks at ``static + K * stash + work``.

    Args:
        profile: the :class:`~pipesim.profiles.models.profile.ModelProfile`.
        first_layer: the stage's first layer.
        last_layer: its last layer (inclusive).
        samples: samples of the replica's share of a micro-batch (> 0).
        recompute: activation recomputation, a :class:`Recompute` mode (or a boolean, ``True``
            for ``full``).

    Raises:
        InputError: ``samples`` is not > 0, or an unknown recompute mode.
    """
    layers = range(first_layer, last_layer + 1)
    stashed = profile.stashed_bytes(samples)
    inputs = 0.0
    if first_layer > 0:
        inputs = profile.cuts()[first_layer - 1].crossing_bytes / profile.profile_batch_size * samples
    saved = sum(stashed[i] for i in layers)
    if Recompute.parse(recompute) is Recompute.FULL:
        return inputs, saved
    acts = profile.activation_bytes(samples)
    return inputs + saved, max(acts[i] for i in layers)


def static_memory_bytes(profile: ModelProfile, layers: Iterable[int], optimizer: str | Optimizer) -> float:
    """Weights + gradients + optimizer state of the given layers on one device, bytes.

    Args:
        profile: the model.
        layers: layer indices held by one device (one replica of one or more stages).
        optimizer: an :class:`Optimizer` or its name.

    Raises:
        UnknownNameError: unknown optimizer.
    """
    params = sum(profile.layers[i].parameter_bytes for i in layers)
    return params * static_memory_multiplier(profile.dtype, optimizer)


IN_FLIGHT_SCHEDULES: tuple[str, ...] = ("gpipe", "dapple", "1f1b", "interleaved", "zb-h1", "zb-h2")
"""Schedules whose peak in-flight micro-batch counts :func:`in_flight_microbatches` knows."""


IN_FLIGHT_SCHEDULES_ALL: tuple[str, ...] = (
    *IN_FLIGHT_SCHEDULES,
    "looped-bfs",
    "interleaved-zb",
    "zbv",
    "dualpipev",
    "v-half",
    "v-min",
    "zb-auto",
    "pipedream-async",
    "pipedream-2bw",
)
"""Every schedule :func:`in_flight_microbatches` knows (:data:`IN_FLIGHT_SCHEDULES` are those the
planner's estimate covers)."""


def in_flight_microbatches(
    schedule: str,
    rank: int,
    num_ranks: int,
    num_microbatches: int,
    *,
    chunks: int = 1,
    warmup: str | Sequence[int] = "default",
    memory_limit: int | None = None,
) -> int:
    """Forwards whose activations rank ``rank`` (0-based, of ``p``) holds at its peak.

    With ``chunks = v > 1`` the count is of chunk forwards (each one micro-batch on one of the
    rank's ``v`` stages). Activations are held from a forward until its backward (``B``), or its
    weight-gradient ``W`` in the zero-bubble schedules (see ``docs/schedules.md``):

    * ``gpipe``: ``m`` (all forwards run before the first backward);
    * ``dapple`` / ``1f1b``: the warm-up count ``K_i = min(p - i, m)`` (``"slow-link"``:
      ``min(2 (p - i) - 1, m)``; an explicit list gives ``K_i``), DAPPLE Sec. 3;
    * ``interleaved``: ``min((v - 1) g + 2 (p - 1 - i) + 1, v m)`` with the round ``g`` of
      micro-batches (``g = m / max(1, m // p)``; ``g = m`` for ``v = 1``);
    * ``zb-h1``: the warm-up ``(v - 1) g + (p - 1 - i) + 1`` plus the ``i`` put-off ``W`` actions,
      ``min((v - 1) g + p, v m)`` (``min(p, m)`` for ``v = 1``), Qi et al., ICLR 2024, Sec. 3.1;
    * ``zb-h2``: ``min(2 p - 1, m)`` (ibid., Sec. 3.2);
    * ``looped-bfs``: ``v m`` (every micro-batch on every chunk before the first backward);
    * ``interleaved-zb``: as ``zb-h1``;
    * ``zbv`` (two chunks in a V): ``min(2 p, 2 m, m + i + 1)``, i.e. ``p`` micro-batches of the
      rank's layers for ``m >= 2p - 1``, as 1F1B's first stage (Qi et al., ICLR 2024, sec. 6);
    * ``dualpipev``: ``2 p + 1`` (``m >= 2p``);
    * ``v-half`` / ``v-min`` (two chunks): at most ``min(2 L, 2 m)`` with ``L = (p + 2) // 2`` /
      ``(p + 4) // 3`` micro-batches (Qi et al., NeurIPS 2024); the greedy order reaches it;
    * ``zb-auto``: ``min(memory_limit, m)`` (default limit ``p``);
    * ``pipedream-async`` / ``pipedream-2bw``: as ``1f1b``.

    Raises:
        InputError: an unknown schedule, a bad warm-up, or ``rank`` outside ``0..p-1``.
    """
    p, m, v, i = num_ranks, num_microbatches, chunks, rank
    if not 0 <= i < p:
        raise invalid("rank", i, f"must be in 0..{p - 1}")
    if schedule == "gpipe":
        return m
    if schedule in ("dapple", "1f1b"):
        if isinstance(warmup, str):
            if warmup == "default":
                return min(p - i, m)
            if warmup == "slow-link":
                return min(2 * (p - i) - 1, m)
            raise invalid("warmup", warmup, "must be 'default', 'slow-link' or a list of per-stage counts")
        counts = list(warmup)
        if len(counts) != p:
            raise invalid("warmup", counts, f"must have one count per stage ({p})")
        return min(int(counts[i]), m)
    group = m // max(1, m // p) if v > 1 else m
    if schedule == "interleaved":
        return min((v - 1) * group + 2 * (p - 1 - i) + 1, v * m)
    if schedule == "zb-h1":
        return min((v - 1) * group + p, v * m)
    if schedule == "zb-h2":
        return min(2 * p - 1, m)
    return _in_flight_more(schedule, i, p, m, v, memory_limit)


def _in_flight_more(schedule: str, i: int, p: int, m: int, v: int, memory_limit: int | None) -> int:
    """:func:`in_flight_microbatches` for the schedules past :data:`IN_FLIGHT_SCHEDULES`."""
    if schedule == "looped-bfs":
        return v * m
    if schedule == "interleaved-zb":
        group = m // max(1, m // p) if v > 1 else m
        return min((v - 1) * group + p, v * m)
    if schedule == "zbv":
        return min(2 * p, 2 * m, m + i + 1)
    if schedule == "dualpipev":
        return 2 * p + 1
    if schedule in ("v-half", "v-min"):
        limit = (p + 2) // 2 if schedule == "v-half" else (p + 4) // 3
        return min(2 * limit, 2 * m)
    if schedule == "zb-auto":
        return min(p if memory_limit is None else memory_limit, m)
    if schedule in ("pipedream-async", "pipedream-2bw"):
        return min(p - i, m)
    known = ", ".join(IN_FLIGHT_SCHEDULES_ALL)
    raise invalid("schedule", schedule, f"in-flight counts are known for {known}")


def weight_versions(schedule: str, stage: int, num_ranks: int, num_microbatches: int) -> int:
    """Weight versions stage ``stage`` (0-based, of ``p`` one-stage ranks) keeps at once.

    ``pipedream-async``: ``min(p - stage, m)``, one per in-flight micro-batch (weight stashing,
    Narayanan et al., SOSP 2019, sec. 3.3); ``pipedream-2bw``: 2, the version being updated and
    the one in use (Narayanan et al., ICML 2021, sec. 3.1; 1 when ``p = 1``); every flushed
    schedule: 1. Each extra version costs the stage's weight bytes.

    Raises:
        InputError: ``stage`` outside ``0..p-1`` or a count below 1.
    """
    check_count("num_ranks", num_ranks)
    check_count("num_microbatches", num_microbatches)
    if type(stage) is not int or not 0 <= stage < num_ranks:
        raise invalid("stage", stage, f"must be an integer in 0..{num_ranks - 1}")
    if schedule == "pipedream-async":
        return min(num_ranks - stage, num_microbatches)
    if schedule == "pipedream-2bw":
        return 2 if num_ranks > 1 else 1
    return 1
