"""meshshard.io.graph: a mesh's graph is its element edges, a point cloud's its kNN graph; what is
recorded about it; the deprecated path meshshard.datasets.mesh_graph."""
import numpy as np
import pytest
import torch

from meshshard.io import DEFAULT_KNN, Mesh, knn_graph, mesh_graph, mesh_graph_info


def _square():
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    return Mesh(pts, {"triangle": np.array([[0, 1, 2], [0, 2, 3]])})


def test_cells_give_element_edges_and_a_cloud_its_knn_graph():
    m = _square()
    assert torch.equal(mesh_graph(m), m.edge_index())
    assert mesh_graph_info(m) == {"graph": "mesh_edges", "cell_types": ["triangle"]}
    cloud = Mesh.from_points(np.random.default_rng(0).random((30, 3)))
    assert torch.equal(mesh_graph(cloud, 4), knn_graph(cloud.points, 4))
    assert mesh_graph(cloud).shape == (2, 30 * DEFAULT_KNN)
    assert mesh_graph_info(cloud, 4) == {"graph": "knn", "knn_k": 4}


def test_a_bad_k_names_the_cloud():
    cloud = Mesh.from_points(np.random.default_rng(0).random((5, 3)))
    with pytest.raises(ValueError, match="point cloud: knn:"):
        mesh_graph(cloud, 0)


@pytest.mark.parametrize("module", ["meshshard.datasets", "meshshard.datasets.fields"])
def test_the_old_import_path_warns_and_gives_the_moved_function(module):
    import importlib

    old = importlib.import_module(module)
    vars(old).pop("mesh_graph", None)  # the package stores a lazily read name: read it afresh
    with pytest.warns(DeprecationWarning, match="mesh_graph moved from meshshard.datasets to meshshard.io"):
        assert old.mesh_graph is mesh_graph
    assert "mesh_graph" not in old.__all__
