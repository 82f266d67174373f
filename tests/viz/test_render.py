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
