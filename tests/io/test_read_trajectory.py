"""read_trajectory on ParaView collections, XDMF time series and folders of numbered step files
written by the tests, and its errors."""
import meshio
import numpy as np
import pytest

import meshshard as ms
from meshshard.io import list_step_files, read_pvd, read_step_files, read_xdmf_series

# a 4 x 3 grid of nodes in two triangles per square
_X, _Y = np.meshgrid(np.linspace(0, 1, 4), np.linspace(0, 0.5, 3))
POINTS = np.c_[_X.ravel(), _Y.ravel()]
TRI = np.array([[j * 4 + i, j * 4 + i + 1, (j + 1) * 4 + i] for j in range(2) for i in range(3)]
               + [[j * 4 + i + 1, (j + 1) * 4 + i + 1, (j + 1) * 4 + i] for j in range(2) for i in range(3)])
N = len(POINTS)
TIMES = [0.0, 0.25, 0.5, 0.75]
NODE_TYPE = np.array([4, 0, 0, 5] * 3, dtype=np.int32)


def _step_data(k):
    rng = np.random.default_rng(k)
    return {"velocity": rng.standard_normal((N, 2)), "pressure": rng.standard_normal(N), "node_type": NODE_TYPE}


def _write_step(path, k, points=POINTS, cells=TRI, drop=()):
    data = {key: v[:len(points)] for key, v in _step_data(k).items() if key not in drop}
    meshio.write(path, meshio.Mesh(np.c_[points, np.zeros(len(points))], [("triangle", cells)], point_data=data))


def _write_pvd(path, entries):
    rows = "\n".join(f'    <DataSet timestep="{t}" group="" part="{part}" file="{f}"/>' for t, f, part in entries)
    path.write_text(f'<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n  <Collection>\n{rows}\n'
                    "  </Collection>\n</VTKFile>\n")


@pytest.fixture
def pvd_case(tmp_path):
    for k in range(len(TIMES)):
        _write_step(tmp_path / f"case_{k}.vtu", k)
    # entries out of order: the reader orders them by timestep
    order = [2, 0, 3, 1]
    _write_pvd(tmp_path / "case.pvd", [(TIMES[k], f"case_{k}.vtu", 0) for k in order])
    return tmp_path / "case.pvd"


def _check_round_trip(traj, times=TIMES):
    assert traj.num_steps == len(times) and traj.times.tolist() == times
    np.testing.assert_array_equal(traj.points, POINTS)
    np.testing.assert_array_equal(traj.cells["triangle"], TRI)
    assert sorted(traj.fields) == ["pressure", "velocity"] and sorted(traj.static) == ["node_type"]
    for k in range(len(times)):
        ref = _step_data(k)
        np.testing.assert_array_equal(traj.fields["velocity"][k], ref["velocity"])
        np.testing.assert_array_equal(traj.fields["pressure"][k], ref["pressure"][:, None])
    assert traj.fields["velocity"].shape == (len(times), N, 2) and traj.fields["pressure"].shape == (len(times), N, 1)
    np.testing.assert_array_equal(traj.static["node_type"][:, 0], NODE_TYPE)


def test_pvd_round_trip(pvd_case):
    traj = ms.read_trajectory(pvd_case)
    _check_round_trip(traj)
    assert traj.name == "case" and traj.source == pvd_case
    assert traj.edge_index().shape[1] == 2 * (3 * 3 + 2 * 4 + 6)  # horizontal, vertical, diagonal edges
    # the folder holding one .pvd reads as that collection
    assert ms.read_trajectory(pvd_case.parent).times.tolist() == TIMES


def test_fields_and_static_choices(pvd_case):
    t = read_pvd(pvd_case, fields=["velocity"])
    assert list(t.fields) == ["velocity"] and t.static == {}
    t = read_pvd(pvd_case, static=())  # nothing static: node_type per step
    assert t.fields["node_type"].shape == (4, N, 1) and t.static == {}
    with pytest.raises(ValueError, match=r"field 'velocity' was named static but changes: step 1 \(case_1.vtu\)"):
        read_pvd(pvd_case, static=["velocity"])
    with pytest.raises(ValueError, match=r"missing field: step 0 \(case_0.vtu\) has no point field 'temperature'"):
        read_pvd(pvd_case, fields=["temperature"])


def test_pvd_step_missing_a_field(pvd_case):
    _write_step(pvd_case.parent / "case_3.vtu", 3, drop=("pressure",))
    with pytest.raises(ValueError, match=r"missing field: step 3 \(case_3.vtu\) has no point field 'pressure' "
                                         r"\(step 0, step 0 \(case_0.vtu\), has it\)"):
        ms.read_trajectory(pvd_case)


@pytest.mark.parametrize("change,match", [
    (dict(points=POINTS + [0.0, 1e-3]), r"the nodes of step 2 \(case_2.vtu\) differ from those of step 0 .* by up to 0.001"),
    (dict(cells=TRI[:, [0, 2, 1]]), r"the cells of step 2 \(case_2.vtu\) differ"),
    (dict(points=POINTS[:-1], cells=TRI[:-1]), r"step 2 \(case_2.vtu\) has 11 nodes in 2D, step 0 .* has 12"),
])
def test_pvd_steps_with_different_meshes(pvd_case, change, match):
    if "cells" in change and "points" in change:  # the last node dropped: keep only triangles not using it
        change["cells"] = TRI[(TRI < N - 1).all(axis=1)]
    _write_step(pvd_case.parent / "case_2.vtu", 2, **change)
    with pytest.raises(ValueError, match="steps with different meshes: " + match):
        ms.read_trajectory(pvd_case)


def test_pvd_errors(tmp_path):
    _write_step(tmp_path / "a.vtu", 0)
    _write_step(tmp_path / "b.vtu", 1)
    one = tmp_path / "one.pvd"
    _write_pvd(one, [(0.0, "a.vtu", 0)])
    with pytest.raises(ValueError, match=r"at least 2 time steps, found 1 \(step 0 \(a.vtu\)\).*single step"):
        ms.read_trajectory(one)
    dup = tmp_path / "dup.pvd"
    _write_pvd(dup, [(0.0, "a.vtu", 0), (0.0, "b.vtu", 0)])
    with pytest.raises(ValueError, match=r"two steps at timestep 0.0: a.vtu and b.vtu"):
        read_pvd(dup)
    parts = tmp_path / "parts.pvd"
    _write_pvd(parts, [(0.0, "a.vtu", 0), (0.0, "b.vtu", 1)])
    with pytest.raises(ValueError, match=r"several parts per time step \(part=\['0', '1'\]\)"):
        read_pvd(parts)
    gone = tmp_path / "gone.pvd"
    _write_pvd(gone, [(0.0, "a.vtu", 0), (1.0, "missing.vtu", 0)])
    with pytest.raises(FileNotFoundError, match="missing.vtu"):
        read_pvd(gone)
    bad = tmp_path / "bad.pvd"
    bad.write_text("<VTKFile type='UnstructuredGrid'><Piece/></VTKFile>")
    with pytest.raises(ValueError, match="not a ParaView collection"):
        read_pvd(bad)
    bad.write_text("not xml at all <")
    with pytest.raises(ValueError, match="not a readable ParaView collection"):
        read_pvd(bad)
    bad.write_text("<VTKFile type='Collection'><Collection/></VTKFile>")
    with pytest.raises(ValueError, match="no <DataSet> entries"):
        read_pvd(bad)


def test_xdmf_time_series_round_trip(tmp_path):
    path = tmp_path / "series.xdmf"
    with meshio.xdmf.TimeSeriesWriter(path, data_format="XML") as w:
        w.write_points_cells(np.c_[POINTS, np.zeros(N)], [("triangle", TRI)])
        for k, t in enumerate(TIMES):
            w.write_data(t, point_data=_step_data(k))
    traj = ms.read_trajectory(path)
    _check_round_trip(traj)
    assert traj.points.shape == (N, 2)  # the zero z column of a planar mesh is dropped, as read_mesh does
    np.testing.assert_array_equal(read_xdmf_series(path, fields=["pressure"]).fields["pressure"][:, :, 0],
                                  np.stack([_step_data(k)["pressure"] for k in range(4)]))


def _xml_numbers(a):
    return " ".join(map(repr, np.asarray(a).ravel().tolist()))


def test_xdmf_that_is_not_a_time_series(tmp_path):
    path = tmp_path / "single.xdmf"  # one uniform grid, as a steady mesh is written
    path.write_text(
        '<Xdmf Version="3.0"><Domain><Grid Name="mesh" GridType="Uniform">'
        f'<Geometry GeometryType="XY"><DataItem DataType="Float" Dimensions="{N} 2" Format="XML" Precision="8">'
        f'{_xml_numbers(POINTS)}</DataItem></Geometry>'
        f'<Topology TopologyType="Triangle" NumberOfElements="{len(TRI)}"><DataItem DataType="Int" '
        f'Dimensions="{len(TRI)} 3" Format="XML">{_xml_numbers(TRI)}</DataItem></Topology>'
        '</Grid></Domain></Xdmf>')
    with pytest.raises(ValueError, match=r"not an XDMF time series meshio can read.*read_mesh"):
        ms.read_trajectory(path)


def test_xdmf_step_with_its_own_mesh(tmp_path):
    path = tmp_path / "series.xdmf"
    with meshio.xdmf.TimeSeriesWriter(path, data_format="XML") as w:
        w.write_points_cells(np.c_[POINTS, np.zeros(N)], [("triangle", TRI)])
        for k, t in enumerate(TIMES):
            w.write_data(t, point_data=_step_data(k))
    text = path.read_text()
    include = text[text.index("<ns0:include"):text.index("/>", text.index("<ns0:include")) + 2]
    assert text.count(include) == len(TIMES)  # every step refers to the one mesh
    moved = ('<Geometry GeometryType="XYZ"><DataItem DataType="Float" Dimensions="{} 3" Format="XML" '
             'Precision="8">{}</DataItem></Geometry>').format(N, _xml_numbers(np.c_[POINTS + 0.5, np.zeros(N)]))
    first = text.index(include) + len(include)
    second = text.index(include, first)
    path.write_text(text[:second] + moved + text[second + len(include):])
    with pytest.raises(ValueError, match=r"steps with different meshes: step 1 of .* defines its own <Geometry>"):
        read_xdmf_series(path)


def test_xdmf_single_step(tmp_path):
    path = tmp_path / "one.xdmf"
    with meshio.xdmf.TimeSeriesWriter(path, data_format="XML") as w:
        w.write_points_cells(np.c_[POINTS, np.zeros(N)], [("triangle", TRI)])
        w.write_data(0.0, point_data=_step_data(0))
    with pytest.raises(ValueError, match="at least 2 time steps, found 1"):
        read_xdmf_series(path)


def test_numbered_step_files_in_natural_order(tmp_path):
    numbers = [0, 2, 10, 1]
    for k, n in enumerate(numbers):
        _write_step(tmp_path / f"step_{n}.vtu", k)
    (tmp_path / "notes.txt").write_text("not a mesh")
    (tmp_path / ".step_5.vtu.1234.tmp").write_text("a hidden temporary")
    assert [p.name for p in list_step_files(tmp_path)] == ["step_0.vtu", "step_1.vtu", "step_2.vtu", "step_10.vtu"]
    traj = ms.read_trajectory(tmp_path)
    assert traj.times.tolist() == [0.0, 1.0, 2.0, 10.0] and traj.name == tmp_path.name
    for i, n in enumerate([0, 1, 2, 10]):
        np.testing.assert_array_equal(traj.fields["velocity"][i], _step_data(numbers.index(n))["velocity"])


def test_step_files_of_several_series(tmp_path):
    for k in range(3):
        _write_step(tmp_path / f"step_{k:04d}.vtu", k)
        _write_step(tmp_path / f"other{k}.vtk", k)
    with pytest.raises(ValueError, match=r"several series: other<n>.vtk \(3 files\), step_<n>.vtu \(3 files\); "
                                         r"choose one with pattern="):
        ms.read_trajectory(tmp_path)
    traj = ms.read_trajectory(tmp_path, pattern="step_*.vtu")
    assert traj.num_steps == 3 and traj.times.tolist() == [0.0, 1.0, 2.0]
    assert read_step_files(tmp_path, pattern="other*.vtk").num_steps == 3
    _write_step(tmp_path / "step_1.vtu", 1)
    with pytest.raises(ValueError, match=r"step_0001.vtu and step_1.vtu have the same step number 1"):
        read_step_files(tmp_path, pattern="step_*.vtu")


def test_unknown_layouts(tmp_path):
    _write_step(tmp_path / "mesh.vtu", 0)
    with pytest.raises(ValueError, match=r"unknown trajectory layout: .*mesh.vtu is a single file of suffix '.vtu'.*"
                                         r"ParaView collection"):
        ms.read_trajectory(tmp_path / "mesh.vtu")
    with pytest.raises(ValueError, match=r"unknown trajectory layout: .* is a folder without .*'mesh.vtu'"):
        ms.read_trajectory(tmp_path)
    with pytest.raises(FileNotFoundError, match="trajectory not found"):
        ms.read_trajectory(tmp_path / "nothing.pvd")
    for name in ("a.pvd", "b.pvd"):
        _write_pvd(tmp_path / name, [(0.0, "mesh.vtu", 0), (1.0, "mesh.vtu", 0)])
    with pytest.raises(ValueError, match=r"several ParaView collections \['a.pvd', 'b.pvd'\]: pass one"):
        ms.read_trajectory(tmp_path)
    with pytest.raises(IndexError, match="holds one trajectory"):
        ms.read_trajectory(tmp_path / "a.pvd", index=1)


def test_iter_trajectories_of_a_single_case(pvd_case):
    trajs = list(ms.io.iter_trajectories(pvd_case))
    assert len(trajs) == 1 and trajs[0].times.tolist() == TIMES


def test_steps_with_polyhedra_are_refused_by_name(tmp_path):
    """A Trajectory holds [n, k] cells only: steps with polyhedra are named, not read without them."""
    from meshshard.io import write_vtu
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    m = ms.read_mesh(tmp_path / "snappy" / "case.foam")
    (tmp_path / "steps").mkdir()
    for i in range(2):
        write_vtu(tmp_path / "steps" / f"step_{i}.vtu", m, {"u": np.full(m.num_nodes, float(i))})
    with pytest.raises(ValueError, match="polyhedral cells"):
        read_step_files(tmp_path / "steps")
