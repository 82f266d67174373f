"""The Trajectory container: shapes, checks, per-step meshes, graph."""
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, Trajectory
from meshshard.io import knn_graph as ms_knn

POINTS = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
TRI = np.array([[0, 1, 2], [1, 3, 2]])


def _traj(**kw):
    args = dict(fields={"u": np.arange(3 * 4 * 2, dtype=np.float32).reshape(3, 4, 2), "p": np.ones((3, 4))},
                static={"node_type": np.array([0, 4, 6, 0], dtype=np.int32)}, times=[0.0, 0.5, 1.0])
    args.update(kw)
    return Trajectory(POINTS, {"triangle": TRI}, **args)


def test_shapes_and_accessors():
    t = _traj(name="case")
    assert t.num_steps == 3 and t.num_nodes == 4 and t.dim == 2
    assert t.fields["u"].shape == (3, 4, 2) and t.fields["u"].dtype == np.float32
    assert t.fields["p"].shape == (3, 4, 1)  # a scalar field is one column
    assert t.static["node_type"].shape == (4, 1) and t.static["node_type"].dtype == np.int32
    assert t.times.dtype == np.float64 and t.times.tolist() == [0.0, 0.5, 1.0]
    assert t.field_names == ["node_type", "p", "u"]
    assert np.array_equal(t.field("u"), t.fields["u"])
    nt = t.field("node_type")
    assert nt.shape == (3, 4, 1) and np.array_equal(nt[2], t.static["node_type"])
    with pytest.raises(KeyError, match=r"no field 'v'; per step: \['p', 'u'\], static: \['node_type'\]"):
        t.field("v")
    assert "Trajectory(name='case', num_steps=3, num_nodes=4" in repr(t)


def test_step_is_a_mesh_with_that_steps_fields():
    t = _traj()
    m = t.step(1)
    assert isinstance(m, Mesh) and np.array_equal(m.cells["triangle"], TRI)
    assert np.array_equal(m.point_data["u"], t.fields["u"][1])
    assert np.array_equal(m.point_data["node_type"], t.static["node_type"])
    assert np.array_equal(t.step(-1).point_data["u"], t.fields["u"][2])
    with pytest.raises(IndexError, match="step 3 out of range for a trajectory of 3 steps"):
        t.step(3)


def test_edge_index_from_cells_or_given():
    t = _traj()
    assert torch.equal(t.edge_index(), t.mesh.edge_index())
    assert t.edge_index().shape == (2, 10)
    cloud = Trajectory(POINTS, fields={"u": np.zeros((2, 4, 1))}, times=[0, 1])
    with pytest.raises(ValueError, match="no cells"):
        cloud.edge_index()
    assert torch.equal(cloud.edge_index(knn=2), ms_knn(POINTS, 2))
    given = torch.tensor([[0, 1], [1, 0]])
    assert torch.equal(Trajectory(POINTS, fields={}, times=[0, 1], edge_index=given).edge_index(), given)
    with pytest.raises(ValueError, match="outside"):
        Trajectory(POINTS, fields={}, times=[0, 1], edge_index=torch.tensor([[0], [4]]))


@pytest.mark.parametrize("kw,match", [
    (dict(times=[0.0]), r"at least 2 time steps, got 1.*single step"),
    (dict(times=[0.0, 1.0, 1.0]), r"strictly increasing: step 2 has time 1.0 after 1.0"),
    (dict(times=[0.0, np.nan, 1.0]), "finite"),
    (dict(times=[0.0, 1.0]), r"field 'u' must have shape \[T=2, N=4, F\]"),
    (dict(static={"node_type": np.zeros(3)}), r"static field 'node_type' must have shape \[N=4, F\]"),
    (dict(static={"u": np.zeros(4)}), "both as static and per step"),
])
def test_bad_shapes_and_times_raise(kw, match):
    with pytest.raises(ValueError, match=match):
        _traj(**kw)


def test_bad_mesh_raises():
    with pytest.raises(ValueError, match="outside"):
        Trajectory(POINTS, {"triangle": TRI + 2}, fields={}, times=[0, 1])
