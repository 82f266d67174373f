"""`meshshard demo --quick`: sharded (2 gloo processes) and single-process loss curves agree."""
import re

import numpy as np
import pytest

from meshshard.cli import main


def _check_output(text, steps):
    rows = re.findall(r"^\s*(\d+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.e+-]+)\s*$", text, flags=re.M)
    assert [int(r[0]) for r in rows] == list(range(steps)), text
    single = [float(r[1]) for r in rows]
    sharded = [float(r[2]) for r in rows]
    assert all(abs(a - b) <= 1e-7 * abs(a) for a, b in zip(single, sharded)), text  # printed to 8 digits
    m = re.search(r"largest loss difference: ([0-9.e+-]+) \(relative ([0-9.e+-]+)\)", text)
    assert m and float(m.group(2)) < 1e-10, text
    assert single[-1] < single[0], "training did not lower the loss"
    return single


def _check_prediction(out_dir, text, first_loss):
    """OUT/prediction.vtu holds the trained model's pressure and its error; OUT/prediction.png draws them."""
    import meshio

    vtu, png = out_dir / "prediction.vtu", out_dir / "prediction.png"
    assert f"prediction: {vtu} (pressure_pred, pressure_error; relative L2 error pressure " in text, text
    assert f"prediction plot: {png}" in text and png.stat().st_size > 10_000
    m = meshio.read(vtu)
    truth, pred, err = (np.asarray(m.point_data[k], dtype=np.float64)
                        for k in ("pressure", "pressure_pred", "pressure_error"))
    assert np.allclose(err, pred - truth, rtol=0, atol=1e-9 * np.abs(truth).max())
    # the trained weights, de-normalised: the (normalised) MSE is below the untrained model's first loss
    assert np.mean(err ** 2) / np.var(truth) < first_loss
    rel = float(re.search(r"relative L2 error pressure ([0-9.e+-]+)\)", text).group(1))
    assert np.isclose(rel, np.linalg.norm(err) / np.linalg.norm(truth), rtol=1e-2)


@pytest.mark.timeout(240)
def test_demo_quick_on_the_cfd_mesh(tmp_path, data_dir, capsys, monkeypatch):
    monkeypatch.setenv("MESHSHARD_DATA", str(data_dir))
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cylinder_crossflow_re35.vtu (CFD solution)" in out
    assert "hidden=16, layers=2" in out and "5 steps" in out
    single = _check_output(out, 5)
    assert (tmp_path / "partition.png").stat().st_size > 10_000
    _check_prediction(tmp_path, out, single[0])


@pytest.mark.timeout(240)
def test_demo_without_the_data_file_meshes_with_gmsh(tmp_path, capsys, monkeypatch):
    """Where the CFD file cannot be found (a pip install away from the data), the demo meshes a
    cylinder channel with gmsh, puts potential flow on it and runs the same comparison."""
    from meshshard.cli import demo

    monkeypatch.setattr(demo, "find_cfd_file", lambda: None)
    assert main(["demo", "--quick", "--steps", "3", "--ranks", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "meshing a cylinder channel with gmsh" in out and "(gmsh cylinder channel" in out
    assert (tmp_path / "cylinder_potential_flow.vtu").exists()
    single = _check_output(out, 3)
    assert (tmp_path / "partition.png").stat().st_size > 10_000
    _check_prediction(tmp_path, out, single[0])


def test_demo_synthetic_flag_skips_the_data_file(tmp_path, data_dir, monkeypatch):
    from meshshard.cli import demo

    class Meshed(Exception):
        pass

    def fake_write(out, num_nodes):
        raise Meshed(num_nodes)

    monkeypatch.setenv("MESHSHARD_DATA", str(data_dir))
    monkeypatch.setattr(demo, "_write_synthetic", fake_write)
    with pytest.raises(Meshed):
        main(["demo", "--quick", "--synthetic", "--out", str(tmp_path)])


def test_demo_finds_the_data_file(tmp_path, monkeypatch):
    """$MESHSHARD_DATA first, then shared/data beside the checkout the package was imported from,
    then ../shared/data or ./shared/data from the working directory; None when absent."""
    from meshshard.cli.demo import DATA_FILE, find_cfd_file

    data = tmp_path / "work" / "shared" / "data"
    data.mkdir(parents=True)
    (data / DATA_FILE).write_text("x")
    clone = tmp_path / "work" / "main"  # a checkout beside shared/
    (clone / "meshshard" / "cli").mkdir(parents=True)
    site = tmp_path / "venv" / "lib" / "python3" / "site-packages" / "meshshard" / "cli" / "demo.py"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # editable install / running from the clone: found through the package location
    assert find_cfd_file(env="", package_file=clone / "meshshard" / "cli" / "demo.py", cwd=elsewhere) == data / DATA_FILE
    # installed into site-packages, run from the clone's root: found through ../shared/data
    assert find_cfd_file(env="", package_file=site, cwd=clone) == data / DATA_FILE
    # ... or from the folder that holds shared/
    assert find_cfd_file(env="", package_file=site, cwd=tmp_path / "work") == data / DATA_FILE
    # installed elsewhere and run elsewhere: not found (the demo then meshes with gmsh)
    assert find_cfd_file(env="", package_file=site, cwd=elsewhere) is None
    # MESHSHARD_DATA: a folder or the file itself
    assert find_cfd_file(env=str(data), package_file=site, cwd=elsewhere) == data / DATA_FILE
    assert find_cfd_file(env=str(data / DATA_FILE), package_file=site, cwd=elsewhere) == data / DATA_FILE

