"""Partition plots on the real meshes: files written with the right size, parts visibly coloured."""
import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from meshshard.io import knn_graph, read_mesh
from meshshard.partitioners import Partition
from meshshard.viz import (auto_zoom_box, ghost_mask, part_colors, plot_part_sizes, plot_partition,
                           plot_partition_summary)
from meshshard.viz.partition_plot import _fan_triangles


def _slab_partition(points, num_parts, axis=0):
    """Equal-size slabs along one axis: a partition made without meshshard's partitioners."""
    order = np.argsort(points[:, axis], kind="stable")
    assignment = np.empty(len(points), dtype=np.int64)
    assignment[order] = np.arange(len(points)) * num_parts // len(points)
    return Partition(torch.from_numpy(assignment), num_parts, method="slabs")


def _parts_seen(png_path, num_parts, tol=0.02):
    """Number of pixels of each part colour in a PNG."""
    img = mpimg.imread(png_path)[..., :3]
    cols = part_colors(num_parts)[:, :3]
    return np.array([(np.abs(img - c).max(-1) < tol).sum() for c in cols])


@pytest.fixture(scope="module")
def naca(data_dir):
    return read_mesh(data_dir / "naca0012_inviscid.su2")


def test_2d_mesh_plot_with_zoom(naca, tmp_path):
    part = _slab_partition(naca.points, 6, axis=1)
    path = tmp_path / "naca.png"
    fig = plot_partition(naca, part, path=path, dpi=60, figsize=(10, 4))
    assert path.stat().st_size > 10_000
    img = mpimg.imread(path)
    assert img.shape[:2] == (4 * 60, 10 * 60)
    assert len(fig.axes) == 2  # the far-field mesh gets a zoom panel on the airfoil
    seen = _parts_seen(path, 6)
    assert (seen > 50).all(), seen  # every part's colour is visible


def test_ghosts_are_marked_and_match_reference(naca, tmp_path):
    part = _slab_partition(naca.points, 4)
    ei = naca.edge_index()
    mask = ghost_mask(part.assignment, ei)
    a = part.assignment.tolist()
    ref = np.zeros(naca.num_nodes, dtype=bool)
    for s, t in ei.t().tolist():
        if a[s] != a[t]:
            ref[s] = ref[t] = True
    assert np.array_equal(mask, ref) and 0 < mask.sum() < naca.num_nodes
    on, off = tmp_path / "on.png", tmp_path / "off.png"
    plot_partition(naca, part, path=on, dpi=60, zoom=None)
    plot_partition(naca, part, path=off, dpi=60, zoom=None, show_ghosts=False)
    black = [(mpimg.imread(p)[..., :3].max(-1) < 0.1).sum() for p in (on, off)]
    assert black[0] > black[1] + 20


def test_auto_zoom_box_finds_the_airfoil(naca):
    tris, _ = _fan_triangles(naca.cells, np.zeros(naca.num_nodes, dtype=np.int64))
    box = auto_zoom_box(naca.points, tris)
    airfoil = naca.points[naca.node_sets["airfoil"].numpy()]
    assert box[0] <= airfoil[:, 0].min() and airfoil[:, 0].max() <= box[1]
    assert box[2] <= airfoil[:, 1].min() and airfoil[:, 1].max() <= box[3]
    assert (box[1] - box[0]) < 0.1 * np.ptp(naca.points[:, 0])
    # a uniform grid has no finer region: no zoom
    g = np.array([[i, j] for i in range(20) for j in range(20)], dtype=float)
    quads = np.array([[i * 20 + j, (i + 1) * 20 + j, (i + 1) * 20 + j + 1, i * 20 + j + 1]
                      for i in range(19) for j in range(19)])
    tri = np.concatenate([quads[:, [0, 1, 2]], quads[:, [0, 2, 3]]])
    assert auto_zoom_box(g, tri) is None


def test_mixed_2d_mesh_summary(data_dir, tmp_path):
    mesh = read_mesh(data_dir / "rae2822_turb.su2")
    part = _slab_partition(mesh.points, 5, axis=1)
    path = tmp_path / "rae.png"
    plot_partition_summary(mesh, part, quality={"edge_cut": 123, "imbalance": 1.01}, path=path, dpi=50)
    assert (_parts_seen(path, 5) > 50).all()


def test_3d_tet_mesh_surface(data_dir, tmp_path):
    mesh = read_mesh(data_dir / "brick_tets.su2")
    part = _slab_partition(mesh.points, 4)
    path = tmp_path / "brick.png"
    fig = plot_partition(mesh, part, path=path, dpi=50)
    assert len(fig.axes) == 2 and all(a.name == "3d" for a in fig.axes)
    # 3D faces are shaded, so allow a wider tolerance; every slab shows on the box surface
    assert (_parts_seen(path, 4, tol=0.12) > 50).all()


def test_3d_ghosts_marked_by_darker_faces(data_dir, tmp_path):
    """On a drawn 3D surface the faces at ghost nodes are darker shades of their part colour."""
    mesh = read_mesh(data_dir / "brick_tets.su2")
    part = _slab_partition(mesh.points, 3)
    on, off = tmp_path / "on.png", tmp_path / "off.png"
    plot_partition(mesh, part, path=on, dpi=50)
    plot_partition(mesh, part, path=off, dpi=50, show_ghosts=False)
    dark = part_colors(3)[:, :3] * 0.45

    def dark_pixels(png):
        img = mpimg.imread(png)[..., :3]
        return sum(int((np.abs(img - c).max(-1) < 0.08).sum()) for c in dark)

    assert dark_pixels(on) > 200 and dark_pixels(off) < 20, (dark_pixels(on), dark_pixels(off))


def test_3d_surface_from_volume_cells_and_surface_meshes(data_dir):
    """The drawn surface of a tet mesh is its outer faces even when the file has no boundary
    cells; a triangle surface in 3D space is drawn as its triangles."""
    from meshshard.io import Mesh
    from meshshard.viz.partition_plot import _surface_faces

    brick = read_mesh(data_dir / "brick_tets.su2")
    bare = Mesh(brick.points, cells={"tetra": brick.cells["tetra"]})  # no boundary cells
    faces = _surface_faces(bare)
    assert len(faces) == 1
    got = {tuple(r) for r in np.sort(faces[0], 1)}
    want = {tuple(r) for r in np.sort(brick.boundary_cells["triangle"], 1)}
    assert got == want  # the file's boundary triangles cover the whole box
    # one hexahedron: 6 quads; a surface mesh: its triangles
    cube = np.array([[0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1], [1, 1, 1], [0, 1, 1]], float)
    assert [f.shape for f in _surface_faces(Mesh(cube, cells={"hexahedron": np.arange(8)[None]}))] == [(6, 4)]
    surf = Mesh(cube, cells={"triangle": np.array([[0, 1, 2], [4, 5, 6]])})
    assert [f.shape for f in _surface_faces(surf)] == [(2, 3)]
    assert _surface_faces(Mesh.from_points(cube)) is None


def test_point_cloud_subsampled_with_knn_ghosts(data_dir, tmp_path):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"]
    part = _slab_partition(pts, 3)
    ei = knn_graph(pts, 4)
    path = tmp_path / "car.png"
    plot_partition(pts, part, edge_index=ei, path=path, dpi=50, max_points=20_000)
    assert (_parts_seen(path, 3, tol=0.05) > 20).all()
    plot_partition(pts, part, edge_index=ei, path=tmp_path / "car_off.png", dpi=50, max_points=20_000,
                   show_ghosts=False)
    black = [int((mpimg.imread(p)[..., :3].max(-1) < 0.1).sum()) for p in (path, tmp_path / "car_off.png")]
    assert black[0] > black[1] + 100, black  # the ghost band between the slabs shows in black
    # a point cloud without a graph: no ghosts, still drawn
    plot_partition(torch.from_numpy(pts[:5000]), part.assignment[:5000], path=tmp_path / "c2.png", dpi=40)
    assert (tmp_path / "c2.png").stat().st_size > 5000


def test_drawing_into_given_axes(naca, data_dir):
    from matplotlib.figure import Figure

    fig = Figure()
    ax2 = fig.add_subplot(1, 3, 1)
    ax3 = fig.add_subplot(1, 3, 2, projection="3d")
    axp = fig.add_subplot(1, 3, 3)
    assert plot_partition(naca, _slab_partition(naca.points, 3), ax=ax2, title="t") is fig
    brick = read_mesh(data_dir / "brick_tets.su2")
    p = _slab_partition(brick.points, 3)
    plot_partition(brick, p, ax=ax3)
    plot_partition(brick, p, ax=axp)  # 3D data on a 2D axes: projection on the two widest axes
    assert axp.get_xlabel() == "x" and axp.get_ylabel() == "y"


def test_part_sizes_bars(tmp_path):
    assignment = torch.tensor([0] * 5 + [1] * 3 + [3] * 7)  # part 2 empty
    part = Partition(assignment, 4)
    fig = plot_part_sizes(part, path=tmp_path / "s.png")
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [5, 3, 0, 7]
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_part_colors_distinct():
    for p in (1, 5, 10, 11, 20):
        c = part_colors(p)
        assert len({tuple(x) for x in c}) == p
    c = part_colors(60)
    assert len({tuple(x) for x in c}) == 60
    with pytest.raises(ValueError):
        part_colors(0)


def test_bad_inputs(naca):
    with pytest.raises(ValueError, match="every one"):
        plot_partition(naca, torch.zeros(10, dtype=torch.long))
    with pytest.raises(TypeError):
        plot_partition(naca, torch.zeros(naca.num_nodes))
    with pytest.raises(ValueError, match="zoom"):
        plot_partition(naca, torch.zeros(naca.num_nodes, dtype=torch.long), zoom=(1, 0, 0, 1))
    with pytest.raises(ValueError):
        plot_partition(np.zeros((5, 4)), torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="edge_index"):
        ghost_mask(torch.zeros(4, dtype=torch.long), torch.tensor([[0, 9], [1, 2]]))
