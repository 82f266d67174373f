"""`meshshard plot` from a mesh file (partitioned on the fly) and from a shard folder."""
import shutil

import matplotlib.image as mpimg
import numpy as np
import pytest

from meshshard.cli import main
from meshshard.viz import part_colors


def _parts_seen(png, num_parts, tol=0.02):
    img = mpimg.imread(png)[..., :3]
    return np.array([(np.abs(img - c[:3]).max(-1) < tol).sum() for c in part_colors(num_parts)])


def test_plot_mesh_file(data_dir, tmp_path):
    png = tmp_path / "naca.png"
    assert main(["plot", str(data_dir / "naca0012_inviscid.su2"), "-k", "4", "-m", "graph", "-o", str(png),
                 "--dpi", "50", "-q"]) == 0
    img = mpimg.imread(png)
    assert img.shape[0] == int(5.5 * 50) and img.shape[1] > img.shape[0]
    assert (_parts_seen(png, 4) > 50).all()


def test_plot_shard_folder_and_moved_mesh(data_dir, tmp_path, capsys):
    src = tmp_path / "cyl.su2"
    shutil.copy(data_dir / "cylinder_laminar.su2", src)
    out = tmp_path / "shards"
    assert main(["partition", str(src), "-k", "6", "-m", "kdtree", "-o", str(out), "-q"]) == 0
    png = tmp_path / "cyl.png"
    assert main(["plot", str(out), "-o", str(png), "--dpi", "50", "-q"]) == 0
    assert (_parts_seen(png, 6) > 50).all()
    # the mesh moved: plot needs --mesh, and checks it is the same file
    moved = tmp_path / "moved.su2"
    src.rename(moved)
    capsys.readouterr()
    assert main(["plot", str(out), "-o", str(png), "-q"]) == 2
    assert "--mesh" in capsys.readouterr().err
    assert main(["plot", str(out), "-o", str(png), "--mesh", str(moved), "--dpi", "40", "-q"]) == 0
    assert main(["plot", str(out), "-o", str(png), "--mesh", str(data_dir / "naca0012_inviscid.su2"), "-q"]) == 2
    assert "sha256" in capsys.readouterr().err


def test_plot_point_cloud_folder(data_dir, tmp_path):
    out = tmp_path / "car"
    assert main(["partition", str(data_dir / "drivaer_body_points.npz"), "-k", "3", "--knn", "3", "-o", str(out),
                 "-q"]) == 0
    png = tmp_path / "car.png"
    assert main(["plot", str(out), "-o", str(png), "--dpi", "40", "--no-ghosts", "-q"]) == 0
    assert (_parts_seen(png, 3, tol=0.05) > 20).all()


def test_plot_preprocessed_dataset_sample(data_dir, tmp_path, capsys):
    ds = tmp_path / "ds"
    files = [str(data_dir / "naca0012_inviscid.su2"), str(data_dir / "rae2822_turb.su2")]
    assert main(["preprocess", *files, "-k", "3", "-m", "graph", "-o", str(ds), "--features", "pos", "--quiet"]) == 0
    png = tmp_path / "rae.png"
    assert main(["plot", str(ds), "--sample", "1", "-o", str(png), "--dpi", "40", "-q"]) == 0
    assert (_parts_seen(png, 3) > 50).all()
    capsys.readouterr()
    assert main(["plot", str(ds), "--sample", "5", "-o", str(png), "-q"]) == 2
    assert "2 sample(s)" in capsys.readouterr().err


@pytest.mark.parametrize("argv,needle", [
    (["{data}/naca0012_inviscid.su2", "-o", "{tmp}/a.png"], "-k"),
    (["{data}/naca0012_inviscid.su2", "-k", "2", "-o", "{tmp}/a.txt"], "image type"),
    (["{tmp}/missing.su2", "-k", "2", "-o", "{tmp}/a.png"], "missing.su2"),
    (["{tmp}", "-o", "{tmp}/a.png"], "meta.json"),
])
def test_plot_bad_input(data_dir, tmp_path, capsys, argv, needle):
    argv = [a.format(data=data_dir, tmp=tmp_path) for a in argv]
    assert main(["plot", *argv, "-q"]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_plot_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["plot", "--help"])
    assert e.value.code == 0 and "MESH_OR_OUT" in capsys.readouterr().out


@pytest.fixture()
def predicted_vtu(data_dir, tmp_path):
    """The cylinder CFD solution with a made-up prediction and its error, as `meshshard predict` names them."""
    import meshio

    m = meshio.read(data_dir / "cylinder_crossflow_re35.vtu")
    p = m.point_data["pressure"].astype(np.float64)
    m.point_data["pressure_pred"] = p + 30.0 * np.sin(m.points[:, 0])
    m.point_data["pressure_error"] = m.point_data["pressure_pred"] - p
    path = tmp_path / "cyl.vtu"
    meshio.write(path, m)
    return path


def test_plot_field_and_compare_draw(predicted_vtu, tmp_path, capsys):
    for argv in (["--field", "pressure_pred", "--units", "Pa"], ["--compare", "pressure", "--zoom", "1", "6", "-2", "2"]):
        png = tmp_path / "f.png"
        assert main(["plot", str(predicted_vtu), *argv, "-o", str(png), "--dpi", "40", "-q"]) == 0
        assert f"wrote {png}" in capsys.readouterr().out
        assert png.stat().st_size > 5_000
        png.unlink()


def test_plot_compare_picks_prediction_and_error_fields(predicted_vtu, tmp_path, monkeypatch):
    """--compare TRUTH takes TRUTH_pred and the file's TRUTH_error; --field names another prediction
    (then the error is recomputed); a file without TRUTH_error gets pred - truth."""
    import meshio

    import meshshard.viz

    calls = []
    monkeypatch.setattr(meshshard.viz, "plot_field_comparison", lambda mesh, t, p, e, **kw: calls.append((t, p, e)))
    png = str(tmp_path / "c.png")
    assert main(["plot", str(predicted_vtu), "--compare", "pressure", "-o", png, "-q"]) == 0
    assert main(["plot", str(predicted_vtu), "--compare", "pressure", "--field", "vorticity_mag", "-o", png, "-q"]) == 0
    m = meshio.read(predicted_vtu)
    del m.point_data["pressure_error"]
    meshio.write(predicted_vtu, m)
    assert main(["plot", str(predicted_vtu), "--compare", "pressure", "-o", png, "-q"]) == 0
    assert calls == [("pressure", "pressure_pred", "pressure_error"), ("pressure", "vorticity_mag", None),
                     ("pressure", "pressure_pred", None)]


@pytest.mark.parametrize("argv,needle", [
    (["--field", "nope"], "cyl.vtu; available: ['pressure', 'pressure_error', 'pressure_pred', 'velocity', 'vort"),
    (["--field", "velocity[5]"], "has 3 components"),
    (["--compare", "pressure", "-k", "2", "--no-zoom"], "-k, --no-zoom: only for a partition plot"),
    (["--field", "pressure", "--sample", "0"], "--sample: only for a partition plot"),
    (["-k", "2", "--units", "Pa"], "--units: only with --field / --compare"),
    (["--compare", "velocity"], "no prediction of 'velocity' in cyl.vtu: no point field 'velocity_pred' or "
                                "velocity_<i>_pred; its point fields: ['pressure', 'pressure_error', 'pressure_pred'"),
    (["--compare", "velocity[3]"], "'velocity[3]' asks for [3]"),
])
def test_plot_field_bad_input(predicted_vtu, tmp_path, capsys, argv, needle):
    assert main(["plot", str(predicted_vtu), *argv, "-o", str(tmp_path / "a.png"), "-q"]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_plot_field_of_a_folder_is_refused(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "--field", "pressure", "-o", str(tmp_path / "a.png"), "-q"]) == 2
    assert "is a folder" in capsys.readouterr().err


def _grid_mesh():
    """A 12 x 6 quad mesh with a vector field ``vel`` [N, 3] and a scalar ``p``."""
    from meshshard.io import Mesh

    nx, ny = 12, 6
    xs, ys = np.meshgrid(np.linspace(0.0, 2.0, nx), np.linspace(0.0, 1.0, ny))
    pts = np.stack([xs.ravel(), ys.ravel()], axis=1)
    quads = [[j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i]
             for j in range(ny - 1) for i in range(nx - 1)]
    vel = np.stack([np.sin(3 * pts[:, 0]), pts[:, 1] - 0.5, pts[:, 0] * pts[:, 1]], axis=1)
    return Mesh(pts, {"quad": quads}, point_data={"vel": vel, "p": pts[:, 0] ** 2})


def _model(mesh, column):
    """A made-up prediction of one target column (``p`` or ``vel_<c>``): off by a different amount per component."""
    if column == "p":
        return 1.1 * mesh.point_data["p"] + 0.3
    c = int(column.split("_")[1])
    return 1.1 * mesh.point_data["vel"][:, c] + 0.3 * (c + 1)


def _write_predicted(path, targets, with_error=True):
    """What `meshshard predict` writes for a model trained on ``targets`` (its write_prediction)."""
    import meshio
    import torch

    from meshshard.cli.predict import write_prediction
    from meshshard.datasets import field_columns

    mesh = _grid_mesh()
    columns = field_columns(mesh, targets)
    pred = torch.from_numpy(np.stack([_model(mesh, c) for c in columns], axis=1))
    write_prediction(path, mesh, pred, targets, columns)
    if not with_error:
        m = meshio.read(path)
        m.point_data = {k: v for k, v in m.point_data.items() if not k.endswith("_error")}
        meshio.write(path, m)
    return mesh


def _bar(fig, label):
    """(low, high) of the colour bar labelled ``label``."""
    (bar,) = [a for a in fig.axes if a.get_ylabel() == label]
    return bar.get_ylim()


@pytest.mark.parametrize("targets,spec,pred,error", [
    (["vel[0,2]"], "vel[0,2]", "vel_pred", "vel_error"),  # a field's selected components: its columns
    (["vel[0,2]"], "vel[2]", "vel_pred[1]", "vel_error[1]"),
    (["vel[2,0]", "p"], "vel[0]", "vel_pred[1]", "vel_error[1]"),  # components in another order
    (["vel[2,0]", "p"], "p", "p_pred", "p_error"),
    (["vel[1]"], "vel[1]", "vel_pred", "vel_error"),  # one component
    (["vel[0]", "vel[1]"], "vel[1]", "vel_1_pred", "vel_1_error"),  # two targets of one field: by column
    (["vel[0]", "vel[1]"], "vel[0,1]", ["vel_0_pred", "vel_1_pred"], ["vel_0_error", "vel_1_error"]),
    (["vel"], "vel[2]", "vel_pred[2]", "vel_error[2]"),  # the whole field
    (["vel"], "vel", "vel_pred", "vel_error"),
])
def test_plot_compare_every_prediction_naming(tmp_path, monkeypatch, targets, spec, pred, error):
    """--compare SPEC on what predict wrote for each kind of target draws the truth, the prediction and
    the error of SPEC's components (the values and the colour bars of the three panels checked)."""
    import meshshard.viz
    from meshshard.datasets import parse_field
    from meshshard.io import read_mesh
    from meshshard.viz import field_values

    vtu = tmp_path / "out.vtu"
    mesh = _write_predicted(vtu, targets)
    name, comps = parse_field(spec)
    truth = mesh.point_data[name].reshape(mesh.num_nodes, -1)[:, comps if comps is not None else slice(None)]
    columns = [name] if name == "p" else [f"{name}_{c}" for c in (comps if comps is not None else range(3))]
    want_pred = np.stack([_model(mesh, c) for c in columns], axis=1)
    want = {"truth": truth, "pred": want_pred, "error": want_pred - truth}
    want = {k: v[:, 0] if v.shape[1] == 1 else np.linalg.norm(v, axis=1) for k, v in want.items()}
    real, drawn = meshshard.viz.plot_field_comparison, []
    monkeypatch.setattr(meshshard.viz, "plot_field_comparison",
                        lambda m, t, p, e, **kw: drawn.append((m, t, p, e, real(m, t, p, e, **kw))))
    png = tmp_path / "cmp.png"
    assert main(["plot", str(vtu), "--compare", spec, "-o", str(png), "--dpi", "30", "-q"]) == 0
    (m, t, p, e, fig), = drawn
    assert (t, p, e) == (spec, pred, error)
    assert m.num_nodes == mesh.num_nodes and sorted(m.point_data) == sorted(read_mesh(vtu).point_data)
    for what, field in (("truth", t), ("pred", p), ("error", e)):
        np.testing.assert_allclose(field_values(m, field)[0], want[what], rtol=1e-6, atol=1e-12)
    shared = (min(want["truth"].min(), want["pred"].min()), max(want["truth"].max(), want["pred"].max()))
    assert np.allclose(_bar(fig, field_values(m, t)[1]), shared)
    assert np.allclose(_bar(fig, field_values(m, p)[1]), shared)
    assert np.allclose(_bar(fig, field_values(m, e)[1]), np.array([-1, 1]) * np.abs(want["error"]).max())
    assert mpimg.imread(png).shape[0] > 50


@pytest.mark.parametrize("targets,spec,needle", [
    (["vel[0,2]"], "vel[1]", "'vel[1]': 'vel_pred' predicts components [0, 2] of 'vel' (read from 'vel_error'), "
                             "not 1"),
    (["vel[0,2]"], "vel", "predicts components [0, 2] of 'vel'"),
    (["vel[0]", "vel[1]"], "vel[2]", "'vel[2]': only components [0, 1] of 'vel' have a prediction in out.vtu "
                                     "(vel_0_pred, vel_1_pred)"),
    (["vel[0,2]"], "p", "no prediction of 'p' in out.vtu: no point field 'p_pred' or p_<i>_pred; its point "
                        "fields: ['p', 'vel', 'vel_error', 'vel_pred']"),
    (["vel"], "vel[3]", "field 'vel' has 3 components; 'vel[3]' asks for [3]"),
    (["p"], "q", "point field 'q' not found"),
])
def test_plot_compare_bad_spec(tmp_path, capsys, targets, spec, needle):
    vtu = tmp_path / "out.vtu"
    _write_predicted(vtu, targets)
    assert main(["plot", str(vtu), "--compare", spec, "-o", str(tmp_path / "a.png"), "-q"]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_plot_compare_without_error_fields(tmp_path, capsys):
    """Without NAME_error (the file has no record of which components NAME_pred holds): a NAME_pred of
    the components asked for is taken as them, the error is prediction - truth; else a clear error."""
    vtu = tmp_path / "out.vtu"
    _write_predicted(vtu, ["vel[0,2]"], with_error=False)
    assert main(["plot", str(vtu), "--compare", "vel[0,2]", "-o", str(tmp_path / "a.png"), "--dpi", "30",
                 "-q"]) == 0
    assert main(["plot", str(vtu), "--compare", "vel[2]", "-o", str(tmp_path / "b.png"), "-q"]) == 2
    assert ("'vel_pred' holds 2 of the 3 components of 'vel' and there is no 'vel_error' to tell which"
            in capsys.readouterr().err)


def test_plot_cell_data(data_dir, tmp_path, capsys, monkeypatch):
    """Cell fields: --field / --compare pick the cell-centred view by themselves (a cell field only)
    and draw a colour per cell; -k with --nodes cells colours each cell by its part; a shard folder
    written with --nodes cells is drawn with its cells; 3D cell data says how it is drawn."""
    import meshshard.viz as viz
    from tests.cli._cell_meshes import write_cylinder_cells, write_mixed_cells

    src = write_cylinder_cells(tmp_path / "cyl_cells.vtu", data_dir)
    drawn = []
    real = viz.plot_field
    monkeypatch.setattr(viz, "plot_field", lambda mesh, *a, **k: drawn.append(mesh) or real(mesh, *a, **k))
    png = tmp_path / "f.png"
    assert main(["plot", str(src), "--field", "pressure", "-o", str(png), "--dpi", "40", "-q"]) == 0
    assert drawn[-1].nodes == "cells" and drawn[-1].num_nodes == 14594 and png.stat().st_size > 5_000
    png = tmp_path / "p.png"
    assert main(["plot", str(src), "--nodes", "cells", "-k", "3", "-o", str(png), "--dpi", "50", "-q"]) == 0
    assert (_parts_seen(png, 3) > 50).all()
    out = tmp_path / "shards"
    assert main(["partition", str(src), "--nodes", "cells", "-k", "2", "-o", str(out), "-q"]) == 0
    assert main(["plot", str(out), "-o", str(tmp_path / "s.png"), "--dpi", "40", "-q"]) == 0
    assert main(["plot", str(out), "--nodes", "points", "-o", str(tmp_path / "s.png"), "-q"]) == 2
    assert "partitioned with nodes = cells" in capsys.readouterr().err
    src3 = write_mixed_cells(tmp_path / "mixed3.vtu", dim=3)
    assert main(["plot", str(src3), "--field", "u", "-o", str(png), "--dpi", "40", "-q"]) == 0
    assert "3D cell data is drawn as points at the cell centres" in capsys.readouterr().out


def test_plot_animate_a_rollout_collection(tmp_path, capsys):
    from PIL import Image

    from meshshard.datasets.synthetic import jittered_grid_mesh
    from meshshard.io import write_trajectory
    from tests.viz.test_animation import _rollout_like

    pvd = write_trajectory(_rollout_like(jittered_grid_mesh(120, seed=1), steps=4), tmp_path / "out" / "roll.pvd")
    gif = tmp_path / "rollout.gif"
    assert main(["plot", str(pvd), "--compare", "f", "--animate", "-o", str(gif), "--dpi", "30", "-q"]) == 0
    assert f"wrote {gif} (4 frames of 4 steps)" in capsys.readouterr().out
    with Image.open(gif) as im:
        assert im.n_frames == 4
    assert main(["plot", str(pvd), "--field", "f_pred[1]", "--animate", "--every", "2", "-o", str(gif), "--dpi", "30",
                 "-q"]) == 0
    with Image.open(gif) as im:
        assert im.n_frames == 3  # steps 0, 2 and the last
    capsys.readouterr()
    # a bad field: one line naming the fields there are, no traceback, no file
    bad = tmp_path / "bad.gif"
    assert main(["plot", str(pvd), "--compare", "velocity", "--animate", "-o", str(bad), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'velocity' not found" in err and "'f_pred'" in err and not bad.exists()
    png = str(tmp_path / "a.png")
    for argv, message in ((["--animate", "--compare", "f", "-o", png], "--animate writes .gif or .mp4"),
                          (["--compare", "f", "--fps", "2", "-o", png], "--fps: only with --animate"),
                          (["--animate", "-o", str(gif)], "--animate draws --field NAME, or --compare TRUTH"),
                          (["--animate", "--compare", "f", "-k", "2", "-o", str(gif)], "-k: not with --animate")):
        assert main(["plot", str(pvd), *argv, "-q"]) == 2, argv
        assert message in capsys.readouterr().err, argv


def test_plot_openfoam_polyhedra(tmp_path):
    """A mesh with polyhedra is drawn by its surface (the faces of one cell only), cut open too."""
    from meshshard.io import read_mesh
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    src = tmp_path / "snappy" / "case.foam"
    png = tmp_path / "p.png"
    assert main(["plot", str(src), "-k", "3", "-o", str(png), "--dpi", "50", "-q"]) == 0
    assert (_parts_seen(png, 3) > 50).all()
    assert main(["plot", str(src), "--nodes", "cells", "--field", "p", "-o", str(png), "--dpi", "40", "-q"]) == 0
    assert read_mesh(src).polyhedra is not None
