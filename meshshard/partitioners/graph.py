"""METIS k-way graph partitioning through pymetis, fed only well-formed symmetric graphs."""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["metis_assignment", "fill_empty_parts"]

# METIS wants positive integer weights; real weights (and integer weights with zeros) are scaled so
# the largest maps to this, which keeps ratios to ~1e-5 while sums stay far from idx_t overflow
_WEIGHT_SCALE = 1 << 16


def _weight_limit() -> int:
    """Largest total weight handed to METIS: well inside its integer type (32 or 64 bits)."""
    try:
        from pymetis._internal import _idx_type_width

        width = int(_idx_type_width())
    except Exception:  # older pymetis: assume the narrow type
        width = 32
    return 2**30 if width <= 32 else 2**52


def _int_weights(w: np.ndarray, what: str, limit: int) -> np.ndarray:
    """Positive integer weights for METIS with the ratios of ``w`` (float64, non-negative).

    Integer weights >= 1 whose sum fits are passed as they are. Otherwise the weights are scaled
    so that the largest maps to ``_WEIGHT_SCALE`` (less when the sum would pass ``limit``) and
    rounded; entries that round to 0 (zero or tiny weights) become 1, since METIS's recursive
    bisection misbehaves on zero-weight vertices (it prints "Cannot bisect a graph with 0
    vertices" and returns empty parts).
    """
    w = np.asarray(w, dtype=np.float64)
    if w.size == 0:
        return w.astype(np.int64)
    if w.min() >= 1 and np.all(w == np.round(w)) and w.sum() <= limit:
        return w.astype(np.int64)
    top = float(w.max())
    if not top > 0:
        return np.ones(w.size, dtype=np.int64)
    scale = min(_WEIGHT_SCALE / top, (limit - w.size) / float(w.sum()))
    if not scale > 0 or w.size >= limit:
        raise ValueError(f"{what}: too many entries ({w.size}) for METIS integer weights")
    out = np.round(w * scale).astype(np.int64)
    np.maximum(out, 1, out=out)
    return out


def _clip_heavy(w: np.ndarray, num_parts: int) -> np.ndarray:
    """Clip node weights to the weight of a fair part, so METIS's balance problem is feasible.

    A node heavier than ``total / num_parts`` ends up in a part of its own whatever METIS does;
    left as it is, METIS's recursive bisection then asks for more parts than a side has vertices
    (it prints "You are trying to partition a graph into too many parts" and leaves parts empty).
    The ``h`` heaviest nodes that exceed ``t = (weight of the others) / (num_parts - h)`` are
    given weight ``t``: one part each, the others share the remaining parts evenly.
    """
    order = np.sort(w)[::-1]
    head = np.concatenate([[0.0], np.cumsum(order[: num_parts - 1])])
    total = float(w.sum())
    h = 0
    while h < num_parts - 1 and order[h] > (total - head[h]) / (num_parts - h):
        h += 1
    if h == 0:
        return w
    return np.minimum(w, (total - head[h]) / (num_parts - h))


def fill_empty_parts(assign: np.ndarray, num_parts: int, indptr: Optional[np.ndarray] = None) -> np.ndarray:
    """Give every empty part one node taken from the currently largest part (deterministic).

    Args:
        assign: int64 ``[N]`` part ids (modified in place and returned).
        num_parts: ``P <= N``.
        indptr: unused (kept for callers that pass the CSR graph).
    """
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
    limit = _weight_limit()
    vw = None if node_weights is None else _int_weights(_clip_heavy(node_weights, num_parts), "weights", limit)
    ewi = None if edge_weights is None else _int_weights(edge_weights, "edge_weights", limit)
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
