"""Per-stage costs of variable-length micro-batches: a sequence cost model cut into pipeline stages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipesim.errors import Infeasible, invalid
from pipesim.plan import balanced_split, stage_ranges
from pipesim.profiles.costmodels.sequence import SeqCostModel, SeqPoly, poly_sum

__all__ = ["MicrobatchShape", "PipelineCosts", "StagePolys"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MicrobatchShape:
    """What a micro-batch costs depends on: its attention sequences and their lengths.

    Attributes:
        rows: attention sequences (padded samples, or packed rows), >= 1.
        tokens: tokens computed, padding included (sum of row lengths).
        square_tokens: the sum over attention sequences of their squared lengths, as the
            attention is costed (see :mod:`pipesim.planner.dynamic.microbatch` for packing).
    """

    rows: int
    tokens: int
    square_tokens: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StagePolys:
    """One stage's costs as polynomials of a micro-batch's shape.

    The polynomials are :class:`~pipesim.profiles.costmodels.sequence.SeqPoly`.

    Attributes:
        fwd_time_s: forward time of the stage, seconds.
        bwd_time_s: backward time, seconds.
        stash_bytes: bytes kept from forward to backward: the stage's received input plus its
            layers' saved bytes.
        work_bytes: transient bytes of the backward (the largest layer output of the stage).
        out_bytes: activation bytes sent to the next stage (zero for the last stage).
    """

    fwd_time_s: SeqPoly
    bwd_time_s: SeqPoly
    stash_bytes: SeqPoly
    work_bytes: SeqPoly
    out_bytes: SeqPoly


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineCosts:
    """A sequence cost model cut into contiguous pipeline stages.

    Attributes:
        model: the sequence cost model.
        ranges: inclusive layer range of each stage.
        stages: the per-stage polynomials.
    """

    model: SeqCostModel
    ranges: tuple[tuple[int, int], ...]
    stages: tuple[StagePolys, ...]

    @classmethod
    def build(
        cls, model: SeqCostModel, *, num_stages: int | None = None, split: Sequence[int] | None = None
    ) -> PipelineCosts:
        """Cut ``model`` into stages: ``split`` layers per stage, or ``num_stages`` stages balanced by
        the zoo profile's layer times (forward + backward at the calibration batch).

        Raises:
            InputError: neither or both of ``num_stages`` and ``split``, or a split that does not
                cover the layers.
            Infeasible: more stages than layers.
        """
        if (num_stages is None) == (split is None):
            raise invalid("num_stages", num_stages, "give either the number of stages or a split")
        if split is None:
            assert num_stages is not None
            profile = model.profile()
            split = balanced_split([a.fwd_time_s + a.bwd_time_s for a in profile.layers], num_stages)
        ranges = tuple(stage_ranges(split, model.num_layers))
        stages = []
        for a, b in ranges:
            layers = model.layers[a : b + 1]
            calib = model.calibration_batch, model.calibration_seq_len
            biggest = max(layers, key=lambda lay: float(lay.output_bytes.padded(*calib)))
            inputs = model.layers[a - 1].output_bytes if a > 0 else SeqPoly()
            stages.append(
                StagePolys(
                    fwd_time_s=poly_sum([lay.fwd_time_s for lay in layers]),
                    bwd_time_s=poly_sum([lay.bwd_time_s for lay in layers]),
                    stash_bytes=inputs + poly_sum([lay.saved_bytes for lay in layers]),
                    work_bytes=biggest.output_bytes,
                    out_bytes=layers[-1].output_bytes if b < model.num_layers - 1 else SeqPoly(),
                )
            )
        return cls(model=model, ranges=ranges, stages=tuple(stages))

    @property
    def num_stages(self) -> int:
        """Number of stages."""
        return len(self.stages)

    def table(self, shapes: Sequence[MicrobatchShape]) -> dict[str, list[list[float]]]:
        """Per-stage, per-micro-batch costs: ``{"fwd_time_s", "bwd_time_s", "stash_bytes",
        "work_bytes", "out_bytes"}`` each ``[stage][microbatch]`` (seconds or bytes, >= 0)."""
        rows = np.array([s.rows for s in shapes], dtype=float)
        tokens = np.array([s.tokens for s in shapes], dtype=float)
        square = np.array([s.square_tokens for s in shapes], dtype=float)
        out: dict[str, list[list[float]]] = {}
        for name in ("fwd_time_s", "bwd_time_s", "stash_bytes", "work_bytes", "out_bytes"):
            out[name] = [
                [max(0.0, float(v)) for v in getattr(stage, name)(rows, tokens, square)]
                for stage in self.stages
            ]
        return out

    def time_s(self, shape: MicrobatchShape) -> float:
        """The micro-batch's time on the slowest stage (forward + backward), seconds."""
        return max(
            float((st.fwd_time_s + st.bwd_time_s)(shape.rows, shape.tokens, shape.square_tokens))
            for st in self.stages
        )

    def memory_bytes(self, shape: MicrobatchShape) -> float:
        """The micro-batch's activation memory on the fullest stage (stash + backward work), bytes."""
        return max(
            float((st.stash_bytes + st.work_bytes)(shape.rows, shape.tokens, shape.square_tokens))
            for st in self.stages
        )

    # -- padded micro-batches as functions of (samples b, length L), for the planners -------------
    def _affine(self, attr: str, seq_len: float) -> tuple[np.ndarray, np.ndarray]:
        """Per stage ``(c, g)`` with ``value(b) = c + b g`` for ``b`` samples padded to ``seq_len``."""
        c = np.empty(self.num_stages)
        g = np.empty(self.num_stages)
        for s, st in enumerate(self.stages):
            poly = st.fwd_time_s + st.bwd_time_s if attr == "time" else st.stash_bytes + st.work_bytes
            k0, ks, kt, kq = poly.coefficients()
            c[s] = k0
            g[s] = ks + kt * seq_len + kq * seq_len * seq_len
        return c, g

    def padded_times_s(self, seq_len: int, max_samples: int) -> np.ndarray:
        """Slowest-stage time of ``b = 1 .. max_samples`` samples padded to ``seq_len``, seconds."""
        c, g = self._affine("time", seq_len)
        b = np.arange(1, max_samples + 1, dtype=float)
        times: np.ndarray = np.max(c[:, None] + g[:, None] * b[None, :], axis=0)
        return times

    def padded_memory_bytes(self, samples: int, seq_len: int) -> float:
        """Activation memory of ``samples`` samples padded to ``seq_len`` (see :meth:`memory_bytes`)."""
        return self.memory_bytes(
            MicrobatchShape(rows=samples, tokens=samples * seq_len, square_tokens=samples * seq_len * seq_len)
        )

    def max_samples(self, seq_len: int, memory_limit_bytes: float) -> int:
        """The most samples padded to ``seq_len`` whose activation memory fits ``memory_limit_bytes``.

        Raises:
            Infeasible: not even one sample of ``seq_len`` tokens fits.
        """
        c, g = self._affine("memory", seq_len)
        if self.padded_memory_bytes(1, seq_len) > memory_limit_bytes:
            need = self.padded_memory_bytes(1, seq_len)
            raise Infeasible(
                f"memory_limit_bytes={memory_limit_bytes:.6g} ({memory_limit_bytes / 2**30:.3g} GiB): "
                f"smaller than one sample of {seq_len} tokens needs, {need:.6g} bytes "
                f"({need / 2**30:.3g} GiB) of activations on the fullest stage"
            )
        positive = g > 0
        if not positive.any():
            return 1 << 30
        k = int(np.floor(np.min((memory_limit_bytes - c[positive]) / g[positive])))
        k = max(1, k)
        while k > 1 and self.padded_memory_bytes(k, seq_len) > memory_limit_bytes:
            k -= 1
        while self.padded_memory_bytes(k + 1, seq_len) <= memory_limit_bytes:
            k += 1
        return k
