"""The cell graph against brute force on small mixed meshes, and against a sparse reference on real meshes."""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from meshshard.io import cell_adjacency, cell_centroids, read_mesh
from meshshard.io.cell_graph import cell_offsets
from tests.conftest import MESH_FILES


def mixed_2d():
    """A 4 x 3 grid of unit quads, every other one split into two triangles."""
    nx, ny = 4, 3
    pid = lambda i, j: i + (nx + 1) * j  # noqa: E731
    pts = np.array([(i, j) for j in range(ny + 1) for i in range(nx + 1)], float)
    quads, tris = [], []
    for j in range(ny):
        for i in range(nx):
            a, b, c, d = pid(i, j), pid(i + 1, j), pid(i + 1, j + 1), pid(i, j + 1)
            if (i + j) % 2:
                tris += [(a, b, c), (a, c, d)]
            else:
                quads.append((a, b, c, d))
    return pts, {"quad": np.array(quads), "triangle": np.array(tris)}


def mixed_3d():
    """A conforming 3 x 2 x 2 block with all four linear 3-D types.

    Column i = 0: each hexahedron split into two wedges (the same diagonal all along z, so the
    triangles match). Column i = 1: hexahedra. Column i = 2: each hexahedron split into six pyramids
    about an added centre point; the pyramid whose base is on the outer x face is split further into
    two tetrahedra (its base is on the boundary, so no neighbour sees the split).
    """
    nx, ny, nz = 3, 2, 2
    pid = lambda i, j, k: i + (nx + 1) * (j + (ny + 1) * k)  # noqa: E731
    pts = [(i, j, k) for k in range(nz + 1) for j in range(ny + 1) for i in range(nx + 1)]
    out = {"wedge": [], "hexahedron": [], "pyramid": [], "tetra": []}
    for k in range(nz):
        for j in range(ny):
            for i in range(nx):
                h = [pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i, j + 1, k),
                     pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j + 1, k + 1), pid(i, j + 1, k + 1)]
                if i == 0:
                    out["wedge"] += [(h[0], h[1], h[2], h[4], h[5], h[6]), (h[0], h[2], h[3], h[4], h[6], h[7])]
                elif i == 1:
                    out["hexahedron"].append(tuple(h))
                else:
                    centre = len(pts)
                    pts.append((i + 0.5, j + 0.5, k + 0.5))
                    faces = [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)]
                    for f in faces:
                        base = [h[v] for v in f]
                        if f == (1, 2, 6, 5):  # the outer x face
                            out["tetra"] += [(base[0], base[1], base[2], centre), (base[0], base[2], base[3], centre)]
                        else:
                            out["pyramid"].append((*base, centre))
    return np.array(pts, float), {t: np.array(c) for t, c in out.items()}


_CORNERS = {"triangle": 3, "quad": 4, "tetra": 4, "hexahedron": 8, "wedge": 6, "pyramid": 5}


def brute_force(cells, dim):
    """Pairs of cells sharing at least ``dim`` corner nodes (a side in 2D, a face in 3D, for
    conforming meshes), by comparing every pair of cells."""
    sets = [set(row[:_CORNERS[t]].tolist()) for t, c in cells.items() for row in c]
    ref = set()
    for a, b in itertools.combinations(range(len(sets)), 2):
        if len(sets[a] & sets[b]) >= dim:
            ref |= {(a, b), (b, a)}
    return ref


@pytest.mark.parametrize("build,dim", [(mixed_2d, 2), (mixed_3d, 3)])
def test_mixed_meshes_match_brute_force(build, dim):
    pts, cells = build()
    ei = cell_adjacency(cells)
    got = set(map(tuple, ei.t().tolist()))
    assert got == brute_force(cells, dim)
    assert ei.shape[1] == len(got)  # no duplicates
    assert torch.equal(ei, ei[:, torch.from_numpy(np.lexsort((ei[1].numpy(), ei[0].numpy())))])
    if dim == 3:
        assert {t for t, c in cells.items() if len(c)} == {"wedge", "hexahedron", "pyramid", "tetra"}


def test_order_of_types_numbers_the_cells():
    pts, cells = mixed_3d()
    flipped = dict(reversed(list(cells.items())))
    a, b = cell_adjacency(cells), cell_adjacency(flipped)
    # cell ids move with the types' order: map flipped ids back to the original ones
    off_a, off_b = cell_offsets(cells), cell_offsets(flipped)
    back = np.empty(sum(map(len, cells.values())), dtype=np.int64)
    for t, c in cells.items():
        back[off_b[t]:off_b[t] + len(c)] = np.arange(off_a[t], off_a[t] + len(c))
    assert set(map(tuple, back[b.numpy()].T.tolist())) == set(map(tuple, a.t().tolist()))


def test_centroids_are_corner_means():
    pts, cells = mixed_3d()
    c = cell_centroids(pts, cells)
    rows = [pts[list(r[:_CORNERS[t]])].mean(0) for t, blk in cells.items() for r in blk]
    np.testing.assert_allclose(c, np.array(rows), atol=1e-12)
    # every centroid lies inside the block
    assert (c > 0).all() and (c < [3, 2, 2]).all()


def test_quadratic_cells_use_their_corners_and_polygons_their_sides():
    quad8 = np.array([[0, 1, 2, 3, 6, 7, 8, 9], [1, 4, 5, 2, 10, 11, 12, 7]])
    assert cell_adjacency({"quad8": quad8}).tolist() == [[0, 1], [1, 0]]
    hexagon = np.array([[0, 1, 2, 3, 4, 5]])
    assert cell_adjacency({"polygon6": hexagon, "polygon3": np.array([[1, 2, 6]])}).tolist() == [[0, 1], [1, 0]]


def test_face_of_three_cells_joins_all_pairs():
    # three triangles on one edge (a non-manifold surface)
    tris = np.array([[0, 1, 2], [0, 1, 3], [1, 0, 4]])
    assert set(map(tuple, cell_adjacency({"triangle": tris}).t().tolist())) == \
        {(a, b) for a in range(3) for b in range(3) if a != b}


def test_rejects_mixed_dimensions_and_unknown_types():
    with pytest.raises(ValueError, match="one topological dimension"):
        cell_adjacency({"triangle": np.array([[0, 1, 2]]), "tetra": np.array([[0, 1, 2, 3]])})
    with pytest.raises(ValueError, match="no face table"):
        cell_adjacency({"vertex": np.zeros((2, 1), dtype=np.int64)})
    with pytest.raises(ValueError, match="need 8 nodes"):
        cell_adjacency({"hexahedron": np.zeros((1, 6), dtype=np.int64)})


@pytest.mark.parametrize("name", MESH_FILES)
def test_real_meshes_match_shared_node_counts(data_dir, name):
    """Reference: cells i != j are neighbours when they share >= dim corner nodes, counted by a
    sparse product of the cell-node incidence (the real meshes are conforming)."""
    mesh = read_mesh(data_dir / name)
    dim = mesh.topological_dim
    rows = [r[:_CORNERS[t]] for t, c in mesh.cells.items() for r in c]
    flat = np.concatenate(rows)
    ptr = np.cumsum([0] + [len(r) for r in rows])
    inc = sp.csr_matrix((np.ones(len(flat)), flat, ptr), shape=(len(rows), mesh.num_nodes))
    shared = (inc @ inc.T).tocoo()
    keep = (shared.data >= dim) & (shared.row != shared.col)
    ref = set(zip(shared.row[keep].tolist(), shared.col[keep].tolist()))
    got = cell_adjacency(mesh.cells)
    assert set(map(tuple, got.t().tolist())) == ref and got.shape[1] == len(ref)
    if dim == 2:
        # every interior edge of a 2D mesh is one cell-graph edge; the cells' sides count interior
        # edges twice and boundary edges once: sides = 2 E_interior + E_boundary, E = E_interior + E_boundary
        n_edges = mesh.edge_index().shape[1] // 2
        sides = sum(len(c) * _CORNERS[t] for t, c in mesh.cells.items())
        assert got.shape[1] // 2 == sides - n_edges
