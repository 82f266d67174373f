"""meshshard.io.pieces: a subset of a .pvtu's pieces read as they are; pieces and a master written
back that VTK's parallel reader opens and read_mesh merges to the original mesh."""
import numpy as np
import pytest

from meshshard.io import read_mesh
from meshshard.io.pieces import piece_sources, pieces_of_rank, read_pieces, write_piece, write_pvtu
from tests.io._piece_files import delaunay_mesh, edges_by_coordinates, write_split, write_whole

import vtk  # the [vtk] extra: missing means fail, not skip


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pieces")
    mesh = delaunay_mesh(0, 120, 3)
    return tmp, mesh, write_split(tmp / "m.pvtu", *mesh, [0.1, 0.3, 0.75], ids=False)


def test_sources_and_rank_blocks(split):
    tmp, _, path = split
    assert [p.name for p in piece_sources(path)] == [f"m_{k}.vtu" for k in range(4)]
    assert [pieces_of_rank(7, 3, r) for r in range(3)] == [[0, 1], [2, 3], [4, 5, 6]]
    assert sum((pieces_of_rank(5, 4, r) for r in range(4)), []) == list(range(5))
    with pytest.raises(ValueError, match="2 pieces cannot give each of 3 ranks"):
        pieces_of_rank(2, 3, 0)
    with pytest.raises(ValueError, match="not a parallel VTK file"):
        piece_sources(tmp / "m" / "m_0.vtu")
    with pytest.raises(ValueError, match=r"has pieces 0..3, asked for \[4\]"):
        read_pieces(path, [1, 4])


def test_subset_is_the_pieces_concatenated(split):
    _, (pts, cells, fields, cfields), path = split
    single = [read_pieces(path, [k]) for k in range(4)]
    both = read_pieces(path, [1, 3])
    assert both.pieces == [1, 3] and both.global_ids is None and not both.dropped
    np.testing.assert_array_equal(both.points, np.concatenate([single[1].points, single[3].points]))
    np.testing.assert_array_equal(both.point_data["q"], np.concatenate([single[1].point_data["q"],
                                                                        single[3].point_data["q"]]))
    assert both.num_points == single[1].num_points + single[3].num_points
    # every piece's cells point at its own rows, after the previous piece's
    tets = both.cells()["tetra"]
    assert len(tets) == len(single[1].cells()["tetra"]) + len(single[3].cells()["tetra"])
    np.testing.assert_array_equal(tets[len(single[1].cells()["tetra"]):],
                                  single[3].cells()["tetra"] + single[1].num_points)
    # the pieces together hold every cell once, and border points more than once
    assert sum(len(s.cells()["tetra"]) for s in single) == len(cells)
    assert sum(s.num_points for s in single) > len(pts)
    np.testing.assert_array_equal(np.sort(np.concatenate([s.cell_data["c"] for s in single])), cfields["c"])


def test_global_ids_and_fields_only_some_pieces_have(tmp_path):
    mesh = delaunay_mesh(1, 60, 3)
    path = write_split(tmp_path / "m.pvtu", *mesh, [0.5], ids=True)
    ps = read_pieces(path, [0, 1])
    assert "GlobalPointIds" not in ps.point_data
    np.testing.assert_array_equal(mesh[0][ps.global_ids], ps.points)
    # a field only one piece has is left out (and named)
    import meshio

    other = tmp_path / "m" / "m_1.vtu"
    m = meshio.read(other)
    m.point_data["extra"] = np.ones(len(m.points))
    meshio.write(other, m)
    ps = read_pieces(path, [0, 1])
    assert "extra" not in ps.point_data and ps.dropped == ["extra"]
    assert "extra" in read_pieces(path, [1]).point_data


@pytest.mark.parametrize("dim", [2, 3])
def test_written_pieces_open_in_vtk_and_merge_to_the_mesh(tmp_path, dim):
    pts, cells, fields, cfields = delaunay_mesh(2, 80, dim)
    path = write_split(tmp_path / "in.pvtu", pts, cells, fields, cfields, [0.4, 0.6], ids=False)
    out = tmp_path / "out" / "r.pvtu"
    names = []
    for k, block in enumerate([[0], [1, 2]]):  # two written pieces from three read ones
        ps = read_pieces(path, block)
        name = f"r/r_{k}.vtu"
        pd = {**ps.point_data, "flag": ps.points[:, 0] > 0.5, "n": np.arange(ps.num_points, dtype=np.int32)}
        write_piece(out.parent / name, ps.points[:, :dim], ps.cell_types, ps.cell_offsets, ps.cell_conn, pd,
                    ps.cell_data)
        names.append(name)
    write_pvtu(out, names, pd, ps.cell_data)
    assert not list(out.parent.glob(".*.tmp")) and not list((out.parent / "r").glob(".*.tmp"))
    reader = vtk.vtkXMLPUnstructuredGridReader()
    reader.SetFileName(str(out))
    reader.Update()
    ug = reader.GetOutput()
    assert ug.GetNumberOfCells() == len(cells)
    assert {ug.GetPointData().GetArrayName(i) for i in range(ug.GetPointData().GetNumberOfArrays())} == \
        {"q", "p", "flag", "n"}
    merged, whole = read_mesh(out), read_mesh(write_whole(tmp_path / "whole.vtu", pts, cells, fields, cfields))
    assert merged.num_nodes == whole.num_nodes == len(pts) and merged.dim == whole.dim == dim
    a, b = np.lexsort(merged.points.T), np.lexsort(whole.points.T)
    np.testing.assert_array_equal(merged.points[a], whole.points[b])
    for name in ("q", "p"):
        np.testing.assert_array_equal(merged.point_data[name][a], whole.point_data[name][b])
    assert edges_by_coordinates(merged.points, merged.edge_index()) == \
        edges_by_coordinates(whole.points, whole.edge_index())
    assert sorted(merged.cell_data["c"]) == sorted(whole.cell_data["c"])


def test_write_errors(tmp_path):
    with pytest.raises(ValueError, match="point field 'v' has 2 rows, the piece 3 points"):
        write_piece(tmp_path / "a.vtu", np.zeros((3, 3)), np.array([5]), np.array([0, 3]), np.array([0, 1, 2]),
                    {"v": np.zeros(2)})
    with pytest.raises(ValueError, match="no pieces"):
        write_pvtu(tmp_path / "a.pvtu", [])
    assert not list(tmp_path.iterdir())


def test_pieces_with_polyhedra_merge_whole_and_are_refused_piece_wise(tmp_path):
    """Two pieces of polyhedral meshes (the second shifted apart): read_mesh merges them with every
    polyhedron renumbered into the merged points; piece-wise reading names what it does not take."""
    from meshshard.io import Mesh, Polyhedra, write_vtu
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    m = read_mesh(tmp_path / "snappy" / "case.foam")
    for i in range(2):
        shifted = Mesh(m.points + [10.0 * i, 0, 0], cells=m.cells, polyhedra=m.polyhedra,
                       cell_data={"c": np.arange(m.num_cells) + 100 * i})
        write_vtu(tmp_path / f"piece{i}.vtu", shifted)
    write_pvtu(tmp_path / "m.pvtu", ["piece0.vtu", "piece1.vtu"], cell_data={"c": np.zeros(1, np.int64)})
    merged = read_mesh(tmp_path / "m.pvtu")
    n = m.num_nodes
    assert merged.num_nodes == 2 * n and merged.cell_counts() == {t: 2 * c for t, c in m.cell_counts().items()}
    assert merged.polyhedra == Polyhedra.concatenate([m.polyhedra, m.polyhedra.renumbered(np.arange(n) + n)])
    # cell fields follow the Mesh order: fixed types piece by piece, then the polyhedra piece by piece
    k = m.num_cells - 2
    c = merged.cell_data["c"]
    assert c[-4:].tolist() == [14, 15, 114, 115] and sorted(c[:-4].tolist()) == list(range(k)) + list(range(100, 100 + k))
    with pytest.raises(ValueError, match="polyhedral cells, which piece-wise reading does not take"):
        read_pieces(tmp_path / "m.pvtu", [0]).cells()
