"""read_mesh on every real mesh in the shared data folder, other formats, and bad files."""
import itertools

import meshio
import numpy as np
import pytest
import torch

from meshshard.io import Mesh, read_mesh
from tests.conftest import MESH_FILES

# (file, geometric dim, volume cell types) - from the data README, independent of meshshard
EXPECTED = {
    "naca0012_inviscid.su2": (2, {"triangle"}),
    "cylinder_laminar.su2": (2, {"triangle"}),
    "rae2822_turb.su2": (2, {"triangle", "quad"}),
    "brick_tets.su2": (3, {"tetra"}),
    "cylinder_crossflow_re35.vtu": (2, {"triangle", "quad"}),
}

# Written out here on purpose (not imported) so the reference is independent of CELL_EDGES.
_REF_EDGES = {
    "triangle": lambda c: [(c[0], c[1]), (c[1], c[2]), (c[2], c[0])],
    "quad": lambda c: [(c[0], c[1]), (c[1], c[2]), (c[2], c[3]), (c[3], c[0])],
    "tetra": lambda c: list(itertools.combinations(c, 2)),
}


def _python_reference_edges(cells):
    """Pure-Python set of undirected element edges."""
    ref = set()
    for ctype, block in cells.items():
        for c in block.tolist():
            for a, b in _REF_EDGES[ctype](c):
                if a != b:
                    ref.add((min(a, b), max(a, b)))
    return ref


@pytest.fixture(scope="module")
def meshes(data_dir):
    return {name: read_mesh(data_dir / name) for name in MESH_FILES}


@pytest.mark.parametrize("name", MESH_FILES)
def test_real_mesh_structure(meshes, data_dir, name):
    mesh = meshes[name]
    raw = meshio.read(data_dir / name)
    dim, types = EXPECTED[name]
    assert isinstance(mesh, Mesh) and mesh.source == data_dir / name
    assert mesh.points.dtype == np.float64 and mesh.points.shape == (len(raw.points), dim)
    np.testing.assert_array_equal(mesh.points, np.asarray(raw.points, dtype=np.float64)[:, :dim])
    assert set(mesh.cells) == types
    for ctype, block in mesh.cells.items():
        assert block.dtype == np.int64
        np.testing.assert_array_equal(block, np.concatenate([c.data for c in raw.cells if c.type == ctype]))
    # everything of lower dimension is kept apart, nothing is lost
    assert sum(map(len, mesh.cells.values())) + sum(map(len, mesh.boundary_cells.values())) == \
        sum(len(c.data) for c in raw.cells)
    assert mesh.num_cells == sum(len(c) for c in mesh.cells.values())
    for key, arr in mesh.point_data.items():
        assert arr.shape[0] == mesh.num_nodes


@pytest.mark.parametrize("name", MESH_FILES)
def test_real_mesh_edges_match_python_reference(meshes, name):
    mesh = meshes[name]
    ei = mesh.edge_index()
    ref = _python_reference_edges(mesh.cells)
    assert ei.shape[1] == 2 * len(ref)
    got = {(a, b) for a, b in ei.t().tolist() if a < b}
    assert got == ref
    n = mesh.num_nodes
    key = ei[0] * n + ei[1]
    assert (key[1:] > key[:-1]).all() and (ei[0] != ei[1]).all()
    assert torch.equal(mesh.edge_index(), ei)  # deterministic


@pytest.mark.parametrize("name", [n for n in MESH_FILES if EXPECTED[n][0] == 2])
def test_2d_meshes_satisfy_euler_formula(meshes, name):
    # each 2D mesh is a domain with one hole (airfoil or cylinder): V - E + F = 0
    mesh = meshes[name]
    e = mesh.edge_index().shape[1] // 2
    assert mesh.num_nodes - e + mesh.num_cells == 0


@pytest.mark.parametrize("name", [n for n in MESH_FILES if n.endswith(".su2") and EXPECTED[n][0] == 2])
def test_2d_su2_edge_count_from_boundary_lines(meshes, name):
    # every interior edge is shared by two cells, every boundary edge (an SU2 marker line) by one
    mesh = meshes[name]
    sides = sum(len(c) * c.shape[1] for c in mesh.cells.values())
    assert mesh.edge_index().shape[1] // 2 == (sides + len(mesh.boundary_cells["line"])) // 2


def test_su2_markers_become_named_node_sets(meshes, data_dir):
    names = {"naca0012_inviscid.su2": {"airfoil", "farfield"}, "cylinder_laminar.su2": {"cylinder", "farfield"},
             "rae2822_turb.su2": {"AIRFOIL", "FARFIELD"},
             "brick_tets.su2": {"x_m", "x_p", "y_m", "y_p", "z_m", "z_p"}}
    for fname, expected in names.items():
        mesh = meshes[fname]
        assert set(mesh.node_sets) == expected
        for ids in mesh.node_sets.values():
            assert ids.dtype == torch.long and ids.numel() > 0
            assert (ids[1:] > ids[:-1]).all()
    # brick faces: x_m is the plane x = min(x), etc. (geometry is the independent reference)
    brick = meshes["brick_tets.su2"]
    for axis, lo_hi in itertools.product(range(3), ("m", "p")):
        coord = brick.points[:, axis]
        target = coord.min() if lo_hi == "m" else coord.max()
        on_face = np.flatnonzero(np.isclose(coord, target, atol=1e-9))
        assert brick.node_sets[f"{'xyz'[axis]}_{lo_hi}"].tolist() == on_face.tolist()
    # airfoil nodes are the ones near the unit chord, far field far away
    naca = meshes["naca0012_inviscid.su2"]
    r = np.linalg.norm(naca.points[naca.node_sets["airfoil"].numpy()] - [0.5, 0], axis=1)
    rf = np.linalg.norm(naca.points[naca.node_sets["farfield"].numpy()] - [0.5, 0], axis=1)
    assert r.max() < 1 and rf.min() > 5


def test_su2_read_is_quiet(data_dir, capfd):
    read_mesh(data_dir / "brick_tets.su2")
    out, err = capfd.readouterr()
    assert "skipping" not in err + out and "Warning" not in err + out


def test_vtu_point_data_and_planar_z_dropped(meshes, data_dir):
    mesh = meshes["cylinder_crossflow_re35.vtu"]
    raw = meshio.read(data_dir / "cylinder_crossflow_re35.vtu")
    assert mesh.dim == 2 and not raw.points[:, 2].any()
    assert set(mesh.point_data) == {"pressure", "velocity", "vorticity_mag"}
    np.testing.assert_array_equal(mesh.point_data["velocity"], raw.point_data["velocity"])


def test_npz_point_cloud(data_dir):
    cloud = read_mesh(data_dir / "drivaer_body_points.npz")
    raw = np.load(data_dir / "drivaer_body_points.npz")["points"]
    assert cloud.is_point_cloud and cloud.num_nodes == len(raw) == 125446 and cloud.dim == 3
    np.testing.assert_array_equal(cloud.points, raw.astype(np.float64))


def test_npz_fields_and_npy(tmp_path, data_dir):
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"][:1000]
    np.savez(tmp_path / "c.npz", points=pts, pressure=np.arange(1000.0), meta=np.zeros(3))
    m = read_mesh(tmp_path / "c.npz")
    assert set(m.point_data) == {"pressure"}  # `meta` does not have N rows
    np.save(tmp_path / "c.npy", pts)
    assert read_mesh(tmp_path / "c.npy").num_nodes == 1000


@pytest.mark.parametrize("suffix", [".vtk", ".vtu", ".msh"])
def test_other_meshio_formats_round_trip(tmp_path, meshes, suffix):
    src = meshes["rae2822_turb.su2"]
    path = tmp_path / f"rae{suffix}"
    pts3 = np.c_[src.points, np.zeros(src.num_nodes)]
    kwargs = {".msh": {"file_format": "gmsh22", "binary": False}}.get(suffix, {})
    meshio.write(path, meshio.Mesh(pts3, list(src.cells.items())), **kwargs)
    back = read_mesh(path)
    assert back.dim == 2 and back.num_nodes == src.num_nodes
    assert torch.equal(back.edge_index(), src.edge_index())


def test_bad_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.su2"):
        read_mesh(tmp_path / "nope.su2")
    (tmp_path / "x.foo").write_text("hello")
    with pytest.raises(ValueError, match=r"x\.foo.*\.foo.*\.su2"):
        read_mesh(tmp_path / "x.foo")
    (tmp_path / "broken.su2").write_text("NDIME= 2\nNPOIN= 3\n0 0\n1 zz\n")
    with pytest.raises(ValueError, match=r"broken\.su2.*'\.su2'"):
        read_mesh(tmp_path / "broken.su2")
    (tmp_path / "trunc.vtu").write_text("<VTKFile type='UnstructuredGrid'>")
    with pytest.raises(ValueError, match="trunc.vtu"):
        read_mesh(tmp_path / "trunc.vtu")
    np.savez(tmp_path / "nopoints.npz", xyz=np.zeros((3, 3)))
    with pytest.raises(ValueError, match="points"):
        read_mesh(tmp_path / "nopoints.npz")
    np.savez(tmp_path / "nan.npz", points=np.array([[0, 0, np.nan]]))
    with pytest.raises(ValueError, match="finite"):
        read_mesh(tmp_path / "nan.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz"):
        read_mesh(tmp_path / "junk.npz")
    with pytest.raises(ValueError, match="directory"):
        read_mesh(tmp_path)


def test_unexpected_meshio_notes_are_forwarded_as_warnings(tmp_path):
    # an SU2 file whose NMARK disagrees with its markers: meshio prints a note we must not swallow
    text = ("NDIME= 2\nNELEM= 1\n5 0 1 2 0\nNPOIN= 3\n0 0 0\n1 0 1\n0 1 2\n"
            "NMARK= 2\nMARKER_TAG= wall\nMARKER_ELEMS= 1\n3 0 1\n")
    (tmp_path / "t.su2").write_text(text)
    with pytest.warns(UserWarning, match="expected 2 markers"):
        m = read_mesh(tmp_path / "t.su2")
    assert m.node_sets["wall"].tolist() == [0, 1] and m.dim == 2 and m.num_cells == 1


@pytest.mark.parametrize("version", [2.2, 4.1])
def test_gmsh_msh_with_physical_groups(tmp_path, version):
    # gmsh's own writer (4.1 is its default): meshio adds an internal "gmsh:bounding_entities"
    # set of entity tags, which must not be taken for a named set of cells
    import gmsh  # installed by the [gmsh] extra that CI installs: missing means fail, not skip
    gmsh.initialize()
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.model.occ.addRectangle(0, 0, 0, 1, 1)
        gmsh.model.occ.synchronize()
        lines = {"bottom": [], "other": []}
        for dim, tag in gmsh.model.getEntities(1):
            y_max = gmsh.model.getBoundingBox(dim, tag)[4]
            lines["bottom" if y_max < 1e-6 else "other"].append(tag)
        gmsh.model.addPhysicalGroup(1, lines["bottom"], name="bottom")
        gmsh.model.addPhysicalGroup(1, lines["other"], name="walls")
        gmsh.model.addPhysicalGroup(2, [1], name="fluid")
        gmsh.option.setNumber("Mesh.MeshSizeMax", 0.2)
        gmsh.model.mesh.generate(2)
        gmsh.option.setNumber("Mesh.MshFileVersion", version)
        gmsh.write(str(tmp_path / "sq.msh"))
    finally:
        gmsh.finalize()
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to skip, nothing to warn about
        mesh = read_mesh(tmp_path / "sq.msh")
    assert mesh.dim == 2 and set(mesh.cells) == {"triangle"} and set(mesh.boundary_cells) == {"line"}
    assert set(mesh.node_sets) == {"bottom", "walls", "fluid"}
    y = mesh.points[:, 1]
    assert mesh.node_sets["bottom"].tolist() == np.flatnonzero(np.abs(y) < 1e-12).tolist()
    assert mesh.node_sets["fluid"].tolist() == list(range(mesh.num_nodes))
    on_boundary = np.flatnonzero((np.abs(mesh.points - 0.5) > 0.5 - 1e-12).any(axis=1))
    assert sorted(set(mesh.node_sets["bottom"].tolist()) | set(mesh.node_sets["walls"].tolist())) == on_boundary.tolist()
    # Euler: a square (no hole) has V - E + F = 1
    assert mesh.num_nodes - mesh.edge_index().shape[1] // 2 + mesh.num_cells == 1


def test_malformed_cell_set_is_skipped_with_a_warning(tmp_path, monkeypatch):
    pts = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]])
    fake = meshio.Mesh(pts, [("triangle", np.array([[0, 1, 2], [1, 3, 2]]))],
                       cell_sets={"good": [np.array([1])], "bad": [np.array([7])]})
    monkeypatch.setattr(meshio, "read", lambda *args, **kwargs: fake)
    (tmp_path / "m.vtu").write_text("stub")
    with pytest.warns(UserWarning, match="'bad'"):
        mesh = read_mesh(tmp_path / "m.vtu")
    assert set(mesh.node_sets) == {"good"} and mesh.node_sets["good"].tolist() == [1, 2, 3]


def test_reader_fields_are_told_apart():
    from meshshard.io import is_reader_field

    assert is_reader_field("gmsh:dim_tags") and is_reader_field("medit:ref") and is_reader_field("nastran:ref")
    assert not is_reader_field("pressure") and not is_reader_field("velocity:x") and not is_reader_field("pos")


def test_point_field_names_match_read_mesh(tmp_path, data_dir):
    from meshshard.io import point_field_names
    from tests.conftest import write_gmsh_square

    write_gmsh_square(tmp_path / "sq.msh", 0.3)
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "c.npz", points=rng.random((6, 3)), p=rng.random(6), v=rng.random((6, 3)))
    m = read_mesh(data_dir / "cylinder_crossflow_re35.vtu")
    # a vtu with data appended after the header (meshio's default writer) and one with none
    meshio.write(tmp_path / "appended.vtu", meshio.Mesh(m.points, [("quad", m.cells["quad"])],
                                                        point_data={"a": m.point_data["pressure"]}))
    meshio.write(tmp_path / "bare.vtu", meshio.Mesh(m.points, [("quad", m.cells["quad"])]))
    for f in [data_dir / "cylinder_crossflow_re35.vtu", tmp_path / "appended.vtu", tmp_path / "bare.vtu",
              tmp_path / "c.npz", tmp_path / "sq.msh", data_dir / "naca0012_inviscid.su2"]:
        assert point_field_names(f) == sorted(read_mesh(f).point_data), f
    assert point_field_names(tmp_path / "sq.msh") == ["gmsh:dim_tags"]


@pytest.mark.parametrize("kind", ["zlib", "raw", "ascii", "bare"])
def test_vtu_field_names_come_from_the_tags_alone(tmp_path, kind):
    """Inline arrays (after the points and cells in meshio's files) are skipped, not read: the header scan
    finds the names itself (no whole read) whatever the chunk size cuts through."""
    from meshshard.io.read import _vtu_point_field_names

    rng = np.random.default_rng(1)
    pts, tri = rng.random((40, 2)), rng.integers(0, 40, (30, 3))
    fields = {} if kind == "bare" else {"p": rng.random(40), "velocity": rng.random((40, 2))}
    meshio.write(tmp_path / "m.vtu", meshio.Mesh(pts, [("triangle", tri)], point_data=fields,
                                                 cell_data={"c": [rng.random(30)]}),
                 binary=kind != "ascii", compression="zlib" if kind == "zlib" else None)
    want = sorted(meshio.read(tmp_path / "m.vtu").point_data)
    assert want == sorted(fields)
    for chunk in (3, 7, 64, 1 << 20):
        assert _vtu_point_field_names(tmp_path / "m.vtu", chunk=chunk) == want, chunk


def test_unreadable_file_of_a_known_suffix_does_not_list_that_suffix(tmp_path):
    (tmp_path / "broken.su2").write_text("NDIME= 2\nNPOIN= 3\n0 0\n1 zz\n")
    with pytest.raises(ValueError) as info:
        read_mesh(tmp_path / "broken.su2")
    msg = str(info.value)
    assert "Supported suffixes" not in msg and "damaged or is not a .su2 file" in msg
    (tmp_path / "x.foo").write_text("hello")
    with pytest.raises(ValueError, match=r"Supported suffixes: .*\.vtp"):
        read_mesh(tmp_path / "x.foo")


def test_gmsh_physical_tags_without_names_become_numbered_sets(tmp_path):
    # a gmsh mesh converted to .vtu keeps its gmsh:physical cell tags but not their names
    pts = np.array([[0.0, 0, 0], [1, 0, 0], [1, 1, 0], [0, 1, 0]])
    cells = [("triangle", np.array([[0, 1, 2], [0, 2, 3]])), ("line", np.array([[0, 1], [2, 3]]))]
    meshio.write(tmp_path / "g.vtu", meshio.Mesh(pts, cells, cell_data={"gmsh:physical": [np.array([9, 9]),
                                                                                         np.array([3, 4])]}))
    m = read_mesh(tmp_path / "g.vtu")
    assert {k: v.tolist() for k, v in m.node_sets.items()} == \
        {"physical_3": [0, 1], "physical_4": [2, 3], "physical_9": [0, 1, 2, 3]}
    assert "gmsh:physical" not in m.cell_data  # reader bookkeeping, not a field
