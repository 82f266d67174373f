"""Polyhedral cells: cells of any number of faces, each face of any number of nodes.

OpenFOAM meshes (snappyHexMesh, cfMesh) hold cells that are no hexahedron, prism, pyramid or
tetrahedron: a cell beside a refined neighbour has one side split into several faces and hanging
nodes on its other sides. VTK calls them polyhedra (``VTK_POLYHEDRON``) and describes each by its
faces.

Representation chosen: :class:`Polyhedra`, a separate attribute ``Mesh.polyhedra`` beside the
fixed-size ``Mesh.cells`` (dict cell type -> ``[n, k]``), holding three flat int64 arrays:

- ``face_nodes`` [S]: the node ids of every face, face after face, in the face's cycle order;
- ``face_offsets`` [F + 1]: face ``f`` is ``face_nodes[face_offsets[f]:face_offsets[f + 1]]``;
- ``cell_offsets`` [P + 1]: polyhedron ``i`` has the faces ``cell_offsets[i]:cell_offsets[i + 1]``.

Each polyhedron lists its own faces (a face between two polyhedra is stored twice), as in VTK's
face streams, so a subset of the polyhedra is a slice of the arrays and never needs the others.

Why not meshio's convention (one ``polyhedron<n>`` block per node count, each cell a Python list
of face arrays): it is a ragged Python structure per cell, not arrays, and every existing path
that takes ``cells[type]`` as an ``[n, k]`` array (edge tables, face tables, the viewers, the
partition files) would have to learn to skip it. Why not padding to the widest cell: a ``-1``
filler would reach every one of those paths as a node id. A separate attribute keeps every
``[n, k]`` path unchanged, and the code that must know polyhedra (the vertex graph, the cell
graph, centroids, named sets, writing) asks for ``mesh.polyhedra`` by name.

Cell numbering: a :class:`meshshard.io.Mesh` numbers its volume cells by the types of ``cells``
in dict order, then the rows of each type, then the polyhedra in their order (the pseudo cell type
:data:`POLYHEDRON` in ``cell_sets``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

__all__ = ["POLYHEDRON", "VTK_POLYHEDRON", "Polyhedra", "ragged_take"]

#: the cell type name of polyhedra in ``Mesh.cell_sets`` and cell counts
POLYHEDRON = "polyhedron"
#: VTK's cell type id of a polyhedron
VTK_POLYHEDRON = 42


def _offsets(name: str, arr, length: int) -> np.ndarray:
    a = np.asarray(arr)
    if a.ndim != 1 or len(a) < 1 or (a.size and not np.issubdtype(a.dtype, np.integer)):
        raise ValueError(f"polyhedra {name} must be a 1-D integer array starting at 0, got shape {a.shape}, "
                         f"dtype {a.dtype}")
    a = a.astype(np.int64, copy=False)
    if a[0] != 0 or a[-1] != length or np.any(np.diff(a) < 1):
        raise ValueError(f"polyhedra {name} must start at 0, end at {length} and strictly increase "
                         f"(every polyhedron a face, every face a node), got {a[:8].tolist()}...{a[-1]}")
    return a


def ragged_take(offsets: np.ndarray, idx: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """The positions of rows ``idx`` of a ragged array, without a loop over the rows.

    Args:
        offsets: int64 [R + 1], row ``r`` spans ``offsets[r]:offsets[r + 1]``.
        idx: int64 [K], the rows wanted, any order.

    Returns:
        ``(positions, lengths)``: int64 [sum of lengths] the positions of those rows one after
        another, and int64 [K] the length of each.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    idx = np.asarray(idx, dtype=np.int64)
    lengths = offsets[idx + 1] - offsets[idx]
    shift = offsets[idx] - np.concatenate([[0], np.cumsum(lengths)[:-1]]) if len(idx) else np.empty(0, np.int64)
    return np.repeat(shift, lengths) + np.arange(int(lengths.sum()), dtype=np.int64), lengths


def _sum_rows(group: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """[n, d]: the sum of the rows of ``values`` [M, d] per ``group`` id (``np.bincount`` per column)."""
    return np.stack([np.bincount(group, weights=values[:, j], minlength=n) for j in range(values.shape[1])], axis=1)


class Polyhedra:
    """Polyhedral cells as flat face arrays (see the module doc).

    Args:
        face_nodes: int array [S], the node ids of all faces, concatenated.
        face_offsets: int array [F + 1], starts of the faces in ``face_nodes`` (0 first, S last).
        cell_offsets: int array [P + 1], starts of each polyhedron's faces (0 first, F last).
        num_nodes: the mesh's node count N, to check the ids; ``None`` skips that check.

    Attributes:
        face_nodes, face_offsets, cell_offsets: the arrays, int64.

    Raises:
        ValueError: offsets that do not start at 0, end at the array's length and strictly
            increase; a face of fewer than 3 nodes; a polyhedron of fewer than 4 faces; node ids
            outside ``[0, num_nodes)``.
    """

    def __init__(self, face_nodes, face_offsets, cell_offsets, num_nodes: Optional[int] = None):
        nodes = np.asarray(face_nodes)
        if nodes.ndim != 1 or (nodes.size and not np.issubdtype(nodes.dtype, np.integer)):
            raise ValueError(f"polyhedra face_nodes must be a 1-D integer array, got shape {nodes.shape}, "
                             f"dtype {nodes.dtype}")
        self.face_nodes = nodes.astype(np.int64, copy=False)
        self.face_offsets = _offsets("face_offsets", face_offsets, len(self.face_nodes))
        self.cell_offsets = _offsets("cell_offsets", cell_offsets, len(self.face_offsets) - 1)
        if len(self.face_offsets) > 1 and np.diff(self.face_offsets).min() < 3:
            f = int(np.flatnonzero(np.diff(self.face_offsets) < 3)[0])
            raise ValueError(f"polyhedra face {f} has {int(np.diff(self.face_offsets)[f])} nodes; a face needs 3 or more")
        if len(self.cell_offsets) > 1 and np.diff(self.cell_offsets).min() < 4:
            c = int(np.flatnonzero(np.diff(self.cell_offsets) < 4)[0])
            raise ValueError(f"polyhedron {c} has {int(np.diff(self.cell_offsets)[c])} faces; a polyhedron needs 4 or more")
        if num_nodes is not None and self.face_nodes.size and \
                (self.face_nodes.min() < 0 or self.face_nodes.max() >= num_nodes):
            raise ValueError(f"polyhedra refer to node ids outside [0, {num_nodes})")

    @classmethod
    def from_faces(cls, cells: Sequence[Sequence[Sequence[int]]], num_nodes: Optional[int] = None) -> "Polyhedra":
        """Polyhedra from nested lists: per cell, its faces, each a node-id cycle.

        Args:
            cells: ``[[face, face, ...], ...]``, each face a sequence of node ids.
            num_nodes: as in :class:`Polyhedra`.

        Returns:
            :class:`Polyhedra`.
        """
        faces = [np.asarray(f, dtype=np.int64).reshape(-1) for c in cells for f in c]
        face_offsets = np.concatenate([[0], np.cumsum([len(f) for f in faces], dtype=np.int64)])
        cell_offsets = np.concatenate([[0], np.cumsum([len(c) for c in cells], dtype=np.int64)])
        nodes = np.concatenate(faces) if faces else np.empty(0, dtype=np.int64)
        return cls(nodes, face_offsets, cell_offsets, num_nodes)

    @property
    def num_cells(self) -> int:
        """Number of polyhedra P."""
        return len(self.cell_offsets) - 1

    def __len__(self) -> int:
        return self.num_cells

    @property
    def num_faces(self) -> int:
        """Number of faces F (a face between two polyhedra counted once per polyhedron)."""
        return len(self.face_offsets) - 1

    def face_sizes(self) -> np.ndarray:
        """int64 [F]: the node count of every face."""
        return np.diff(self.face_offsets)

    def face_cell(self) -> np.ndarray:
        """int64 [F]: the polyhedron (0 .. P - 1) every face belongs to."""
        return np.repeat(np.arange(self.num_cells, dtype=np.int64), np.diff(self.cell_offsets))

    def faces(self, i: int) -> list:
        """The faces of polyhedron ``i``.

        Args:
            i: the polyhedron, in ``[0, P)``.

        Returns:
            list of int64 arrays, the node ids of each face in cycle order.
        """
        lo, hi = self.cell_offsets[i], self.cell_offsets[i + 1]
        return [self.face_nodes[self.face_offsets[f]:self.face_offsets[f + 1]] for f in range(lo, hi)]

    def sides(self) -> np.ndarray:
        """int64 [S, 2]: every side of every face (node ``j`` to the next node of its cycle), a
        side shared by faces repeated; the edges of the vertex graph."""
        nxt = np.arange(1, len(self.face_nodes) + 1, dtype=np.int64)
        nxt[self.face_offsets[1:] - 1] = self.face_offsets[:-1]  # the last node of a face closes its cycle
        return np.stack([self.face_nodes, self.face_nodes[nxt]], axis=1)

    def cell_nodes(self) -> Tuple[np.ndarray, np.ndarray]:
        """The distinct nodes of every polyhedron.

        Returns:
            ``(cell, node)``: int64 [M] each, one row per (polyhedron, node of it), sorted by cell
            then node.
        """
        cell = np.repeat(self.face_cell(), self.face_sizes())
        n = np.int64(max(int(self.face_nodes.max(initial=-1)) + 1, 1))
        key = np.unique(cell * n + self.face_nodes)
        return key // n, key % n

    def centroids(self, points: np.ndarray) -> np.ndarray:
        """The volume centroid of every polyhedron, as OpenFOAM computes cell centres.

        Each face is cut into triangles from its node average, each triangle with the cell's
        estimated centre (the average of its face centres) forms a tetrahedron, and the cell's
        centroid is the volume-weighted mean of the tetrahedra's centroids. The volumes are taken
        unsigned (the faces' orientation is not relied on), which is exact for a cell star-shaped
        about its estimated centre (every convex cell). No point is added to the mesh. A
        degenerate cell of zero volume gets its estimated centre.

        Args:
            points: float array [N, 3].

        Returns:
            float64 [P, 3].
        """
        points = np.asarray(points, dtype=np.float64)
        if points.ndim != 2 or points.shape[1] != 3:
            raise ValueError(f"polyhedra centroids need 3-D points [N, 3], got shape {points.shape}")
        sizes = self.face_sizes()
        face_of_node = np.repeat(np.arange(self.num_faces), sizes)
        face_centre = _sum_rows(face_of_node, points[self.face_nodes], self.num_faces) / sizes[:, None]
        cell = self.face_cell()
        estimate = _sum_rows(cell, face_centre, self.num_cells) / np.diff(self.cell_offsets)[:, None]
        a, b = self.sides().T
        tet_cell = cell[face_of_node]
        # one tetrahedron per face side: (a, b, face centre, cell estimate); coordinates as columns,
        # relative to the cell estimate; the face's orientation does not matter: |volume|
        cc = estimate[tet_cell]
        u, v, w = (points[a] - cc).T, (points[b] - cc).T, (face_centre[face_of_node] - cc).T
        vol = np.abs(u[0] * (v[1] * w[2] - v[2] * w[1]) + u[1] * (v[2] * w[0] - v[0] * w[2])
                     + u[2] * (v[0] * w[1] - v[1] * w[0])) / 6.0
        total = np.bincount(tet_cell, weights=vol, minlength=self.num_cells)
        out = np.stack([np.bincount(tet_cell, weights=(u[j] + v[j] + w[j]) * vol, minlength=self.num_cells)
                        for j in range(3)], axis=1) / 4.0
        ok = total > 0
        out[ok] /= total[ok, None]
        out[~ok] = 0.0
        return estimate + out  # the tetrahedra's centroids were taken relative to the estimate

    def subset(self, idx) -> "Polyhedra":
        """Some of the polyhedra.

        Args:
            idx: int array of polyhedron numbers, any order.

        Returns:
            :class:`Polyhedra` of those polyhedra in that order (node ids unchanged).
        """
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        face_ids, nf = ragged_take(self.cell_offsets, idx)
        node_ids, sizes = ragged_take(self.face_offsets, face_ids)
        return Polyhedra(self.face_nodes[node_ids], np.concatenate([[0], np.cumsum(sizes)]),
                         np.concatenate([[0], np.cumsum(nf)]))

    def renumbered(self, new_id: np.ndarray) -> "Polyhedra":
        """The same polyhedra with new node ids.

        Args:
            new_id: int array, ``new_id[i]`` the new id of node ``i``.

        Returns:
            :class:`Polyhedra`.
        """
        return Polyhedra(np.asarray(new_id, dtype=np.int64)[self.face_nodes], self.face_offsets, self.cell_offsets)

    @staticmethod
    def concatenate(parts: Sequence["Polyhedra"]) -> "Polyhedra":
        """Polyhedra one after another.

        Args:
            parts: :class:`Polyhedra` objects, their node ids in one numbering.

        Returns:
            :class:`Polyhedra` of ``parts`` in order.
        """
        nodes = np.concatenate([p.face_nodes for p in parts]) if parts else np.empty(0, dtype=np.int64)
        fo, co, fat, cat = [np.zeros(1, np.int64)], [np.zeros(1, np.int64)], 0, 0
        for p in parts:
            fo.append(p.face_offsets[1:] + fat)
            co.append(p.cell_offsets[1:] + cat)
            fat += int(p.face_offsets[-1])
            cat += p.num_faces
        return Polyhedra(nodes, np.concatenate(fo), np.concatenate(co))

    def vtk_face_stream(self) -> Tuple[np.ndarray, np.ndarray]:
        """VTK's legacy face streams: per polyhedron ``[n_faces, n0, ids..., n1, ids..., ...]``.

        Returns:
            ``(stream, offsets)``: int64 [L] all streams concatenated and [P + 1] their starts.
        """
        sizes = self.face_sizes()
        faces_per_cell = np.diff(self.cell_offsets)
        length = 1 + np.add.reduceat(sizes + 1, self.cell_offsets[:-1]) if self.num_cells else \
            np.empty(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(length)]).astype(np.int64)
        stream = np.empty(int(offsets[-1]), dtype=np.int64)
        stream[offsets[:-1]] = faces_per_cell
        # position of each face's count: its cell's start + 1 + the nodes and counts of earlier faces
        cell = self.face_cell()
        before = np.arange(self.num_faces) - self.cell_offsets[cell]  # faces before it in its cell
        head = offsets[cell] + 1 + before + (self.face_offsets[:-1] - self.face_offsets[self.cell_offsets[cell]])
        stream[head] = sizes
        within = np.arange(len(self.face_nodes)) - np.repeat(self.face_offsets[:-1], sizes)
        stream[np.repeat(head, sizes) + 1 + within] = self.face_nodes
        return stream, offsets

    def __eq__(self, other) -> bool:
        return isinstance(other, Polyhedra) and all(
            np.array_equal(a, b) for a, b in ((self.face_nodes, other.face_nodes), (self.face_offsets, other.face_offsets),
                                             (self.cell_offsets, other.cell_offsets)))

    def __repr__(self) -> str:
        return f"Polyhedra(num_cells={self.num_cells}, num_faces={self.num_faces})"
