"""meshshard.datasets.gmsh_meshes: the family of generated test meshes."""
import numpy as np
import pytest

from meshshard.datasets import gmsh_meshes as G
from meshshard.partitioners.multilevel import part_components

_EXPECT = {  # name -> (space dim, cell types)
    "vessel (tet)": (3, {"tetra"}),
    "bodies (2D tri)": (2, {"triangle"}),
    "shell (prism)": (3, {"wedge"}),
    "shell (hex)": (3, {"hexahedron"}),
    "boundary layer (2D quad+tri)": (2, {"quad", "triangle"}),
    "hex block (graded)": (3, {"hexahedron"}),
    "mixed (hex+prism)": (3, {"hexahedron", "wedge"}),
}


@pytest.mark.parametrize("name", list(G.GMSH_FAMILY))
def test_family_member_shape_size_and_connectivity(name):
    mesh = G.GMSH_FAMILY[name](3000)
    dim, types = _EXPECT[name]
    assert mesh.points.shape[1] == dim
    assert set(mesh.cells) == types
    assert 1500 <= mesh.num_nodes <= 6000  # within a factor 2 of the target
    ei = mesh.edge_index().numpy()
    assert np.unique(ei).shape[0] == mesh.num_nodes  # every node is in a cell
    assert part_components(np.zeros(mesh.num_nodes, dtype=np.int64), ei).tolist() == [1]  # one connected body


@pytest.mark.parametrize("make, dim, types", [(G.cylinder_hex_mesh, 3, {"hexahedron"}),
                                               (G.naca0012_ogrid_mesh, 2, {"quad"})])
def test_held_out_meshes(make, dim, types):
    """The two meshes kept out of the family (bench_partition --only heldout): size, cells, one body, and the
    hole: no node inside the cylinder (radius 0.5) or the airfoil (its chord on the x axis, thickness 12%)."""
    assert make not in G.GMSH_FAMILY.values()
    mesh = make(3000)
    assert mesh.points.shape[1] == dim and set(mesh.cells) == types
    assert 2000 <= mesh.num_nodes <= 4500
    ei = mesh.edge_index().numpy()
    assert part_components(np.zeros(mesh.num_nodes, dtype=np.int64), ei).tolist() == [1]
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    if dim == 3:
        assert np.hypot(x, y).min() >= 0.5 - 1e-9
    else:
        xc = np.clip(x, 0, 1)
        half = 0.6 * (0.2969 * np.sqrt(xc) - 0.1260 * xc - 0.3516 * xc**2 + 0.2843 * xc**3 - 0.1036 * xc**4)
        inside = (x > 0.01) & (x < 0.99) & (np.abs(y) < 0.5 * half)  # well inside the airfoil's skin
        assert not inside.any()
        assert np.hypot(x - 0.5, y).max() == pytest.approx(12.0, rel=1e-6)  # the far-field circle
    with pytest.raises(ValueError, match="num_nodes"):
        make(10)


def test_grading_and_thinness():
    bl = G.boundary_layer_mesh(3000)
    ei = bl.edge_index().numpy()
    length = np.linalg.norm(bl.points[ei[0]] - bl.points[ei[1]], axis=1)
    assert length.max() / length.min() > 100  # strongly graded
    shell = G.shell_mesh(3000)
    r = np.linalg.norm(shell.points, axis=1)
    assert r.min() >= 1.0 - 1e-6 and r.max() <= 1.01 + 1e-6  # 1% of the radius thick


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_nodes"):
        G.hex_block_mesh(10)
    with pytest.raises(ValueError, match="num_nodes"):
        G.vessel_mesh(2.5e4)
    with pytest.raises(ValueError, match="cell"):
        G.shell_mesh(2000, cell="tetra")
    with pytest.raises(ValueError, match="layers"):
        G.mixed_mesh(2000, layers=0)


def test_canonical_numbering_ignores_gmsh_order_and_keeps_orientation():
    rng = np.random.default_rng(0)
    points = rng.random((30, 2))
    cells = {"triangle": np.array([[0, 1, 2], [3, 4, 5], [2, 1, 6]]), "quad": np.array([[7, 8, 9, 10]])}
    ref_pts, ref_cells = G._canonical(points, cells)
    assert (np.lexsort(ref_pts.T[::-1]) == np.arange(30)).all()
    perm = rng.permutation(30)  # the same mesh, numbered and listed in another order
    inv = np.argsort(perm)
    shuffled = {"quad": inv[cells["quad"]], "triangle": inv[cells["triangle"]][::-1]}
    pts, got = G._canonical(points[perm], shuffled)
    assert np.array_equal(pts, ref_pts) and list(got) == list(ref_cells) == ["quad", "triangle"]
    for name in got:
        assert np.array_equal(got[name], ref_cells[name])
        # each cell holds the same points in the same (orientation) order as before renumbering
        kept = {tuple(map(tuple, ref_pts[c])) for c in got[name]}
        assert kept == {tuple(map(tuple, points[c])) for c in cells[name]}


@pytest.mark.parametrize("name", ["boundary layer (2D quad+tri)", "vessel (tet)"])
def test_family_numbering_is_lexicographic(name):
    mesh = G.GMSH_FAMILY[name](2000)
    assert (np.lexsort(mesh.points.T[::-1]) == np.arange(mesh.num_nodes)).all()
    for c in mesh.cells.values():
        assert (np.lexsort(c.T[::-1]) == np.arange(c.shape[0])).all()
