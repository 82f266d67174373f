"""Normalisation statistics (mean / std per column) computed once over a whole dataset.

Per sample we keep exact moments ``(count, mean, M2)`` in float64 and merge them in sample order
with Chan et al.'s pairwise formula. Both :class:`~meshshard.datasets.MeshDataset` and
``meshshard preprocess`` use this same code path in the same order, so they produce bit-identical
statistics; :meth:`Moments.all_reduce` merges per-rank moments of owned rows (each node and each
edge counted once) and agrees to float64 rounding.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List

import torch

__all__ = ["Moments", "FieldStats", "DatasetStats", "STAT_KEYS", "sample_moments"]

STAT_KEYS = ("x", "y", "edge_attr")
_MIN_STD = 1e-8  # columns that do not vary (e.g. a zero z-velocity) are divided by 1, not by ~0


def _is_shard_tensor(t) -> bool:
    from meshshard.tensor import ShardTensor

    return isinstance(t, ShardTensor)


def _on_local_rows(t, column_wise):
    """``column_wise`` on a ShardTensor's local rows, layout kept (no communication): the statistics
    are the same on every rank (one stats.json), so promoting them to Replicate, with the
    PromotionWarning of a plain tensor meeting a ShardTensor, is not needed."""
    from meshshard.tensor.shard_tensor import _FromLocal  # differentiable rewrap with the same layout

    return _FromLocal.apply(column_wise(t.to_local()), t.device_mesh, tuple(t.placements), t._shard_sizes)


@dataclass
class Moments:
    """Count, mean and sum of squared deviations of every column (float64).

    Attributes:
        count: rows seen.
        mean: ``[C]`` column means.
        m2: ``[C]`` sums of squared deviations from the mean (Welford / Chan).
    """

    count: int
    mean: torch.Tensor  # [C] float64
    m2: torch.Tensor  # [C] float64

    @classmethod
    def of(cls, values: torch.Tensor) -> "Moments":
        """Moments of the rows of ``values``.

        Args:
            values: ``[n, C]`` (any float dtype; computed in float64).
        """
        v = values.detach().to(torch.float64).reshape(values.shape[0], -1).cpu()
        if v.shape[0] == 0:
            return cls(0, torch.zeros(v.shape[1], dtype=torch.float64), torch.zeros(v.shape[1], dtype=torch.float64))
        mean = v.mean(dim=0)
        return cls(int(v.shape[0]), mean, ((v - mean) ** 2).sum(dim=0))

    def merge(self, other: "Moments") -> "Moments":
        """Moments of the union of both row sets (Chan et al. 1979).

        Args:
            other: moments of the same columns.
        """
        if self.mean.shape != other.mean.shape:
            raise ValueError(f"cannot merge statistics of {self.mean.numel()} and {other.mean.numel()} columns")
        if other.count == 0:
            return self
        if self.count == 0:
            return other
        n = self.count + other.count
        delta = other.mean - self.mean
        mean = self.mean + delta * (other.count / n)
        m2 = self.m2 + other.m2 + delta ** 2 * (self.count * other.count / n)
        return Moments(n, mean, m2)

    @staticmethod
    def merge_all(items: Iterable["Moments"]) -> "Moments":
        """Merge in the given order (the order fixes the float64 rounding)."""
        items = list(items)
        if not items:
            raise ValueError("no statistics to merge")
        out = items[0]
        for m in items[1:]:
            out = out.merge(m)
        return out

    def all_reduce(self, group=None) -> "Moments":
        """Merge the moments of every rank (in rank order), returning the same value on all ranks.

        Args:
            group: process group (default: the world); collective.
        """
        from meshshard.distributed import all_gather_into_tensor

        c = self.mean.numel()
        packed = torch.cat([torch.tensor([float(self.count)], dtype=torch.float64), self.mean, self.m2])
        rows = all_gather_into_tensor(packed, group)
        return Moments.merge_all(Moments(int(r[0]), r[1:1 + c].clone(), r[1 + c:].clone()) for r in rows)

    def to_stats(self) -> "FieldStats":
        """Mean and population std."""
        std = (self.m2 / self.count).sqrt() if self.count else torch.zeros_like(self.m2)
        return FieldStats(self.mean.clone(), std, self.count)

    def to_dict(self) -> dict:
        """JSON-ready form (lists of floats)."""
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Moments":
        """Inverse of :meth:`to_dict`.

        Args:
            d: ``{"count", "mean", "m2"}``.
        """
        return cls(int(d["count"]), torch.tensor(d["mean"], dtype=torch.float64), torch.tensor(d["m2"], dtype=torch.float64))


@dataclass
class FieldStats:
    """Mean and population std per column, with ``normalize`` / ``denormalize``.

    Columns whose std is below ``1e-8`` (constant columns) are only centred (divided by 1).

    Attributes:
        mean: ``[C]`` float64 column means.
        std: ``[C]`` float64 population standard deviations.
        count: rows the statistics were computed over.
    """

    mean: torch.Tensor
    std: torch.Tensor
    count: int = 0

    def _scale(self) -> torch.Tensor:
        return torch.where(self.std < _MIN_STD, torch.ones_like(self.std), self.std)

    def normalize(self, t: torch.Tensor) -> torch.Tensor:
        """``(t - mean) / std`` column-wise, in ``t``'s dtype and device.

        Args:
            t: ``[*, C]``.
        """
        if t.shape[-1] != self.mean.numel():
            raise ValueError(f"normalize: tensor has {t.shape[-1]} columns, statistics have {self.mean.numel()}")
        if _is_shard_tensor(t):
            return _on_local_rows(t, self.normalize)
        return (t - self.mean.to(dtype=t.dtype, device=t.device)) / self._scale().to(dtype=t.dtype, device=t.device)

    def denormalize(self, t: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`.

        Args:
            t: ``[*, C]``.
        """
        if _is_shard_tensor(t):
            return _on_local_rows(t, self.denormalize)
        return t * self._scale().to(dtype=t.dtype, device=t.device) + self.mean.to(dtype=t.dtype, device=t.device)

    def to_dict(self) -> dict:
        """JSON-ready form, as stored in a dataset's ``stats.json``."""
        return {"count": self.count, "mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "FieldStats":
        """Inverse of :meth:`to_dict`.

        Args:
            d: ``{"mean", "std"}`` and optionally ``"count"``.
        """
        return cls(torch.tensor(d["mean"], dtype=torch.float64), torch.tensor(d["std"], dtype=torch.float64),
                   int(d.get("count", 0)))

    def equal(self, other: "FieldStats", rtol: float = 0.0, atol: float = 0.0) -> bool:
        """Same count, and means and stds equal within ``torch.allclose(rtol, atol)``.

        Args:
            other: statistics to compare with.
            rtol, atol: tolerances (default: exact).
        """
        return self.count == other.count and torch.allclose(self.mean, other.mean, rtol=rtol, atol=atol) \
            and torch.allclose(self.std, other.std, rtol=rtol, atol=atol)


@dataclass
class DatasetStats:
    """Statistics of ``x`` (features), ``y`` (targets) and ``edge_attr`` over a whole dataset.

    Attributes:
        x, y, edge_attr: :class:`FieldStats` of node features, targets and edge features.
    """

    x: FieldStats
    y: FieldStats
    edge_attr: FieldStats

    @classmethod
    def from_moments(cls, moments: Dict[str, Moments]) -> "DatasetStats":
        """From merged moments of ``x``, ``y`` and ``edge_attr``."""
        return cls(**{k: moments[k].to_stats() for k in STAT_KEYS})

    @classmethod
    def from_sample_moments(cls, per_sample: List[Dict[str, Moments]]) -> "DatasetStats":
        """Merge per-sample moments in sample order (the one code path everybody uses).

        Args:
            per_sample: per sample, ``{"x": Moments, "y": Moments, "edge_attr": Moments}``.
        """
        if not per_sample:
            raise ValueError("a dataset needs at least one sample to compute statistics")
        return cls.from_moments({k: Moments.merge_all(m[k] for m in per_sample) for k in STAT_KEYS})

    def to_dict(self) -> dict:
        """JSON-ready form, as stored in a dataset's ``stats.json``."""
        return {k: getattr(self, k).to_dict() for k in STAT_KEYS}

    @classmethod
    def from_dict(cls, d: dict) -> "DatasetStats":
        """Inverse of :meth:`to_dict`; names missing keys.

        Args:
            d: ``{"x": ..., "y": ..., "edge_attr": ...}``, each as :meth:`FieldStats.to_dict`.
        """
        missing = [k for k in STAT_KEYS if k not in d]
        if missing:
            raise ValueError(f"statistics lack {missing}")
        return cls(**{k: FieldStats.from_dict(d[k]) for k in STAT_KEYS})

    def equal(self, other: "DatasetStats", rtol: float = 0.0, atol: float = 0.0) -> bool:
        """:meth:`FieldStats.equal` for every field.

        Args:
            other: statistics to compare with.
            rtol, atol: tolerances (default: exact).
        """
        return all(getattr(self, k).equal(getattr(other, k), rtol, atol) for k in STAT_KEYS)


def sample_moments(data) -> Dict[str, Moments]:
    """Moments of one sample's ``x``, ``y`` and ``edge_attr`` (every node / edge once).

    Args:
        data: with ``x [N, F]``, ``y [N, T]``, ``edge_attr [E, d + 1]``.
    """
    return {"x": Moments.of(data.x), "y": Moments.of(data.y), "edge_attr": Moments.of(data.edge_attr)}

