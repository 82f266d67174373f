"""Rows of a large array computed on demand, for :func:`meshshard.graph.save_parts`.

``save_parts`` stores in each part file only the rows of ``node_data`` / ``edge_data`` that the
part holds. A :class:`LazyRows` in their place computes those rows when a part asks for them, so
the whole ``[n, ...]`` array never exists at once (e.g. edge features computed from positions).
"""
from __future__ import annotations

from typing import Callable, Sequence

import torch

__all__ = ["LazyRows"]


class LazyRows:
    """An ``[num_rows, *row_shape]`` array of ``dtype`` whose rows ``fn(index)`` computes on demand.

    Args:
        num_rows: rows of the whole array.
        row_shape: shape of one row (``()`` for a vector).
        dtype: dtype of the rows ``fn`` returns.
        fn: ``fn(index: LongTensor [m]) -> Tensor [m, *row_shape]`` of ``dtype``: the rows ``index``
            (any order, repeats allowed), each the same whatever else is asked with it.

    Raises:
        ValueError: ``num_rows`` negative.
        TypeError: ``fn`` not callable.
    """

    def __init__(self, num_rows: int, row_shape: Sequence[int], dtype: torch.dtype,
                 fn: Callable[[torch.Tensor], torch.Tensor]):
        if int(num_rows) < 0:
            raise ValueError(f"num_rows must be >= 0, got {num_rows}")
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.shape = torch.Size([int(num_rows), *(int(s) for s in row_shape)])
        self.dtype = dtype
        self._fn = fn

    def dim(self) -> int:
        """Dimensions of the whole array (``1 + len(row_shape)``)."""
        return len(self.shape)

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        """The rows ``index`` (LongTensor ``[m]``), checked against the declared shape and dtype.

        Raises:
            ValueError: ``fn`` returned another shape or dtype.
        """
        rows = self._fn(index)
        want = (int(index.numel()), *self.shape[1:])
        if not isinstance(rows, torch.Tensor) or tuple(rows.shape) != want or rows.dtype != self.dtype:
            got = f"{tuple(rows.shape)} {rows.dtype}" if isinstance(rows, torch.Tensor) else type(rows).__name__
            raise ValueError(f"LazyRows: fn returned {got} for {index.numel()} rows, expected {want} {self.dtype}")
        return rows

    def __repr__(self) -> str:
        return f"LazyRows(shape={tuple(self.shape)}, dtype={self.dtype})"
