"""Mesh construction and validation."""
import numpy as np
import pytest
import torch

from meshshard.io import Mesh


def test_from_points_and_properties():
    pts = np.random.default_rng(0).random((7, 3)).astype(np.float32)
    m = Mesh.from_points(pts, point_data={"p": np.arange(7)})
    assert m.points.dtype == np.float64 and m.num_nodes == 7 and m.dim == 3
    assert m.num_cells == 0 and m.is_point_cloud and m.topological_dim is None
    assert np.array_equal(m.point_data["p"], np.arange(7))
    assert "point cloud" in repr(m) and "num_nodes=7" in repr(m)
    m2 = Mesh.from_points(torch.zeros(4, 2))
    assert m2.dim == 2


@pytest.mark.parametrize("bad,exc", [
    (np.zeros((5,)), ValueError), (np.zeros((5, 4)), ValueError), (np.zeros((0, 3)), ValueError),
    (np.array([[0, 0, np.nan]]), ValueError), (np.array([[0, np.inf]]), ValueError),
    (np.array([["a", "b"]]), TypeError),
])
def test_from_points_rejects_bad_points(bad, exc):
    with pytest.raises(exc):
        Mesh.from_points(bad)


def test_rejects_bad_cells_and_point_data():
    pts = np.zeros((4, 2))
    with pytest.raises(ValueError, match="outside"):
        Mesh(pts, cells={"triangle": [[0, 1, 4]]})
    with pytest.raises(ValueError, match="outside"):
        Mesh(pts, cells={"triangle": [[0, -1, 2]]})
    with pytest.raises(TypeError, match="integer"):
        Mesh(pts, cells={"triangle": np.array([[0.0, 1.0, 2.0]])})
    with pytest.raises(ValueError, match="one topological dimension"):
        Mesh(pts, cells={"triangle": [[0, 1, 2]], "line": [[0, 1]]})
    with pytest.raises(ValueError, match="4 rows"):
        Mesh(pts, point_data={"p": np.zeros(3)})
    with pytest.raises(ValueError, match="no cells of"):
        Mesh(pts, cells={"triangle": [[0, 1, 2]]}, cell_sets={"wall": {"line": [0]}})


def test_cell_sets_give_node_sets():
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0]])
    m = Mesh(pts, cells={"triangle": [[0, 1, 2], [0, 2, 3]]},
             boundary_cells={"line": [[0, 1], [1, 2], [2, 3], [3, 0]]},
             cell_sets={"bottom": {"line": [0]}, "right_top": {"line": [1, 2]}})
    assert m.node_sets["bottom"].tolist() == [0, 1]
    assert m.node_sets["right_top"].tolist() == [1, 2, 3]
    assert m.node_sets["bottom"].dtype == torch.long
    assert m.num_cells == 2 and m.topological_dim == 2


def test_cell_data_and_fixed_graph_are_checked():
    pts = np.array([[0, 0], [1, 0], [1, 1], [0, 1.0]])
    m = Mesh(pts, cells={"triangle": [[0, 1, 2], [0, 2, 3]]}, cell_data={"c": [1.0, 2.0]})
    assert m.cell_data["c"].tolist() == [1.0, 2.0] and "cell_data=['c']" in repr(m)
    with pytest.raises(ValueError, match="one row per volume cell"):
        Mesh(pts, cells={"triangle": [[0, 1, 2]]}, cell_data={"c": [1.0, 2.0]})
    g = Mesh(pts, graph=torch.tensor([[0, 1], [1, 0]]))
    assert not g.is_point_cloud and g.edge_index().tolist() == [[0, 1], [1, 0]] and "point cloud" not in repr(g)
    with pytest.raises(ValueError, match="outside"):
        Mesh(pts, graph=torch.tensor([[0], [4]]))
    with pytest.raises(ValueError, match=r"\[2, E\]"):
        Mesh(pts, graph=torch.zeros(3, 1, dtype=torch.long))
