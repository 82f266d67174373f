"""A tiny OpenFOAM case written as text: an nx x ny x nz block of unit hexahedra.

Patches: ``inlet`` (x = 0), ``outlet`` (x = nx), ``walls`` (the four other sides). Fields ``p``
(scalar) and ``U`` (vector) at times ``0`` and ``1``: ``p = time * 100 + cell id``.
"""
from pathlib import Path

import numpy as np

__all__ = ["write_openfoam_block", "write_openfoam_polyhedra"]


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
    n_cells = len(cells_ijk)
    p = {t: t * 100.0 + np.arange(n_cells) for t in (0, 1)}
    U = {t: np.stack([np.arange(n_cells), np.full(n_cells, t), np.zeros(n_cells)], axis=1) for t in (0, 1)}
    _write_polymesh(case, points, faces, owner, neighbour, n_internal, bounds, n_cells,
                    {t: {"p": p[t], "U": U[t]} for t in (0, 1)})
    hexes = np.array([(pid(i, j, k), pid(i + 1, j, k), pid(i + 1, j + 1, k), pid(i, j + 1, k),
                       pid(i, j, k + 1), pid(i + 1, j, k + 1), pid(i + 1, j + 1, k + 1), pid(i, j + 1, k + 1))
                      for i, j, k in cells_ijk])
    return {"points": points, "cells": hexes, "p": p,
            "patch_faces": {name: np.array([f for f, _ in entries]) for name, entries in patches.items()}}


def _write_polymesh(case: Path, points, faces, owner, neighbour, n_internal: int, bounds, n_cells: int,
                    cell_fields) -> None:
    """Write ``constant/polyMesh``, ``system/controlDict``, the fields and ``case.foam``.

    ``faces`` are point-id tuples of any length; ``bounds`` (patch name, nFaces, startFace);
    ``cell_fields`` time -> {name: [C] scalars or [C, 3] vectors}."""
    mesh_dir = case / "constant" / "polyMesh"
    mesh_dir.mkdir(parents=True, exist_ok=True)
    (case / "system").mkdir(exist_ok=True)
    (case / "system" / "controlDict").write_text(
        _header("dictionary", "controlDict", "system")
        + "application simpleFoam;\nstartFrom startTime;\nstartTime 0;\nstopAt endTime;\nendTime 1;\n"
          "deltaT 1;\nwriteControl timeStep;\nwriteInterval 1;\n")
    (mesh_dir / "points").write_text(_header("vectorField", "points", "constant/polyMesh") + f"{len(points)}\n(\n"
                                     + "".join(f"({x:.17g} {y:.17g} {z:.17g})\n" for x, y, z in points) + ")\n")
    (mesh_dir / "faces").write_text(_header("faceList", "faces", "constant/polyMesh") + f"{len(faces)}\n(\n"
                                    + "".join(f"{len(f)}({' '.join(map(str, f))})\n" for f in faces) + ")\n")
    note = f'    note "nPoints:{len(points)} nCells:{n_cells} nFaces:{len(faces)} nInternalFaces:{n_internal}";\n'
    for name, values in (("owner", owner), ("neighbour", neighbour)):
        head = _header("labelList", name, "constant/polyMesh").replace("    object", note + "    object")
        (mesh_dir / name).write_text(head + f"{len(values)}\n(\n" + "".join(f"{v}\n" for v in values) + ")\n")
    (mesh_dir / "boundary").write_text(
        _header("polyBoundaryMesh", "boundary", "constant/polyMesh") + f"{len(bounds)}\n(\n"
        + "".join(f"    {name}\n    {{\n        type {'wall' if name == 'walls' else 'patch'};\n"
                  f"        nFaces {n};\n        startFace {start};\n    }}\n" for name, n, start in bounds) + ")\n")
    for t, fields in cell_fields.items():
        tdir = case / str(t)
        tdir.mkdir(exist_ok=True)
        for name, values in fields.items():
            values = np.asarray(values, dtype=float)
            vector = values.ndim == 2
            zero = "uniform (0 0 0)" if vector else "uniform 0"
            bf = "".join(f"    {b}\n    {{\n        type calculated;\n        value {zero};\n    }}\n"
                         for b, _, _ in bounds)
            rows = "".join((f"({v[0]:.17g} {v[1]:.17g} {v[2]:.17g})\n" if vector else f"{v:.17g}\n") for v in values)
            cls, kind = ("volVectorField", "vector") if vector else ("volScalarField", "scalar")
            (tdir / name).write_text(_header(cls, name, str(t)) + "dimensions [0 1 -1 0 0 0 0];\n\n"
                                     + f"internalField nonuniform List<{kind}>\n{len(values)}\n(\n" + rows
                                     + ");\n\nboundaryField\n{\n" + bf + "}\n")
    (case / "case.foam").write_text("")


def _box_faces(lo, hi):
    """The six sides of an axis-aligned box as corner cycles (any orientation; fixed later)."""
    (x0, y0, z0), (x1, y1, z1) = lo, hi
    return [((x0, y0, z0), (x0, y1, z0), (x0, y1, z1), (x0, y0, z1)), ((x1, y0, z0), (x1, y1, z0), (x1, y1, z1), (x1, y0, z1)),
            ((x0, y0, z0), (x1, y0, z0), (x1, y0, z1), (x0, y0, z1)), ((x0, y1, z0), (x1, y1, z0), (x1, y1, z1), (x0, y1, z1)),
            ((x0, y0, z0), (x1, y0, z0), (x1, y1, z0), (x0, y1, z0)), ((x0, y0, z1), (x1, y0, z1), (x1, y1, z1), (x0, y1, z1))]


def _wedge_faces(tri, z0, z1):
    """The five faces of a triangle ``tri`` (three (x, y)) extruded from ``z0`` to ``z1``."""
    a, b = [(x, y, z0) for x, y in tri], [(x, y, z1) for x, y in tri]
    return [tuple(a), tuple(b)] + [(a[i], a[(i + 1) % 3], b[(i + 1) % 3], b[i]) for i in range(3)]


def _inside_rect(inner, outer) -> bool:
    """Whether the axis-aligned rectangle ``inner`` lies in the rectangle ``outer`` (same plane)."""
    lo, hi = np.min(outer, 0), np.max(outer, 0)
    p = np.asarray(inner)
    return bool(((p >= lo) & (p <= hi)).all())


def _plane(face):
    """(axis, coordinate) of an axis-aligned face, or None for a slanted one."""
    p = np.asarray(face)
    for axis in range(3):
        if np.all(p[:, axis] == p[0, axis]):
            return axis, float(p[0, axis])
    return None


def write_openfoam_polyhedra(case: Path) -> dict:
    """An OpenFOAM case with real polyhedra, hexahedra and prisms (the layout of a snappyHexMesh
    refinement step), written into folder ``case``.

    Along x: four prisms (two unit cubes x in [-2, -1], each cut by a vertical diagonal plane), two
    unit hexahedra (x in [-1, 0]), two unit cubes x in [0, 1] whose +x side meets eight half-size
    hexahedra (x in [1, 1.5]): each of those two cells has its +x side split in four faces and
    hanging nodes on its other sides (9 faces, 13 points), so VTK calls it a polyhedron. y in
    [0, 2] (two coarse cells, four fine), z in [0, 1]. The OpenFOAM cell order mixes the kinds.
    Patches: ``inlet`` (x = -2), ``outlet`` (x = 1.5), ``walls`` (the rest). Fields at times 0 and
    1: ``p = time * 100 + cell id`` and ``U = (cell id, time, 0)``.

    Returns:
        dict with ``points`` [P, 3]; per OpenFOAM cell: ``kind`` (``"wedge"``, ``"hexahedron"``,
        ``"polyhedron"``), ``centre`` [C, 3] (volume centroid), ``faces`` (list of point-id tuples,
        the cell's faces) and ``points_of`` (sorted point ids); ``patch_faces`` name -> list of
        point-id tuples; ``p`` time -> [C]; ``face_sides`` the sorted point-id pairs of every
        face side (the vertex graph's edges); ``internal`` the (owner, neighbour) cell pairs of the
        internal faces (the cell graph's edges).
    """
    case = Path(case)
    cells = []  # (kind, coarse faces as coordinate cycles, volume centroid)
    for y in (0.0, 1.0):
        tri_a, tri_b = ((-2.0, y), (-1.0, y), (-1.0, y + 1)), ((-2.0, y), (-1.0, y + 1), (-2.0, y + 1))
        cells.append(("hexahedron", _box_faces((-1.0, y, 0.0), (0.0, y + 1, 1.0)), (-0.5, y + 0.5, 0.5)))
        cells.append(("polyhedron", _box_faces((0.0, y, 0.0), (1.0, y + 1, 1.0)), (0.5, y + 0.5, 0.5)))
        cells.append(("wedge", _wedge_faces(tri_a, 0.0, 1.0), tuple(np.mean(tri_a, 0)) + (0.5,)))
        cells.append(("wedge", _wedge_faces(tri_b, 0.0, 1.0), tuple(np.mean(tri_b, 0)) + (0.5,)))
    for z in (0.0, 0.5):
        for y in (0.0, 0.5, 1.0, 1.5):
            cells.append(("hexahedron", _box_faces((1.0, y, z), (1.5, y + 0.5, z + 0.5)), (1.25, y + 0.25, z + 0.25)))
    coords = sorted({p for _, faces, _ in cells for f in faces for p in f}, key=lambda p: (p[2], p[1], p[0]))
    pid = {p: i for i, p in enumerate(coords)}
    points = np.array(coords)

    # final faces: a coarse side containing smaller coplanar sides of other cells is split into them
    final = []  # per cell: list of coordinate cycles
    for c, (_, faces, _) in enumerate(cells):
        out = []
        for f in faces:
            pieces = [g for d, (_, other, _) in enumerate(cells) if d != c for g in other
                      if len(f) == len(g) == 4 and _plane(f) is not None and _plane(g) == _plane(f)
                      and _inside_rect(g, f) and set(g) != set(f)]
            out += pieces or [f]
        final.append(out)

    def with_hanging(face):
        """The cycle of ``face`` with every mesh point lying on one of its sides inserted."""
        cyc = []
        for a, b in zip(face, face[1:] + face[:1]):
            a_, b_ = np.array(a), np.array(b)
            on = []
            for p in coords:
                t = np.dot(np.array(p) - a_, b_ - a_) / np.dot(b_ - a_, b_ - a_)
                if 0 < t < 1 and np.allclose(a_ + t * (b_ - a_), p):
                    on.append((t, p))
            cyc += [a] + [p for _, p in sorted(on)]
        return cyc

    by_key = {}  # frozenset of corners -> [cycle, [cells]]
    for c, faces in enumerate(final):
        for f in faces:
            by_key.setdefault(frozenset(f), [with_hanging(list(f)), []])[1].append(c)
    centre = np.array([ctr for _, _, ctr in cells])

    def oriented(cycle, c):
        """``cycle`` as point ids, its normal pointing out of cell ``c``."""
        p = np.array(cycle)
        normal = np.cross(p - p.mean(0), np.roll(p, -1, 0) - p.mean(0)).sum(0)
        ids = [pid[q] for q in cycle]
        return tuple(ids) if np.dot(normal, p.mean(0) - centre[c]) > 0 else tuple(ids[::-1])

    internal = sorted((min(cs), max(cs), oriented(cyc, min(cs))) for cyc, cs in by_key.values() if len(cs) == 2)
    assert all(len(cs) in (1, 2) for _, cs in by_key.values())
    patches = {"inlet": [], "outlet": [], "walls": []}
    for cyc, cs in by_key.values():
        if len(cs) == 1:
            x = np.array(cyc)[:, 0]
            name = "inlet" if np.all(x == -2.0) else "outlet" if np.all(x == 1.5) else "walls"
            patches[name].append((cs[0], oriented(cyc, cs[0])))
    faces = [f for _, _, f in internal]
    owner, neighbour = [o for o, _, _ in internal], [n for _, n, _ in internal]
    bounds = []
    for name, entries in patches.items():
        bounds.append((name, len(entries), len(faces)))
        for c, f in sorted(entries):
            faces.append(f)
            owner.append(c)
    n_cells = len(cells)
    p = {t: t * 100.0 + np.arange(n_cells) for t in (0, 1)}
    U = {t: np.stack([np.arange(n_cells), np.full(n_cells, t), np.zeros(n_cells)], 1).astype(float) for t in (0, 1)}
    _write_polymesh(case, points, faces, owner, neighbour, len(internal), bounds, n_cells,
                    {t: {"p": p[t], "U": U[t]} for t in (0, 1)})
    cell_faces = [[] for _ in range(n_cells)]
    for f, o in zip(faces, owner):
        cell_faces[o].append(f)
    for f, nb in zip(faces, neighbour):
        cell_faces[nb].append(f)
    sides = sorted({tuple(sorted((a, b))) for f in faces for a, b in zip(f, f[1:] + f[:1])})
    return {"points": points, "kind": [k for k, _, _ in cells], "centre": centre, "faces": cell_faces,
            "points_of": [sorted({q for f in fs for q in f}) for fs in cell_faces],
            "patch_faces": {name: [f for _, f in sorted(entries)] for name, entries in patches.items()},
            "p": p, "face_sides": sides, "internal": list(zip(owner[:len(internal)], neighbour))}
