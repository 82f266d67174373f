"""Parallel VTK files written by the tests themselves: meshio writes each piece's .vtu, the .pvtu
master is written by hand. Pieces are uneven (cut along x at uneven fractions)."""
from pathlib import Path

import meshio
import numpy as np


def delaunay_mesh(seed: int, n: int, dim: int):
    """Random points (``dim`` = 2: in the plane z = 0) and their Delaunay cells, with point fields
    ``q`` (3 columns) and ``p``, and a cell field ``c``."""
    from scipy.spatial import Delaunay

    rng = np.random.default_rng(seed)
    pts = rng.random((n, dim))
    cells = Delaunay(pts).simplices.astype(np.int64)
    fields = {"q": np.sin(3 * pts[:, [0, 1, 0]] + pts[:, [1, 0, 1]]), "p": pts @ np.arange(1.0, dim + 1)}
    return pts, cells, fields, {"c": np.arange(len(cells), dtype=np.float64)}


def write_split(path: Path, pts, cells, fields, cell_fields, fractions, ids: bool) -> Path:
    """``path`` (.pvtu) with one piece per slab of cells between the given fractions of the x range
    (border points repeated in every piece that uses them); ``GlobalPointIds`` when ``ids``."""
    path = Path(path)
    ctype = "tetra" if cells.shape[1] == 4 else "triangle"
    x = pts[cells].mean(axis=1)[:, 0]
    cuts = np.quantile(x, fractions)
    piece = np.searchsorted(cuts, x, side="right")
    folder = path.parent / path.stem
    folder.mkdir(parents=True, exist_ok=True)
    sources = []
    for k in range(len(fractions) + 1):
        idx = np.flatnonzero(piece == k)
        used = np.unique(cells[idx])
        local = np.searchsorted(used, cells[idx])
        xyz = np.zeros((len(used), 3))
        xyz[:, :pts.shape[1]] = pts[used]
        pd = {name: v[used] for name, v in fields.items()}
        if ids:
            pd["GlobalPointIds"] = used.astype(np.int64)
        m = meshio.Mesh(xyz, [(ctype, local)], point_data=pd, cell_data={n: [v[idx]] for n, v in cell_fields.items()})
        src = folder / f"{path.stem}_{k}.vtu"
        meshio.write(src, m, file_format="vtu")
        sources.append(src.relative_to(path.parent).as_posix())
    arrays = "".join(f'<PDataArray type="{"Int64" if name == "GlobalPointIds" else "Float64"}" Name="{name}" '
                     f'NumberOfComponents="{1 if v.ndim == 1 else v.shape[1]}"/>' for name, v in
                     list(fields.items()) + ([("GlobalPointIds", np.zeros(1, np.int64))] if ids else []))
    path.write_text('<?xml version="1.0"?>\n<VTKFile type="PUnstructuredGrid" version="0.1">\n'
                    f'<PUnstructuredGrid GhostLevel="0"><PPointData>{arrays}</PPointData>'
                    '<PCellData><PDataArray type="Float64" Name="c"/></PCellData>'
                    '<PPoints><PDataArray type="Float64" NumberOfComponents="3"/></PPoints>\n'
                    + "".join(f'<Piece Source="{s}"/>\n' for s in sources)
                    + "</PUnstructuredGrid></VTKFile>\n")
    return path


def write_whole(path: Path, pts, cells, fields, cell_fields) -> Path:
    """The unsplit mesh as one .vtu."""
    ctype = "tetra" if cells.shape[1] == 4 else "triangle"
    meshio.write(path, meshio.Mesh(pts, [(ctype, cells)], point_data=fields,
                                   cell_data={n: [v] for n, v in cell_fields.items()}), file_format="vtu")
    return Path(path)


def edges_by_coordinates(points, edge_index) -> set:
    """Directed edges as pairs of coordinate tuples."""
    return {(tuple(points[a]), tuple(points[b])) for a, b in np.asarray(edge_index).T.tolist()}
