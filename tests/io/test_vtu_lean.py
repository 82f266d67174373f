"""The streamed .vtu reader: equal to meshio.read on the layouts it reads, None (meshio's turn) on the rest."""
import base64
import re

import meshio
import numpy as np
import pytest

from meshshard.io import read_mesh
from meshshard.io.vtu_lean import read_vtu


def _mesh(dim=3):
    rng = np.random.default_rng(0)
    pts = rng.random((40, dim))
    tri = rng.integers(0, 40, (30, 3))
    quad = rng.integers(0, 40, (10, 4))
    cells = [("triangle", tri), ("quad", quad), ("triangle", tri[:5])]  # a type twice: blocks kept apart
    point_data = {"u": rng.random((40, 3)), "p": rng.random(40), "k": rng.integers(0, 5, 40).astype(np.int32)}
    cell_data = {"c": [rng.random(30), rng.random(10), rng.random(5)],
                 "gmsh:physical": [np.full(30, 1), np.full(10, 2), np.full(5, 3)]}
    return meshio.Mesh(pts, cells, point_data=point_data, cell_data=cell_data)


def _assert_same(a, b):
    assert a.points.dtype == b.points.dtype and np.array_equal(a.points, b.points)
    assert a.points.flags.writeable and b.points.flags.writeable
    assert [c.type for c in a.cells] == [c.type for c in b.cells]
    for x, y in zip(a.cells, b.cells):
        assert x.data.dtype == y.data.dtype and np.array_equal(x.data, y.data)
    assert a.point_data.keys() == b.point_data.keys()
    for k in a.point_data:
        x, y = a.point_data[k], b.point_data[k]
        assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y) and y.flags.writeable
    assert a.cell_data.keys() == b.cell_data.keys()
    for k in a.cell_data:
        for x, y in zip(a.cell_data[k], b.cell_data[k]):
            assert x.dtype == y.dtype and np.array_equal(x, y)


@pytest.mark.parametrize("compression", [None, "zlib"])
@pytest.mark.parametrize("dim", [2, 3])
def test_equals_meshio(tmp_path, dim, compression):
    path = tmp_path / "m.vtu"
    meshio.write(path, _mesh(dim), binary=True, compression=compression)
    got = read_vtu(path)
    assert got is not None
    _assert_same(meshio.read(path), got)


def test_header_encoded_apart(tmp_path):
    """Older VTK writers encode the byte count and the values as two base64 blocks."""
    path = tmp_path / "m.vtu"
    meshio.write(path, _mesh(), binary=True, compression=None)
    text = path.read_text()

    def split(match):
        raw = base64.b64decode(match.group(2))
        return match.group(1) + (base64.b64encode(raw[:4]) + base64.b64encode(raw[4:])).decode() + match.group(3)

    text, n = re.subn(r'(<DataArray[^>]*format="binary"[^>]*>\s*)([A-Za-z0-9+/=]+)(\s*</DataArray>)', split, text)
    assert n >= 6
    path.write_text(text)
    ref = meshio.read(path)
    got = read_vtu(path)
    assert got is not None
    _assert_same(ref, got)


def test_zlib_in_many_blocks(tmp_path):
    """meshio compresses in blocks of 32 KiB: arrays of several blocks, the last one partial."""
    rng = np.random.default_rng(1)
    path = tmp_path / "big.vtu"
    mesh = meshio.Mesh(rng.random((30000, 3)), [("tetra", rng.integers(0, 30000, (20000, 4)))],
                       point_data={"p": rng.random(30000)})
    meshio.write(path, mesh, binary=True, compression="zlib")
    got = read_vtu(path)
    assert got is not None
    _assert_same(meshio.read(path), got)


@pytest.mark.parametrize("options", [dict(binary=True, compression="lzma"), dict(binary=False)], ids=["lzma", "ascii"])
def test_other_layouts_left_to_meshio(tmp_path, options):
    path = tmp_path / "m.vtu"
    meshio.write(path, _mesh(), **options)
    assert read_vtu(path) is None
    mesh = read_mesh(path)  # read by meshio instead
    assert mesh.num_nodes == 40 and mesh.point_data["u"].shape == (40, 3)


def test_two_pieces_and_damaged_files_left_to_meshio(tmp_path):
    path = tmp_path / "m.vtu"
    meshio.write(path, _mesh(), binary=True, compression=None)
    text = path.read_text()
    piece = text[text.index("<Piece"):text.index("</Piece>") + len("</Piece>")]
    two = tmp_path / "two.vtu"
    two.write_text(text.replace(piece, piece + "\n" + piece))
    assert read_vtu(two) is None
    cut = tmp_path / "cut.vtu"
    cut.write_text(text[:len(text) // 2])
    assert read_vtu(cut) is None
    with pytest.raises(ValueError, match="cut.vtu"):
        read_mesh(cut)  # meshio's error, as before


def test_read_mesh_uses_it(tmp_path, monkeypatch):
    path = tmp_path / "m.vtu"
    meshio.write(path, _mesh(), binary=True, compression=None)
    import meshshard.io.vtu_lean

    with monkeypatch.context() as m:
        m.setattr(meshshard.io.vtu_lean, "read_vtu", lambda path: None)  # meshio's reader, as before
        ref = read_mesh(path)

    def refuse(*args, **kwargs):
        raise AssertionError("meshio.read called for a layout the streamed reader reads")

    monkeypatch.setattr(meshio, "read", refuse)
    mesh = read_mesh(path)
    assert np.array_equal(mesh.points, ref.points) and mesh.cells.keys() == ref.cells.keys()
    for t in ref.cells:
        assert np.array_equal(mesh.cells[t], ref.cells[t])
    assert mesh.point_data.keys() == ref.point_data.keys()
    assert all(np.array_equal(mesh.point_data[k], ref.point_data[k]) for k in ref.point_data)
    assert mesh.node_sets.keys() == ref.node_sets.keys() and mesh.cell_data.keys() == ref.cell_data.keys()
