"""Polyhedra (flat face arrays) and a Mesh of them, without vtk: the vertex graph is the sides of the
faces, the cell graph the faces two cells share, centroids the cells' volume centroids; checked on
the snappyHexMesh-like case of tests/io/_openfoam_case.py built from its faces alone."""
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, cell_adjacency, cell_centroids, cells_as_nodes, edge_index_from_cells
from meshshard.io.polyhedra import POLYHEDRON, Polyhedra
from tests.io._openfoam_case import write_openfoam_polyhedra

# a unit cube whose +x side is split in four (the cell beside a refined layer): 9 faces, 13 points
_CUBE = np.array([(0, 0, 0), (1, 0, 0), (1, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 1), (1, 1, 1), (0, 1, 1),
                  (1, .5, 0), (1, 0, .5), (1, 1, .5), (1, .5, 1), (1, .5, .5)], float)
_CUBE_FACES = [[0, 3, 7, 4], [0, 1, 8, 2, 3], [4, 7, 6, 11, 5], [0, 4, 5, 9, 1], [3, 2, 10, 6, 7],
               [1, 9, 12, 8], [8, 12, 10, 2], [9, 5, 11, 12], [12, 11, 6, 10]]


def _graph(pairs, n):
    a = {(int(x), int(y)) for x, y in pairs} | {(int(y), int(x)) for x, y in pairs}
    return [list(e) for e in sorted(a)]


def test_arrays_sides_nodes_and_stream():
    ph = Polyhedra.from_faces([_CUBE_FACES], num_nodes=13)
    assert ph.num_cells == len(ph) == 1 and ph.num_faces == 9 and ph.face_sizes().tolist() == [4, 5, 5, 5, 5, 4, 4, 4, 4]
    assert [f.tolist() for f in ph.faces(0)] == _CUBE_FACES
    want = {tuple(sorted((f[i], f[(i + 1) % len(f)]))) for f in _CUBE_FACES for i in range(len(f))}
    assert {tuple(sorted(s)) for s in ph.sides().tolist()} == want and len(want) == 20  # 8 whole cube edges, 4 split in two, 4 inner
    cell, node = ph.cell_nodes()
    assert cell.tolist() == [0] * 13 and node.tolist() == list(range(13))
    stream, off = ph.vtk_face_stream()
    ref = [9] + [v for f in _CUBE_FACES for v in [len(f)] + f]
    assert stream.tolist() == ref and off.tolist() == [0, len(ref)]
    two = Polyhedra.concatenate([ph, ph.renumbered(np.arange(13) + 13)])
    s2, o2 = two.vtk_face_stream()
    assert s2.tolist() == ref + [9] + [v for f in _CUBE_FACES for v in [len(f)] + [x + 13 for x in f]]
    assert o2.tolist() == [0, len(ref), 2 * len(ref)]
    assert two.subset([1, 0]) == Polyhedra.concatenate([ph.renumbered(np.arange(13) + 13), ph])


def test_centroid_is_the_volume_centroid_not_the_vertex_mean():
    ph = Polyhedra.from_faces([_CUBE_FACES])
    np.testing.assert_allclose(ph.centroids(_CUBE), [[0.5, 0.5, 0.5]], atol=1e-15)
    assert _CUBE.mean(0)[0] > 0.6  # the hanging nodes pull the vertex mean towards +x
    # a tetrahedron given as a polyhedron: its centroid is the mean of its corners
    tet = np.array([(0, 0, 0), (2, 0, 0), (0, 3, 0), (0, 0, 5)], float)
    t = Polyhedra.from_faces([[[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2]]])
    np.testing.assert_allclose(t.centroids(tet), [tet.mean(0)], atol=1e-15)


def test_bad_arrays_are_named():
    with pytest.raises(ValueError, match="face 0 has 2 nodes"):
        Polyhedra([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [0, 2, 5, 8, 12], [0, 4])
    with pytest.raises(ValueError, match="polyhedron 0 has 3 faces"):
        Polyhedra([0, 1, 2, 0, 1, 3, 1, 2, 3], [0, 3, 6, 9], [0, 3])
    with pytest.raises(ValueError, match="end at 12"):
        Polyhedra(np.arange(12), [0, 3, 6, 9, 11], [0, 4])
    with pytest.raises(ValueError, match=r"outside \[0, 10\)"):
        Polyhedra.from_faces([_CUBE_FACES], num_nodes=10)
    with pytest.raises(ValueError, match="outside"):
        Mesh(_CUBE[:10], polyhedra=Polyhedra.from_faces([_CUBE_FACES]))
    with pytest.raises(ValueError, match="one topological dimension"):
        Mesh(_CUBE, cells={"triangle": [[0, 1, 2]]}, polyhedra=Polyhedra.from_faces([_CUBE_FACES]))
    with pytest.raises(ValueError, match="polyhedra=Polyhedra"):
        Mesh(_CUBE, cells={"polyhedron": [[0, 1, 2, 3]]})


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return write_openfoam_polyhedra(tmp_path_factory.mktemp("poly") / "snappy")


def test_mesh_of_polyhedra_graphs_and_centroids(case):
    n = len(case["points"])
    ph = Polyhedra.from_faces(case["faces"], num_nodes=n)
    assert [len(f) for f, k in zip(case["faces"], case["kind"]) if k == "polyhedron"] == [9, 9]
    m = Mesh(case["points"], polyhedra=ph, cell_data={"p": case["p"][1]},
             cell_sets={"poly": {POLYHEDRON: [1, 5]}})
    assert m.num_cells == 16 and m.topological_dim == 3 and not m.is_point_cloud
    assert "polyhedron: 16" in repr(m) and m.cell_counts() == {"polyhedron": 16}
    # vertex graph: every side of every face, once, both directions
    assert m.edge_index().t().tolist() == _graph(case["face_sides"], n)
    assert edge_index_from_cells({}, n, polyhedra=ph).equal(m.edge_index())
    # the set of two polyhedra names their 13 points each (8 shared corners on y = 1... and the rest)
    assert m.node_sets["poly"].tolist() == sorted(set(case["points_of"][1]) | set(case["points_of"][5]))
    # cell graph: the owner / neighbour pairs of the internal faces
    assert cell_adjacency({}, ph).t().tolist() == _graph(case["internal"], 16)
    np.testing.assert_allclose(cell_centroids(case["points"], {}, ph), case["centre"], atol=1e-14)
    cm = cells_as_nodes(m)
    np.testing.assert_allclose(cm.points, case["centre"], atol=1e-14)
    assert cm.node_sets["poly"].tolist() == [1, 5] and cm.point_data["p"].tolist() == case["p"][1].tolist()


def test_mixed_fixed_cells_and_polyhedra_number_the_polyhedra_last(case):
    """Hexahedra as [n, 8] rows and the other cells as polyhedra: the cell graph and centroids in
    the Mesh's order (fixed types, then polyhedra)."""
    pts = case["points"]
    hexes, rest = [], []
    for c, kind in enumerate(case["kind"]):
        if kind == "hexahedron":
            lo, hi = pts[case["points_of"][c]].min(0), pts[case["points_of"][c]].max(0)
            corner = {tuple(p): i for i, p in enumerate(pts)}
            hexes.append((c, [corner[(x, y, z)] for z in (lo[2], hi[2]) for x, y in
                              ((lo[0], lo[1]), (hi[0], lo[1]), (hi[0], hi[1]), (lo[0], hi[1]))]))
        else:
            rest.append(c)
    order = [c for c, _ in hexes] + rest  # Mesh cell id -> case cell id
    ph = Polyhedra.from_faces([case["faces"][c] for c in rest])
    m = Mesh(pts, cells={"hexahedron": np.array([h for _, h in hexes])}, polyhedra=ph)
    new = np.argsort(order)  # case cell id -> Mesh cell id
    assert cell_adjacency(m.cells, ph).t().tolist() == _graph([(new[a], new[b]) for a, b in case["internal"]], 16)
    np.testing.assert_allclose(cell_centroids(pts, m.cells, ph), case["centre"][order], atol=1e-14)
    assert m.edge_index().t().tolist() == _graph(case["face_sides"], len(pts))
    # node types from a cell field: a node takes the largest type of the cells holding it
    from meshshard.io import node_type_from_field

    m.cell_data["t"] = np.arange(16)
    want = np.zeros(len(pts), dtype=np.int64)
    for mesh_id, c in enumerate(order):
        want[case["points_of"][c]] = np.maximum(want[case["points_of"][c]], mesh_id)
    assert node_type_from_field(m, "t").tolist() == want.tolist()
    assert torch.equal(m.edge_index(), Mesh(pts, polyhedra=Polyhedra.from_faces(case["faces"])).edge_index())


def test_ragged_take():
    from meshshard.io.polyhedra import ragged_take

    offsets = np.array([0, 2, 2, 5, 6])  # rows [0, 1], [], [2, 3, 4], [5]
    pos, lengths = ragged_take(offsets, np.array([2, 0, 1, 3, 2]))
    assert pos.tolist() == [2, 3, 4, 0, 1, 5, 2, 3, 4] and lengths.tolist() == [3, 2, 0, 1, 3]
    pos, lengths = ragged_take(offsets, np.array([], dtype=np.int64))
    assert pos.tolist() == [] and lengths.tolist() == []
