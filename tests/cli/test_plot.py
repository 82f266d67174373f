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
