"""VTK's formats through the vtk package: files written by vtk itself (and an OpenFOAM case as text)."""
import meshio
import numpy as np
import pytest
from meshshard.io import read_mesh
from tests.io._openfoam_case import write_openfoam_block, write_openfoam_polyhedra

import vtk  # installed by the [vtk] extra that CI installs: missing means fail, not skip
from vtkmodules.util.numpy_support import numpy_to_vtk


def _array(name, values):
    arr = numpy_to_vtk(np.ascontiguousarray(values), deep=True)
    arr.SetName(name)
    return arr


def _polydata(points, polys, point_fields=(), cell_fields=()):
    pd = vtk.vtkPolyData()
    p = vtk.vtkPoints()
    p.SetData(numpy_to_vtk(np.ascontiguousarray(points, dtype=np.float64), deep=True))
    pd.SetPoints(p)
    ca = vtk.vtkCellArray()
    for c in polys:
        ca.InsertNextCell(len(c), list(c))
    pd.SetPolys(ca)
    for name, v in point_fields:
        pd.GetPointData().AddArray(_array(name, v))
    for name, v in cell_fields:
        pd.GetCellData().AddArray(_array(name, v))
    return pd


def _surface():
    """A 3-D surface: a 3 x 2 grid of quads folded up at x = 2, plus a pentagon and two triangles."""
    pts = np.array([(i, j, max(0, i - 2)) for j in range(3) for i in range(4)], float)
    pid = lambda i, j: i + 4 * j  # noqa: E731
    polys = [(pid(i, j), pid(i + 1, j), pid(i + 1, j + 1), pid(i, j + 1)) for j in range(2) for i in range(3)]
    extra = len(pts)
    pts = np.vstack([pts, [(-1, 0.5, 0), (-1, 1.5, 0), (-0.5, 2.5, 0)]])
    polys += [(pid(0, 0), pid(0, 1), extra + 1, extra), (pid(0, 1), pid(0, 2), extra + 2, extra + 1),
              (extra, extra + 1, extra + 2), (pid(0, 0), extra, extra + 2, pid(0, 2), pid(0, 1))]
    return pts, polys


def _writer(cls, path, data):
    w = cls()
    w.SetFileName(str(path))
    w.SetInputData(data)
    assert w.Write() == 1
    return path


def _ref_edges(polys):
    ref = set()
    for c in polys:
        for a, b in zip(c, c[1:] + c[:1]):
            ref |= {(a, b), (b, a)}
    return ref


@pytest.mark.parametrize("suffix", [".vtp", ".vtk"])
def test_surface_polydata_gives_its_edge_graph_and_fields(tmp_path, suffix):
    pts, polys = _surface()
    rng = np.random.default_rng(0)
    pf, cf = rng.random((len(pts), 3)), rng.random(len(polys))
    pd = _polydata(pts, polys, [("v", pf)], [("c", cf)])
    cls = vtk.vtkXMLPolyDataWriter if suffix == ".vtp" else vtk.vtkPolyDataWriter
    m = read_mesh(_writer(cls, tmp_path / f"s{suffix}", pd))
    assert m.dim == 3 and m.num_nodes == len(pts) and m.topological_dim == 2
    np.testing.assert_array_equal(m.points, pts)
    np.testing.assert_allclose(m.point_data["v"], pf)
    assert set(map(tuple, m.edge_index().t().tolist())) == _ref_edges(polys)
    assert sorted(m.cells) == ["polygon5", "quad", "triangle"]
    # cell data follows the Mesh's cell order (types in order, rows in file order)
    order = [i for t in m.cells for i, c in enumerate(polys) if {3: "triangle", 4: "quad"}.get(len(c), f"polygon{len(c)}") == t]
    np.testing.assert_allclose(m.cell_data["c"], cf[order])
    cm = read_mesh(tmp_path / f"s{suffix}", nodes="cells")
    assert cm.num_nodes == len(polys)
    np.testing.assert_allclose(cm.point_data["c"], cf[order])


def _tet_grid(rng, n=60, coincident=False):
    """An unstructured tetrahedral grid of random points (a crack along one duplicated point when
    ``coincident``) with a point field, a cell field and global point ids."""
    from scipy.spatial import Delaunay

    # float32 values: VTK's piece filters store the points of a piece as float32
    pts = rng.random((n, 3)).astype(np.float32).astype(np.float64)
    tets = Delaunay(pts).simplices.copy()
    if coincident:  # point n is a copy of point 0 used by half of point 0's cells
        pts = np.vstack([pts, pts[:1]])
        users = np.flatnonzero((tets == 0).any(1))[::2]
        tets[users] = np.where(tets[users] == 0, n, tets[users])
    ug = vtk.vtkUnstructuredGrid()
    p = vtk.vtkPoints()
    p.SetData(numpy_to_vtk(pts, deep=True))
    ug.SetPoints(p)
    for t in tets:
        ug.InsertNextCell(vtk.VTK_TETRA, 4, t.tolist())
    ug.GetPointData().AddArray(_array("p", pts @ [1.0, 2.0, 3.0]))
    ug.GetCellData().AddArray(_array("c", np.arange(len(tets), dtype=float)))
    ug.GetPointData().AddArray(_array("GlobalPointIds", np.arange(len(pts), dtype=np.int64) + 7))
    return ug, pts, tets


def _write_pieces(path, data, pieces):
    from vtkmodules.vtkFiltersParallel import vtkExtractPolyDataPiece, vtkExtractUnstructuredGridPiece

    src = vtk.vtkTrivialProducer()
    src.SetOutput(data)
    poly = path.suffix == ".pvtp"
    split = vtkExtractPolyDataPiece() if poly else vtkExtractUnstructuredGridPiece()
    split.SetInputConnection(src.GetOutputPort())
    w = vtk.vtkXMLPPolyDataWriter() if poly else vtk.vtkXMLPUnstructuredGridWriter()
    w.SetFileName(str(path))
    w.SetInputConnection(split.GetOutputPort())
    w.SetNumberOfPieces(pieces)
    w.SetStartPiece(0)
    w.SetEndPiece(pieces - 1)
    assert w.Write() == 1


def _cell_keys(mesh):
    """Every cell as a frozenset of corner coordinates, with its row in the mesh's cell order."""
    rows = np.concatenate(list(mesh.cells.values()))
    return {frozenset(map(tuple, mesh.points[r].round(12).tolist())): i for i, r in enumerate(rows)}


@pytest.mark.parametrize("ids", [False, True])
def test_pvtu_pieces_merge_to_the_unsplit_mesh(tmp_path, ids):
    ug, pts, tets = _tet_grid(np.random.default_rng(1), coincident=ids)
    if not ids:
        ug.GetPointData().RemoveArray("GlobalPointIds")
    whole = read_mesh(_writer(vtk.vtkXMLUnstructuredGridWriter, tmp_path / "whole.vtu", ug))
    _write_pieces(tmp_path / "split.pvtu", ug, 3)
    pieces = [read_mesh(tmp_path / f"split_{i}.vtu") for i in range(3)]
    assert sum(p.num_nodes for p in pieces) > whole.num_nodes  # the pieces share border points
    m = read_mesh(tmp_path / "split.pvtu")
    assert m.num_nodes == whole.num_nodes == len(pts) and m.num_cells == whole.num_cells
    if ids:  # a coincident pair of distinct points stays two points: the ids decide
        assert len(np.unique(m.points, axis=0)) == len(pts) - 1
    else:
        assert len(np.unique(m.points, axis=0)) == len(pts)
    # the same cells over the same points, fields at the same places
    a, b = _cell_keys(m), _cell_keys(whole)
    if not ids:
        assert a.keys() == b.keys()
        keys = list(a)
        np.testing.assert_array_equal(m.cell_data["c"][[a[k] for k in keys]], whole.cell_data["c"][[b[k] for k in keys]])
    order_m = np.lexsort(np.c_[m.points, m.point_data["p"]].T)
    order_w = np.lexsort(np.c_[whole.points, whole.point_data["p"]].T)
    np.testing.assert_array_equal(m.points[order_m], whole.points[order_w])
    np.testing.assert_array_equal(m.point_data["p"][order_m], whole.point_data["p"][order_w])
    assert m.edge_index().shape == whole.edge_index().shape
    assert "GlobalPointIds" not in m.point_data
    assert sorted(m.cell_data["c"].tolist()) == sorted(whole.cell_data["c"].tolist())


def test_pvtp_pieces_merge(tmp_path):
    pts, polys = _surface()
    pd = _polydata(pts, polys, [("v", pts[:, 0] * 10)], [("c", np.arange(len(polys), dtype=float))])
    _write_pieces(tmp_path / "s.pvtp", pd, 2)
    m = read_mesh(tmp_path / "s.pvtp")
    assert m.num_nodes == len(pts) and m.num_cells == len(polys)
    # the same edge graph, over coordinates
    edges = {frozenset((tuple(m.points[a]), tuple(m.points[b]))) for a, b in m.edge_index().t().tolist()}
    assert edges == {frozenset((tuple(pts[a]), tuple(pts[b]))) for a, b in _ref_edges(polys)}
    np.testing.assert_array_equal(m.point_data["v"], m.points[:, 0] * 10)


def test_vtm_blocks_merge_with_their_names(tmp_path):
    ug, pts, tets = _tet_grid(np.random.default_rng(2))
    # boundary: the faces of the convex hull, as a polydata block without the field "p"
    from scipy.spatial import ConvexHull

    hull = ConvexHull(pts).simplices
    wall = _polydata(pts, hull.tolist(), cell_fields=[("c", np.zeros(len(hull)))])
    half = vtk.vtkUnstructuredGrid()  # a second volume block: the same grid moved by 2 in x
    half.DeepCopy(ug)
    moved = pts + [2.0, 0, 0]
    half.GetPoints().SetData(numpy_to_vtk(moved, deep=True))
    mb = vtk.vtkMultiBlockDataSet()
    for i, (name, block) in enumerate((("fluid", ug), ("solid", half), ("wall", wall))):
        mb.SetBlock(i, block)
        mb.GetMetaData(i).Set(vtk.vtkCompositeDataSet.NAME(), name)
    m = read_mesh(_writer(vtk.vtkXMLMultiBlockDataWriter, tmp_path / "b.vtm", mb))
    n = len(pts)
    assert m.num_nodes == 2 * n and m.num_cells == 2 * len(tets) and m.boundary_cells["triangle"].shape == hull.shape
    assert set(m.node_sets) == {"fluid", "solid", "wall"}
    assert m.node_sets["fluid"].tolist() == list(range(n)) and m.node_sets["solid"].tolist() == list(range(n, 2 * n))
    assert m.node_sets["wall"].tolist() == np.unique(hull).tolist()  # wall points are the fluid block's points
    assert m.cell_data["block"].tolist() == [0] * len(tets) + [1] * len(tets)
    np.testing.assert_allclose(m.point_data["p"], np.r_[pts, pts] @ [1.0, 2.0, 3.0])  # copied with the grid; the wall block lacks p
    cm = read_mesh(tmp_path / "b.vtm", nodes="cells")
    # reference: tets with a face on the hull
    hull_faces = {frozenset(f) for f in hull.tolist()}
    want = [i for i, t in enumerate(tets.tolist()) if any(frozenset(f) in hull_faces for f in
                                                          ([t[0], t[1], t[2]], [t[0], t[1], t[3]], [t[1], t[2], t[3]], [t[0], t[2], t[3]]))]
    assert cm.node_sets["wall"].tolist() == want
    assert cm.point_data["block"].tolist() == m.cell_data["block"].tolist()


def test_openfoam_case_with_patches_and_times(tmp_path):
    ref = write_openfoam_block(tmp_path / "cav", 3, 2, 2)
    for path in (tmp_path / "cav" / "case.foam", tmp_path / "cav"):
        m = read_mesh(path)
        assert m.num_nodes == len(ref["points"]) and m.num_cells == len(ref["cells"])
        assert sorted(m.cells) == ["hexahedron"] and sorted(m.boundary_cells) == ["quad"]
        np.testing.assert_array_equal(m.points, ref["points"])
        assert set(m.node_sets) == {"inlet", "outlet", "walls"}
        for name, faces in ref["patch_faces"].items():
            assert m.node_sets[name].tolist() == np.unique(faces).tolist()
        np.testing.assert_array_equal(m.cell_data["p"], ref["p"][1])  # the last time by default
        assert m.cell_data["U"].shape == (len(ref["cells"]), 3) and "p" in m.point_data
    assert read_mesh(tmp_path / "cav", time=0).cell_data["p"].tolist() == ref["p"][0].tolist()
    with pytest.raises(ValueError, match="no time 5"):
        read_mesh(tmp_path / "cav", time=5)
    cm = read_mesh(tmp_path / "cav" / "case.foam", nodes="cells")
    centres = ref["points"][ref["cells"]].mean(1)
    np.testing.assert_allclose(cm.points, centres)
    np.testing.assert_array_equal(cm.point_data["p"], ref["p"][1])
    # x-neighbours, y-neighbours and z-neighbours of a 3 x 2 x 2 block
    assert cm.edge_index().shape[1] == 2 * (2 * 2 * 2 + 3 * 1 * 2 + 3 * 2 * 1)
    assert cm.node_sets["inlet"].tolist() == [c for c in range(12) if c % 3 == 0]
    assert cm.node_sets["outlet"].tolist() == [c for c in range(12) if c % 3 == 2]


def _cycle_key(face):
    """A face cycle up to its start and direction."""
    f = [int(v) for v in face]
    rots = [f[i:] + f[:i] for i in range(len(f))]
    return tuple(min(rots + [r[::-1] for r in rots]))


def _as_graph(pairs):
    return sorted({(int(a), int(b)) for a, b in pairs} | {(int(b), int(a)) for a, b in pairs})


def test_openfoam_polyhedra_hexahedra_and_prisms(tmp_path):
    """A snappyHexMesh-like case: two cells beside a refined layer are polyhedra (9 faces, hanging
    nodes), read with their faces, not refused and not decomposed (no point added)."""
    from meshshard.io.polyhedra import POLYHEDRON
    from meshshard.io.vtk_formats import _polyhedron_faces_by_cell

    ref = write_openfoam_polyhedra(tmp_path / "snappy")
    m = read_mesh(tmp_path / "snappy" / "case.foam")
    np.testing.assert_array_equal(m.points, ref["points"])  # OpenFOAM's points, no cell centre added
    assert m.cell_counts() == {"hexahedron": 10, "wedge": 4, POLYHEDRON: 2} and m.topological_dim == 3
    # Mesh cell order: fixed types in order of appearance (hexahedron, wedge), the polyhedra last
    foam_of = [c for kind in ("hexahedron", "wedge", "polyhedron") for c, k in enumerate(ref["kind"]) if k == kind]
    for i, c in enumerate(foam_of[14:]):
        assert sorted(map(_cycle_key, m.polyhedra.faces(i))) == sorted(map(_cycle_key, ref["faces"][c]))
    for t, first in (("hexahedron", 0), ("wedge", 10)):
        for row, c in zip(m.cells[t], foam_of[first:]):
            assert sorted(row.tolist()) == ref["points_of"][c]
    np.testing.assert_array_equal(m.cell_data["p"], ref["p"][1][foam_of])
    np.testing.assert_array_equal(m.cell_data["U"][:, 0], np.array(foam_of, float))
    # the face streams read one cell at a time (VTK < 9.4) give the same polyhedra
    from vtkmodules.vtkIOGeometry import vtkOpenFOAMReader

    reader = vtkOpenFOAMReader()
    reader.SetFileName(str(tmp_path / "snappy" / "case.foam"))
    reader.Update()
    grid = reader.GetOutput().GetBlock(0)
    assert _polyhedron_faces_by_cell(grid, np.array([1, 5])) == m.polyhedra
    # vertex graph: the sides of every face, once, both directions
    assert m.edge_index().t().tolist() == [list(e) for e in _as_graph(ref["face_sides"])]
    # patches: boundary faces (quads, triangles and the polyhedra's 5-node sides) name their points
    assert sorted(m.boundary_cells) == ["polygon5", "quad", "triangle"]
    for name, faces in ref["patch_faces"].items():
        assert m.node_sets[name].tolist() == sorted({v for f in faces for v in f})

    cm = read_mesh(tmp_path / "snappy", nodes="cells")
    np.testing.assert_allclose(cm.points, ref["centre"][foam_of], atol=1e-12)  # the polyhedra's volume centroids
    np.testing.assert_array_equal(cm.point_data["p"], ref["p"][1][foam_of])
    mesh_id = np.argsort(foam_of)
    assert cm.edge_index().t().tolist() == [list(e) for e in _as_graph([(mesh_id[a], mesh_id[b])
                                                                      for a, b in ref["internal"]])]
    for name, faces in ref["patch_faces"].items():
        owners = {c for c, fs in enumerate(ref["faces"]) for f in fs if _cycle_key(f) in set(map(_cycle_key, faces))}
        assert cm.node_sets[name].tolist() == sorted(mesh_id[list(owners)].tolist()), name
    assert cm.node_sets["outlet"].numel() == 8 and cm.node_sets["inlet"].numel() == 2


def test_ensight_case(tmp_path):
    ug, pts, tets = _tet_grid(np.random.default_rng(3))
    ug.GetCellData().AddArray(_array("BlockId", np.ones(len(tets), dtype=np.int32)))
    w = vtk.vtkEnSightWriter()
    w.SetPath(str(tmp_path))
    w.SetBaseName("flow")
    w.SetInputData(ug)
    w.SetTimeStep(0)
    w.Write()
    w.WriteCaseFile(1)
    case = next(tmp_path.glob("*.case"))
    m = read_mesh(case)
    assert m.num_nodes == len(pts) and m.num_cells == len(tets)
    np.testing.assert_allclose(m.points, pts, rtol=1e-6)  # EnSight stores float32
    # the writer names node and element variables with _n / _c
    np.testing.assert_allclose(m.point_data["p_n"], pts @ [1.0, 2.0, 3.0], rtol=1e-5)
    np.testing.assert_array_equal(m.cell_data["c_c"], np.arange(len(tets)))


def test_missing_vtk_names_the_extra(tmp_path, monkeypatch):
    import meshshard._optional as opt

    real = opt.importlib.import_module
    monkeypatch.setattr(opt.importlib, "import_module",
                        lambda name, *a: (_ for _ in ()).throw(ImportError(name)) if name == "vtk" else real(name, *a))
    (tmp_path / "s.vtp").write_text("x")
    with pytest.raises(ImportError, match=r"meshshard\[vtk\]"):
        read_mesh(tmp_path / "s.vtp")


def test_bad_vtk_files(tmp_path):
    (tmp_path / "junk.vtp").write_text("not xml")
    with pytest.raises(ValueError, match="junk.vtp"):
        read_mesh(tmp_path / "junk.vtp")
    (tmp_path / "p.pvtu").write_text("<VTKFile><PUnstructuredGrid><Piece Source='gone.vtu'/></PUnstructuredGrid></VTKFile>")
    with pytest.raises(FileNotFoundError, match="gone.vtu"):
        read_mesh(tmp_path / "p.pvtu")
    (tmp_path / "notacase").mkdir()
    with pytest.raises(ValueError, match="directory"):
        read_mesh(tmp_path / "notacase")
    # a polyhedron (here a tetrahedron given by its face stream) is read with its faces
    ug = vtk.vtkUnstructuredGrid()
    p = vtk.vtkPoints()
    for xyz in [(0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1)]:
        p.InsertNextPoint(*xyz)
    ug.SetPoints(p)
    faces = [4, 3, 0, 1, 2, 3, 0, 1, 3, 3, 1, 2, 3, 3, 0, 2, 3]
    ids = vtk.vtkIdList()
    for f in faces:
        ids.InsertNextId(f)
    ug.InsertNextCell(vtk.VTK_POLYHEDRON, ids)
    mb = vtk.vtkMultiBlockDataSet()
    mb.SetBlock(0, ug)
    _writer(vtk.vtkXMLMultiBlockDataWriter, tmp_path / "poly.vtm", mb)
    m = read_mesh(tmp_path / "poly.vtm")
    assert m.cells == {} and m.num_cells == 1 and m.cell_counts() == {"polyhedron": 1}
    assert [f.tolist() for f in m.polyhedra.faces(0)] == [[0, 1, 2], [0, 1, 3], [1, 2, 3], [0, 2, 3]]
    assert m.edge_index().shape[1] == 12  # the tetrahedron's 6 edges, both directions
