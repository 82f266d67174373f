"""Element edge tables: every supported element on a hand-made single cell, mixed meshes, bad types."""
import itertools

import numpy as np
import pytest
import torch

from meshshard.io import Mesh
from meshshard.io.cell_edges import cell_edges, coalesce_undirected, edge_index_from_cells


def _undirected(ei):
    return {tuple(sorted(p)) for p in ei.t().tolist()}


def _check_graph_form(ei, n):
    assert ei.dtype == torch.long and ei.shape[0] == 2
    assert (ei[0] != ei[1]).all(), "self loop"
    pairs = ei.t().tolist()
    assert len(set(map(tuple, pairs))) == len(pairs), "duplicate edge"
    assert set(map(tuple, pairs)) == {(b, a) for a, b in pairs}, "not symmetric"
    key = ei[0] * n + ei[1]
    assert (key[1:] > key[:-1]).all(), "not sorted by (row 0, row 1)"


# Unit elements: edges are the vertex pairs at distance 1 (hex: unit cube; others as noted).
CUBE = np.array(list(itertools.product([0, 1], repeat=3)), dtype=float)[:, ::-1]  # x fastest


def _pairs_at_distance(points, ids, dist):
    return {(a, b) for a, b in itertools.combinations(ids, 2)
            if abs(np.linalg.norm(points[a] - points[b]) - dist) < 1e-12}


def test_triangle_quad_tetra_hex_counts_and_geometry():
    # triangle: all 3 pairs
    ei = Mesh(np.array([[0, 0], [1, 0], [0, 1.0]]), cells={"triangle": [[0, 1, 2]]}).edge_index()
    assert _undirected(ei) == {(0, 1), (1, 2), (0, 2)}
    # quad (unit square, VTK order counter-clockwise): 4 sides, no diagonals
    sq = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0]])
    ei = Mesh(sq, cells={"quad": [[0, 1, 2, 3]]}).edge_index()
    assert _undirected(ei) == _pairs_at_distance(sq, range(4), 1.0) and ei.shape[1] == 8
    # tetra: all 6 pairs
    ei = Mesh(np.eye(4)[:, :3], cells={"tetra": [[0, 1, 2, 3]]}).edge_index()
    assert _undirected(ei) == set(itertools.combinations(range(4), 2))
    # hexahedron in VTK order: bottom face counter-clockwise, then top face
    hex_pts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1.0]])
    ei = Mesh(hex_pts, cells={"hexahedron": [list(range(8))]}).edge_index()
    assert _undirected(ei) == _pairs_at_distance(hex_pts, range(8), 1.0)
    assert ei.shape[1] == 24
    _check_graph_form(ei, 8)


def test_wedge_and_pyramid():
    # wedge: triangle (0,1,2) at z=0, (3,4,5) above it; 3 + 3 + 3 = 9 edges
    tri = np.array([[0, 0], [1, 0], [0, 1.0]])
    wedge_pts = np.vstack([np.c_[tri, np.zeros(3)], np.c_[tri, np.ones(3)]])
    ei = Mesh(wedge_pts, cells={"wedge": [list(range(6))]}).edge_index()
    expected = {(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (0, 3), (1, 4), (2, 5)}
    assert _undirected(ei) == expected
    # pyramid: square base 0..3, apex 4; 4 base sides + 4 slanted = 8 (no base diagonals)
    pyr = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 1.0]])
    ei = Mesh(pyr, cells={"pyramid": [list(range(5))]}).edge_index()
    assert _undirected(ei) == {(0, 1), (1, 2), (2, 3), (0, 3), (0, 4), (1, 4), (2, 4), (3, 4)}


@pytest.mark.parametrize("ctype,corners,edges", [
    ("triangle6", 3, 3), ("quad8", 4, 4), ("tetra10", 4, 6), ("hexahedron20", 8, 12),
    ("wedge15", 6, 9), ("pyramid13", 5, 8),
])
def test_quadratic_elements_split_each_edge_at_its_midside_node(ctype, corners, edges):
    local = cell_edges(ctype, np.arange(corners + edges)[None])
    und = {tuple(sorted(p)) for p in local.tolist()}
    assert len(und) == 2 * edges
    # every mid-side node sits on exactly two edges, each to a corner; corners never touch corners
    for m in range(corners, corners + edges):
        nbrs = [a if b == m else b for a, b in und if m in (a, b)]
        assert len(nbrs) == 2 and all(x < corners for x in nbrs)
    assert not any(a < corners and b < corners for a, b in und)


def test_quad9_centre_node_is_connected():
    und = {tuple(sorted(p)) for p in cell_edges("quad9", np.arange(9)[None]).tolist()}
    assert {(4, 8), (5, 8), (6, 8), (7, 8)} <= und and len(und) == 12


def test_polygon_cycle():
    und = {tuple(sorted(p)) for p in cell_edges("polygon", np.arange(5)[None]).tolist()}
    assert und == {(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)}


def test_mixed_hex_and_wedge_share_a_face_without_duplicates():
    # hex 0..7 on [0,1]^3, wedge on its +x face: nodes 1,2,6 / 5... build a wedge sharing edge 1-2
    pts = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1],
                    [2, 0, 0], [2, 0, 1.0]])
    cells = {"hexahedron": [list(range(8))], "wedge": [[1, 8, 2, 5, 9, 6]]}
    ei = Mesh(pts, cells=cells).edge_index()
    _check_graph_form(ei, len(pts))
    # reference: union of per-element edge sets from the hand-written tables above
    hex_e = _pairs_at_distance(pts, range(8), 1.0)
    w = [1, 8, 2, 5, 9, 6]
    wedge_e = {tuple(sorted((w[a], w[b]))) for a, b in
               [(0, 1), (1, 2), (2, 0), (3, 4), (4, 5), (5, 3), (0, 3), (1, 4), (2, 5)]}
    assert _undirected(ei) == hex_e | wedge_e
    assert ei.shape[1] == 2 * len(hex_e | wedge_e)


def test_degenerate_cell_gives_no_self_loop():
    # a collapsed quad (node 2 repeated) as some meshers write triangles in quad blocks
    ei = Mesh(np.array([[0, 0], [1, 0], [0, 1.0]]), cells={"quad": [[0, 1, 2, 2]]}).edge_index()
    assert _undirected(ei) == {(0, 1), (1, 2), (0, 2)}
    _check_graph_form(ei, 3)


def test_unsupported_and_malformed_cells():
    with pytest.raises(ValueError, match="not supported"):
        cell_edges("hexahedron27", np.arange(27)[None])
    with pytest.raises(ValueError, match="need 4 nodes"):
        cell_edges("quad", np.arange(3)[None])
    with pytest.raises(ValueError, match="outside"):
        edge_index_from_cells({"triangle": np.array([[0, 1, 5]])}, num_nodes=3)


def test_coalesce_matches_python_reference_on_random_pairs():
    rng = np.random.default_rng(0)
    pairs = rng.integers(0, 50, size=(2000, 2))
    ei = coalesce_undirected(pairs, 50)
    ref = sorted({(a, b) for a, b in pairs.tolist() if a != b} | {(b, a) for a, b in pairs.tolist() if a != b})
    assert ei.t().tolist() == [list(p) for p in ref]


def test_point_cloud_edge_index_points_to_knn_graph():
    m = Mesh.from_points(np.random.default_rng(0).random((10, 3)))
    with pytest.raises(ValueError, match="knn_graph"):
        m.edge_index()
