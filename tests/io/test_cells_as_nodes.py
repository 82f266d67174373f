"""read_mesh(nodes='cells'): cell centres, cell fields and the cell graph; boundary sets carried to cells."""
import meshio
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, cell_adjacency, cells_as_nodes, read_mesh
from tests.io.test_cell_graph import mixed_2d, mixed_3d


def test_cell_fields_become_node_fields_through_a_file(tmp_path):
    pts, cells = mixed_2d()
    n = {t: len(c) for t, c in cells.items()}
    rng = np.random.default_rng(0)
    fields = {t: rng.random((k, 2)) for t, k in n.items()}
    # meshio keeps one block per type; the volume cell field comes back in the Mesh's cell order
    meshio.write(tmp_path / "m.vtu", meshio.Mesh(np.c_[pts, np.zeros(len(pts))], list(cells.items()),
                                                cell_data={"u": [fields[t] for t in cells]}))
    vertex = read_mesh(tmp_path / "m.vtu")
    assert vertex.nodes == "points" and not vertex.point_data
    np.testing.assert_array_equal(vertex.cell_data["u"], np.concatenate([fields[t] for t in vertex.cells]))
    m = read_mesh(tmp_path / "m.vtu", nodes="cells")
    assert m.nodes == "cells" and m.vertex_mesh is not None and m.num_nodes == sum(n.values())
    assert not m.is_point_cloud and m.dim == 2
    np.testing.assert_array_equal(m.point_data["u"], vertex.cell_data["u"])
    corners = np.concatenate([pts[c].mean(1) for c in vertex.cells.values()])
    np.testing.assert_allclose(m.points, corners, atol=1e-12)
    assert m.edge_index().tolist() == cell_adjacency(vertex.cells).tolist()
    from meshshard.io import point_field_names

    assert point_field_names(tmp_path / "m.vtu", nodes="cells") == ["u"]
    assert "nodes=cells" in repr(m)


def test_boundary_faces_name_the_cells_that_own_them():
    pts, cells = mixed_3d()
    # boundary quads on x = 3 would be split (tets there): take the x = 0 side (wedge quads)
    x0 = np.flatnonzero(pts[:, 0] == 0)
    quads = []
    for w in cells["wedge"]:
        for f in ((0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)):
            face = w[list(f)]
            if np.isin(face, x0).all():
                quads.append(face)
    quads = np.array(quads)
    vertex = Mesh(pts, cells=cells, boundary_cells={"quad": quads}, cell_sets={"inlet": {"quad": np.arange(len(quads))},
                                                                                "pyr": {"pyramid": [0, 2]}},
                  node_sets=None)
    vertex.node_sets["corner"] = torch.tensor([0])  # a node-only set: no cell has a face in it
    m = cells_as_nodes(vertex)
    # reference: the wedges with all corners of some face on x = 0, by brute force
    ref = [i for i, w in enumerate(cells["wedge"]) if any(np.isin(w[list(f)], x0).all()
                                                           for f in ((0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)))]
    assert m.node_sets["inlet"].tolist() == ref and len(ref) == 4
    off = len(cells["wedge"]) + len(cells["hexahedron"])
    assert m.node_sets["pyr"].tolist() == [off, off + 2]
    assert m.node_sets["corner"].tolist() == []


def test_su2_markers_become_cell_sets(data_dir):
    vertex = read_mesh(data_dir / "rae2822_turb.su2")
    m = read_mesh(data_dir / "rae2822_turb.su2", nodes="cells")
    assert set(m.node_sets) == set(vertex.node_sets) and m.num_nodes == vertex.num_cells
    lines = vertex.boundary_cells["line"]
    for name, per_type in vertex.cell_sets.items():
        # reference: cells holding both ends of one of the marker's lines, by a node -> cells lookup
        want = set()
        rows = [set(r[:4 if t == "quad" else 3].tolist()) for t, c in vertex.cells.items() for r in c]
        by_node = {}
        for i, r in enumerate(rows):
            for v in r:
                by_node.setdefault(v, set()).add(i)
        for a, b in lines[per_type["line"]].tolist():
            want |= by_node[a] & by_node[b]
        assert m.node_sets[name].tolist() == sorted(want) and len(want) == len(per_type["line"])


def test_bad_requests(tmp_path, data_dir):
    np.savez(tmp_path / "c.npz", points=np.random.default_rng(0).random((5, 3)))
    with pytest.raises(ValueError, match="no cells"):
        read_mesh(tmp_path / "c.npz", nodes="cells")
    with pytest.raises(ValueError, match="'points'.*'cells'"):
        read_mesh(data_dir / "naca0012_inviscid.su2", nodes="faces")
