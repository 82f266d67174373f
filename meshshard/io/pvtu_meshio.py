"""A ``.pvtu`` read without the ``vtk`` package: its ``.vtu`` pieces read by meshio and merged as
:func:`meshshard.io.vtk_formats.read_vtk` merges them (each shared point once, matched by the global
point id array when every piece has one, else by coordinates; the first piece's values win).

This is what :func:`meshshard.io.read_mesh` falls back to for a ``.pvtu`` when the extra
``meshshard[vtk]`` is not installed, so that the ``.pvtu`` files meshshard writes (the steps of a
rollout under torchrun, predictions written piece by piece) read back with the core dependencies.
"""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import Dict, Union

import numpy as np

from meshshard.io.mesh import Mesh

__all__ = ["read_pvtu_meshio"]

PathLike = Union[str, os.PathLike]


class _MeshioPart:
    """One ``.vtu`` piece as the arrays :func:`meshshard.io.vtk_formats._merge` takes."""

    def __init__(self, path: Path) -> None:
        import meshio

        from meshshard.io.vtk_formats import _GHOST, _GLOBAL_ID_NAMES, _POLYGON, _VTK_TO_MESHIO, _group_cells

        try:
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
                m = meshio.read(path, file_format="vtu")
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - meshio raises many kinds (or exits) on a bad file
            raise ValueError(f"cannot read the piece {path}: {exc or 'meshio cannot read it'}") from exc
        self.name = path.stem
        self.points_of = None  # every piece holds its own points
        pts = np.asarray(m.points, dtype=np.float64)
        self.points = np.concatenate([pts, np.zeros((len(pts), 3 - pts.shape[1]))], axis=1) if pts.shape[1] < 3 \
            else pts
        n = len(self.points)
        self.point_data: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in m.point_data.items()
                                                  if np.asarray(v).dtype.kind in "biuf" and len(v) == n}
        self.point_data.pop(_GHOST, None)
        self.global_ids = None
        for name in _GLOBAL_ID_NAMES:
            v = self.point_data.get(name)
            if v is not None and (v.ndim == 1 or v.shape[1:] == (1,)) and np.issubdtype(v.dtype, np.integer):
                self.global_ids = self.point_data.pop(name).reshape(-1).astype(np.int64)
                break
        to_vtk = {t: k for k, t in _VTK_TO_MESHIO.items() if k not in (8, 11)}  # PIXEL / VOXEL: QUAD / HEXAHEDRON
        types, sizes, conns = [], [], []
        for block in m.cells:
            data = np.asarray(block.data, dtype=np.int64)
            if block.type.startswith("polygon"):
                vtk_type = _POLYGON
            elif block.type in to_vtk:
                vtk_type = to_vtk[block.type]
            else:
                raise ValueError(f"{path} has cells of a type meshshard does not convert: {block.type}")
            types.append(np.full(len(data), vtk_type, dtype=np.int64))
            sizes.append(np.full(len(data), data.shape[1], dtype=np.int64))
            conns.append(data.reshape(-1))
        t = np.concatenate(types) if types else np.zeros(0, np.int64)
        offsets = np.concatenate([[0], np.cumsum(np.concatenate(sizes))]) if sizes else np.zeros(1, np.int64)
        conn = np.concatenate(conns) if conns else np.zeros(0, np.int64)
        self.cell_data = {k: np.concatenate([np.asarray(b) for b in v]) for k, v in m.cell_data.items()
                          if all(np.asarray(b).dtype.kind in "biuf" for b in v)}
        ghost = self.cell_data.pop(_GHOST, None)
        keep = np.ones(len(t), dtype=bool) if ghost is None else (ghost.astype(np.int64).reshape(-1) & 1) == 0
        self.cells = _group_cells(t, offsets, conn, keep, self.name)
        self.polyhedra = None  # a polyhedron block of meshio is refused above (its type is no VTK_TO_MESHIO name)


def read_pvtu_meshio(path: PathLike) -> Mesh:
    """Read a ``.pvtu`` whose pieces are ``.vtu`` files through meshio, its pieces merged.

    Args:
        path: the ``.pvtu`` master.

    Returns:
        :class:`Mesh` as :func:`meshshard.io.vtk_formats.read_vtk` gives it (float64 points, d = 2
        when planar; volume cells, boundary cells; point and volume cell fields).

    Raises:
        FileNotFoundError: the master or a piece it names does not exist.
        ValueError: not a ``.pvtu``, a piece meshio cannot read, or cells meshshard does not convert.
    """
    from meshshard.io.pieces import piece_sources
    from meshshard.io.vtk_formats import _merge

    path = Path(path)
    if path.suffix.lower() != ".pvtu":
        raise ValueError(f"{path}: read_pvtu_meshio reads .pvtu files")
    return _merge([_MeshioPart(p) for p in piece_sources(path)], path, False)
