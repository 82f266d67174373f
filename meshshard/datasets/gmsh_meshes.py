"""A family of gmsh meshes unlike the shipped ones, to test and benchmark partitioners.

Each generator takes a target node count (the result lands within a factor 2 of it) and returns a
:class:`meshshard.Mesh`: a branching tubular vessel (tetrahedra), several bodies in one 2D channel
(triangles), a thin curved shell (prisms or hexahedra in a few layers), a strongly graded 2D
boundary layer (quads at the wall, triangles outside), a graded hexahedral block, and a mixed 3D
mesh (the boundary-layer mesh extruded: hexahedra and prisms). :data:`GMSH_FAMILY` maps names to
generators. Two more are kept out of the family, as meshes the partitioners were not tuned on
(``bench_partition.py --only heldout``): a hexahedral block with a cylindrical hole
(:func:`cylinder_hex_mesh`) and a NACA 0012 quad O-grid (:func:`naca0012_ogrid_mesh`). All need
the optional ``gmsh`` package (``pip install 'meshshard[gmsh]'``).

The nodes gmsh makes are numbered in lexicographic order of their coordinates (the extruded shell and
mixed meshes stack that numbering layer by layer) and cells in order of their node ids, so a generator
called twice gives the same arrays, whatever order gmsh produced them in. gmsh's 2D
meshing round a boundary-layer field is not fully repeatable, though: between runs it can move some
interior nodes of the boundary-layer and mixed meshes, even between generations in one process.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from meshshard._optional import require_gmsh
from meshshard.io.mesh import Mesh

__all__ = ["vessel_mesh", "bodies_mesh", "shell_mesh", "boundary_layer_mesh", "hex_block_mesh", "mixed_mesh",
           "GMSH_FAMILY", "cylinder_hex_mesh", "naca0012_ogrid_mesh"]

#: gmsh element type -> meshio cell type (first-order elements)
_GMSH_TYPES = {2: "triangle", 3: "quad", 4: "tetra", 5: "hexahedron", 6: "wedge", 7: "pyramid"}


def _check_nodes(num_nodes) -> int:
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, (int, np.integer)) or num_nodes < 100:
        raise ValueError(f"num_nodes must be an int >= 100, got {num_nodes!r}")
    return int(num_nodes)


def _run(build: Callable[[object], None], dim: int, space_dim: int):
    """Start gmsh, let ``build(gmsh)`` make and mesh a model, return (points, cells) of dimension ``dim``."""
    gmsh = require_gmsh()
    gmsh.initialize(interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.option.setNumber("General.NumThreads", 1)
        build(gmsh)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        index = np.full(int(tags.max()) + 1, -1, dtype=np.int64)
        index[tags.astype(np.int64)] = np.arange(tags.size)
        points = coords.reshape(-1, 3)[:, :space_dim]
        blocks: Dict[str, list] = {}
        for etype, _, enodes in zip(*gmsh.model.mesh.getElements(dim)):
            name = _GMSH_TYPES.get(int(etype))
            if name is not None:
                k = {"triangle": 3, "quad": 4, "tetra": 4, "hexahedron": 8, "wedge": 6, "pyramid": 5}[name]
                blocks.setdefault(name, []).append(index[enodes.astype(np.int64)].reshape(-1, k))
    finally:
        gmsh.finalize()
    return _canonical(*_compact(points, {k: np.concatenate(v) for k, v in blocks.items()}))


def _compact(points: np.ndarray, cells: Dict[str, np.ndarray]):
    """Drop nodes no cell uses (gmsh keeps construction and lower-dimension nodes)."""
    used = np.zeros(points.shape[0], dtype=bool)
    for c in cells.values():
        used[c.reshape(-1)] = True
    remap = np.cumsum(used) - 1
    return np.ascontiguousarray(points[used], dtype=np.float64), {k: remap[c] for k, c in cells.items()}


def _canonical(points: np.ndarray, cells: Dict[str, np.ndarray]):
    """Number nodes in lexicographic order of their coordinates, and each block's cells in order of their node ids.

    gmsh numbers nodes and elements differently from one run to the next where a boundary-layer field is
    meshed (the same points come out in another order), and a partitioner's result depends on that order:
    a fixed numbering makes a generated mesh, and every benchmark figure on it, reproducible. A cell's own
    node order (its orientation) is kept.
    """
    order = np.lexsort(points.T[::-1])
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    out = {}
    for name in sorted(cells):
        c = rank[cells[name]]
        out[name] = c[np.lexsort(c.T[::-1])]
    return np.ascontiguousarray(points[order]), out


def _calibrated(mesh_with: Callable[[float], tuple], h_guess: float, num_nodes: int, dim: float):
    """Mesh at a coarser trial size, then at the size its node count says gives ``num_nodes``.

    Node counts of graded and thin geometries do not follow ``area / h^dim`` at small sizes,
    so one cheap trial (about a quarter of the final cost) calibrates the size.
    """
    trial = 1.6 * h_guess
    points, _ = mesh_with(trial)
    h = trial * (points.shape[0] / num_nodes) ** (1.0 / dim)
    # on a grid of 1/16 octave: the trial's node count moves by a few nodes between gmsh runs, the size should not
    return mesh_with(float(2.0 ** (np.round(16 * np.log2(h)) / 16)))


def _sizes(gmsh, h: float) -> None:
    gmsh.option.setNumber("Mesh.MeshSizeMax", h)
    gmsh.option.setNumber("Mesh.MeshSizeMin", 0.0)


def vessel_mesh(num_nodes: int = 20_000) -> Mesh:
    """A branching tubular vessel (a trunk splitting twice into thinner tubes), tetrahedra.

    Args:
        num_nodes: target node count.

    Returns:
        3D :class:`Mesh` with ``tetra`` cells (points ``[N, 3]``).
    """
    n = _check_nodes(num_nodes)
    # (start, direction, length, radius) of each tube; children start where the parent ends
    tubes = [((0, 0, 0), (0, 0, 1), 4.0, 0.5)]
    for sx in (-1, 1):
        d1 = np.array([0.8 * sx, 0.0, 1.0])
        d1 /= np.linalg.norm(d1)
        p1 = np.array([0.0, 0.0, 4.0])
        tubes.append((tuple(p1), tuple(d1), 3.0, 0.35))
        p2 = p1 + 3.0 * d1
        for sy in (-1, 1):
            d2 = d1 + np.array([0.0, 0.9 * sy, 0.3])
            d2 /= np.linalg.norm(d2)
            tubes.append((tuple(p2), tuple(d2), 2.5, 0.22))
    volume = sum(np.pi * r * r * length for _, _, length, r in tubes)
    h_guess = (volume / (0.16 * n)) ** (1 / 3)

    def build(gmsh, h):
        occ = gmsh.model.occ
        parts = []
        for (x, y, z), d, length, r in tubes:
            parts.append((3, occ.addCylinder(x, y, z, *(length * np.asarray(d)), r)))
            parts.append((3, occ.addSphere(x, y, z, r)))  # round joint with the parent
        occ.fuse(parts[:1], parts[1:])
        occ.synchronize()
        _sizes(gmsh, h)
        gmsh.model.mesh.generate(3)

    # thin tubes: the node count grows slower than h^-3 at these sizes (hence the calibration's exponent 2.5)
    points, cells = _calibrated(lambda h: _run(lambda g: build(g, h), 3, 3), h_guess, n, 2.5)
    return Mesh(points, cells=cells)


def bodies_mesh(num_nodes: int = 20_000) -> Mesh:
    """A 2D channel holding seven bodies of different shapes and sizes, triangles graded towards them.

    Args:
        num_nodes: target node count.

    Returns:
        2D :class:`Mesh` with ``triangle`` cells (points ``[N, 2]``).
    """
    n = _check_nodes(num_nodes)
    h_guess = np.sqrt(24.0 / (0.25 * n))

    def build(gmsh, h):
        occ = gmsh.model.occ
        box = occ.addRectangle(0, 0, 0, 8.0, 3.0)
        holes = [occ.addDisk(1.0, 1.5, 0, 0.3, 0.3), occ.addDisk(2.5, 0.7, 0, 0.15, 0.15),
                 occ.addDisk(2.6, 2.2, 0, 0.4, 0.2), occ.addRectangle(4.0, 1.2, 0, 0.8, 0.5),
                 occ.addDisk(5.6, 0.6, 0, 0.1, 0.1), occ.addDisk(6.0, 2.1, 0, 0.5, 0.25),
                 occ.addRectangle(6.8, 1.0, 0, 0.15, 1.0)]
        occ.cut([(2, box)], [(2, t) for t in holes])
        occ.synchronize()
        # the bodies' outlines: every curve strictly inside the channel
        walls = [t for _, t in gmsh.model.getEntities(1)
                 if min(gmsh.model.getBoundingBox(1, t)[0:2]) > 1e-6 and gmsh.model.getBoundingBox(1, t)[3] < 8.0 - 1e-6
                 and gmsh.model.getBoundingBox(1, t)[4] < 3.0 - 1e-6]
        f = gmsh.model.mesh.field
        dist = f.add("Distance")
        f.setNumbers(dist, "CurvesList", walls)
        f.setNumber(dist, "Sampling", 200)
        thr = f.add("Threshold")
        f.setNumber(thr, "InField", dist)
        f.setNumber(thr, "SizeMin", h / 6)
        f.setNumber(thr, "SizeMax", h * 1.5)
        f.setNumber(thr, "DistMin", 0.02)
        f.setNumber(thr, "DistMax", 0.8)
        f.setAsBackgroundMesh(thr)
        gmsh.option.setNumber("Mesh.MeshSizeExtendFromBoundary", 0)
        gmsh.option.setNumber("Mesh.MeshSizeFromPoints", 0)
        gmsh.option.setNumber("Mesh.Algorithm", 5)
        gmsh.model.mesh.generate(2)

    points, cells = _calibrated(lambda h: _run(lambda g: build(g, h), 2, 2), h_guess, n, 2)
    return Mesh(points, cells=cells)


def _layers(points: np.ndarray, normals: np.ndarray, cells: Dict[str, np.ndarray], thickness: float, layers: int):
    """Extrude a surface mesh along ``normals`` into ``layers`` layers: triangles -> wedges, quads -> hexahedra."""
    ns = points.shape[0]
    pts = np.concatenate([points + (thickness * k / layers) * normals for k in range(layers + 1)])
    out = {}
    for name, c in cells.items():
        vol = "wedge" if name == "triangle" else "hexahedron"
        out[vol] = np.concatenate([np.concatenate([c + k * ns, c + (k + 1) * ns], axis=1) for k in range(layers)])
    return pts, out


def shell_mesh(num_nodes: int = 20_000, cell: str = "wedge", layers: int = 3) -> Mesh:
    """A thin spherical dome (thickness 1% of its radius) made of a few extruded layers.

    Args:
        num_nodes: target node count (over all layers).
        cell: ``"wedge"`` (triangles extruded to prisms) or ``"hexahedron"`` (quads extruded).
        layers: element layers through the thickness.

    Returns:
        3D :class:`Mesh` with ``wedge`` or ``hexahedron`` cells (points ``[N, 3]``).
    """
    n = _check_nodes(num_nodes)
    if cell not in ("wedge", "hexahedron"):
        raise ValueError(f"cell must be 'wedge' or 'hexahedron', got {cell!r}")
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise ValueError(f"layers must be an int >= 1, got {layers!r}")
    area = 2 * np.pi  # unit hemisphere; nodes ~ 1.15 area / h^2 (triangles), quads half as many per h^2
    h = np.sqrt((1.15 if cell == "wedge" else 7.5) * area * (layers + 1) / n)  # subdivision: ~6x the nodes

    def build(gmsh):
        occ = gmsh.model.occ
        occ.addSphere(0, 0, 0, 1.0, angle1=0.0)
        cutter = occ.addCylinder(0.3, 0.0, -1.0, 0.0, 0.0, 3.0, 0.25)  # a hole through the dome
        occ.cut([(3, 1)], [(3, cutter)])
        occ.synchronize()
        # keep only the spherical surface: drop the volume, the flat base and the hole's wall
        other = [(2, t) for _, t in gmsh.model.getEntities(2) if gmsh.model.getType(2, t) != "Sphere"]
        gmsh.model.mesh.setSize(gmsh.model.getEntities(0), h)
        _sizes(gmsh, h)
        if cell == "hexahedron":  # every triangle split into 3 quads (gmsh's recombination can crash on large meshes)
            gmsh.option.setNumber("Mesh.SubdivisionAlgorithm", 1)
        gmsh.model.removeEntities([(3, t) for _, t in gmsh.model.getEntities(3)])
        gmsh.model.removeEntities(other)
        gmsh.model.mesh.generate(2)

    points, cells = _run(build, 2, 3)
    normals = points / np.linalg.norm(points, axis=1, keepdims=True)
    pts, vol = _layers(points, normals, cells, 0.01, int(layers))
    return Mesh(pts, cells=vol)


def _boundary_layer(num_nodes: int):
    """2D points and cells: an elliptic body in a box, quads graded 1.25x per layer off its wall, triangles outside."""
    h_guess = np.sqrt(40.0 / (0.23 * num_nodes))

    def build(gmsh, h):
        occ = gmsh.model.occ
        box = occ.addRectangle(-2.0, -2.0, 0, 8.0, 5.0)
        body = occ.addDisk(0.0, 0.5, 0, 1.0, 0.12)
        occ.cut([(2, box)], [(2, body)])
        occ.synchronize()
        wall = [t for d, t in gmsh.model.getEntities(1) if gmsh.model.getBoundingBox(1, t)[3] < 1.5]
        f = gmsh.model.mesh.field
        bl = f.add("BoundaryLayer")
        f.setNumbers(bl, "CurvesList", wall)
        f.setNumber(bl, "Size", h / 200)
        f.setNumber(bl, "Ratio", 1.25)
        f.setNumber(bl, "Thickness", 0.25)
        f.setNumber(bl, "Quads", 1)
        f.setAsBoundaryLayer(bl)
        dist = f.add("Distance")
        f.setNumbers(dist, "CurvesList", wall)
        thr = f.add("Threshold")
        f.setNumber(thr, "InField", dist)
        f.setNumber(thr, "SizeMin", h / 5)
        f.setNumber(thr, "SizeMax", h * 1.5)
        f.setNumber(thr, "DistMin", 0.25)
        f.setNumber(thr, "DistMax", 2.0)
        f.setAsBackgroundMesh(thr)
        gmsh.option.setNumber("Mesh.MeshSizeExtendFromBoundary", 0)
        gmsh.option.setNumber("Mesh.MeshSizeFromPoints", 0)
        gmsh.model.mesh.generate(2)

    return _calibrated(lambda h: _run(lambda g: build(g, h), 2, 2), h_guess, num_nodes, 2)


def boundary_layer_mesh(num_nodes: int = 20_000) -> Mesh:
    """A strongly graded boundary layer round a thin elliptic body: wall quads growing 1.25x per layer, triangles outside.

    Args:
        num_nodes: target node count.

    Returns:
        2D :class:`Mesh` with ``quad`` and ``triangle`` cells (points ``[N, 2]``).
    """
    points, cells = _boundary_layer(_check_nodes(num_nodes))
    return Mesh(points, cells=cells)


def mixed_mesh(num_nodes: int = 20_000, layers: int = 4) -> Mesh:
    """The boundary-layer mesh extruded through ``layers`` layers: hexahedra and prisms in one 3D mesh.

    Args:
        num_nodes: target node count (over all layers).
        layers: element layers in z.

    Returns:
        3D :class:`Mesh` with ``hexahedron`` and ``wedge`` cells (points ``[N, 3]``).
    """
    n = _check_nodes(num_nodes)
    if isinstance(layers, bool) or not isinstance(layers, (int, np.integer)) or layers < 1:
        raise ValueError(f"layers must be an int >= 1, got {layers!r}")
    points, cells = _boundary_layer(max(n // (layers + 1), 100))
    flat = np.concatenate([points, np.zeros((points.shape[0], 1))], axis=1)
    normal = np.zeros_like(flat)
    normal[:, 2] = 1.0
    pts, vol = _layers(flat, normal, cells, 0.5, int(layers))
    return Mesh(pts, cells=vol)


def hex_block_mesh(num_nodes: int = 20_000, grading: float = 1.08) -> Mesh:
    """A 4 x 1 x 0.5 block of structured hexahedra, graded geometrically towards one face in y and z.

    Args:
        num_nodes: target node count.
        grading: ratio of successive cell sizes in y and z (1: uniform).

    Returns:
        3D :class:`Mesh` with ``hexahedron`` cells (points ``[N, 3]``).
    """
    n = _check_nodes(num_nodes)
    # nodes per direction in proportion to the extents, (8k)(2k)(k) ~ n
    k = max(int(round((n / 16.0) ** (1 / 3))), 2)
    counts = (8 * k, 2 * k, k)

    def build(gmsh):
        gmsh.model.occ.addBox(0, 0, 0, 4.0, 1.0, 0.5)
        gmsh.model.occ.synchronize()
        for d, t in gmsh.model.getEntities(1):
            x0, y0, z0, x1, y1, z1 = gmsh.model.getBoundingBox(1, t)
            axis = int(np.argmax([x1 - x0, y1 - y0, z1 - z0]))
            coef = 1.0 if axis == 0 else grading
            gmsh.model.mesh.setTransfiniteCurve(t, counts[axis], "Progression", coef)
        for d, t in gmsh.model.getEntities(2):
            gmsh.model.mesh.setTransfiniteSurface(t)
            gmsh.model.mesh.setRecombine(2, t)
        gmsh.model.mesh.setTransfiniteVolume(1)
        gmsh.model.mesh.setRecombine(3, 1)
        gmsh.model.mesh.generate(3)

    points, cells = _run(build, 3, 3)
    return Mesh(points, cells=cells)


#: name -> generator taking a target node count
def cylinder_hex_mesh(num_nodes: int = 20_000) -> Mesh:
    """A structured hexahedral block with a cylindrical hole (held out: no family mesh is like it).

    An O-grid of four transfinite patches between a circle of radius 0.5 and a 4 x 3 rectangle, graded
    towards the cylinder, recombined into quads and extruded into hexahedra along z.

    Args:
        num_nodes: target node count (the mesh lands within a few percent of it).

    Returns:
        3D :class:`meshshard.Mesh` with ``hexahedron`` cells.
    """
    num_nodes = _check_nodes(num_nodes)
    m = max(4, int(round((num_nodes / 2.4) ** (1 / 3))))  # nodes ~ 4 (m - 1) m (0.6 m + 1)
    layers = max(2, int(round(0.6 * m)))

    def build(gmsh):
        geo = gmsh.model.geo
        centre = geo.addPoint(0, 0, 0)
        angles = np.pi / 4 + np.arange(4) * np.pi / 2
        inner = [geo.addPoint(0.5 * np.cos(a), 0.5 * np.sin(a), 0) for a in angles]
        outer = [geo.addPoint(2.0 * np.sign(np.cos(a)), 1.5 * np.sign(np.sin(a)), 0) for a in angles]
        arcs = [geo.addCircleArc(inner[i], centre, inner[(i + 1) % 4]) for i in range(4)]
        sides = [geo.addLine(outer[i], outer[(i + 1) % 4]) for i in range(4)]
        rays = [geo.addLine(inner[i], outer[i]) for i in range(4)]
        surfaces = [geo.addPlaneSurface([geo.addCurveLoop([arcs[i], rays[(i + 1) % 4], -sides[i], -rays[i]])])
                    for i in range(4)]
        for t in arcs + sides:
            geo.mesh.setTransfiniteCurve(t, m)
        for t in rays:
            geo.mesh.setTransfiniteCurve(t, m, "Progression", 1.04)
        for s in surfaces:
            geo.mesh.setTransfiniteSurface(s)
            geo.mesh.setRecombine(2, s)
        geo.extrude([(2, s) for s in surfaces], 0, 0, 3.0, [layers], recombine=True)
        geo.synchronize()
        gmsh.model.mesh.generate(3)

    points, cells = _run(build, 3, 3)
    return Mesh(points, cells=cells)


def naca0012_ogrid_mesh(num_nodes: int = 20_000) -> Mesh:
    """A NACA 0012 airfoil in a quad O-grid with boundary-layer grading (held out: no family mesh is like it).

    Four transfinite patches between the airfoil (split at the trailing edge, the leading edge and x = 0.3 on
    both sides) and a far-field circle of radius 12 chords, the radial spacing growing geometrically from the
    wall (the last cell a few thousand times the first), all quads.

    Args:
        num_nodes: target node count (the mesh lands within a few percent of it).

    Returns:
        2D :class:`meshshard.Mesh` with ``quad`` cells.
    """
    num_nodes = _check_nodes(num_nodes)
    around = max(4, int(round(np.sqrt(num_nodes / 2.0))))  # nodes per patch side along the wall
    radial = max(4, int(round(num_nodes / (4 * (around - 1)))))

    def half_thickness(x):
        return 0.6 * (0.2969 * np.sqrt(x) - 0.1260 * x - 0.3516 * x**2 + 0.2843 * x**3 - 0.1036 * x**4)

    def build(gmsh):
        geo = gmsh.model.geo
        k = 200
        xs = 0.5 * (1 - np.cos(np.linspace(0, np.pi, k)))  # cosine spacing, 0 (leading edge) .. 1 (trailing edge)
        split = int(np.argmin(abs(xs - 0.3)))
        te, le = geo.addPoint(1, 0, 0), geo.addPoint(0, 0, 0)
        up, lo = (geo.addPoint(xs[split], s * half_thickness(xs[split]), 0) for s in (1, -1))

        def spline(a, b, ids, sign):
            return geo.addSpline([a] + [geo.addPoint(xs[i], sign * half_thickness(xs[i]), 0) for i in ids] + [b])

        wall = [spline(te, up, range(k - 2, split, -1), 1), spline(up, le, range(split - 1, 0, -1), 1),
                spline(le, lo, range(1, split), -1), spline(lo, te, range(split + 1, k - 1), -1)]
        centre = geo.addPoint(0.5, 0, 0)
        far = [geo.addPoint(0.5 + 12.0 * np.cos(a), 12.0 * np.sin(a), 0) for a in np.arange(4) * np.pi / 2]
        arcs = [geo.addCircleArc(far[i], centre, far[(i + 1) % 4]) for i in range(4)]
        rays = [geo.addLine(w, f) for w, f in zip([te, up, le, lo], far)]
        surfaces = [geo.addPlaneSurface([geo.addCurveLoop([wall[i], rays[(i + 1) % 4], -arcs[i], -rays[i]])])
                    for i in range(4)]
        for t in wall + arcs:
            geo.mesh.setTransfiniteCurve(t, around)
        for t in rays:
            geo.mesh.setTransfiniteCurve(t, radial, "Progression", 1.0 + 8.0 / radial)
        for s in surfaces:
            geo.mesh.setTransfiniteSurface(s)
            geo.mesh.setRecombine(2, s)
        geo.synchronize()
        gmsh.model.mesh.generate(2)

    points, cells = _run(build, 2, 2)
    return Mesh(points, cells=cells)


GMSH_FAMILY: Dict[str, Callable[[int], Mesh]] = {
    "vessel (tet)": vessel_mesh,
    "bodies (2D tri)": bodies_mesh,
    "shell (prism)": shell_mesh,
    "shell (hex)": lambda n: shell_mesh(n, cell="hexahedron"),
    "boundary layer (2D quad+tri)": boundary_layer_mesh,
    "hex block (graded)": hex_block_mesh,
    "mixed (hex+prism)": mixed_mesh,
}
