"""A tiny OpenFOAM case written as text: an nx x ny x nz block of unit hexahedra.

Patches: ``inlet`` (x = 0), ``outlet`` (x = nx), ``walls`` (the four other sides). Fields ``p``
(scalar) and ``U`` (vector) at times ``0`` and ``1``: ``p = time * 100 + cell id``.
"""
from pathlib import Path

import numpy as np

__all__ = ["write_openfoam_block"]


def _header(cls: str, obj: str, location: str = "") -> str:
    loc = f'    location "{location}";\n' if location else ""
    return (f"FoamFile\n{{\n    version 2.0;\n    format ascii;\n    class {cls};\n{loc}    object {obj};\n}}\n\n")


def write_openfoam_block(case: Path, nx: int, ny: int, nz: int) -> dict:
    """Write the case into folder ``case``.

    Returns:
        dict with ``points`` [P, 3], ``cells`` [C, 8] (VTK hexahedron order), ``patch_faces``
        (name -> [F, 4] point ids) and ``p`` (time -> [C] values).
    """
    case = Path(case)
    pid = lambda i, j, k: i + (nx + 1) * (j + (ny + 1) * k)  # noqa: E731
    cid = lambda i, j, k: i + nx * (j + ny * k)  # noqa: E731
    points = np.array([(i, j, k) for k in range(nz + 1) for j in range(ny + 1) for i in range(nx + 1)], float)
    # faces with their normal pointing out of the owner cell
    xp = lambda i, j, k: (pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i + 1, j + 1, k + 1), pid(i + 1, j, k + 1))  # noqa
    yp = lambda i, j, k: (pid(i, j + 1, k), pid(i, j + 1, k + 1), pid(i + 1, j + 1, k + 1), pid(i + 1, j + 1, k))  # noqa
    zp = lambda i, j, k: (pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j + 1, k + 1), pid(i, j + 1, k + 1))  # noqa
    xm = lambda i, j, k: (pid(i, j, k), pid(i, j, k + 1), pid(i, j + 1, k + 1), pid(i, j + 1, k))  # noqa
    ym = lambda i, j, k: (pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j, k + 1), pid(i, j, k + 1))  # noqa
    zm = lambda i, j, k: (pid(i, j, k), pid(i, j + 1, k), pid(i + 1, j + 1, k), pid(i + 1, j, k))  # noqa
    cells_ijk = [(i, j, k) for k in range(nz) for j in range(ny) for i in range(nx)]
    faces, owner, neighbour = [], [], []
    for i, j, k in cells_ijk:  # internal faces, upper-triangular order
        c = cid(i, j, k)
        for ok, face, nb in ((i + 1 < nx, xp, (i + 1, j, k)), (j + 1 < ny, yp, (i, j + 1, k)),
                             (k + 1 < nz, zp, (i, j, k + 1))):
            if ok:
                faces.append(face(i, j, k)); owner.append(c); neighbour.append(cid(*nb))  # noqa: E702
    patches = {"inlet": [], "outlet": [], "walls": []}
    for i, j, k in cells_ijk:
        c = cid(i, j, k)
        if i == 0:
            patches["inlet"].append((xm(i, j, k), c))
        if i == nx - 1:
            patches["outlet"].append((xp(i, j, k), c))
        for ok, face in ((j == 0, ym), (j == ny - 1, yp), (k == 0, zm), (k == nz - 1, zp)):
            if ok:
                patches["walls"].append((face(i, j, k), c))
    n_internal = len(faces)
    bounds = []
    for name, entries in patches.items():
        bounds.append((name, len(entries), len(faces)))
        for face, c in entries:
            faces.append(face); owner.append(c)  # noqa: E702
    mesh_dir = case / "constant" / "polyMesh"
    mesh_dir.mkdir(parents=True, exist_ok=True)
    (case / "system").mkdir(exist_ok=True)
    (case / "system" / "controlDict").write_text(
        _header("dictionary", "controlDict", "system")
        + "application simpleFoam;\nstartFrom startTime;\nstartTime 0;\nstopAt endTime;\nendTime 1;\n"
          "deltaT 1;\nwriteControl timeStep;\nwriteInterval 1;\n")
    (mesh_dir / "points").write_text(_header("vectorField", "points", "constant/polyMesh") + f"{len(points)}\n(\n"
                                     + "".join(f"({x:g} {y:g} {z:g})\n" for x, y, z in points) + ")\n")
    (mesh_dir / "faces").write_text(_header("faceList", "faces", "constant/polyMesh") + f"{len(faces)}\n(\n"
                                    + "".join(f"4({' '.join(map(str, f))})\n" for f in faces) + ")\n")
    note = f'    note "nPoints:{len(points)} nCells:{len(cells_ijk)} nFaces:{len(faces)} nInternalFaces:{n_internal}";\n'
    for name, values in (("owner", owner), ("neighbour", neighbour)):
        head = _header("labelList", name, "constant/polyMesh").replace("    object", note + "    object")
        (mesh_dir / name).write_text(head + f"{len(values)}\n(\n" + "".join(f"{v}\n" for v in values) + ")\n")
    (mesh_dir / "boundary").write_text(
        _header("polyBoundaryMesh", "boundary", "constant/polyMesh") + f"{len(bounds)}\n(\n"
        + "".join(f"    {name}\n    {{\n        type {'wall' if name == 'walls' else 'patch'};\n"
                  f"        nFaces {n};\n        startFace {start};\n    }}\n" for name, n, start in bounds) + ")\n")
    n_cells = len(cells_ijk)
    p = {}
    for t in (0, 1):
        tdir = case / str(t)
        tdir.mkdir(exist_ok=True)
        p[t] = t * 100.0 + np.arange(n_cells)
        bf = "".join(f"    {name}\n    {{\n        type calculated;\n        value uniform 0;\n    }}\n" for name in patches)
        (tdir / "p").write_text(_header("volScalarField", "p", str(t)) + "dimensions [0 2 -2 0 0 0 0];\n\n"
                                + f"internalField nonuniform List<scalar>\n{n_cells}\n(\n"
                                + "".join(f"{v:g}\n" for v in p[t]) + ");\n\nboundaryField\n{\n" + bf + "}\n")
        bfu = bf.replace("uniform 0", "uniform (0 0 0)")
        (tdir / "U").write_text(_header("volVectorField", "U", str(t)) + "dimensions [0 1 -1 0 0 0 0];\n\n"
                                + f"internalField nonuniform List<vector>\n{n_cells}\n(\n"
                                + "".join(f"({c:g} {t:g} 0)\n" for c in range(n_cells)) + ");\n\nboundaryField\n{\n"
                                + bfu + "}\n")
    (case / "case.foam").write_text("")
    hexes = np.array([(pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i, j + 1, k),
                       pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j + 1, k + 1), pid(i, j + 1, k + 1))
                      for i, j, k in cells_ijk])
    return {"points": points, "cells": hexes, "p": p,
            "patch_faces": {name: np.array([f for f, _ in entries]) for name, entries in patches.items()}}
