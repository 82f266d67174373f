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
    assert main(["plot", str(predicted_vtu), "--compare", "velocity[0]", "-o", png, "-q"]) == 0
    assert calls == [("pressure", "pressure_pred", "pressure_error"), ("pressure", "vorticity_mag", None),
                     ("velocity[0]", "velocity_pred[0]", None)]


@pytest.mark.parametrize("argv,needle", [
    (["--field", "nope"], "cyl.vtu; available: ['pressure', 'pressure_error', 'pressure_pred', 'velocity', 'vort"),
    (["--field", "velocity[5]"], "has 3 components"),
    (["--compare", "pressure", "-k", "2", "--no-zoom"], "-k, --no-zoom: only for a partition plot"),
    (["--field", "pressure", "--sample", "0"], "--sample: only for a partition plot"),
    (["-k", "2", "--units", "Pa"], "--units: only with --field / --compare"),
    (["--compare", "velocity"], "'velocity_pred' not found"),
])
def test_plot_field_bad_input(predicted_vtu, tmp_path, capsys, argv, needle):
    assert main(["plot", str(predicted_vtu), *argv, "-o", str(tmp_path / "a.png"), "-q"]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "a.png").exists()


def test_plot_field_of_a_folder_is_refused(tmp_path, capsys):
    assert main(["plot", str(tmp_path), "--field", "pressure", "-o", str(tmp_path / "a.png"), "-q"]) == 2
    assert "is a folder" in capsys.readouterr().err
