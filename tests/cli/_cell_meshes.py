"""Mesh files with cell fields (finite-volume data) that the --nodes cells tests write themselves."""
from pathlib import Path

import meshio
import numpy as np

from tests.io.test_cell_graph import mixed_2d, mixed_3d


def write_mixed_cells(path: Path, dim: int = 2) -> Path:
    """The small mixed mesh of tests/io/test_cell_graph.py (2D quads + triangles, or 3D wedges,
    hexahedra, pyramids, tetrahedra) as a .vtu with cell fields ``u`` [C] and ``v`` [C, 2]."""
    pts, cells = mixed_2d() if dim == 2 else mixed_3d()
    if pts.shape[1] == 2:
        pts = np.c_[pts, np.zeros(len(pts))]
    rng = np.random.default_rng(dim)
    blocks = [(t, c) for t, c in cells.items() if len(c)]
    meshio.write(path, meshio.Mesh(pts, blocks, cell_data={"u": [rng.random(len(c)) for _, c in blocks],
                                                           "v": [rng.random((len(c), 2)) for _, c in blocks]}))
    return path


def write_cylinder_cells(path: Path, data_dir: Path) -> Path:
    """The cylinder CFD solution (14,555 quads + 39 triangles) with its point fields averaged onto the
    cells: a cell-centred solution on real data."""
    m = meshio.read(data_dir / "cylinder_crossflow_re35.vtu")
    fields = {name: [np.asarray(m.point_data[name], float)[b.data].mean(1) for b in m.cells]
              for name in ("pressure", "velocity")}
    meshio.write(path, meshio.Mesh(m.points, m.cells, cell_data=fields))
    return path
