"""Synthetic meshes with analytic fields: a gmsh cylinder channel, and a large jittered grid.

:func:`cylinder_channel_mesh` is used by ``meshshard demo`` when the real CFD file is absent, and by
the benchmarks to make meshes of any size; :func:`jittered_grid_mesh` makes meshes of millions of
nodes in seconds (vectorised numpy, no mesher) for ``benchmarks/bench_scale.py``. The flow is the textbook potential flow past a cylinder of radius ``R`` in a uniform
stream ``U`` (no channel walls in the formula): velocity
``u = U (1 - R^2 (x^2 - y^2) / r^4)``, ``v = -2 U R^2 x y / r^4`` and Bernoulli pressure
``p = 0.5 rho (U^2 - |u|^2)``, with ``(x, y)`` relative to the cylinder centre.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["cylinder_channel_mesh", "potential_flow_fields", "mesh_size_for_nodes", "jittered_grid_mesh"]

_LENGTH, _HEIGHT, _CENTER, _RADIUS = 15.0, 7.5, (3.0, 0.0), 0.5


def potential_flow_fields(points: np.ndarray, center=_CENTER, radius: float = _RADIUS, speed: float = 1.0,
                          density: float = 1.0) -> dict:
    """Velocity ``[N, 2]`` and pressure ``[N]`` of potential flow past a cylinder at ``points``.

    Args:
        points: ``[N, 2]`` coordinates (inside the cylinder the flow is clamped to its surface).
        center, radius: the cylinder.
        speed: free-stream speed ``U``.
        density: ``rho`` in Bernoulli's pressure.

    Returns:
        ``{"velocity": [N, 2], "pressure": [N]}``.
    """
    x = points[:, 0] - center[0]
    y = points[:, 1] - center[1]
    r2 = np.maximum(x * x + y * y, radius * radius)
    r4 = r2 * r2
    u = speed * (1.0 - radius ** 2 * (x * x - y * y) / r4)
    v = -2.0 * speed * radius ** 2 * x * y / r4
    p = 0.5 * density * (speed ** 2 - (u * u + v * v))
    return {"velocity": np.stack([u, v], axis=1), "pressure": p}


def mesh_size_for_nodes(num_nodes: int) -> float:
    """Approximate gmsh element size giving ``num_nodes`` nodes in the channel (triangles).

    Args:
        num_nodes: the wanted node count.
    """
    area = _LENGTH * _HEIGHT - np.pi * _RADIUS ** 2
    # A triangle mesh of size h has about 2 area / (sqrt(3) h^2) nodes; the refinement at the cylinder adds
    # nodes, which the factor 1.55 (fitted to gmsh's output) accounts for.
    return float(np.sqrt(1.55 * area / max(num_nodes, 10)))


def cylinder_channel_mesh(num_nodes: Optional[int] = 10000, mesh_size: Optional[float] = None,
                          refine_cylinder: float = 0.3, verbose: bool = False):
    """Mesh a 15 x 7.5 channel around a cylinder (radius 0.5) with gmsh and attach potential flow.

    Args:
        num_nodes: target node count (used when ``mesh_size`` is None); the result is near it, not
            exact (the element size is estimated from it).
        mesh_size: gmsh element size far from the cylinder.
        refine_cylinder: element size at the cylinder as a fraction of ``mesh_size``.
        verbose: let gmsh print.

    Returns:
        :class:`meshshard.io.Mesh` (2D triangles) with point data ``velocity [N, 2]`` and
        ``pressure [N]`` and node sets ``cylinder``, ``inlet``, ``outlet``, ``walls``.
    """
    import gmsh

    from meshshard.io import Mesh

    h = float(mesh_size) if mesh_size is not None else mesh_size_for_nodes(int(num_nodes))
    if not h > 0:
        raise ValueError(f"mesh_size must be > 0, got {h}")
    gmsh.initialize(interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 1 if verbose else 0)
        gmsh.option.setNumber("General.NumThreads", 1)
        gmsh.model.add("cylinder_channel")
        occ = gmsh.model.occ
        rect = occ.addRectangle(0.0, -_HEIGHT / 2, 0.0, _LENGTH, _HEIGHT)
        disk = occ.addDisk(_CENTER[0], _CENTER[1], 0.0, _RADIUS, _RADIUS)
        occ.cut([(2, rect)], [(2, disk)])
        occ.synchronize()
        # Finer near the cylinder: a distance field on its boundary.
        curves = gmsh.model.getEntities(1)
        cyl = []
        for dim, tag in curves:
            xmin, ymin, _, xmax, ymax, _ = gmsh.model.getBoundingBox(dim, tag)
            if xmin > 1e-4 and xmax < _LENGTH - 1e-4 and ymin > -_HEIGHT / 2 + 1e-4 and ymax < _HEIGHT / 2 - 1e-4:
                cyl.append(tag)
        f_dist = gmsh.model.mesh.field.add("Distance")
        gmsh.model.mesh.field.setNumbers(f_dist, "CurvesList", cyl)
        f_thr = gmsh.model.mesh.field.add("Threshold")
        gmsh.model.mesh.field.setNumber(f_thr, "InField", f_dist)
        gmsh.model.mesh.field.setNumber(f_thr, "SizeMin", h * refine_cylinder)
        gmsh.model.mesh.field.setNumber(f_thr, "SizeMax", h)
        gmsh.model.mesh.field.setNumber(f_thr, "DistMin", 0.1)
        gmsh.model.mesh.field.setNumber(f_thr, "DistMax", 2.0)
        gmsh.model.mesh.field.setAsBackgroundMesh(f_thr)
        gmsh.option.setNumber("Mesh.MeshSizeExtendFromBoundary", 0)
        gmsh.option.setNumber("Mesh.MeshSizeFromPoints", 0)
        gmsh.option.setNumber("Mesh.MeshSizeFromCurvature", 0)
        gmsh.option.setNumber("Mesh.Algorithm", 6)  # Frontal-Delaunay: regular triangles
        gmsh.model.mesh.generate(2)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        order = np.argsort(tags)
        tags = tags[order]
        points = coords.reshape(-1, 3)[order, :2]
        index = np.full(int(tags.max()) + 1, -1, dtype=np.int64)
        index[tags.astype(np.int64)] = np.arange(tags.size)
        tris = []
        for etype, _, enodes in zip(*gmsh.model.mesh.getElements(2)):
            if etype == 2:  # 3-node triangle
                tris.append(index[enodes.astype(np.int64)].reshape(-1, 3))
        node_sets = {"cylinder": [], "inlet": [], "outlet": [], "walls": []}
        for dim, tag in curves:
            ntags, _, _ = gmsh.model.mesh.getNodes(dim, tag, includeBoundary=True)
            ids = index[ntags.astype(np.int64)]
            xmin, ymin, _, xmax, ymax, _ = gmsh.model.getBoundingBox(dim, tag)
            if tag in cyl:
                node_sets["cylinder"].append(ids)
            elif xmax < 1e-4:
                node_sets["inlet"].append(ids)
            elif xmin > _LENGTH - 1e-4:
                node_sets["outlet"].append(ids)
            else:
                node_sets["walls"].append(ids)
    finally:
        gmsh.finalize()
    cells = {"triangle": np.concatenate(tris)}
    used = np.zeros(points.shape[0], dtype=bool)
    used[cells["triangle"].reshape(-1)] = True
    if not used.all():  # drop construction nodes no triangle uses
        remap = np.cumsum(used) - 1
        points = points[used]
        cells = {"triangle": remap[cells["triangle"]]}
        node_sets = {k: [remap[i[used[i]]] for i in v] for k, v in node_sets.items()}
    node_sets = {k: np.unique(np.concatenate(v)) if v else np.empty(0, dtype=np.int64) for k, v in node_sets.items()}
    return Mesh(points, cells=cells, point_data=potential_flow_fields(points), node_sets=node_sets)


def jittered_grid_mesh(num_nodes: int, aspect: float = 2.0, jitter: float = 0.2, seed: int = 0,
                       shuffle: bool = True):
    """A 2D triangle mesh of about ``num_nodes`` nodes: a structured grid, jittered and triangulated.

    The ``nx x ny`` grid (``nx / ny ~ aspect``, spacing 1 / (ny - 1)) has its interior nodes moved by
    up to ``jitter`` of a spacing in each axis (so the mesh is unstructured in shape, every
    triangle keeps its orientation: ``jitter < 0.25``), each cell is split into two triangles along a
    diagonal chosen at random, and the nodes are renumbered by a random permutation (``shuffle``)
    so that node order carries no locality and a partitioner has work to do. Everything is
    vectorised, so millions of nodes are cheap. The fields are smooth and analytic in the coordinates:
    ``velocity [N, 2]`` is the potential flow past a cylinder at the channel's left third
    (:func:`potential_flow_fields`) and ``pressure [N]`` its Bernoulli pressure plus a gentle wave,
    so ``y`` is a nonlinear function of ``x`` and ``pos``.

    Args:
        num_nodes: target node count (``>= 4``); the result has ``nx * ny`` nodes, within a few
            rows of the target.
        aspect: width / height of the domain (``> 0``).
        jitter: largest displacement of interior nodes per axis, as a fraction of the spacing, in
            ``[0, 0.25)`` (a vertex is at least ``h / sqrt(2)`` from its opposite side).
        seed: seed of the jitter, the diagonals and the renumbering.
        shuffle: renumber the nodes randomly (``False``: row-major grid order).

    Returns:
        :class:`meshshard.io.Mesh` with ``points [N, 2]``, ``cells["triangle"] [2 (nx-1)(ny-1), 3]``,
        point data ``velocity [N, 2]`` and ``pressure [N]``, and node sets ``inlet``, ``outlet``,
        ``walls`` (the domain's left, right, and bottom + top sides).

    Raises:
        ValueError: ``num_nodes < 4``, ``aspect <= 0`` or ``jitter`` outside ``[0, 0.25)``.
    """
    from meshshard.io import Mesh

    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 4:
        raise ValueError(f"num_nodes must be an int >= 4, got {num_nodes!r}")
    if not aspect > 0:
        raise ValueError(f"aspect must be > 0, got {aspect!r}")
    if not 0 <= jitter < 0.25:
        raise ValueError(f"jitter must be in [0, 0.25) (larger moves can fold triangles), got {jitter!r}")
    ny = max(2, int(round(np.sqrt(num_nodes / aspect))))
    nx = max(2, int(round(num_nodes / ny)))
    h = 1.0 / (ny - 1)
    rng = np.random.default_rng(seed)
    iy, ix = np.divmod(np.arange(nx * ny, dtype=np.int64), nx)  # row-major: id = iy * nx + ix
    points = np.stack([ix * h, iy * h], axis=1)
    interior = (ix > 0) & (ix < nx - 1) & (iy > 0) & (iy < ny - 1)
    points[interior] += rng.uniform(-jitter * h, jitter * h, size=(int(interior.sum()), 2))
    # Cell (cx, cy) has corners a=(cx,cy), b=(cx+1,cy), c=(cx,cy+1), d=(cx+1,cy+1).
    cy, cx = np.divmod(np.arange((nx - 1) * (ny - 1), dtype=np.int64), nx - 1)
    a = cy * nx + cx
    b, c, d = a + 1, a + nx, a + nx + 1
    flip = rng.random(a.size) < 0.5  # diagonal a-d or b-c; both triangles counter-clockwise
    tri = np.empty((2 * a.size, 3), dtype=np.int64)
    tri[0::2] = np.where(flip[:, None], np.stack([a, b, d], 1), np.stack([a, b, c], 1))
    tri[1::2] = np.where(flip[:, None], np.stack([a, d, c], 1), np.stack([b, d, c], 1))
    sides = {"inlet": ix == 0, "outlet": ix == nx - 1, "walls": (iy == 0) | (iy == ny - 1)}
    if shuffle:
        new_id = rng.permutation(nx * ny)
        order = np.empty_like(new_id)
        order[new_id] = np.arange(nx * ny)
        points, tri = points[order], new_id[tri]
        sides = {k: np.sort(new_id[v]) for k, v in sides.items()}
    else:
        sides = {k: np.flatnonzero(v) for k, v in sides.items()}
    length = (nx - 1) * h
    fields = potential_flow_fields(points, center=(length / 3, 0.5), radius=0.1)
    fields["pressure"] = fields["pressure"] + 0.1 * np.sin(2 * np.pi * points[:, 0] / length) * np.cos(np.pi * points[:, 1])
    return Mesh(points, cells={"triangle": tri}, point_data=fields, node_sets=sides)
