"""Element edge tables and the vectorised cell -> node-graph conversion.

A mesh's node graph connects two nodes when they share an element EDGE (not merely an element):
a quad gives its 4 sides, not its 2 diagonals; a hexahedron its 12 edges. Local node numbering
follows VTK, which is what meshio uses for every format it reads.
"""
from __future__ import annotations

from typing import Dict, Mapping, Tuple

import numpy as np
import torch

__all__ = ["CELL_EDGES", "TOPOLOGICAL_DIM", "cell_edges", "edge_index_from_cells", "coalesce_undirected"]


def _split(corner_edges, midside):
    """Edges of a quadratic element: every corner edge (a, b) with mid node m becomes a-m, m-b."""
    out = []
    for (a, b), m in zip(corner_edges, midside):
        out += [(a, m), (m, b)]
    return tuple(out)


_TRI = ((0, 1), (1, 2), (2, 0))
_QUAD = ((0, 1), (1, 2), (2, 3), (3, 0))
_TET = ((0, 1), (1, 2), (2, 0), (0, 3), (1, 3), (2, 3))
_HEX = ((0, 1), (1, 2), (2, 3), (3, 0), (4, 5), (5, 6), (6, 7), (7, 4), (0, 4), (1, 5), (2, 6), (3, 7))
_WEDGE = ((0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5))
_PYRAMID = ((0, 1), (1, 2), (2, 3), (3, 0), (0, 4), (1, 4), (2, 4), (3, 4))
#: corners of the hexahedron's faces in the VTK order of a 27-node hex's face-centre nodes 20..25
#: (-x, +x, -y, +y, -z, +z); node 26 is the body centre
_HEX_FACES = ((0, 3, 7, 4), (1, 2, 6, 5), (0, 1, 5, 4), (3, 2, 6, 7), (0, 1, 2, 3), (4, 5, 6, 7))


def _hex27():
    """Edges of the 27-node hex: the 3x3x3 lattice of its nodes (54 edges, 8 sub-hexes).

    Corner edges split at mid-edge nodes 8..19, each face centre joined to the 4 mid-edge nodes
    of its face, the body centre joined to the 6 face centres.
    """
    mid = {frozenset(e): 8 + i for i, e in enumerate(_HEX)}
    out = list(_split(_HEX, tuple(range(8, 20))))
    for f, face in enumerate(_HEX_FACES):
        centre = 20 + f
        out += [(mid[frozenset((a, b))], centre) for a, b in zip(face, face[1:] + face[:1])]
        out.append((centre, 26))
    return tuple(out)


#: Local node pairs of every element edge, per meshio cell type (VTK node order). Quadratic
#: elements are split at their mid-side nodes, so the graph follows the element's edges.
CELL_EDGES: Dict[str, Tuple[Tuple[int, int], ...]] = {
    "line": ((0, 1),),
    "line3": ((0, 2), (2, 1)),
    "triangle": _TRI,
    "triangle6": _split(_TRI, (3, 4, 5)),
    "quad": _QUAD,
    "quad8": _split(_QUAD, (4, 5, 6, 7)),
    # quad9: the 8-node edges plus the centre node joined to the four mid-side nodes
    "quad9": _split(_QUAD, (4, 5, 6, 7)) + ((4, 8), (5, 8), (6, 8), (7, 8)),
    "tetra": _TET,
    "tetra10": _split(_TET, (4, 5, 6, 7, 8, 9)),
    "hexahedron": _HEX,
    "hexahedron20": _split(_HEX, tuple(range(8, 20))),
    "hexahedron27": _hex27(),
    "wedge": _WEDGE,
    "wedge15": _split(_WEDGE, tuple(range(6, 15))),
    "pyramid": _PYRAMID,
    "pyramid13": _split(_PYRAMID, tuple(range(5, 13))),
}

#: Topological dimension of the cell types meshshard knows (meshio's table covers the rest).
TOPOLOGICAL_DIM: Dict[str, int] = {
    "vertex": 0, "line": 1, "line3": 1, "polygon": 2,
    "triangle": 2, "triangle6": 2, "quad": 2, "quad8": 2, "quad9": 2,
    "tetra": 3, "tetra10": 3, "hexahedron": 3, "hexahedron20": 3, "hexahedron27": 3,
    "wedge": 3, "wedge15": 3, "pyramid": 3, "pyramid13": 3,
}


def topological_dim(cell_type: str) -> int:
    """Topological dimension of a meshio cell type (0 vertex ... 3 volume)."""
    if cell_type in TOPOLOGICAL_DIM:
        return TOPOLOGICAL_DIM[cell_type]
    if cell_type.startswith("polygon"):
        return 2
    try:
        from meshio._mesh import topological_dimension
    except ImportError:  # pragma: no cover - very old meshio
        topological_dimension = {}
    if cell_type in topological_dimension:
        return int(topological_dimension[cell_type])
    raise ValueError(f"unknown cell type {cell_type!r}")


def _local_edges(cell_type: str, cells: np.ndarray) -> np.ndarray:
    """``[n_local_edges, 2]`` local node pairs of a cell type, checked against the cells' node count."""
    if cells.ndim != 2:
        raise ValueError(f"{cell_type} cells must be a 2-D array [n_cells, nodes_per_cell], got shape {cells.shape}")
    if cell_type.startswith("polygon"):
        # a polygon block holds polygons of one node count k: the cycle 0-1-...-(k-1)-0
        k = cells.shape[1]
        return np.stack([np.arange(k), (np.arange(k) + 1) % k], axis=1)
    if cell_type in CELL_EDGES:
        local = np.asarray(CELL_EDGES[cell_type], dtype=np.int64)
        need = int(local.max()) + 1
        if cells.shape[1] != need:
            raise ValueError(f"{cell_type} cells need {need} nodes each, got {cells.shape[1]}")
        return local
    raise ValueError(
        f"cell type {cell_type!r} is not supported for edge extraction; supported: "
        f"{sorted(CELL_EDGES) + ['polygon']}"
    )


def cell_edges(cell_type: str, cells: np.ndarray) -> np.ndarray:
    """Node pairs of every edge of every cell of one type.

    Args:
        cell_type: meshio cell type name ("triangle", "hexahedron", "polygon", ...).
        cells: int array [n_cells, nodes_per_cell].

    Returns:
        int64 array [n_cells * edges_per_cell, 2] (duplicates between neighbouring cells kept).
    """
    cells = np.asarray(cells, dtype=np.int64)
    local = _local_edges(cell_type, cells)
    # [n_cells, n_local_edges, 2] -> [n_cells * n_local_edges, 2]
    return cells[:, local].reshape(-1, 2)


def _edge_index_from_keys(key: np.ndarray, n: np.int64) -> torch.Tensor:
    """Both directions of the distinct undirected edges ``key = lo * n + hi`` (``lo < hi``; negative
    keys are dropped), sorted by (row 0, row 1). Sorts ``key`` in place; once deduplicated it is no
    longer referenced here, so a caller that keeps no name for it gets its memory back early."""
    key.sort()  # sort + neighbour compare: np.unique sorts too, and adds masks and copies of its own
    key = key[np.searchsorted(key, 0):]
    if key.size:
        key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    lo, hi = np.divmod(key, n)
    both = np.concatenate([key, hi * n + lo])
    del lo, hi, key
    both.sort()
    out = np.empty((2, both.size), dtype=np.int64)
    np.divmod(both, n, out=(out[0], out[1]))  # straight into the result: no extra copies
    return torch.from_numpy(out)


def coalesce_undirected(pairs: np.ndarray, num_nodes: int) -> torch.Tensor:
    """Symmetrise, deduplicate and sort node pairs; drop self loops.

    Args:
        pairs: int array [M, 2] of node pairs in any order, with repeats.
        num_nodes: N; every id must lie in [0, N).

    Returns:
        LongTensor [2, E]: both directions of every distinct pair, sorted by (row 0, row 1).
    """
    pairs = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]
    keep = a != b
    a, b = a[keep], b[keep]
    n = np.int64(max(num_nodes, 1))
    # one int64 key per pair: unique is then a single sort (N < 3e9 keeps N*N in int64)
    return _edge_index_from_keys(np.minimum(a, b) * n + np.maximum(a, b), n)


def edge_index_from_cells(cells: Mapping[str, np.ndarray], num_nodes: int, polyhedra=None) -> torch.Tensor:
    """Undirected node graph of a mesh with mixed element types.

    Each element edge's key ``min * N + max`` is written straight into one ``int64`` array (self
    loops as -1), without the ``[M, 2]`` pair table, which would need several times the memory.

    Args:
        cells: dict cell type -> int array [n_cells, nodes_per_cell].
        num_nodes: number of mesh nodes N.
        polyhedra: optional :class:`meshshard.io.polyhedra.Polyhedra`: each gives the sides of
            its faces (a side shared by several faces once).

    Returns:
        LongTensor [2, E], both directions, no duplicates, no self loops, sorted by (row 0, row 1).
    """
    blocks = []
    for t, c in cells.items():
        c = np.asarray(c, dtype=np.int64)
        if len(c):
            local = _local_edges(t, c)
            if c.min() < 0 or c.max() >= num_nodes:
                raise ValueError(f"cell connectivity refers to node ids outside [0, {num_nodes})")
            blocks.append((c, local))
    if polyhedra is not None and polyhedra.num_cells:
        nodes = polyhedra.face_nodes
        if nodes.min() < 0 or nodes.max() >= num_nodes:
            raise ValueError(f"polyhedra refer to node ids outside [0, {num_nodes})")
        blocks.append((polyhedra.sides(), np.array([[0, 1]], dtype=np.int64)))
    if not blocks:
        return torch.empty(2, 0, dtype=torch.long)
    n = np.int64(max(num_nodes, 1))
    # the keys are passed without a name here, so the callee frees them once deduplicated
    return _edge_index_from_keys(_edge_keys(blocks, n), n)


def _edge_keys(blocks, n: np.int64) -> np.ndarray:
    """``min * n + max`` of every element edge of every (cells, local edge table) block; -1 for self loops."""
    key = np.empty(sum(len(c) * len(local) for c, local in blocks), dtype=np.int64)
    at = 0
    for c, local in blocks:
        for i, j in local:
            a, b, seg = c[:, i], c[:, j], key[at:at + len(c)]
            np.minimum(a, b, out=seg)
            seg *= n
            seg += np.maximum(a, b)
            seg[a == b] = -1  # self loop (a degenerate cell)
            at += len(c)
    return key
