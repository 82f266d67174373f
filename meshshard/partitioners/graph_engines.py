"""k-way graph partitioning engines (METIS through pymetis, KaMinPar, Mt-KaHyPar), fed only
well-formed symmetric graphs."""
from __future__ import annotations

import os
import tempfile
from typing import Optional

import numpy as np

from meshshard._fileutil import release_free_heap
from meshshard._optional import require

__all__ = ["GRAPH_ENGINES", "graph_assignment", "metis_assignment", "kaminpar_assignment",
           "mtkahypar_assignment", "fill_empty_parts"]

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


def _engine_input(indptr, indices, num_parts, node_weights, edge_weights, limit):
    """Drop zero-weight entries (the engines reject them; the graph stays symmetric) and turn the
    weights into the engines' positive integers: ``(indptr, indices, vw or None, ew or None)``."""
    n = indptr.shape[0] - 1
    if edge_weights is not None:
        keep = edge_weights > 0
        if not keep.all():
            rows = np.repeat(np.arange(n), np.diff(indptr))[keep]
            indices, edge_weights = indices[keep], edge_weights[keep]
            indptr = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    vw = None if node_weights is None else _int_weights(_clip_heavy(node_weights, num_parts), "weights", limit)
    ewi = None if edge_weights is None else _int_weights(edge_weights, "edge_weights", limit)
    return indptr, indices, vw, ewi


def _checked(assign, n: int, num_parts: int, engine: str) -> np.ndarray:
    assign = np.asarray(assign, dtype=np.int64)
    if assign.shape != (n,) or (n and (assign.min() < 0 or assign.max() >= num_parts)):
        raise RuntimeError(f"{engine} returned an invalid partition (shape {assign.shape})")
    return fill_empty_parts(assign, num_parts)


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
    indptr, indices, vw, ewi = _engine_input(indptr, indices, num_parts, node_weights, edge_weights,
                                             _weight_limit())
    ufactor = max(1, int(round((float(imbalance) - 1.0) * 1000)))
    opts = pymetis.Options(seed=int(seed), ufactor=ufactor)
    # METIS's own integer type: pymetis then hands the arrays over without a copy (often views of
    # the caller's edge_index)
    idx = pymetis.zero_copy_dtype()
    adj = pymetis.CSRAdjacency(np.ascontiguousarray(indptr, dtype=idx), np.ascontiguousarray(indices, dtype=idx))
    result = pymetis.part_graph(
        int(num_parts), adj,
        vweights=vw,
        eweights=ewi,
        options=opts,
    )
    # METIS frees its work arrays (several times adjncy) into the heap, where they would stay resident for the
    # rest of the run on a large mesh without this
    release_free_heap()
    return _checked(result.vertex_part if hasattr(result, "vertex_part") else result[1], n, num_parts, "pymetis")


# KaMinPar and Mt-KaHyPar keep weights in 32-bit integers in their default builds
_INT32_LIMIT = 2**30


def _write_metis_graph(path: str, indptr: np.ndarray, indices: np.ndarray, vw: np.ndarray, ew: np.ndarray) -> None:
    """Write a graph in the METIS text format with node and edge weights (format code ``011``)."""
    n = indptr.shape[0] - 1
    deg = np.diff(indptr)
    # one token row per node: its weight, then (neighbour + 1, edge weight) pairs
    tokens = np.empty(n + 2 * indices.shape[0], dtype=np.int64)
    line_start = np.arange(n) + 2 * indptr[:-1]
    tokens[line_start] = vw
    is_pair = np.ones(tokens.shape[0], dtype=bool)
    is_pair[line_start] = False
    pairs = np.empty((indices.shape[0], 2), dtype=np.int64)
    pairs[:, 0] = indices + 1
    pairs[:, 1] = ew
    tokens[is_pair] = pairs.reshape(-1)
    line_end = np.zeros(tokens.shape[0], dtype=bool)
    line_end[line_start + 2 * deg] = True
    seps = np.where(line_end, "\n", " ").tolist()
    with open(path, "w") as f:
        f.write(f"{n} {indices.shape[0] // 2} 011\n")
        f.write("".join(t + s for t, s in zip(map(str, tokens.tolist()), seps)))


def kaminpar_assignment(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_parts: int,
    *,
    node_weights: Optional[np.ndarray] = None,
    edge_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    seed: int = 0,
) -> np.ndarray:
    """k-way KaMinPar partition (``pip install 'meshshard[kaminpar]'``) of a symmetric CSR graph.

    KaMinPar's Python API reads graphs only from files, so the graph goes through a temporary
    METIS-format file. One thread and a fixed seed: the same input gives the same partition.

    Args:
        indptr, indices: symmetric CSR adjacency (no self loops, no repeated entries).
        num_parts: ``1 <= P <= N``.
        node_weights: float64 ``[N]`` non-negative, or None.
        edge_weights: float64 per CSR entry, non-negative, or None.
        imbalance: allowed max part weight / mean (KaMinPar ``eps = imbalance - 1``).
        seed: KaMinPar random seed.

    Returns:
        int64 ``[N]`` part ids, every part non-empty.
    """
    kaminpar = require("kaminpar")
    n = indptr.shape[0] - 1
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if num_parts == n:
        return np.arange(n, dtype=np.int64)
    indptr, indices, vw, ew = _engine_input(indptr, indices, num_parts, node_weights, edge_weights, _INT32_LIMIT)
    vw = np.ones(n, dtype=np.int64) if vw is None else vw
    ew = np.ones(indices.shape[0], dtype=np.int64) if ew is None else ew
    with tempfile.TemporaryDirectory(prefix="meshshard-kaminpar-") as tmp:
        path = os.path.join(tmp, "graph.metis")
        _write_metis_graph(path, indptr, indices, vw, ew)
        graph = kaminpar.load_graph(path, kaminpar.GraphFileFormat.METIS)
    kaminpar.reseed(int(seed))
    solver = kaminpar.KaMinPar(1, kaminpar.default_context())
    assign = solver.compute_partition(graph, int(num_parts), float(imbalance) - 1.0)
    return _checked(assign, n, num_parts, "KaMinPar")


_MTKAHYPAR = {}  # the thread pool, initialised once per process as Mt-KaHyPar requires


def _mtkahypar():
    mt = require("mtkahypar")
    if "init" not in _MTKAHYPAR:
        _MTKAHYPAR["init"] = mt.initialize(1, False)
    return mt, _MTKAHYPAR["init"]


def mtkahypar_assignment(
    indptr: np.ndarray,
    indices: np.ndarray,
    num_parts: int,
    *,
    node_weights: Optional[np.ndarray] = None,
    edge_weights: Optional[np.ndarray] = None,
    imbalance: float = 1.01,
    seed: int = 0,
) -> np.ndarray:
    """k-way Mt-KaHyPar partition (``pip install 'meshshard[mtkahypar]'``) of a symmetric CSR graph.

    Uses the ``DETERMINISTIC`` preset on a one-thread pool (initialised once per process) and
    minimises the edge cut: the same input and seed give the same partition.

    Args:
        indptr, indices: symmetric CSR adjacency (no self loops, no repeated entries).
        num_parts: ``1 <= P <= N``.
        node_weights: float64 ``[N]`` non-negative, or None.
        edge_weights: float64 per CSR entry, non-negative, or None.
        imbalance: allowed max part weight / mean (Mt-KaHyPar ``epsilon = imbalance - 1``).
        seed: Mt-KaHyPar random seed.

    Returns:
        int64 ``[N]`` part ids, every part non-empty.
    """
    mt, init = _mtkahypar()
    n = indptr.shape[0] - 1
    if num_parts == 1:
        return np.zeros(n, dtype=np.int64)
    if num_parts == n:
        return np.arange(n, dtype=np.int64)
    indptr, indices, vw, ew = _engine_input(indptr, indices, num_parts, node_weights, edge_weights, _INT32_LIMIT)
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    upper = rows < indices  # each undirected edge once
    edges = np.stack([rows[upper], indices[upper]], axis=1)
    vw = np.ones(n, dtype=np.int64) if vw is None else vw
    ew = np.ones(edges.shape[0], dtype=np.int64) if ew is None else ew[upper]
    ctx = init.context_from_preset(mt.PresetType.DETERMINISTIC)
    ctx.set_partitioning_parameters(int(num_parts), float(imbalance) - 1.0, mt.Objective.CUT)
    ctx.logging = False
    mt.set_seed(int(seed))
    graph = init.create_graph(ctx, n, edges.shape[0], edges, vw, ew)
    return _checked(graph.partition(ctx).get_partition(), n, num_parts, "Mt-KaHyPar")


#: engine name -> function ``(indptr, indices, num_parts, *, node_weights, edge_weights,
#: imbalance, seed) -> int64 [N]`` of :class:`~meshshard.partitioners.GraphPartitioner`
GRAPH_ENGINES = {
    "metis": metis_assignment,
    "kaminpar": kaminpar_assignment,
    "mtkahypar": mtkahypar_assignment,
}


def graph_assignment(engine: str, indptr: np.ndarray, indices: np.ndarray, num_parts: int, **options) -> np.ndarray:
    """k-way partition of a symmetric CSR graph with one of :data:`GRAPH_ENGINES`.

    Args:
        engine: ``"metis"``, ``"kaminpar"`` or ``"mtkahypar"``.
        indptr, indices: symmetric CSR adjacency (``[N + 1]``, ``[2M]``).
        num_parts: ``1 <= P <= N``.
        **options: ``node_weights``, ``edge_weights``, ``imbalance``, ``seed`` as in
            :func:`metis_assignment`.

    Returns:
        int64 ``[N]`` part ids, every part non-empty.
    """
    if engine not in GRAPH_ENGINES:
        raise ValueError(f"unknown graph engine {engine!r}; valid engines: {sorted(GRAPH_ENGINES)}")
    return GRAPH_ENGINES[engine](indptr, indices, num_parts, **options)
