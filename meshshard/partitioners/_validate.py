"""Input checks shared by every partitioner: bad input raises ValueError/TypeError naming it."""
from __future__ import annotations

import numbers
from typing import Optional

import numpy as np
import torch

__all__ = ["as_points", "check_num_parts", "as_node_weights", "as_edge_index", "as_edge_weights", "to_numpy"]


def to_numpy(x, what: str) -> np.ndarray:
    """numpy view of an array-like or tensor (detached, on CPU; half floats become float32).

    Args:
        x: array-like or tensor.
        what: its name, for the error message.
    """
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16 or x.dtype == torch.float16:
            x = x.float()
        return x.numpy()
    try:
        return np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{what} must be an array or tensor, got {type(x).__name__} ({exc})") from exc


def _is_real(arr: np.ndarray) -> bool:
    return arr.dtype != np.bool_ and (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating))


def as_points(points) -> np.ndarray:
    """Validated coordinates.

    Args:
        points: array or tensor ``[N, 2]`` or ``[N, 3]`` of finite real numbers.

    Returns:
        numpy ``[N, d]`` (float32 kept, other dtypes become float64).

    Raises:
        TypeError: None, or not real numbers. ValueError: wrong shape, NaN or inf.
    """
    if points is None:
        raise TypeError("points must be an array or tensor of shape [N, 2] or [N, 3], got None")
    pts = to_numpy(points, "points")
    if not _is_real(pts):
        raise TypeError(f"points must hold real numbers, got dtype {pts.dtype}")
    if pts.ndim != 2 or pts.shape[1] not in (2, 3):
        raise ValueError(f"points must have shape [N, 2] or [N, 3], got {tuple(pts.shape)}")
    if pts.dtype != np.float32:
        pts = pts.astype(np.float64, copy=False)
    if pts.shape[0] and not np.isfinite(pts).all():
        bad = np.flatnonzero(~np.isfinite(pts).all(axis=1))
        raise ValueError(f"points hold NaN or inf coordinates ({bad.size} rows, first row {int(bad[0])})")
    return pts


def check_num_parts(num_parts, num_nodes: int) -> int:
    """``1 <= num_parts <= N`` as an int.

    Args:
        num_parts: requested number of parts (an int).
        num_nodes: ``N``.
    """
    if isinstance(num_parts, bool) or not isinstance(num_parts, (numbers.Integral, np.integer)):
        raise TypeError(f"num_parts must be an int, got {type(num_parts).__name__}")
    num_parts = int(num_parts)
    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    if num_parts > num_nodes:
        raise ValueError(f"num_parts ({num_parts}) must not exceed the number of nodes N ({num_nodes})")
    return num_parts


def as_node_weights(weights, num_nodes: int) -> Optional[np.ndarray]:
    """float64 ``[N]`` non-negative finite weights with a positive sum, or None.

    Args:
        weights: None, or array / tensor ``[N]``.
        num_nodes: ``N``.
    """
    if weights is None:
        return None
    w = to_numpy(weights, "weights")
    if not _is_real(w):
        raise TypeError(f"weights must hold real numbers, got dtype {w.dtype}")
    w = w.astype(np.float64, copy=False).reshape(-1) if w.ndim <= 1 else w
    if w.ndim != 1 or w.shape[0] != num_nodes:
        raise ValueError(f"weights must have shape [N] = [{num_nodes}], got {tuple(to_numpy(weights, 'weights').shape)}")
    if not np.isfinite(w).all():
        raise ValueError("weights hold NaN or inf")
    if (w < 0).any():
        raise ValueError(f"weights must be non-negative, got minimum {float(w.min())}")
    if num_nodes and not w.sum() > 0:
        raise ValueError("weights sum to zero: nothing to balance")
    return w


def as_edge_index(edge_index, num_nodes: int) -> np.ndarray:
    """int64 ``[2, E]`` with every id in ``[0, N)``; an int32 input stays int32 (not copied).

    Int32 ids hold a large mesh's graph in half the memory (``meshshard preprocess`` keeps its
    ``[2, E]`` edges so); everything that reads an edge list here takes either type.

    Args:
        edge_index: integer array / tensor ``[2, E]`` (``E`` may be 0).
        num_nodes: ``N``.
    """
    ei = to_numpy(edge_index, "edge_index")
    if ei.dtype == np.bool_ or not np.issubdtype(ei.dtype, np.integer):
        raise TypeError(f"edge_index must hold integer node ids, got dtype {ei.dtype}")
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {tuple(ei.shape)}")
    if ei.dtype != np.int32:
        ei = ei.astype(np.int64, copy=False)
    if ei.size:
        lo, hi = int(ei.min()), int(ei.max())
        if lo < 0:
            raise ValueError(f"edge_index holds negative node ids (min {lo})")
        if hi >= num_nodes:
            raise ValueError(f"edge_index holds node id {hi}, out of range for N = {num_nodes} nodes")
    return ei


def as_edge_weights(edge_weights, num_edges: int) -> Optional[np.ndarray]:
    """float64 ``[E]`` non-negative finite edge weights, or None.

    Args:
        edge_weights: None, or array / tensor ``[E]``.
        num_edges: ``E``, the number of ``edge_index`` columns.
    """
    if edge_weights is None:
        return None
    w = to_numpy(edge_weights, "edge_weights")
    if not _is_real(w):
        raise TypeError(f"edge_weights must hold real numbers, got dtype {w.dtype}")
    if w.ndim != 1 or w.shape[0] != num_edges:
        raise ValueError(f"edge_weights must have shape [E] = [{num_edges}], got {tuple(w.shape)}")
    w = w.astype(np.float64, copy=False)
    if not np.isfinite(w).all():
        raise ValueError("edge_weights hold NaN or inf")
    if (w < 0).any():
        raise ValueError(f"edge_weights must be non-negative, got minimum {float(w.min())}")
    return w
