"""meshshard.io.write_vtk and write_vtu / write_prediction of a mesh with polyhedra: the .vtu VTK reads
back holds the same polyhedra (no point added) and the fields in the Mesh's cell order; read_mesh reads
it back; the one-cell-at-a-time path of older VTK writes the same file content."""
import numpy as np
import pytest
import torch

from meshshard.io import read_mesh, write_prediction, write_vtu
from tests.io._openfoam_case import write_openfoam_polyhedra

import vtk  # installed by the [vtk] extra that CI installs: missing means fail, not skip
from vtkmodules.util.numpy_support import vtk_to_numpy


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    root = tmp_path_factory.mktemp("snappy")
    write_openfoam_polyhedra(root / "snappy")
    return root / "snappy" / "case.foam"


def _vtk_read(path):
    reader = vtk.vtkXMLUnstructuredGridReader()
    reader.SetFileName(str(path))
    reader.Update()
    return reader.GetOutput()


def _vtk_polyhedra(grid):
    """(cell types, faces of every polyhedron as lists) of a grid VTK read."""
    from meshshard.io.vtk_formats import _polyhedron_faces

    types = vtk_to_numpy(grid.GetCellTypes() if grid.GetCellTypes().IsA("vtkDataArray") else grid.GetCellTypesArray())
    ph = _polyhedron_faces(grid, np.flatnonzero(types == 42))
    return types, [[f.tolist() for f in ph.faces(i)] for i in range(ph.num_cells)]


@pytest.mark.parametrize("one_cell_at_a_time", [False, True])
def test_point_and_cell_fields_round_trip(case, tmp_path, monkeypatch, one_cell_at_a_time):
    if one_cell_at_a_time:
        import meshshard.io.write_vtk as wv

        monkeypatch.setattr(wv, "_has_polyhedral_cells_api", lambda grid: False)
    m = read_mesh(case)
    q = np.arange(m.num_nodes, dtype=float) * 0.5
    path = write_vtu(tmp_path / "v.vtu", m, {"q": q}, source=case)
    grid = _vtk_read(path)
    assert grid.GetNumberOfPoints() == m.num_nodes and grid.GetNumberOfCells() == m.num_cells
    types, faces = _vtk_polyhedra(grid)
    assert types.tolist() == [12] * 10 + [13] * 4 + [42] * 2
    assert faces == [[f.tolist() for f in m.polyhedra.faces(i)] for i in range(2)]
    np.testing.assert_array_equal(vtk_to_numpy(grid.GetPointData().GetArray("q")), q)
    np.testing.assert_array_equal(vtk_to_numpy(grid.GetCellData().GetArray("p")), m.cell_data["p"])
    back = read_mesh(path)
    assert back.polyhedra == m.polyhedra and back.cell_counts() == m.cell_counts()
    assert all(np.array_equal(back.cells[t], c) for t, c in m.cells.items())
    np.testing.assert_array_equal(back.points, m.points)
    np.testing.assert_array_equal(back.point_data["q"], q)
    assert torch.equal(back.edge_index(), m.edge_index())

    cm = read_mesh(case, nodes="cells")
    pred = torch.from_numpy(np.stack([cm.point_data["p"] * 2.0], 1).astype(np.float64))
    metrics = write_prediction(tmp_path / "c.vtu", cm, pred, ["p"], ["p"], source=case)
    assert metrics["p"]["max_abs"] == pytest.approx(float(np.abs(cm.point_data["p"]).max()))
    grid = _vtk_read(tmp_path / "c.vtu")
    assert _vtk_polyhedra(grid)[1] == faces and grid.GetNumberOfPoints() == m.num_nodes
    np.testing.assert_allclose(vtk_to_numpy(grid.GetCellData().GetArray("p_pred")), cm.point_data["p"] * 2.0)
    back = read_mesh(tmp_path / "c.vtu", nodes="cells")
    np.testing.assert_allclose(back.points, cm.points, atol=1e-12)
    assert torch.equal(back.edge_index(), cm.edge_index())
    np.testing.assert_allclose(back.point_data["p_error"], cm.point_data["p"])
    with pytest.raises(ValueError, match="16 volume cells"):
        write_vtu(tmp_path / "bad.vtu", cm, {"x": np.zeros(5)})
    assert not (tmp_path / "bad.vtu").exists()


@pytest.mark.parametrize("mode", ["appended", "binary", "ascii"])
def test_polyhedral_vtu_is_told_from_its_tags(case, tmp_path, mode):
    """read_mesh sends a .vtu with polyhedra to vtk, found from the tags of its <Cells> alone (the arrays between
    them skipped), whatever the writer's data mode and wherever a chunk boundary falls; a plain .vtu is not sent."""
    import meshio

    from meshshard.io.read import _vtu_has_polyhedra

    m = read_mesh(case)
    grid = _vtk_read(write_vtu(tmp_path / "v.vtu", m, {"q": np.zeros(m.num_nodes)}, source=case))
    writer = vtk.vtkXMLUnstructuredGridWriter()
    writer.SetInputData(grid)
    getattr(writer, {"appended": "SetDataModeToAppended", "binary": "SetDataModeToBinary",
                     "ascii": "SetDataModeToAscii"}[mode])()
    writer.SetFileName(str(tmp_path / "w.vtu"))
    writer.Write()
    meshio.write(tmp_path / "plain.vtu", meshio.Mesh(m.points, [("hexahedron", m.cells["hexahedron"])],
                                                     point_data={"q": np.zeros(m.num_nodes)}))
    for chunk in (5, 64, 1 << 20):
        assert _vtu_has_polyhedra(tmp_path / "w.vtu", chunk=chunk), chunk
        assert not _vtu_has_polyhedra(tmp_path / "plain.vtu", chunk=chunk), chunk
    assert read_mesh(tmp_path / "w.vtu").polyhedra == m.polyhedra
