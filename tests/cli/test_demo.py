"""`meshshard demo --quick`: sharded (2 gloo processes) and single-process loss curves agree."""
import re

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


@pytest.mark.timeout(240)
def test_demo_quick_on_the_cfd_mesh(tmp_path, data_dir, capsys, monkeypatch):
    monkeypatch.setenv("MESHSHARD_DATA", str(data_dir))
    assert main(["demo", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "cylinder_crossflow_re35.vtu (CFD solution)" in out
    assert "hidden=16, layers=2" in out and "5 steps" in out
    _check_output(out, 5)
    assert (tmp_path / "partition.png").stat().st_size > 10_000


@pytest.mark.timeout(240)
def test_demo_without_the_data_file_meshes_with_gmsh(tmp_path, capsys):
    assert main(["demo", "--quick", "--synthetic", "--steps", "3", "--ranks", "3", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "meshing a cylinder channel with gmsh" in out
    assert (tmp_path / "cylinder_potential_flow.vtu").exists()
    _check_output(out, 3)
    assert (tmp_path / "partition.png").exists()
