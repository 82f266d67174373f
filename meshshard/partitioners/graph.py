"""METIS k-way graph partitioning through pymetis, fed only well-formed symmetric graphs."""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["metis_assignment", "fill_empty_parts"]

# METIS wants integer weights; real weights are scaled so the largest maps to this
_WEIGHT_SCALE = 1000


def _int_weights(w: np.ndarray, what: str, positive: bool, limit: int) -> np.ndarray:
    """Integer weights for METIS: integral inputs kept when small enough, others scaled to [.., _WEIGHT_SCALE]."""
    w = np.asarray(w, dtype=np.float64)
    if w.size == 0:
        return w.astype(np.int64)
    if np.all(w == np.round(w)) and w.sum() <= limit:
        out = w.astype(np.int64)
    else:
        top = float(w.max())
        out = np.round(w * (_WEIGHT_SCALE / top)).astype(np.int64) if top > 0 else np.zeros(w.size, np.int64)
        if out.sum() > limit:
            raise ValueError(f"{what} sum too large for METIS integer weights")
    if positive:
        np.maximum(out, 1, out=out)  # tiny positive real weights must not vanish
    return out


def fill_empty_parts(assign: np.ndarray, num_parts: int, indptr: Optional[np.ndarray] = None) -> np.ndarray:
    """Give every empty part one node taken from the currently largest part (deterministic)."""
    counts = np.bincount(assign, minlength=num_parts)
    for part in np.flatnonzero(counts == 0):
        donor = int(np.argmax(counts))
        members = np.flatnonzero(assign == donor)
        node = int(members[-1])
        assign[node] = part
        counts[donor] -= 1
        counts[part] += 1
    return assign


def metis_assignment(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_parts: int,
    *,
    node_weights: Optional[np.ndarray] = None,
    edge_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    seed: int = 0,
) -> np.ndarray:
    """k-way METIS partition of a symmetric CSR graph (no self loops, no repeated entries).

    Args:
        indptr, indices: symmetric CSR adjacency.
        num_parts: ``1 <= P <= N``.
        node_weights: float64 ``[N]`` non-negative, or None.
        edge_weights: float64 per CSR entry, non-negative (zero-weight entries are dropped), or None.
        imbalance: allowed max part weight / mean (METIS ``ufactor = round((imbalance - 1) * 1000)``).
        seed: METIS random seed.

    Returns:
        int64 ``[N]`` part ids, every part non-empty.
    """
    import pymetis

    n = indptr.shape[0] - 1
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if num_parts == n:  # one node per part: nothing for METIS to decide
        return np.arange(n, dtype=np.int64)
    if edge_weights is not None:
        keep = edge_weights > 0
        if not keep.all():  # METIS rejects zero edge weights: drop those entries (stays symmetric)
            rows = np.repeat(np.arange(n), np.diff(indptr))[keep]
            indices, edge_weights = indices[keep], edge_weights[keep]
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    limit = 2**30
    vw = None if node_weights is None else _int_weights(node_weights, "weights", False, limit)
    if vw is not None and vw.sum() == 0:
        vw = np.ones(n, dtype=np.int64)
    ewi = None if edge_weights is None else _int_weights(edge_weights, "edge_weights", True, limit)
    ufactor = max(1, int(round((float(imbalance) - 1.0) * 1000)))
    opts = pymetis.Options(seed=int(seed), ufactor=ufactor)
    adj = pymetis.CSRAdjacency(indptr.astype(np.int64), indices.astype(np.int64))
    result = pymetis.part_graph(
        int(num_parts), adj,
        vweights=vw,
        eweights=ewi,
        options=opts,
    )
    assign = np.asarray(result.vertex_part if hasattr(result, "vertex_part") else result[1], dtype=np.int64)
    if assign.shape != (n,) or (n and (assign.min() < 0 or assign.max() >= num_parts)):
        raise RuntimeError(f"pymetis returned an invalid partition (shape {assign.shape})")
    return fill_empty_parts(assign, num_parts)
