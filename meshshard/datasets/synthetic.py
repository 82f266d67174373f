"""Synthetic meshes with analytic fields (a gmsh cylinder channel, a large jittered grid) and
transient cases on any mesh (:func:`advection_diffusion_trajectory`).

:func:`cylinder_channel_mesh` is used by ``meshshard demo`` when the real CFD file is absent, and by
the benchmarks to make meshes of any size; :func:`jittered_grid_mesh` makes meshes of millions of
nodes in seconds (vectorised numpy, no mesher) for ``benchmarks/bench_scale.py``. The flow is the textbook potential flow past a cylinder of radius ``R`` in a uniform
stream ``U`` (no channel walls in the formula): velocity
``u = U (1 - R^2 (x^2 - y^2) / r^4)``, ``v = -2 U R^2 x y / r^4`` and Bernoulli pressure
``p = 0.5 rho (U^2 - |u|^2)``, with ``(x, y)`` relative to the cylinder centre.
:func:`advection_diffusion_trajectory` steps a scalar and a vector field of any mesh through time
(implicit graph operators, boundary nodes fixed) for the learned simulators of issue 41; tests and
``examples/learned_simulator.py`` run on it without downloads.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

__all__ = ["cylinder_channel_mesh", "potential_flow_fields", "mesh_size_for_nodes", "jittered_grid_mesh",
           "advection_diffusion_trajectory", "boundary_nodes"]

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


# ---- transient: advection-diffusion trajectories on any mesh ------------------------------------

# the facets (edges of 2D cells, faces of 3D cells) by corner positions, to find a mesh's boundary
_FACETS = {
    "line": [(0,), (1,)],
    "triangle": [(0, 1), (1, 2), (2, 0)],
    "quad": [(0, 1), (1, 2), (2, 3), (3, 0)],
    "tetra": [(0, 1, 2), (0, 1, 3), (1, 2, 3), (0, 2, 3)],
    "hexahedron": [(0, 1, 2, 3), (4, 5, 6, 7), (0, 1, 5, 4), (1, 2, 6, 5), (2, 3, 7, 6), (3, 0, 4, 7)],
    "wedge": [(0, 1, 2), (3, 4, 5), (0, 1, 4, 3), (1, 2, 5, 4), (2, 0, 3, 5)],
    "pyramid": [(0, 1, 4), (1, 2, 4), (2, 3, 4), (3, 0, 4), (0, 1, 2, 3)],
}


def boundary_nodes(mesh) -> np.ndarray:
    """Which nodes of ``mesh`` lie on its boundary.

    The union of the mesh's named node sets when it has any (as :func:`cylinder_channel_mesh` and
    :func:`jittered_grid_mesh` give them), else the nodes of its boundary cells (a file's markers),
    else the nodes of the facets that belong to one cell only.

    Args:
        mesh: a :class:`~meshshard.io.Mesh` with cells.

    Returns:
        bool ``[N]``.

    Raises:
        ValueError: a point cloud (no cells), or a cell type whose facets are unknown here.
    """
    n = mesh.num_nodes
    out = np.zeros(n, dtype=bool)
    if mesh.node_sets:
        for ids in mesh.node_sets.values():
            out[np.asarray(ids, dtype=np.int64)] = True
        return out
    if mesh.boundary_cells:
        for conn in mesh.boundary_cells.values():
            out[np.asarray(conn, dtype=np.int64).reshape(-1)] = True
        return out
    if mesh.is_point_cloud:
        raise ValueError("boundary_nodes: a point cloud has no cells, so no boundary; pass boundary= explicitly")
    facets = {}
    for ctype, conn in mesh.cells.items():
        if ctype not in _FACETS:
            raise ValueError(f"boundary_nodes: unknown facets of cell type {ctype!r} (known: {sorted(_FACETS)}); "
                             "pass boundary= explicitly")
        for f in _FACETS[ctype]:
            facets.setdefault(len(f), []).append(conn[:, list(f)])
    for group in facets.values():
        f = np.concatenate(group)
        key = np.sort(f, axis=1)
        _, inverse, counts = np.unique(key, axis=0, return_inverse=True, return_counts=True)
        out[f[counts[inverse.reshape(-1)] == 1].reshape(-1)] = True
    return out


def _graph_operators(points: np.ndarray, edge_index: np.ndarray, stream: np.ndarray):
    """Sparse ``[N, N]`` matrices of the graph Laplacian and of upwind advection along ``stream``.

    Laplacian: ``(L u)_i = (2 d / deg_i) sum_j (u_j - u_i) / |x_j - x_i|^2``, consistent for quadratics on
    isotropic stencils (a regular grid). Advection: ``(A u)_i = sum_j w_ij (u_i - u_j)`` over the upstream neighbours
    ``j`` (``s . (x_i - x_j) > 0``), ``w_ij = c_i s . (x_i - x_j) / |x_i - x_j|^2`` with ``c_i`` making
    the derivative along ``s`` exact for linear fields. Both have non-negative off-diagonal weights,
    so the implicit step keeps the values between their extremes.
    """
    import scipy.sparse as sp

    n, d = points.shape
    src, dst = edge_index  # edge j -> i: row i takes from column j
    diff = points[dst] - points[src]  # x_i - x_j
    dist2 = np.maximum((diff * diff).sum(1), 1e-300)
    deg = np.bincount(dst, minlength=n).astype(np.float64)
    w_lap = 2.0 * d / np.maximum(deg[dst], 1.0) / dist2
    lap = sp.csr_matrix((w_lap, (dst, src)), shape=(n, n))
    lap = lap - sp.diags(np.asarray(lap.sum(1)).reshape(-1))
    speed2 = float(stream @ stream)
    along = diff @ stream  # s . (x_i - x_j)
    up = along > 0
    w = np.where(up, along / dist2, 0.0)
    # sum_j w_ij s.(x_i - x_j) should be |s|^2 (the derivative along s of u = s.x)
    norm = np.bincount(dst, weights=w * along, minlength=n)
    scale = np.where(norm > 0, speed2 / np.maximum(norm, 1e-300), 0.0)
    w = w * scale[dst]
    adv = sp.diags(np.bincount(dst, weights=w, minlength=n)) - sp.csr_matrix((w, (dst, src)), shape=(n, n))
    return lap.tocsr(), adv.tocsr()


def advection_diffusion_trajectory(mesh=None, *, steps: int = 50, dt: Optional[float] = None,
                                   diffusivity: float = 0.002, speed: float = 1.0, num_blobs: int = 2,
                                   num_vortices: int = 2, boundary: Optional[np.ndarray] = None, seed: int = 0,
                                   name: Optional[str] = None):
    r"""A transient case on any mesh: a scalar and a velocity-like vector advected by a uniform
    stream and diffused, the boundary nodes held at their first values (Dirichlet).

    Both fields obey :math:`\partial_t u + s \cdot \nabla u = \nu \Delta u` with the stream
    ``s = (speed, 0[, 0])`` (the Oseen linearisation: a vortex carried by the free stream and
    smoothed by viscosity). The operators are graph operators on the mesh's edges
    (a Laplacian and an upwind advection, scipy.sparse) and each step is
    one implicit Euler step ``(I + dt (A - nu L)) u^{n+1} = u^n`` on the interior nodes, factorised
    once; boundary rows keep their first value. The start is random (``seed``): ``concentration``
    is a sum of ``num_blobs`` Gaussian blobs in the upstream half of the domain, ``velocity`` the
    stream plus ``num_vortices`` Lamb-Oseen vortices (turning in the ``x, y`` plane). The same
    arguments give the same arrays.

    Args:
        mesh: a :class:`~meshshard.io.Mesh` with cells, 2D or 3D (default: a
            :func:`jittered_grid_mesh` of 1,200 nodes, aspect 2, not shuffled, ``seed``).
        steps: time steps ``T`` written, the start included (``>= 2``).
        dt: time step (default: half the median edge length over ``speed``: a Courant number of 0.5).
        diffusivity: ``nu`` (``>= 0``), in domain units squared per time unit.
        speed: the stream's speed along ``x`` (``>= 0``).
        num_blobs, num_vortices: the start's blobs and vortices (``>= 0``).
        boundary: bool ``[N]`` of the nodes held fixed (default :func:`boundary_nodes`).
        seed: the random start (and the default mesh).
        name: the trajectory's name (default ``"advection_diffusion"``).

    Returns:
        :class:`~meshshard.io.Trajectory` with ``fields`` ``concentration [T, N, 1]`` and
        ``velocity [T, N, d]``, static ``node_type [N, 1]`` (int64: 0 interior, 1 boundary), and
        ``times [T] = dt * arange(T)``. Write it with :func:`meshshard.io.write_trajectory`.

    Raises:
        ValueError: a point cloud, a bad argument (the message names it), or a ``boundary`` mask
            of the wrong shape or holding every node.
    """
    import scipy.sparse as sp
    from scipy.sparse.linalg import splu

    from meshshard.io import Mesh, Trajectory

    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 2:
        raise ValueError(f"steps must be an int >= 2 (a trajectory has at least two steps), got {steps!r}")
    for label, v in (("diffusivity", diffusivity), ("speed", speed)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{label} must be finite and >= 0, got {v!r}")
    for label, v in (("num_blobs", num_blobs), ("num_vortices", num_vortices)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{label} must be an int >= 0, got {v!r}")
    if mesh is None:
        mesh = jittered_grid_mesh(1200, aspect=2.0, jitter=0.2, seed=seed, shuffle=False)
    if not isinstance(mesh, Mesh):
        raise TypeError(f"mesh must be a meshshard.io.Mesh, got {type(mesh).__name__}")
    if mesh.is_point_cloud:
        raise ValueError("advection_diffusion_trajectory needs a mesh with cells (its edges carry the operators), "
                         "got a point cloud")
    points = mesh.points
    n, d = points.shape
    fixed = boundary_nodes(mesh) if boundary is None else np.asarray(boundary, dtype=bool)
    if fixed.shape != (n,):
        raise ValueError(f"boundary must be a bool mask of shape [{n}], got {fixed.shape}")
    if fixed.all():
        raise ValueError("boundary holds every node: nothing would evolve")
    edge_index = mesh.edge_index().numpy()
    lengths = np.linalg.norm(points[edge_index[0]] - points[edge_index[1]], axis=1)
    h = float(np.median(lengths))
    if dt is None:
        dt = 0.5 * h / speed if speed > 0 else 0.25 * h * h / max(diffusivity, 1e-12)
    if not (np.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be finite and > 0, got {dt!r}")
    stream = np.zeros(d)
    stream[0] = speed

    rng = np.random.default_rng(seed)
    lo, hi = points.min(0), points.max(0)
    extent = hi - lo
    size = float(extent[:2].min()) if d > 1 else float(extent[0])
    conc = np.zeros(n)
    for _ in range(num_blobs):
        c = lo + extent * np.r_[rng.uniform(0.15, 0.5), rng.uniform(0.25, 0.75, d - 1)]
        width = size * rng.uniform(0.1, 0.2)
        conc += rng.uniform(0.5, 1.0) * np.exp(-((points - c) ** 2).sum(1) / (2 * width ** 2))
    vel = np.tile(stream, (n, 1))
    if d >= 2:
        for _ in range(num_vortices):
            c = lo + extent * np.r_[rng.uniform(0.15, 0.6), rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7, d - 2)]
            core = size * rng.uniform(0.06, 0.12)
            circulation = rng.choice([-1.0, 1.0]) * rng.uniform(0.5, 1.0) * 2 * np.pi * core * max(speed, 1.0)
            rx, ry = points[:, 0] - c[0], points[:, 1] - c[1]
            r2 = np.maximum(rx * rx + ry * ry, 1e-300)
            u_theta_over_r = circulation / (2 * np.pi * r2) * (1.0 - np.exp(-r2 / core ** 2))
            vel[:, 0] -= u_theta_over_r * ry
            vel[:, 1] += u_theta_over_r * rx
    state = np.concatenate([conc[:, None], vel], axis=1)  # [N, 1 + d]

    lap, adv = _graph_operators(points, edge_index, stream)
    interior = sp.diags((~fixed).astype(np.float64))
    system = sp.identity(n, format="csr") + dt * (interior @ (adv - diffusivity * lap))
    solve = splu(system.tocsc())
    out = np.empty((steps, n, 1 + d))
    out[0] = state
    for k in range(1, steps):
        state = solve.solve(state)
        state[fixed] = out[0][fixed]  # exact Dirichlet values, not the solve's rounding
        out[k] = state
    node_type = fixed.astype(np.int64)[:, None]
    return Trajectory(points, mesh.cells, fields={"concentration": out[:, :, :1], "velocity": out[:, :, 1:]},
                      static={"node_type": node_type}, times=dt * np.arange(steps),
                      boundary_cells=mesh.boundary_cells, name=name or "advection_diffusion")
