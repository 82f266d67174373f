"""meshshard.io.write: .vtu files of a mesh with more point fields (write_vtu) and of a model's
prediction with its error and metrics (write_prediction); atomic writes; the deprecated import path
meshshard.cli.predict.write_vtu / write_prediction."""
from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, field_columns, read_mesh, select_fields, write_prediction, write_vtu
from meshshard.viz import prediction_field_names

CYL, NACA = "cylinder_crossflow_re35.vtu", "naca0012_inviscid.su2"


def _fields(path):
    return meshio.read(path).point_data


def test_write_vtu_keeps_cells_points_and_fields_and_leaves_no_partial_file(tmp_path, data_dir, monkeypatch):
    """The writer of predict and the demo (their predictions and the demo's gmsh fallback mesh): the mesh reads
    back the same (a 2D mesh with its zero z dropped, a point cloud as a point cloud), with the source
    file's boundary cells when given it; an interrupted write leaves no file."""
    mesh = read_mesh(data_dir / CYL)
    back = read_mesh(write_vtu(tmp_path / "m.vtu", mesh, {"p_pred": mesh.point_data["pressure"] * 2}))
    assert np.array_equal(back.points, mesh.points) and back.cells.keys() == mesh.cells.keys()
    assert all(np.array_equal(back.cells[t], c) for t, c in mesh.cells.items())
    assert list(back.point_data) == [*mesh.point_data, "p_pred"]
    assert np.array_equal(back.point_data["p_pred"], mesh.point_data["pressure"] * 2)
    cloud = Mesh.from_points(np.random.default_rng(0).random((50, 3)))
    back = read_mesh(write_vtu(tmp_path / "c.vtu", cloud, {"a": np.arange(50.0)}))
    assert back.is_point_cloud and np.array_equal(back.points, cloud.points)
    assert np.array_equal(back.point_data["a"], np.arange(50.0))
    naca = read_mesh(data_dir / NACA)
    def cell_types(path):
        return {c.type for c in meshio.read(path).cells}

    assert "line" not in naca.cells and cell_types(write_vtu(tmp_path / "n.vtu", naca)) == {"triangle"}
    assert cell_types(write_vtu(tmp_path / "n.vtu", naca, source=data_dir / NACA)) == {"triangle", "line"}
    with pytest.raises(ValueError, match="point field 'a' has 49 rows, the mesh 50 points"):
        write_vtu(tmp_path / "short.vtu", cloud, {"a": np.arange(49.0)})

    def killed_mid_write(path, mesh, file_format=None):
        Path(path).write_bytes(b"<VTKFile partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(meshio, "write", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        write_vtu(tmp_path / "killed.vtu", cloud)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.vtu", "m.vtu", "n.vtu"]


def test_write_prediction_fields_metrics_and_bad_shapes(tmp_path, data_dir):
    """<target>_pred / _error named by prediction_field_names (a target's selected components are its
    field's columns; by column where two targets share a field), metrics per column, no error field
    and no metrics without the truth."""
    mesh = read_mesh(data_dir / CYL)
    targets = ["velocity[0,1]", "pressure"]
    truth = torch.from_numpy(select_fields(mesh, targets))
    pred = truth * 3.0  # error 2 * truth: relative L2 2 per column
    metrics = write_prediction(tmp_path / "p.vtu", mesh, pred, targets, field_columns(mesh, targets),
                               source=data_dir / CYL)
    out = _fields(tmp_path / "p.vtu")
    for key, cols in (("velocity", slice(0, 2)), ("pressure", 2)):
        pred_name, error_name = prediction_field_names(key)
        np.testing.assert_array_equal(out[pred_name], pred[:, cols].numpy())
        np.testing.assert_array_equal(out[error_name], 2 * truth[:, cols].numpy())
    assert list(metrics) == ["velocity_0", "velocity_1", "pressure"]
    assert all(np.isclose(m["rel_l2"], 2.0) for m in metrics.values())
    p = truth[:, 2].numpy()
    assert np.isclose(metrics["pressure"]["mse"], np.mean((2 * p) ** 2))
    assert np.isclose(metrics["pressure"]["max_abs"], np.abs(2 * p).max())

    zero = mesh.point_data["velocity"].copy()
    zero[:, 2] = 0.0  # a 2D flow's third component: relative L2 is undefined (NaN), not inf
    mesh.point_data["velocity"] = zero
    metrics = write_prediction(tmp_path / "z.vtu", mesh, torch.ones(mesh.num_nodes, 3), ["velocity"],
                               field_columns(mesh, ["velocity"]))
    assert np.isnan(metrics["velocity_2"]["rel_l2"]) and np.isfinite(metrics["velocity_0"]["rel_l2"])
    assert metrics["velocity_2"]["mse"] == metrics["velocity_2"]["max_abs"] == 1.0

    split = ["velocity[0]", "velocity[1]"]  # two targets of one field: the outputs are named by column
    write_prediction(tmp_path / "s.vtu", mesh, pred[:, :2], split, field_columns(mesh, split))
    names = {"velocity_0_pred", "velocity_0_error", "velocity_1_pred", "velocity_1_error"}
    assert names <= set(_fields(tmp_path / "s.vtu"))

    del mesh.point_data["pressure"]  # no truth: the prediction alone
    assert write_prediction(tmp_path / "n.vtu", mesh, pred[:, 2:], ["pressure"], ["pressure"]) is None
    assert set(_fields(tmp_path / "n.vtu")) == {"velocity", "vorticity_mag", "pressure_pred"}
    with pytest.raises(ValueError, match=r"pred must have shape \[14831, 1\].*got \[14831, 3\]"):
        write_prediction(tmp_path / "bad.vtu", mesh, pred, ["pressure"], ["pressure"])
    with pytest.raises(ValueError, match=r"got \[10, 1\]"):
        write_prediction(tmp_path / "bad.vtu", mesh, pred[:10, 2:], ["pressure"], ["pressure"])
    assert not (tmp_path / "bad.vtu").exists()


@pytest.mark.parametrize("name,obj", [("write_vtu", write_vtu), ("write_prediction", write_prediction)])
def test_the_old_import_path_warns_and_gives_the_moved_function(name, obj):
    import meshshard.cli.predict as old

    with pytest.warns(DeprecationWarning, match=f"moved to meshshard.io.{name}"):
        assert getattr(old, name) is obj
    assert name not in old.__all__
    with pytest.raises(AttributeError):
        old.no_such_name


def test_write_pvd_round_trip(tmp_path):
    import meshio

    from meshshard.io import read_pvd, write_pvd

    pts = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    (tmp_path / "steps").mkdir()
    for k in range(3):
        meshio.write(tmp_path / "steps" / f"s {k}.vtu", meshio.Mesh(pts, [("triangle", np.array([[0, 1, 2]]))],
                                                                   point_data={"u": np.full(3, float(k))}))
    path = write_pvd(tmp_path / "case.pvd", [(0.5 * k, tmp_path / "steps" / f"s {k}.vtu") for k in range(3)])
    assert 'file="steps/s 0.vtu"' in path.read_text()
    traj = read_pvd(path)
    assert traj.times.tolist() == [0.0, 0.5, 1.0] and traj.fields["u"][:, 0, 0].tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(ValueError, match="strictly increasing"):
        write_pvd(tmp_path / "bad.pvd", [(1.0, "a.vtu"), (1.0, "b.vtu")])
    with pytest.raises(ValueError, match="no steps"):
        write_pvd(tmp_path / "bad.pvd", [])
    assert not (tmp_path / "bad.pvd").exists()


def test_a_cell_centred_prediction_is_written_as_cell_data_of_the_source(tmp_path, data_dir):
    """rae2822 (triangles, quads and marker lines) read with nodes='cells': <target>_pred / _error are
    cell fields of its volume cells in Mesh order, NaN on the boundary lines, and read back as the
    node fields of read_mesh(nodes='cells'); without the source file, the mesh's own volume cells."""
    src = data_dir / "rae2822_turb.su2"
    mesh = read_mesh(src, nodes="cells")
    pred = torch.from_numpy(2.0 * mesh.points[:, 1:2])
    metrics = write_prediction(tmp_path / "p.vtu", mesh, pred, ["pos[1]"], ["pos_1"], source=src)
    out = meshio.read(tmp_path / "p.vtu")
    assert "pos_pred" not in out.point_data and {c.type for c in out.cells} == {"triangle", "quad", "line"}
    at = {t: 0 for t in mesh.vertex_mesh.cells}
    offsets = {"triangle": 0, "quad": len(mesh.vertex_mesh.cells["triangle"])}
    for block, values in zip(out.cells, out.cell_data["pos_pred"]):
        if block.type == "line":
            assert np.isnan(values).all()
            continue
        start = offsets[block.type] + at[block.type]
        np.testing.assert_array_equal(values, pred[start:start + len(values), 0].numpy())
        at[block.type] += len(values)
    back = read_mesh(tmp_path / "p.vtu", nodes="cells")
    np.testing.assert_array_equal(back.point_data["pos_pred"], pred[:, 0].numpy())
    np.testing.assert_allclose(back.point_data["pos_error"], mesh.points[:, 1], rtol=0, atol=1e-15)
    np.testing.assert_allclose(metrics["pos_1"]["mse"], np.mean(mesh.points[:, 1] ** 2), rtol=1e-12)
    # no source: the volume cells and their cell fields, the new field among them
    mesh.vertex_mesh.cell_data["tag"] = np.arange(mesh.num_nodes) % 7
    back = read_mesh(write_vtu(tmp_path / "v.vtu", mesh, {"a": np.arange(mesh.num_nodes, dtype=float)}), nodes="cells")
    np.testing.assert_array_equal(back.point_data["a"], np.arange(mesh.num_nodes))
    np.testing.assert_array_equal(back.point_data["tag"], np.arange(mesh.num_nodes) % 7)
    with pytest.raises(ValueError, match="cell field 'a' has 3 rows, the mesh 22842 volume cells"):
        write_vtu(tmp_path / "short.vtu", mesh, {"a": np.zeros(3)})
    mesh.vertex_mesh = None
    with pytest.raises(ValueError, match="vertex_mesh is None"):
        write_vtu(tmp_path / "lost.vtu", mesh, {"a": np.zeros(3)})
