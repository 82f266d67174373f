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


@dataclass
class Moments:
    """Count, mean and sum of squared deviations of every column (float64)."""

    count: int
    mean: torch.Tensor  # [C] float64
    m2: torch.Tensor  # [C] float64

    @classmethod
    def of(cls, values: torch.Tensor) -> "Moments":
        """Moments of the rows of ``values`` ``[n, C]``."""
        v = values.detach().to(torch.float64).reshape(values.shape[0], -1).cpu()
        if v.shape[0] == 0:
            return cls(0, torch.zeros(v.shape[1], dtype=torch.float64), torch.zeros(v.shape[1], dtype=torch.float64))
        mean = v.mean(dim=0)
        return cls(int(v.shape[0]), mean, ((v - mean) ** 2).sum(dim=0))

    def merge(self, other: "Moments") -> "Moments":
        """Moments of the union of both row sets (Chan et al. 1979)."""
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
        items = list(items)
        if not items:
            raise ValueError("no statistics to merge")
        out = items[0]
        for m in items[1:]:
            out = out.merge(m)
        return out

    def all_reduce(self, group=None) -> "Moments":
        """Merge the moments of every rank (in rank order), returning the same value on all ranks."""
        from meshshard.distributed import all_gather_into_tensor

        c = self.mean.numel()
        packed = torch.cat([torch.tensor([float(self.count)], dtype=torch.float64), self.mean, self.m2])
        rows = all_gather_into_tensor(packed, group)
        return Moments.merge_all(Moments(int(r[0]), r[1:1 + c].clone(), r[1 + c:].clone()) for r in rows)

    def to_stats(self) -> "FieldStats":
        std = (self.m2 / self.count).sqrt() if self.count else torch.zeros_like(self.m2)
        return FieldStats(self.mean.clone(), std, self.count)

    def to_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean.tolist(), "m2": self.m2.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "Moments":
        return cls(int(d["count"]), torch.tensor(d["mean"], dtype=torch.float64), torch.tensor(d["m2"], dtype=torch.float64))


@dataclass
class FieldStats:
    """Mean and population std per column, with ``normalize`` / ``denormalize``.

    Columns whose std is below ``1e-8`` (constant columns) are only centred (divided by 1).
    """

    mean: torch.Tensor
    std: torch.Tensor
    count: int = 0

    def _scale(self) -> torch.Tensor:
        return torch.where(self.std < _MIN_STD, torch.ones_like(self.std), self.std)

    def normalize(self, t: torch.Tensor) -> torch.Tensor:
        """``(t - mean) / std`` column-wise, in ``t``'s dtype and device."""
        if t.shape[-1] != self.mean.numel():
            raise ValueError(f"normalize: tensor has {t.shape[-1]} columns, statistics have {self.mean.numel()}")
        return (t - self.mean.to(t)) / self._scale().to(t)

    def denormalize(self, t: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`normalize`."""
        return t * self._scale().to(t) + self.mean.to(t)

    def to_dict(self) -> dict:
        return {"count": self.count, "mean": self.mean.tolist(), "std": self.std.tolist()}

    @classmethod
    def from_dict(cls, d: dict) -> "FieldStats":
        return cls(torch.tensor(d["mean"], dtype=torch.float64), torch.tensor(d["std"], dtype=torch.float64),
                   int(d.get("count", 0)))

    def equal(self, other: "FieldStats", rtol: float = 0.0, atol: float = 0.0) -> bool:
        return self.count == other.count and torch.allclose(self.mean, other.mean, rtol=rtol, atol=atol) \
            and torch.allclose(self.std, other.std, rtol=rtol, atol=atol)


@dataclass
class DatasetStats:
    """Statistics of ``x`` (features), ``y`` (targets) and ``edge_attr`` over a whole dataset."""

    x: FieldStats
    y: FieldStats
    edge_attr: FieldStats

    @classmethod
    def from_moments(cls, moments: Dict[str, Moments]) -> "DatasetStats":
        return cls(**{k: moments[k].to_stats() for k in STAT_KEYS})

    @classmethod
    def from_sample_moments(cls, per_sample: List[Dict[str, Moments]]) -> "DatasetStats":
        """Merge per-sample moments in sample order (the one code path everybody uses)."""
        if not per_sample:
            raise ValueError("a dataset needs at least one sample to compute statistics")
        return cls.from_moments({k: Moments.merge_all(m[k] for m in per_sample) for k in STAT_KEYS})

    def to_dict(self) -> dict:
        return {k: getattr(self, k).to_dict() for k in STAT_KEYS}

    @classmethod
    def from_dict(cls, d: dict) -> "DatasetStats":
        missing = [k for k in STAT_KEYS if k not in d]
        if missing:
            raise ValueError(f"statistics lack {missing}")
        return cls(**{k: FieldStats.from_dict(d[k]) for k in STAT_KEYS})

    def equal(self, other: "DatasetStats", rtol: float = 0.0, atol: float = 0.0) -> bool:
        return all(getattr(self, k).equal(getattr(other, k), rtol, atol) for k in STAT_KEYS)


def sample_moments(data) -> Dict[str, Moments]:
    """Moments of one sample's ``x``, ``y`` and ``edge_attr`` (every node / edge once)."""
    return {"x": Moments.of(data.x), "y": Moments.of(data.y), "edge_attr": Moments.of(data.edge_attr)}

