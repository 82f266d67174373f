"""meshshard.viz._render, the rendering partition and field plots share: the outer surface of a
volume mesh (both extraction paths), a surface mesh's own cells."""
import numpy as np

from meshshard.io import Mesh, read_mesh
from meshshard.viz._render import faces_seen_once, sort_rows, surface_faces


def test_3d_surface_from_volume_cells_and_surface_meshes(data_dir):
    """The drawn surface of a tet mesh is its outer faces even when the file has no boundary
    cells; a triangle surface in 3D space is drawn as its triangles."""

    brick = read_mesh(data_dir / "brick_tets.su2")
    bare = Mesh(brick.points, cells={"tetra": brick.cells["tetra"]})  # no boundary cells
    faces = surface_faces(bare)
    assert len(faces) == 1
    got = {tuple(r) for r in np.sort(faces[0], 1)}
    want = {tuple(r) for r in np.sort(brick.boundary_cells["triangle"], 1)}
    assert got == want  # the file's boundary triangles cover the whole box
    # one hexahedron: 6 quads; a surface mesh: its triangles
    cube = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
    assert [f.shape for f in surface_faces(Mesh(cube, cells={"hexahedron": np.arange(8)[None]}))] == [(6, 4)]
    surf = Mesh(cube, cells={"triangle": np.array([[0, 1, 2], [4, 5, 6]])})
    assert [f.shape for f in surface_faces(surf)] == [(2, 3)]
    assert surface_faces(Mesh.from_points(cube)) is None


def test_face_extraction_paths_agree():
    """The integer-key path and the row-unique path (ids too large to pack) find the same faces."""
    rng = np.random.default_rng(0)
    f = rng.integers(0, 30, size=(500, 4))
    np.testing.assert_array_equal(sort_rows(f), np.sort(f, axis=1))
    f = np.concatenate([f, f[:100][:, ::-1]])  # 100 faces seen twice (in another order)
    small = faces_seen_once([f])
    big = faces_seen_once([f + 2 ** 40]) - 2 ** 40  # 2^40 ** 4 does not fit one int64 key
    key = {tuple(r) for r in np.sort(f, 1).tolist()}
    want = [r for r in np.sort(f, 1).tolist() if sum(1 for q in np.sort(f, 1).tolist() if q == r) == 1]
    assert len(key) > len(want) > 0
    assert sorted(map(tuple, np.sort(small, 1).tolist())) == sorted(map(tuple, want))
    assert sorted(map(tuple, np.sort(big, 1).tolist())) == sorted(map(tuple, want))


def test_surface_of_a_mesh_with_polyhedra(tmp_path):
    """The surface of the snappy-like OpenFOAM case is its boundary faces: quads and triangles as they
    are, the polyhedra's 5-node sides as fans of three triangles; the cutaway keeps the far cells."""
    from meshshard.io import read_mesh
    from meshshard.io.polyhedra import POLYHEDRON
    from meshshard.viz._render import surface_faces
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    m = read_mesh(tmp_path / "snappy")
    faces = surface_faces(m)
    quads = [f for f in faces if f.shape[1] == 4]
    tris = np.concatenate([f for f in faces if f.shape[1] == 3])
    assert sorted(map(sorted, np.concatenate(quads).tolist())) == sorted(map(sorted, m.boundary_cells["quad"].tolist()))
    assert len(tris) == len(m.boundary_cells["triangle"]) + 3 * len(m.boundary_cells["polygon5"])
    fans = {frozenset(f) for f in tris.tolist()}
    for pent in m.boundary_cells["polygon5"].tolist():  # each pentagon: three triangles of its nodes
        assert sum(1 for f in fans if f <= set(pent)) == 3
    keep = {t: np.zeros(len(c), dtype=bool) for t, c in m.cells.items()}
    keep[POLYHEDRON] = np.array([True, False])
    one = surface_faces(m, keep)  # one polyhedron alone: its 9 faces (4 quads, 4 pentagons as 12 triangles)
    assert sum(len(f) for f in one if f.shape[1] == 4) == 5 and sum(len(f) for f in one if f.shape[1] == 3) == 12
