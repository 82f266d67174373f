"""Partition plots on the real meshes: files written with the right size, parts visibly coloured."""
import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from meshshard.io import knn_graph, read_mesh
from meshshard.partitioners import Partition
from meshshard.viz import (auto_zoom_box, cut_zoom_box, ghost_mask, part_colors, plot_part_sizes, plot_partition,
                           plot_partition_summary)
from meshshard.viz._render import fan_triangles


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
    tris, _ = fan_triangles(naca.cells, np.zeros(naca.num_nodes, dtype=np.int64))
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


def test_3d_ghosts_marked_by_darker_faces(data_dir):
    """On a drawn 3D surface the faces at ghost nodes are darker shades of their part colour."""
    from meshshard.viz._render import light_direction, majority_part, surface_faces
    from meshshard.viz.partition_plot import _face_colors

    mesh = read_mesh(data_dir / "brick_tets.su2")
    part = _slab_partition(mesh.points, 3)
    a = part.assignment.numpy()
    ghosts = ghost_mask(a, mesh.edge_index())
    faces = surface_faces(mesh)[0]
    light = light_direction(20, -60)
    on = _face_colors(mesh.points, faces, a, ghosts, part_colors(3), light)
    off = _face_colors(mesh.points, faces, a, None, part_colors(3), light)
    at_ghost = ghosts[faces].any(1)
    assert 0 < at_ghost.sum() < len(faces)
    np.testing.assert_allclose(on[at_ghost, :3], 0.45 * off[at_ghost, :3])
    np.testing.assert_array_equal(on[~at_ghost], off[~at_ghost])
    # shading: faces of one part facing the light squarely are brighter than faces at a slant
    brightness = off[:, :3].sum(1) / part_colors(3)[majority_part(faces, a), :3].sum(1)
    assert 0.5 <= brightness.min() < brightness.max() <= 1.0 + 1e-12


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


def _box_minus_sphere(h):
    """Tets (gmsh) of the cube [0, 2]^3 minus the ball of radius 0.5 at its centre, element size h."""
    import gmsh  # installed by the [gmsh] extra that CI installs: missing means fail, not skip
    from meshshard.io import Mesh

    gmsh.initialize(interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.option.setNumber("General.NumThreads", 1)
        occ = gmsh.model.occ
        occ.cut([(3, occ.addBox(0, 0, 0, 2, 2, 2))], [(3, occ.addSphere(1, 1, 1, 0.5))])
        occ.synchronize()
        gmsh.option.setNumber("Mesh.MeshSizeMin", h)
        gmsh.option.setNumber("Mesh.MeshSizeMax", h)
        gmsh.model.mesh.generate(3)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        index = np.zeros(int(tags.max()) + 1, dtype=np.int64)
        index[tags.astype(np.int64)] = np.arange(len(tags))
        etypes, _, enodes = gmsh.model.mesh.getElements(3)
        tets = index[enodes[list(etypes).index(4)].astype(np.int64)].reshape(-1, 4)
    finally:
        gmsh.finalize()
    used = np.unique(tets)
    remap = np.full(len(tags), -1)
    remap[used] = np.arange(len(used))
    return Mesh(coords.reshape(-1, 3)[used], cells={"tetra": remap[tets]})


@pytest.fixture(scope="module")
def holed_box():
    return _box_minus_sphere(0.25)


def test_3d_boundary_faces_include_the_hole(holed_box):
    """The surface is every face of exactly one tet (checked against a dict count), the sphere's
    faces among them; the cut-away view shows the hole and the section through the parts."""
    from collections import Counter

    from meshshard.viz._render import surface_faces
    from meshshard.viz.partition_plot import _cutaway

    mesh = holed_box
    faces = surface_faces(mesh)
    assert len(faces) == 1
    count = Counter(tuple(sorted(t[i] for i in f)) for t in mesh.cells["tetra"].tolist()
                    for f in ((0, 1, 2), (0, 1, 3), (1, 2, 3), (0, 2, 3)))
    assert {tuple(sorted(f)) for f in faces[0].tolist()} == {f for f, c in count.items() if c == 1}
    r = np.linalg.norm(mesh.points[faces[0]] - 1.0, axis=2)  # [F, 3] distance of each corner from the centre
    on_sphere = (np.abs(r - 0.5) < 1e-6).all(1)
    assert on_sphere.sum() > 20 and (~on_sphere).sum() > 100
    # cut open facing a camera at +y (azimuth 90): the cells of the far side y < 0.9 only
    cut, label = _cutaway(mesh.points, mesh, 0.0, 90.0)
    assert "y = 0.9" in label
    cf = cut[0]
    centroid = mesh.points[cf].mean(1)
    assert centroid[:, 1].max() <= 0.9 + 0.25  # nothing of the removed side (within one cell of the cut)
    r = np.linalg.norm(mesh.points[cf] - 1.0, axis=2)
    assert (np.abs(r - 0.5) < 1e-6).all(1).sum() > 10  # the half of the hole on the kept side shows
    section = cf[(np.abs(r - 0.5) > 1e-6).any(1) & (centroid[:, 1] > 0.3) & (centroid[:, 1] < 1.5)]
    assert len(section) > 50  # faces of the section through the interior


def test_3d_plot_panels_axes_labels_and_parts(holed_box, tmp_path):
    part = _slab_partition(holed_box.points, 3)
    path = tmp_path / "hole.png"
    fig = plot_partition_summary(holed_box, part, path=path, dpi=50)
    views = [a for a in fig.axes if a.name == "3d"]
    assert len(views) == 2
    assert all((a.get_xlabel(), a.get_ylabel(), a.get_zlabel()) == ("x", "y", "z") for a in views)
    assert views[0].get_title().startswith("surface") and views[1].get_title().startswith("cut open at")
    assert (_parts_seen(path, 3, tol=0.05) > 20).all()


def test_point_cloud_subsample_keeps_every_part():
    """A random subsample in proportion to part sizes would keep ~1 point of a 50-point part of
    100k; the per-part draw keeps a share of every part and about max_points in all."""
    from meshshard.viz.partition_plot import _subsample_parts

    a = np.r_[np.zeros(99_950, dtype=np.int64), np.ones(50, dtype=np.int64)]
    idx = _subsample_parts(a, 2, 5_000, seed=0)
    assert (np.diff(idx) > 0).all() and 4_900 <= len(idx) <= 5_100
    kept = np.bincount(a[idx], minlength=2)
    assert kept[1] == 50 and kept[0] >= 4_900
    assert len(_subsample_parts(a[:1000], 2, 5_000, seed=0)) == 1000


def test_zoom_centred_where_parts_meet_on_the_demo_fallback_mesh():
    """The demo's gmsh mesh in 2 parts: the finest cells (around the cylinder) lie inside part 0,
    so a zoom on them shows one part; the zoom is centred on the cut instead."""
    from meshshard.datasets.synthetic import cylinder_channel_mesh
    from meshshard.partitioners import partition
    from meshshard.viz import mesh_zoom_box

    mesh = cylinder_channel_mesh(3000)
    ei = mesh.edge_index()
    part = partition(mesh.points, 2, method="kdtree", edge_index=ei)
    a, pts = part.assignment.numpy(), mesh.points

    def inside(box):
        return (pts[:, 0] >= box[0]) & (pts[:, 0] <= box[1]) & (pts[:, 1] >= box[2]) & (pts[:, 1] <= box[3])

    assert len(np.unique(a[inside(mesh_zoom_box(mesh))])) == 1  # what today's automatic zoom showed
    box = cut_zoom_box(mesh, part)
    ghosts = ghost_mask(a, ei)
    assert len(np.unique(a[inside(box)])) == 2 and ghosts[inside(box)].sum() >= 10
    e = ei.numpy()
    cut = e[:, a[e[0]] != a[e[1]]]
    centre = np.array([box[0] + box[1], box[2] + box[3]]) / 2
    nearest_cut = np.linalg.norm((pts[cut[0]] + pts[cut[1]]) / 2 - centre, axis=1).min()
    assert nearest_cut < 1e-9  # centred on the midpoint of a cut edge
    assert (box[1] - box[0]) * (box[3] - box[2]) < 0.25 * np.ptp(pts[:, 0]) * np.ptp(pts[:, 1])
    fig = plot_partition_summary(mesh, part, edge_index=ei)  # the figure's zoom panel uses that box
    zoom_ax = fig.axes[1]
    assert zoom_ax.get_xlim() == pytest.approx(box[:2]) and zoom_ax.get_ylim() == pytest.approx(box[2:])
    # one part, or no graph for a point cloud: no cut to zoom on
    assert cut_zoom_box(mesh, np.zeros(mesh.num_nodes, dtype=np.int64)) is None
    assert cut_zoom_box(pts, part) is None


def _rings_partition(mesh):
    """Parts 1 and 3: the inner half of the nodes (a graded mesh's fine region), above and below
    y = 0; parts 0 and 2: the outer half, left and right of x = 0."""
    d = np.linalg.norm(mesh.points - np.median(mesh.points, axis=0), axis=1)
    inner = d <= np.median(d)
    x, y = mesh.points[:, 0], mesh.points[:, 1]
    a = np.where(inner, np.where(y >= 0, 1, 3), np.where(x < 0, 0, 2))
    return Partition(torch.from_numpy(a), 4, method="rings")


def test_small_parts_are_labelled_and_zoomed(data_dir, tmp_path):
    """rae2822 in 4 parts with 2 in the fine region round the airfoil: in the whole-mesh view those
    two are specks, so each gets a label in its colour, and the zoom holds all of both."""
    from meshshard.viz.partition_plot import _small_parts

    mesh = read_mesh(data_dir / "rae2822_turb.su2")
    part = _rings_partition(mesh)
    a = part.assignment.numpy()
    assert _small_parts(mesh.points, a, 4).tolist() in ([1, 3], [3, 1])
    path = tmp_path / "rae.png"
    fig = plot_partition_summary(mesh, part, path=path, dpi=60)
    overview, zoom = fig.axes[0], fig.axes[1]
    assert sorted(t.get_text() for t in overview.texts) == ["part 1", "part 3"]
    (x0, x1), (y0, y1) = zoom.get_xlim(), zoom.get_ylim()
    small = mesh.points[np.isin(a, [1, 3])]
    assert x0 <= small[:, 0].min() and small[:, 0].max() <= x1 and y0 <= small[:, 1].min() and small[:, 1].max() <= y1
    # every part's colour shows in the whole-mesh panel itself (pixels inside its axes)
    img = mpimg.imread(path)[..., :3]
    box = overview.get_window_extent()
    h = img.shape[0]
    crop = img[int(h - box.y1):int(h - box.y0), int(box.x0):int(box.x1)]
    seen = np.array([(np.abs(crop - c[:3]).max(-1) < 0.02).sum() for c in part_colors(4)])
    assert (seen > 30).all(), seen


def test_summary_names_the_ghost_counts_apart(naca):
    """"distinct ghost nodes" (each node once, the black dots) and the quality report's ghost_nodes
    ("ghosts (1-hop, sum over parts)") differ where a node touches two other parts."""
    from meshshard.partitioners import partition_quality
    from meshshard.viz.partition_plot import _summary_lines

    part = _rings_partition(naca)
    ei = naca.edge_index()
    q = partition_quality(part, ei)
    distinct = int(ghost_mask(part.assignment, ei).sum())
    assert q["ghost_nodes"] > distinct  # a node at a junction of three parts is a ghost of two
    fig = plot_partition_summary(naca, part, edge_index=ei, quality=q)
    text = "\n".join(t.get_text() for a in fig.axes for t in a.texts)
    assert f"distinct ghost nodes (black): {distinct:,}" in text
    assert f"ghosts (1-hop, sum over parts): {q['ghost_nodes']:,}" in text
    assert "ghost_nodes" not in text
    assert f"{distinct:,} distinct ghost nodes" in fig.get_suptitle()
    lines = _summary_lines(np.array([3, 4]), None, {"ghost_nodes": 5}, "black")
    assert lines[-1] == "ghosts (1-hop, sum over parts): 5"
