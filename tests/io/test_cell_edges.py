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
            if abs(np.linalg.norm(points[a] - points[b]) - dist) < 1e-9}


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
        cell_edges("wedge18", np.arange(18)[None])  # meshio's node order differs between formats
    with pytest.raises(ValueError, match="not supported"):
        Mesh(np.zeros((18, 3)), cells={"wedge18": [list(range(18))]}).edge_index()
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


@pytest.mark.parametrize("name", ["rae2822_turb.su2", "brick_tets.su2", "cylinder_crossflow_re35.vtu"])
def test_edge_index_from_cells_equals_pairs_then_coalesce_on_real_meshes(data_dir, name):
    # edge_index_from_cells writes keys without the pair table; the pair path is the reference
    import meshshard as ms

    m = ms.read_mesh(data_dir / name)
    cells = dict(m.cells)
    degenerate = np.array([[0, 0, 0, 0], [1, 2, 2, 3]])  # self loops, repeated nodes
    cells["quad"] = np.concatenate([cells.get("quad", np.empty((0, 4), np.int64)), degenerate])
    ref = coalesce_undirected(np.concatenate([cell_edges(t, c) for t, c in cells.items()]), m.num_nodes)
    assert torch.equal(edge_index_from_cells(cells, m.num_nodes), ref)


def test_point_cloud_edge_index_points_to_knn_graph():
    m = Mesh.from_points(np.random.default_rng(0).random((10, 3)))
    with pytest.raises(ValueError, match="knn_graph"):
        m.edge_index()


# ---- quadratic elements against the VTK documentation, linear ones against their convex hull ----

# Mid-edge node -> the two corners it sits between, copied from the VTK class docs
# (vtkQuadraticTriangle/Quad/Tetra/Hexahedron/Wedge/Pyramid), not derived from CELL_EDGES.
VTK_MIDSIDE = {
    "triangle6": {3: (0, 1), 4: (1, 2), 5: (2, 0)},
    "quad8": {4: (0, 1), 5: (1, 2), 6: (2, 3), 7: (3, 0)},
    "tetra10": {4: (0, 1), 5: (1, 2), 6: (2, 0), 7: (0, 3), 8: (1, 3), 9: (2, 3)},
    "hexahedron20": {8: (0, 1), 9: (1, 2), 10: (2, 3), 11: (3, 0), 12: (4, 5), 13: (5, 6), 14: (6, 7),
                     15: (7, 4), 16: (0, 4), 17: (1, 5), 18: (2, 6), 19: (3, 7)},
    "wedge15": {6: (0, 1), 7: (1, 2), 8: (2, 0), 9: (3, 4), 10: (4, 5), 11: (5, 3), 12: (0, 3),
                13: (1, 4), 14: (2, 5)},
    "pyramid13": {5: (0, 1), 6: (1, 2), 7: (2, 3), 8: (3, 0), 9: (0, 4), 10: (1, 4), 11: (2, 4),
                  12: (3, 4)},
}


@pytest.mark.parametrize("ctype", sorted(VTK_MIDSIDE))
def test_quadratic_tables_follow_vtk_midside_numbering(ctype):
    spec = VTK_MIDSIDE[ctype]
    got = {tuple(sorted(p)) for p in cell_edges(ctype, np.arange(max(spec) + 1)[None]).tolist()}
    expected = {tuple(sorted((m, c))) for m, pair in spec.items() for c in pair}
    assert got == expected


# Reference elements in VTK node order (vtkTetra, vtkHexahedron, vtkWedge, vtkPyramid)
VTK_LINEAR = {
    "tetra": [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]],
    "hexahedron": [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]],
    "wedge": [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [0, 1, 1]],
    "pyramid": [[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0.5, 0.5, 1]],
}


def _hull_edges(pts):
    """Edges of a convex polyhedron: hull triangle edges, minus diagonals of flat (quad) faces."""
    from scipy.spatial import ConvexHull

    hull = ConvexHull(pts)
    faces_of = {}
    for f, tri in enumerate(hull.simplices):
        for a, b in itertools.combinations(sorted(tri.tolist()), 2):
            faces_of.setdefault((a, b), []).append(f)
    normals = hull.equations[:, :3]
    return {e for e, (f, g) in faces_of.items() if abs(normals[f] @ normals[g]) < 1 - 1e-9}


@pytest.mark.parametrize("ctype", sorted(VTK_LINEAR))
def test_linear_3d_tables_equal_convex_hull_edges_of_sheared_elements(ctype):
    ref = np.asarray(VTK_LINEAR[ctype], dtype=float)
    rng = np.random.default_rng(0)
    for _ in range(3):  # any affine image of the element has the same edges
        a = np.eye(3) + 0.3 * rng.standard_normal((3, 3))
        pts = ref @ a.T + rng.standard_normal(3)
        ei = Mesh(pts, cells={ctype: [list(range(len(pts)))]}).edge_index()
        assert _undirected(ei) == _hull_edges(pts)


def test_hexahedron27_is_the_lattice_of_its_nodes():
    # VTK 27-node hex: corners, mid-edges (as hex20), face centres -x +x -y +y -z +z, body centre
    corners = np.array(VTK_LINEAR["hexahedron"], dtype=float) * 2
    mids = [(corners[a] + corners[b]) / 2 for a, b in VTK_MIDSIDE["hexahedron20"].values()]
    faces = [(0, 3, 7, 4), (1, 2, 6, 5), (0, 1, 5, 4), (3, 2, 6, 7), (0, 1, 2, 3), (4, 5, 6, 7)]
    centres = [corners[list(f)].mean(0) for f in faces]
    pts = np.vstack([corners, mids, centres, [[1, 1, 1]]])
    assert np.array_equal(pts[20], [0, 1, 1]) and np.array_equal(pts[25], [1, 1, 2])
    ei = Mesh(pts, cells={"hexahedron27": [list(range(27))]}).edge_index()
    assert _undirected(ei) == _pairs_at_distance(pts, range(27), 1.0)
    assert ei.shape[1] == 2 * 54


# ---- second-order meshes written by gmsh and read back through meshio (its node reordering) ----

def _gmsh_box(path, kind, incomplete):
    import gmsh  # installed by the [gmsh] extra that CI installs: missing means fail, not skip
    gmsh.initialize()
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.add("box")
        if kind == "hex":  # 2 x 2 x 2 structured hexahedra on the unit cube
            geo = gmsh.model.geo
            for i, (x, y) in enumerate([(0, 0), (1, 0), (1, 1), (0, 1)]):
                geo.addPoint(x, y, 0, 1.0, i + 1)
            for i in range(4):
                geo.addLine(i + 1, (i + 1) % 4 + 1, i + 1)
            geo.addCurveLoop([1, 2, 3, 4], 1)
            geo.addPlaneSurface([1], 1)
            for c in range(1, 5):
                geo.mesh.setTransfiniteCurve(c, 3)
            geo.mesh.setTransfiniteSurface(1)
            geo.mesh.setRecombine(2, 1)
            geo.extrude([(2, 1)], 0, 0, 1, [2], recombine=True)
            geo.synchronize()
        else:
            gmsh.model.occ.addBox(0, 0, 0, 1, 1, 1)
            gmsh.model.occ.synchronize()
            gmsh.option.setNumber("Mesh.MeshSizeMax", 0.5)
        gmsh.option.setNumber("Mesh.SecondOrderIncomplete", incomplete)
        gmsh.model.mesh.generate(3)
        gmsh.model.mesh.setOrder(2)
        gmsh.write(str(path))
    finally:
        gmsh.finalize()


@pytest.mark.parametrize("kind,incomplete,ctype", [
    ("tet", 0, "tetra10"), ("hex", 1, "hexahedron20"), ("hex", 0, "hexahedron27"),
])
def test_gmsh_second_order_meshes(tmp_path, kind, incomplete, ctype):
    from meshshard.io import read_mesh

    _gmsh_box(tmp_path / "box.msh", kind, incomplete)
    mesh = read_mesh(tmp_path / "box.msh")
    assert set(mesh.cells) == {ctype}
    ei = mesh.edge_index()
    _check_graph_form(ei, mesh.num_nodes)
    pts = mesh.points
    if kind == "hex":
        # the nodes lie on the lattice of spacing 1/4; element edges join lattice neighbours
        got = _undirected(ei)
        assert {round(float(np.linalg.norm(pts[a] - pts[b])), 9) for a, b in got} == {0.25}
        if ctype == "hexahedron27":  # the full 5 x 5 x 5 lattice: every neighbour pair
            assert mesh.num_nodes == 125 and got == _pairs_at_distance(pts, range(125), 0.25)
        else:  # hex20: corner - mid-edge pairs only (12 edges x 2 halves per hex, shared)
            assert mesh.num_nodes == 81 and len(got) == 3 * 3 * 2 * 3 * 2
    else:
        # every mid-edge node sits halfway between exactly the two corners it is joined to
        corners = np.unique(mesh.cells[ctype][:, :4])
        is_corner = np.zeros(mesh.num_nodes, bool)
        is_corner[corners] = True
        src, dst = ei.numpy()
        assert (is_corner[src] != is_corner[dst]).all()  # no corner-corner, no mid-mid edges
        mid_rows = ~is_corner[dst]  # (corner, mid) rows, grouped by mid since ei is sorted
        mids, corner = dst[mid_rows], src[mid_rows]
        order = np.argsort(mids, kind="stable")
        mids, corner = mids[order], corner[order]
        assert np.array_equal(np.bincount(mids)[~is_corner], np.full((~is_corner).sum(), 2))
        pairs = corner.reshape(-1, 2)
        np.testing.assert_allclose(pts[mids[::2]], pts[pairs].mean(1), atol=1e-12)
