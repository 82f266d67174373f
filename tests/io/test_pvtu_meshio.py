"""meshshard.io.pvtu_meshio: a .pvtu read through meshio (no vtk package) equals the vtk reader's
merged mesh, with and without global point ids, 2D and 3D; read_mesh falls back to it without vtk."""
import numpy as np
import pytest

from meshshard.io import read_mesh
from meshshard.io.pvtu_meshio import read_pvtu_meshio
from meshshard.io.vtk_formats import read_vtk
from tests.io._piece_files import delaunay_mesh, write_split


def _assert_same(a, b):
    np.testing.assert_array_equal(a.points, b.points)
    assert sorted(a.cells) == sorted(b.cells)
    for t in a.cells:
        np.testing.assert_array_equal(a.cells[t], b.cells[t])
    assert sorted(a.point_data) == sorted(b.point_data) and sorted(a.cell_data) == sorted(b.cell_data)
    for k in a.point_data:
        np.testing.assert_array_equal(np.asarray(a.point_data[k]).reshape(len(a.points), -1),
                                      np.asarray(b.point_data[k]).reshape(len(b.points), -1), err_msg=k)
    for k in a.cell_data:
        np.testing.assert_array_equal(np.asarray(a.cell_data[k]).reshape(-1), np.asarray(b.cell_data[k]).reshape(-1))


@pytest.mark.parametrize("dim,ids", [(2, True), (2, False), (3, True)])
def test_equals_the_vtk_reader(tmp_path, dim, ids):
    pts, cells, fields, cfields = delaunay_mesh(3, 120, dim)
    path = write_split(tmp_path / "m.pvtu", pts, cells, fields, cfields, [0.3, 0.55, 0.9], ids=ids)
    got = read_pvtu_meshio(path)
    assert got.num_nodes == len(pts) and got.points.shape[1] == dim  # border points once, planar kept 2D
    _assert_same(got, read_vtk(path))


def test_read_mesh_falls_back_without_vtk(tmp_path, monkeypatch):
    pts, cells, fields, cfields = delaunay_mesh(4, 60, 2)
    path = write_split(tmp_path / "m.pvtu", pts, cells, fields, cfields, [0.5], ids=True)
    import meshshard._optional as optional

    real = optional.has_module
    monkeypatch.setattr(optional, "has_module", lambda name: False if name == "vtk" else real(name))
    called = []
    monkeypatch.setattr("meshshard.io.pvtu_meshio.read_pvtu_meshio", lambda p: called.append(p) or read_pvtu_meshio(p))
    got = read_mesh(path)
    assert called == [path]
    _assert_same(got, read_vtk(path))


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="reads .pvtu files"):
        read_pvtu_meshio(tmp_path / "m.pvtp")
    bad = tmp_path / "b.pvtu"
    (tmp_path / "b0.vtu").write_text("not a vtu")
    bad.write_text('<VTKFile type="PUnstructuredGrid"><PUnstructuredGrid><Piece Source="b0.vtu"/>'
                   "</PUnstructuredGrid></VTKFile>")
    with pytest.raises(ValueError, match="cannot read the piece"):
        read_pvtu_meshio(bad)
    with pytest.raises(FileNotFoundError):
        read_pvtu_meshio(tmp_path / "missing.pvtu")
