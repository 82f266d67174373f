"""CGNS files through vtkCGNSReader: files written by the tests with h5py in the CGNS/HDF5 layout."""
import numpy as np
import pytest
import torch
from meshshard.io import read_mesh
from meshshard.io.cgns import read_cgns_parts
from tests.io._cgns_file import mixed_block, write_cgns, write_polyhedral_cgns, write_structured_cgns

import vtk  # noqa: F401  (installed by the [vtk] extra that CI installs: missing means fail, not skip)

VOLUME = ("hexahedron", "wedge", "tetra")


def _zone(b, name="Fluid", bcs=True, **fields):
    z = {"name": name, "points": b["points"],
         "sections": [("Hexa", "hexahedron", b["hexahedron"]), ("Prisms", "wedge", b["wedge"]),
                      ("Tets", "tetra", b["tetra"]), ("inlet", "quad", b["inlet"]), ("outlet", "triangle", b["outlet"])]}
    if bcs:  # BC types the reader's own BC loading skips, and a BC by vertex point list
        z["bcs"] = [("inlet", "BCInflow", "FaceCenter", "inlet"), ("outlet", "BCOutflow", "FaceCenter", "outlet"),
                    ("probe", "BCWall", "Vertex", [0, 1, 2])]
    z.update(fields)
    return z


def _fields(b, t=0.0):
    n_cells = sum(len(b[k]) for k in VOLUME)
    return {"p": b["points"] @ [1.0, 2.0, 3.0] + 100 * t,
            "U": b["points"][:, :1] * [1.0, -1.0, 0.5] + t}, {"rho": np.arange(n_cells) * 10.0 + t}


def _cell_faces(cells, faces):
    """Ids of the cells (in the order given) having one of ``faces`` (node-id tuples) among their nodes."""
    want = [set(f) for f in faces.tolist()]
    return [i for i, c in enumerate(cells) if any(f <= set(c) for f in want)]


def test_mixed_elements_fields_and_boundary_sections(tmp_path):
    b = mixed_block()
    pf, cf = _fields(b)
    path = write_cgns(tmp_path / "m.cgns", [_zone(b, point_fields={"p": pf["p"]}, cell_fields=cf)])
    m = read_mesh(path)
    np.testing.assert_array_equal(m.points, b["points"])
    assert list(m.cells) == list(VOLUME)
    for t in VOLUME:
        np.testing.assert_array_equal(m.cells[t], b[t])
    assert sorted(m.boundary_cells) == ["quad", "triangle"]
    np.testing.assert_array_equal(m.boundary_cells["quad"], b["inlet"])
    np.testing.assert_array_equal(m.boundary_cells["triangle"], b["outlet"])
    np.testing.assert_array_equal(m.point_data["p"], pf["p"])
    np.testing.assert_array_equal(m.cell_data["rho"], cf["rho"])  # file order = hexahedra, wedges, tetrahedra
    # boundary sets are the boundary sections; the vertex point-list BC is not read (the reader takes
    # its point numbers for element numbers, so it is not used at all)
    assert set(m.cell_sets) == {"inlet", "outlet"}
    assert m.node_sets["inlet"].tolist() == np.unique(b["inlet"]).tolist()
    assert m.node_sets["outlet"].tolist() == np.unique(b["outlet"]).tolist()

    # the boundary sections' cells use the zone's points: none converted or matched again
    assert [p.points_of for p in read_cgns_parts(path, None)] == [None, 0, 0]

    cm = read_mesh(path, nodes="cells")
    cells = [c for t in VOLUME for c in b[t].tolist()]
    assert cm.num_nodes == len(cells)
    np.testing.assert_allclose(cm.points, np.array([b["points"][c].mean(0) for c in cells]), atol=1e-12)
    np.testing.assert_array_equal(cm.point_data["rho"], cf["rho"])
    assert cm.node_sets["inlet"].tolist() == _cell_faces(cells, b["inlet"])
    assert cm.node_sets["outlet"].tolist() == _cell_faces(cells, b["outlet"])


def test_times(tmp_path):
    b = mixed_block(1, 1)
    times = [0.0, 0.5, 1.0]
    per_time = [_fields(b, t) for t in times]
    path = write_cgns(tmp_path / "t.cgns", [_zone(b, bcs=False, point_fields=[p for p, _ in per_time],
                                                     cell_fields=[c for _, c in per_time])], times=times)
    m = read_mesh(path)  # the last time by default
    np.testing.assert_array_equal(m.point_data["p"], per_time[2][0]["p"])
    np.testing.assert_array_equal(m.point_data["U"], per_time[2][0]["U"])
    np.testing.assert_array_equal(m.cell_data["rho"], per_time[2][1]["rho"])
    m = read_mesh(path, time=0.5)
    np.testing.assert_array_equal(m.point_data["p"], per_time[1][0]["p"])
    np.testing.assert_array_equal(m.cell_data["rho"], per_time[1][1]["rho"])
    with pytest.raises(ValueError, match="no time 2"):
        read_mesh(path, time=2)


def test_2d_zone(tmp_path):
    """Quadrilaterals and triangles with their boundary edges as BAR_2 sections; two coordinates."""
    pid = lambda i, j: i + 4 * j  # noqa: E731
    pts = np.array([(i, j) for j in range(3) for i in range(4)], float)
    quads = np.array([[pid(i, j), pid(i + 1, j), pid(i + 1, j + 1), pid(i, j + 1)] for j in range(2) for i in range(2)])
    tris = np.array([t for j in range(2) for t in ([pid(2, j), pid(3, j), pid(3, j + 1)],
                                                   [pid(2, j), pid(3, j + 1), pid(2, j + 1)])])
    wall = np.array([[pid(i, 0), pid(i + 1, 0)] for i in range(3)])
    outlet = np.array([[pid(3, 0), pid(3, 1)], [pid(3, 1), pid(3, 2)]])
    z = {"name": "Plane", "points": pts, "sections": [("Quads", "quad", quads), ("Tris", "triangle", tris),
                                                      ("wall", "line", wall), ("outlet", "line", outlet)],
         "bcs": [("wall", "BCWallViscous", "EdgeCenter", "wall")],
         "point_fields": {"p": pts[:, 0] * 2 - pts[:, 1]}, "cell_fields": {"c": np.arange(8.0)}}
    m = read_mesh(write_cgns(tmp_path / "p.cgns", [z], cell_dim=2, phys_dim=2))
    assert m.dim == 2 and m.topological_dim == 2
    np.testing.assert_array_equal(m.points, pts)
    np.testing.assert_array_equal(m.cells["quad"], quads)
    np.testing.assert_array_equal(m.cells["triangle"], tris)
    np.testing.assert_array_equal(m.boundary_cells["line"], np.concatenate([wall, outlet]))
    np.testing.assert_array_equal(m.point_data["p"], z["point_fields"]["p"])
    np.testing.assert_array_equal(m.cell_data["c"], np.arange(8.0))
    assert m.node_sets["wall"].tolist() == [0, 1, 2, 3] and m.node_sets["outlet"].tolist() == [3, 7, 11]


def test_several_zones_merge_each_a_set(tmp_path):
    """Two blocks side by side share the points of their interface: kept once; each zone is a set,
    the cell field ``block`` numbers them, boundary sections of one name form one set."""
    a, b = mixed_block(), mixed_block(x0=3.0)
    za = _zone(a, name="Left", bcs=False, point_fields={"p": _fields(a)[0]["p"]}, cell_fields=_fields(a)[1])
    zb = _zone(b, name="Right", bcs=False, point_fields={"p": _fields(b)[0]["p"]}, cell_fields=_fields(b)[1])
    m = read_mesh(write_cgns(tmp_path / "z.cgns", [za, zb]))
    ref = np.unique(np.concatenate([a["points"], b["points"]]), axis=0)
    assert m.num_nodes == len(ref) == 2 * len(a["points"]) - 9  # the 3 x 3 interface points once
    order = np.lexsort(m.points.T[::-1])
    np.testing.assert_array_equal(m.points[order], ref)
    np.testing.assert_array_equal(m.point_data["p"], m.points @ [1.0, 2.0, 3.0])
    n = sum(len(a[t]) for t in VOLUME)
    assert m.num_cells == 2 * n
    np.testing.assert_array_equal(m.cell_data["block"], np.repeat([0, 1], n)[_zone_order(m, n)])
    assert set(m.cell_sets) == {"Left", "Right", "inlet", "outlet"}
    for name, block in (("Left", a), ("Right", b)):
        np.testing.assert_array_equal(np.sort(m.points[m.node_sets[name]], axis=0),
                                      np.sort(block["points"], axis=0))
    inlet_x = m.points[m.node_sets["inlet"], 0]
    assert sorted(set(inlet_x.tolist())) == [0.0, 3.0] and len(inlet_x) == 18  # both zones' inlets: one set
    # every cell of both zones, with its own points
    got = sorted(tuple(sorted(map(tuple, m.points[c].tolist()))) for t in VOLUME for c in m.cells[t])
    want = sorted(tuple(sorted(map(tuple, blk["points"][c].tolist()))) for blk in (a, b) for t in VOLUME for c in blk[t])
    assert got == want


def _zone_order(m, n):
    """Cell order of the merged mesh (types in order, each type's rows zone by zone) as zone-major ids."""
    per = {t: len(m.cells[t]) // 2 for t in VOLUME}
    starts = np.cumsum([0] + [per[t] for t in VOLUME])
    return np.concatenate([np.concatenate([z * n + starts[i] + np.arange(per[t]) for z in (0, 1)])
                           for i, t in enumerate(VOLUME)])


def test_structured_zone_reads_as_hexahedra(tmp_path):
    ni, nj, nk = 4, 3, 2
    grid = np.stack(np.meshgrid(np.arange(ni) * 0.5, np.arange(nj), np.arange(nk) * 2.0, indexing="ij"), -1)
    grid = grid.transpose(2, 1, 0, 3).copy()  # [nk, nj, ni, 3], i fastest
    m = read_mesh(write_structured_cgns(tmp_path / "s.cgns", grid))
    np.testing.assert_array_equal(m.points, grid.reshape(-1, 3))
    pid = lambda i, j, k: i + ni * (j + nj * k)  # noqa: E731
    want = [[pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i, j + 1, k),
             pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j + 1, k + 1), pid(i, j + 1, k + 1)]
            for k in range(nk - 1) for j in range(nj - 1) for i in range(ni - 1)]
    assert list(m.cells) == ["hexahedron"]
    np.testing.assert_array_equal(m.cells["hexahedron"], want)
    assert not m.boundary_cells and not m.cell_sets


def test_polyhedral_zone_reads_as_polyhedra(tmp_path):
    """NGON_n / NFACE_n sections: two tetrahedra given as polyhedra sharing a face (Mesh.polyhedra)."""
    pts = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], float)
    faces = [[0, 2, 1], [0, 1, 3], [1, 2, 3], [0, 3, 2], [1, 4, 2], [1, 3, 4], [2, 4, 3]]
    path = write_polyhedral_cgns(tmp_path / "poly.cgns", pts, faces, [[1, 2, 3, 4], [3, 5, 6, 7]])
    m = read_mesh(path)
    assert not m.cells and m.polyhedra.num_cells == 2 and m.num_cells == 2
    np.testing.assert_array_equal(m.points, pts)
    for cell, want in enumerate([[0, 1, 2, 3], [2, 4, 5, 6]]):
        assert [sorted(f.tolist()) for f in m.polyhedra.faces(cell)] == [sorted(faces[i]) for i in want]
    edges = {tuple(e) for e in m.edge_index().t().tolist()}
    tet_sides = {(a, b) for t in ([0, 1, 2, 3], [1, 2, 3, 4]) for a in t for b in t if a != b}
    assert edges == tet_sides
    cells = read_mesh(path, nodes="cells")
    assert cells.num_nodes == 2 and sorted(map(tuple, cells.edge_index().t().tolist())) == [(0, 1), (1, 0)]


def test_not_cgns_or_damaged(tmp_path):
    import h5py

    (tmp_path / "text.cgns").write_text("not a cgns file\n")
    with h5py.File(tmp_path / "plain.cgns", "w") as f:  # HDF5, but not CGNS
        f["x"] = np.arange(3)
    raw = write_cgns(tmp_path / "whole.cgns", [_zone(mixed_block())]).read_bytes()
    (tmp_path / "cut.cgns").write_bytes(raw[:len(raw) // 2])
    for name in ("text", "plain", "cut"):
        with pytest.raises(ValueError, match=rf"{name}\.cgns: not a CGNS file"):
            read_mesh(tmp_path / f"{name}.cgns")


def _replace(node, values):
    del node[" data"]
    node.create_dataset(" data", data=values)


@pytest.mark.parametrize("damage, message", [
    (lambda z: z.__delitem__("GridCoordinates"), "Error while reading mesh coordinates"),
    (lambda z: _replace(z["GridCoordinates/CoordinateY"], np.arange(3.0)), "cgio_read_data_type"),
    (lambda z: _replace(z["FlowSolution/p"], np.arange(3.0)), "cgio_read_data_type"),
    (lambda z: _replace(z["FlowSolutionCell/rho"], np.arange(3.0)), "cgio_read_data_type"),
    (lambda z: z["Tets/ElementConnectivity/ data"].__setitem__(3, 999), "a tetra cell refers to point 998"),
])
def test_malformed_files_are_refused(tmp_path, damage, message):
    """Arrays missing or shorter than the zone says: VTK's reader reports it and leaves the array
    unfilled; the read fails naming the problem instead of returning uninitialised values."""
    import h5py

    b = mixed_block(1, 1)
    pf, cf = _fields(b)
    path = write_cgns(tmp_path / "bad.cgns", [_zone(b, point_fields={"p": pf["p"]}, cell_fields=cf)])
    with h5py.File(path, "a") as f:
        damage(f["Base/Fluid"])
    with pytest.raises(ValueError, match=rf"bad\.cgns.*{message}"):
        read_mesh(path)


def test_meshio_layout_and_missing_vtk(tmp_path, monkeypatch):
    """meshio writes .cgns without CGNSBase_t (VTK does not open it): such a file goes to meshio;
    without vtk a CGNS file meshio cannot read names the extra."""
    import meshio
    import meshshard._optional as opt

    b = mixed_block(1, 1)
    meshio.write(tmp_path / "mio.cgns", meshio.Mesh(b["points"], [("tetra", b["tetra"])]))
    m = read_mesh(tmp_path / "mio.cgns")
    np.testing.assert_array_equal(m.points, b["points"])
    np.testing.assert_array_equal(m.cells["tetra"], b["tetra"])
    path = write_cgns(tmp_path / "m.cgns", [_zone(b)])
    monkeypatch.setattr(opt, "has_module", lambda name: name != "vtk" and opt.importlib.util.find_spec(name) is not None)
    with pytest.raises(ValueError, match=r"m\.cgns.*meshshard\[vtk\]"):
        read_mesh(path)


def test_cli_preprocess_gives_boundary_node_types(tmp_path, capsys):
    from meshshard.cli import main
    from meshshard.datasets import read_dataset_meta
    from meshshard.graph import load_part

    b = mixed_block()
    pf, cf = _fields(b)
    path = write_cgns(tmp_path / "m.cgns", [_zone(b, point_fields=pf, cell_fields=cf)])
    for nodes, target in (("points", "p"), ("cells", "rho")):
        out = tmp_path / f"ds_{nodes}"
        assert main(["preprocess", str(path), "--nodes", nodes, "-k", "2", "-o", str(out), "--features", "pos",
                     "--targets", target, "--dtype", "float64", "-q"]) == 0
        meta = read_dataset_meta(out)
        assert meta["node_types"] == ["inlet", "outlet"]
        mesh = read_mesh(path, nodes=nodes)
        want = torch.zeros(mesh.num_nodes, dtype=torch.long)
        want[mesh.node_sets["outlet"]] = 2
        want[mesh.node_sets["inlet"]] = 1
        assert (want == 1).any() and (want == 2).any() and (want == 0).any()
        for r in range(2):
            part = load_part(out / meta["samples"][0]["dir"], r)
            ids = torch.cat([part["owned_ids"], part["ghost_ids"]])
            assert torch.equal(part["node_data"]["node_type_id"], want[ids])
            assert torch.equal(part["node_data"]["y"].reshape(-1),
                               torch.from_numpy(mesh.point_data[target]).reshape(-1)[ids])
    capsys.readouterr()
    assert main(["info", str(path)]) == 0
