"""Field plots on the real meshes: a 2D CFD solution, a 3D tet mesh, point clouds; colour limits,
the symmetric error map, vector components and bad field names."""
import matplotlib.image as mpimg
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, read_mesh
from meshshard.viz import field_values, plot_field, plot_field_comparison, prediction_field_names


def _bar_limits(fig, label):
    """(low, high) of the colour bar labelled ``label`` (a vertical bar: its y range)."""
    bars = [a for a in fig.axes if a.get_ylabel() == label]
    assert len(bars) == 1, [a.get_ylabel() for a in fig.axes]
    return bars[0].get_ylim()


def _colours(png):
    """Distinct RGB colours in a PNG (quantised to 8 bits)."""
    img = (mpimg.imread(png)[..., :3] * 255).round().astype(np.uint8)
    return np.unique(img.reshape(-1, 3), axis=0)


@pytest.fixture(scope="module")
def cylinder(data_dir):
    mesh = read_mesh(data_dir / "cylinder_crossflow_re35.vtu")
    p = mesh.point_data["pressure"].astype(np.float64)
    mesh.point_data["pressure_pred"] = p + 40.0 * np.sin(mesh.points[:, 0]) + 25.0  # off-centre error
    return mesh


def test_2d_filled_contours_with_data_range_limits(cylinder, tmp_path):
    path = tmp_path / "p.png"
    fig = plot_field(cylinder, "pressure", path=path, units="Pa", dpi=50)
    p = cylinder.point_data["pressure"]
    assert np.allclose(_bar_limits(fig, "pressure [Pa]"), (p.min(), p.max()))
    img = mpimg.imread(path)
    w, h = fig.get_size_inches()
    assert img.shape[:2] == (round(h * 50), round(w * 50)) and w > h  # the 2:1 channel keeps its proportions
    assert len(_colours(path)) > 30  # a colour field, not a blank or one-colour panel
    # a point field of the mesh or an array of the same values draw alike
    fig2 = plot_field(cylinder, torch.from_numpy(p.astype(np.float64)), label="p", dpi=50)
    assert np.allclose(_bar_limits(fig2, "p"), (p.min(), p.max()))
    # a zoom shows its box (in the box's proportions); the colour limits stay the whole field's
    fig3 = plot_field(cylinder, "pressure", zoom=(1, 5, -1, 1), dpi=30)
    ax = fig3.axes[0]
    assert ax.get_xlim() == (1, 5) and ax.get_ylim() == (-1, 1)
    assert np.allclose(_bar_limits(fig3, "pressure"), (p.min(), p.max()))
    with pytest.raises(ValueError, match="min < max"):
        plot_field(cylinder, "pressure", zoom=(5, 1, -1, 1))


def test_comparison_shares_limits_and_centres_the_error(cylinder, tmp_path):
    path = tmp_path / "cmp.png"
    t = cylinder.point_data["pressure"].astype(np.float64)
    pred = cylinder.point_data["pressure_pred"]
    fig = plot_field_comparison(cylinder, "pressure", "pressure_pred", path=path, dpi=40)
    shared = (min(t.min(), pred.min()), max(t.max(), pred.max()))
    assert np.allclose(_bar_limits(fig, "pressure"), shared)
    assert np.allclose(_bar_limits(fig, "pressure_pred"), shared)
    err = pred - t
    lo, hi = _bar_limits(fig, "pressure_pred - pressure")
    assert np.isclose(hi, np.abs(err).max()) and np.isclose(lo, -hi)  # symmetric although the error is not
    assert err.min() > -hi * 0.9
    titles = [a.get_title() for a in fig.axes]
    rel = np.linalg.norm(err) / np.linalg.norm(t)
    assert any(f"relative L2 {rel:.3g}" in s for s in titles), titles
    assert path.stat().st_size > 10_000
    # a given error field is drawn as given (here: twice the difference), not recomputed
    fig = plot_field_comparison(cylinder, "pressure", "pressure_pred", error=2 * err, dpi=40)
    assert np.isclose(_bar_limits(fig, "error")[1], 2 * np.abs(err).max())


def test_vector_field_magnitude_and_components(cylinder, tmp_path):
    v = cylinder.point_data["velocity"].astype(np.float64)
    mag, label = field_values(cylinder, "velocity")
    assert label == "|velocity|" and np.allclose(mag, np.linalg.norm(v, axis=1))
    comp, label = field_values(cylinder, "velocity[1]")
    assert label == "velocity[1]" and np.array_equal(comp, v[:, 1])
    planar, label = field_values(cylinder, "velocity[0,1]")
    assert label == "|velocity[0,1]|" and np.allclose(planar, np.linalg.norm(v[:, :2], axis=1))
    fig = plot_field(cylinder, "velocity[1]", dpi=40)
    assert np.allclose(_bar_limits(fig, "velocity[1]"), (v[:, 1].min(), v[:, 1].max()))
    assert prediction_field_names("velocity[0]") == ("velocity_pred[0]", "velocity_error[0]")
    assert prediction_field_names("pressure") == ("pressure_pred", "pressure_error")


def test_3d_tet_mesh_surface(data_dir, tmp_path):
    mesh = read_mesh(data_dir / "brick_tets.su2")
    x = mesh.points
    mesh.point_data["u"] = np.stack([np.sin(3 * x[:, 0]), x[:, 1] * x[:, 2], x[:, 2]], axis=1)
    path = tmp_path / "brick.png"
    fig = plot_field(mesh, "u[0]", path=path, dpi=40)
    assert [a.name for a in fig.axes].count("3d") == 1
    u0 = mesh.point_data["u"][:, 0]
    assert np.allclose(_bar_limits(fig, "u[0]"), (u0.min(), u0.max()))
    assert len(_colours(path)) > 30  # shaded faces of many values
    from matplotlib.figure import Figure

    with pytest.raises(ValueError, match="3D axes"):
        plot_field(mesh, "u[2]", ax=Figure().add_subplot())
    with pytest.raises(ValueError, match="zoom is a 2D box"):
        plot_field(mesh, "u[2]", zoom=(0, 1, 0, 1))


def test_3d_surface_too_large_for_faces_scatters_its_nodes(data_dir, monkeypatch):
    import meshshard.viz.field_plot as field_plot

    mesh = read_mesh(data_dir / "brick_tets.su2")
    monkeypatch.setattr(field_plot, "MAX_FACES_3D", 100)
    fig = plot_field(mesh, mesh.points[:, 0], dpi=30)
    (scatter,) = fig.axes[0].collections
    on_surface = np.isclose(mesh.points, mesh.points.min(0)) | np.isclose(mesh.points, mesh.points.max(0))
    assert len(scatter.get_array()) == on_surface.any(1).sum()  # the box's surface nodes, not its interior


@pytest.mark.parametrize("dim", [2, 3])
def test_point_cloud_scatter(data_dir, tmp_path, dim):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"][::25, :dim].astype(np.float64)
    cloud = Mesh.from_points(pts, point_data={"height": pts[:, -1]})
    path = tmp_path / "cloud.png"
    fig = plot_field(cloud, "height", path=path, dpi=40, max_points=2000)
    assert np.allclose(_bar_limits(fig, "height"), (pts[:, -1].min(), pts[:, -1].max()))
    assert len(_colours(path)) > 20
    plot_field(pts, pts[:, 0], dpi=30)  # bare points and an array


@pytest.mark.parametrize("spec,needle", [
    ("nope", r"point field 'nope' not found.*available: \['pressure', 'pressure_pred', 'velocity'"),
    ("velocity[3]", r"3 components; 'velocity\[3\]' asks for \[3\]"),
    ("velocity[", "bad field spec"),
])
def test_bad_field_names(cylinder, spec, needle):
    with pytest.raises(ValueError, match=needle):
        plot_field(cylinder, spec)
    with pytest.raises(ValueError, match=needle):
        plot_field_comparison(cylinder, "pressure", spec)


def test_bad_values(cylinder):
    n = cylinder.num_nodes
    with pytest.raises(ValueError, match=rf"shape \[{n}\] or \[{n}, C\]"):
        plot_field(cylinder, np.zeros(n - 1))
    bad = np.zeros(n)
    bad[7] = np.nan
    with pytest.raises(ValueError, match="1 NaN or infinite"):
        plot_field(cylinder, bad)
    with pytest.raises(ValueError, match="vmin must be below vmax"):
        plot_field(cylinder, "pressure", vmin=1.0, vmax=0.0)
    fig = plot_field(cylinder, np.full(n, 3.0), label="constant", dpi=30)  # one value: still a usable bar
    lo, hi = _bar_limits(fig, "constant")
    assert lo < 3.0 < hi


def _predicted(vel_pred, vel_error=None, vel=None):
    """A point cloud with ``vel`` [N, 3] and a prediction of some of its components."""
    rng = np.random.default_rng(0)
    vel = rng.normal(size=(40, 3)) if vel is None else vel
    fields = {"vel": vel, "vel_pred": vel_pred(vel)}
    if vel_error is not None:
        fields["vel_error"] = vel_error(vel, fields["vel_pred"])
    return Mesh.from_points(rng.normal(size=(40, 2)), point_data=fields)


def test_prediction_fields_read_from_the_error_field():
    """Which components a NAME_pred holds comes from NAME_pred - NAME_error; a file whose truth is not the
    one the prediction was compared with, or whose columns match several components, gets a clear error."""
    mesh = _predicted(lambda v: 2 * v[:, [2, 1]], lambda v, p: p - v[:, [2, 1]])
    assert prediction_field_names("vel[1]", mesh) == ("vel_pred[1]", "vel_error[1]")
    assert prediction_field_names("vel[1,2]", mesh) == ("vel_pred[1,0]", "vel_error[1,0]")
    assert prediction_field_names("vel[2,1]", mesh) == ("vel_pred", "vel_error")
    values, label = field_values(mesh, "vel_pred[1,0]")
    assert label == "|vel_pred[1,0]|" and np.allclose(values, 2 * np.linalg.norm(mesh.point_data["vel"][:, 1:], axis=1))
    with pytest.raises(ValueError, match=r"'vel_pred' - 'vel_error' is no component of 'vel': the file's 'vel' is "
                                         "not the truth the prediction was compared with"):
        prediction_field_names("vel[2,1]", _predicted(lambda v: 2 * v[:, :2], lambda v, p: p - v[:, :2] - 1.0))
    twin = np.random.default_rng(1).normal(size=(40, 3))
    twin[:, 2] = twin[:, 0]  # components 0 and 2 equal: a column compared with either
    mesh = _predicted(lambda v: 2 * v[:, [0, 2]], lambda v, p: p - v[:, [0, 2]], vel=twin)
    assert prediction_field_names("vel[0,2]", mesh) == ("vel_pred", "vel_error")
    with pytest.raises(ValueError, match=r"'vel\[2\]' is ambiguous: columns \[0, 1\] of 'vel_pred' were all compared "
                                         "with component 2"):
        prediction_field_names("vel[2]", mesh)
    with pytest.raises(ValueError, match="'vel_error' has 1 columns but 'vel_pred' 2"):
        prediction_field_names("vel[0,2]", _predicted(lambda v: v[:, :2], lambda v, p: p[:, 0]))


def test_field_values_of_several_specs(cylinder):
    v = cylinder.point_data["velocity"].astype(np.float64)
    values, label = field_values(cylinder, ["velocity[0]", "pressure_pred"])
    assert label == "|velocity[0], pressure_pred|"
    assert np.allclose(values, np.hypot(v[:, 0], cylinder.point_data["pressure_pred"]))
    with pytest.raises(ValueError, match="empty list"):
        field_values(cylinder, [])


def test_cell_data_is_drawn_one_flat_colour_per_cell():
    """A cell-centred 2D mesh (mixed quads and triangles): every fan triangle of a cell has that cell's
    value (plot_field) or part (plot_partition), no contour interpolation between cells."""
    from matplotlib.collections import PolyCollection

    from meshshard.io import cells_as_nodes
    from meshshard.viz import plot_partition
    from tests.io.test_cell_graph import mixed_2d

    pts, cells = mixed_2d()
    n_quad, n_tri = len(cells["quad"]), len(cells["triangle"])
    u = np.arange(n_quad + n_tri, dtype=float) ** 2
    mesh = cells_as_nodes(Mesh(pts, cells=cells, cell_data={"u": u}))
    # quads give two fan triangles each, triangles one; cells numbered quads first (dict order)
    want = np.concatenate([np.repeat(u[:n_quad][None], 2, 0).reshape(-1), u[n_quad:]])
    fig = plot_field(mesh, "u")
    faces = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    assert len(faces) == 1 and np.array_equal(faces[0].get_array(), want)
    part = np.arange(n_quad + n_tri) % 3
    fig = plot_partition(mesh, part, zoom=None)
    faces = [c for c in fig.axes[0].collections if isinstance(c, PolyCollection)]
    want = np.concatenate([np.repeat(part[:n_quad][None], 2, 0).reshape(-1), part[n_quad:]])
    assert len(faces) == 1 and np.array_equal(faces[0].get_array(), want)
