"""Partition plots: cells (2D) or points/surfaces (3D) coloured by part, ghost nodes marked.

Figures are made as :mod:`meshshard.viz._render` makes them (a bare matplotlib ``Figure``, no
pyplot), with the rendering the field plots share.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch

from meshshard.viz._render import (CELL_FACES_3D, MAX_FACES_3D, MAX_POINTS_3D, Box, PathLike, cell_drawing_2d, check_box,
                                  fan_triangles,
                                    frame_3d, light_direction, majority_part, marker_size, marker_size_3d, new_figure,
                                    points_and_mesh, save_figure, shade, surface_faces)
from meshshard.viz.colors import part_colormap, part_colors

__all__ = ["plot_partition", "plot_part_sizes", "plot_partition_summary", "ghost_mask", "auto_zoom_box", "mesh_zoom_box",
           "cut_zoom_box"]


# ----------------------------------------------------------------------------- inputs


def _assignment(partition, n: int) -> Tuple[np.ndarray, int]:
    if hasattr(partition, "assignment") and hasattr(partition, "num_parts"):
        a, p = partition.assignment, int(partition.num_parts)
    else:
        a, p = partition, None
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"partition must assign every one of the {n} nodes, got shape {a.shape}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"partition assignment must hold integer part ids, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.size and a.min() < 0:
        raise ValueError("partition assignment holds negative part ids")
    p = p if p is not None else int(a.max()) + 1 if a.size else 1
    return a, p


def _int_array(x) -> np.ndarray:
    return np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.int64)


def ghost_mask(assignment, edge_index) -> np.ndarray:
    """Nodes that are ghosts of some other part: they have an edge into a different part.

    Args:
        assignment: int [N] part id per node.
        edge_index: int [2, E] node graph.

    Returns:
        bool numpy array [N].
    """
    a, ei = _int_array(assignment), _int_array(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"edge_index must have shape [2, E], got {ei.shape}")
    mask = np.zeros(a.shape[0], dtype=bool)
    if ei.size:
        if ei.min() < 0 or ei.max() >= a.shape[0]:
            raise ValueError(f"edge_index refers to nodes outside [0, {a.shape[0]})")
        cut = a[ei[0]] != a[ei[1]]
        mask[ei[0, cut]] = True
        mask[ei[1, cut]] = True
    return mask


def auto_zoom_box(points: np.ndarray, triangles: np.ndarray, fraction: float = 0.2) -> Optional[Box]:
    """A box around the finest cells (e.g. the airfoil in a far-field mesh), or None.

    Takes the ``fraction`` of triangles with the smallest area, boxes their nodes (1-99th
    percentile, padded), and returns ``(xmin, xmax, ymin, ymax)`` only when that box covers less
    than a quarter of the mesh's bounding box (otherwise a zoom shows nothing new).

    Args:
        points: ``[N, 2]`` (or more columns; the first two are used).
        triangles: ``[T, 3]`` node ids.
        fraction: share of the smallest triangles that defines the fine region.
    """
    p = points[:, :2]
    a, b, c = p[triangles[:, 0]], p[triangles[:, 1]], p[triangles[:, 2]]
    area = 0.5 * np.abs((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))
    if len(area) < 20:
        return None
    small = triangles[area <= np.quantile(area, fraction)].reshape(-1)
    q = p[small]
    lo, hi = np.percentile(q, 1, axis=0), np.percentile(q, 99, axis=0)
    span = np.maximum(hi - lo, 1e-12)
    side = max(span) * 1.3  # a margin around the fine region, and not too flat a box
    centre = (lo + hi) / 2
    half = np.maximum(span * 0.65, side / 2 * np.array([1.0, 0.6]))
    lo, hi = centre - half, centre + half
    full = np.ptp(p, axis=0)
    if np.prod(hi - lo) > 0.25 * np.prod(np.maximum(full, 1e-300)):
        return None
    return float(lo[0]), float(hi[0]), float(lo[1]), float(hi[1])


def _part_boxes(points: np.ndarray, assignment: np.ndarray, num_parts: int):
    """Bounding box of each non-empty part: (part ids [P'], lo [P', d], hi [P', d])."""
    sizes = np.bincount(assignment, minlength=num_parts)
    present = np.flatnonzero(sizes)
    starts = np.cumsum(sizes)[present] - sizes[present]
    grouped = points[np.argsort(assignment, kind="stable")]
    return present, np.minimum.reduceat(grouped, starts), np.maximum.reduceat(grouped, starts)


def _small_parts(points: np.ndarray, assignment: np.ndarray, num_parts: int, fraction: float = 0.05) -> np.ndarray:
    """Parts too small to see in a view of the whole mesh, smallest first: the diagonal of their
    bounding box is below ``fraction`` of the mesh's (a graded mesh puts whole parts in its fine region)."""
    if len(points) == 0:
        return np.zeros(0, dtype=np.int64)
    ids, lo, hi = _part_boxes(points, assignment, num_parts)
    diag = np.linalg.norm(hi - lo, axis=1)
    small = diag < fraction * np.linalg.norm(np.ptp(points, axis=0))
    return ids[small][np.argsort(diag[small], kind="stable")]


def cut_zoom_box(mesh_or_points, partition, edge_index=None, nodes: int = 1500) -> Optional[Box]:
    """A 2D zoom box centred where parts meet, or None.

    The centre is the midpoint of a cut edge (an edge whose ends lie in different parts), so the
    box always holds nodes of at least two parts and ghost nodes. Which cut edge, and how large:

    - parts too small to see in a view of the whole mesh (see ``plot_partition``): the cut edge
      nearest their middle, and a box that holds all of them (or only the smallest, when all of
      them need too large a box);
    - else, when the mesh has a region of much finer cells (:func:`auto_zoom_box`): the cut edge
      nearest that region's centre, and a box of that region's size;
    - else the cut edge nearest the middle of the cut, and a box holding about ``nodes`` nodes.

    Args:
        mesh_or_points: a 2D :class:`~meshshard.io.Mesh`, or points ``[N, 2]``.
        partition: a :class:`~meshshard.partitioners.Partition` or an int assignment ``[N]``.
        edge_index: node graph ``[2, E]``; defaults to the mesh's element graph.
        nodes: about how many nodes the box holds when neither rule above sets its size.

    Returns:
        ``(xmin, xmax, ymin, ymax)``, or ``None`` for 3D points, one part, no graph (a point
        cloud without ``edge_index``), or a box that would cover more than a quarter of the
        mesh's bounding box (the whole view shows it all already).
    """
    points, mesh = points_and_mesh(mesh_or_points)
    if points.shape[1] != 2:
        return None
    assignment, num_parts = _assignment(partition, len(points))
    return _cut_zoom_box(points, mesh, assignment, num_parts, _edge_index_for(mesh, points, edge_index), nodes)


def _cut_zoom_box(points, mesh, assignment, num_parts, edge_index, nodes=1500) -> Optional[Box]:
    if edge_index is None:
        return None
    ghost_mask(assignment, edge_index)  # validates edge_index
    ei = _int_array(edge_index)
    cut = ei[:, assignment[ei[0]] != assignment[ei[1]]]
    if cut.shape[1] == 0:
        return None
    mid = (points[cut[0]] + points[cut[1]]) / 2
    max_area = 0.25 * np.prod(np.maximum(np.ptp(points, axis=0), 1e-300))
    from scipy.spatial import cKDTree

    tree = cKDTree(points)

    def box_at(target, half=None, contain=None, k=200):
        c = mid[np.argmin(((mid - target) ** 2).sum(1))]
        dist = tree.query(c, k=min(k, len(points)))[0]
        h = np.full(2, float(np.max(dist)))  # at least k nodes around the cut: ghosts and cells to see
        if half is not None:
            h = np.maximum(h, half)
        if contain is not None:
            h = np.maximum(h, 1.1 * np.abs(contain - c).max(0))
        h = np.maximum(h, 0.6 * h.max())  # not too flat a box
        if np.prod(2 * h) > max_area:
            return None
        return float(c[0] - h[0]), float(c[0] + h[0]), float(c[1] - h[1]), float(c[1] + h[1])

    small = _small_parts(points, assignment, num_parts)
    for group in ((small, small[:1]) if small.size else ()):
        sel = points[np.isin(assignment, group)]
        lo, hi = sel.min(0), sel.max(0)
        box = box_at((lo + hi) / 2, contain=np.stack([lo, hi]))
        if box is not None:
            return box
    fine = _fine_box(points, mesh)
    if fine is not None:
        centre = np.array([fine[0] + fine[1], fine[2] + fine[3]]) / 2
        return box_at(centre, half=np.array([fine[1] - fine[0], fine[3] - fine[2]]) / 2)
    return box_at(np.median(mid, axis=0), k=nodes)


def _fine_box(points, mesh) -> Optional[Box]:
    if mesh is None or mesh.is_point_cloud or mesh.topological_dim != 2:
        return None
    tris, _ = fan_triangles(mesh.cells, np.zeros(mesh.num_nodes, dtype=np.int64))
    return auto_zoom_box(points, tris)


def _subsample_parts(assignment: np.ndarray, num_parts: int, max_points: int, seed: int) -> np.ndarray:
    """Sorted ids of at most about ``max_points`` nodes, drawn at random in proportion to the part
    sizes, but at least ``max_points / (10 num_parts)`` from each part, so that small parts stay visible."""
    n = len(assignment)
    if n <= max_points:
        return np.arange(n)
    sizes = np.bincount(assignment, minlength=num_parts)
    quota = np.maximum(sizes * max_points // n, np.minimum(sizes, max(max_points // (10 * num_parts), 1)))
    perm = np.random.default_rng(seed).permutation(n)
    a = assignment[perm]
    order = np.argsort(a, kind="stable")
    rank = np.empty(n, dtype=np.int64)  # position of each drawn node among the drawn nodes of its part
    rank[order] = np.arange(n) - np.repeat(np.cumsum(sizes) - sizes, sizes)
    return np.sort(perm[rank < quota[a]])


def _ghost_size(n_visible: int) -> float:
    return float(np.clip(12000.0 / max(n_visible, 1), 0.4, 10.0))


# ----------------------------------------------------------------------------- drawing

def _draw_2d(ax, points, mesh, assignment, num_parts, ghosts, box=None, show_cell_edges=False):
    cmap = part_colormap(num_parts)
    x, y = points[:, 0], points[:, 1]
    cells_2d = cell_drawing_2d(mesh) if points.shape[1] == 2 else None
    if cells_2d is not None:  # cell-centred data: every cell in its part's colour
        vx, tris, cell = cells_2d
        ax.tripcolor(vx[:, 0], vx[:, 1], tris, facecolors=assignment[cell].astype(float), cmap=cmap, vmin=-0.5,
                     vmax=num_parts - 0.5, edgecolors="none", linewidth=0.0)
        n_visible = len(points)
    elif mesh is not None and not mesh.is_point_cloud and mesh.topological_dim == 2:
        tris, tri_part = fan_triangles(mesh.cells, assignment)
        ax.tripcolor(x, y, tris, facecolors=tri_part.astype(float), cmap=cmap, vmin=-0.5,
                     vmax=num_parts - 0.5, edgecolors="none", linewidth=0.0)
        if show_cell_edges:  # the element edges (not the fan diagonals of quads), thin and white
            _draw_cell_edges(ax, points, mesh, box)
        n_visible = len(points)
    else:
        idx = _subsample_parts(assignment, num_parts, 200_000, 0)
        ax.scatter(x[idx], y[idx], c=assignment[idx], cmap=cmap, vmin=-0.5, vmax=num_parts - 0.5,
                   s=marker_size(len(idx)), linewidths=0, rasterized=True)
        n_visible = len(idx)
    if box is not None:
        ax.set_xlim(box[0], box[1])
        ax.set_ylim(box[2], box[3])
        inside = (x >= box[0]) & (x <= box[1]) & (y >= box[2]) & (y <= box[3])
        n_visible = int(inside.sum())
    if ghosts is not None and ghosts.any():
        ax.scatter(x[ghosts], y[ghosts], s=_ghost_size(n_visible), c="k", marker="o",
                   linewidths=0, label="ghost nodes", zorder=3)
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")


def _label_small_parts(ax, points, assignment, num_parts) -> np.ndarray:
    """Point at each part too small to see in a whole-mesh view with a label in its colour; returns them."""
    small = _small_parts(points, assignment, num_parts)[:12]
    colors = part_colors(num_parts)
    for i, r in enumerate(np.sort(small)):
        own = points[assignment == r, :2]
        at = own[np.argmin(((own - np.median(own, axis=0)) ** 2).sum(1))]
        angle = np.deg2rad(60 + 360 * i / len(small))  # fan the labels out: small parts often share one spot
        ax.annotate(f"part {r}", xy=at, xytext=(45 * np.cos(angle), 30 * np.sin(angle)), textcoords="offset points",
                    fontsize=7, ha="center", va="center", zorder=5,
                    bbox=dict(boxstyle="round,pad=0.25", fc=colors[r], ec="k", lw=0.5),
                    arrowprops=dict(arrowstyle="-", color="k", lw=0.7, shrinkA=0, shrinkB=0))
    return small


def _draw_cell_edges(ax, points, mesh, box):
    from matplotlib.collections import LineCollection

    ei = mesh.edge_index()
    ei = ei[:, ei[0] < ei[1]].numpy()
    if box is not None:
        p = points[ei]  # [2, E, 2]
        inside = ((p[..., 0] >= box[0]) & (p[..., 0] <= box[1]) & (p[..., 1] >= box[2]) & (p[..., 1] <= box[3])).any(0)
        ei = ei[:, inside]
    if ei.shape[1] > 300_000:  # too many to see: skip rather than paint the panel white
        return
    ax.add_collection(LineCollection(points[ei.T][:, :, :2], colors="w", linewidths=0.15))


def _cutaway(points, mesh, elev, azim):
    """Cut a volume mesh open at its mid-plane facing the camera: the surface of the cells in the
    far half, so cavities and the parts inside show. Returns (faces, label) or None."""
    if mesh is None or mesh.is_point_cloud or mesh.topological_dim != 3 or \
            not all(t in CELL_FACES_3D for t in mesh.cells):
        return None
    e, a = np.deg2rad(elev), np.deg2rad(azim)
    toward_camera = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    axis = int(np.argmax(np.abs(toward_camera)))
    sign = np.sign(toward_camera[axis])
    # a little off the middle: a k-d tree or bisection partition puts a cut right at the middle,
    # and a section along a cut shows the cells of two parts interleaved
    middle = float(0.55 * points[:, axis].min() + 0.45 * points[:, axis].max())
    keep = {t: (points[conn, axis].mean(1) - middle) * sign < 0 for t, conn in mesh.cells.items()}
    if mesh.polyhedra is not None:
        from meshshard.io.polyhedra import POLYHEDRON

        cell, node = mesh.polyhedra.cell_nodes()
        mean = np.bincount(cell, weights=points[node, axis]) / np.bincount(cell)
        keep[POLYHEDRON] = (mean - middle) * sign < 0
    faces = surface_faces(mesh, keep)
    if faces is None:
        return None
    return faces, f"cut open at {'xyz'[axis]} = {middle:.3g}, the side facing the camera removed"


def _darken(colors: np.ndarray, factor: float = 0.45) -> np.ndarray:
    out = colors.copy()
    out[:, :3] *= factor
    return out


def _face_colors(points, conn, assignment, ghosts, colors, light) -> np.ndarray:
    """RGBA [F, 4] per face: its part's colour, shaded (:func:`shade`), darker at ghost nodes."""
    out = shade(points, conn, colors[majority_part(conn, assignment)], light)
    if ghosts is not None:
        at_ghost = ghosts[conn].any(1)
        out[at_ghost] = _darken(out[at_ghost])
    return out


def _draw_3d(ax, points, mesh, assignment, num_parts, ghosts, elev, azim, max_points, seed, faces=None):
    """Surface faces coloured by part (faces at a ghost node darker), or a coloured scatter
    (ghost nodes as black dots on top) for point clouds and surfaces too big to draw."""
    colors = part_colors(num_parts)
    n_faces = sum(len(f) for f in faces) if faces else 0
    if faces and n_faces <= MAX_FACES_3D:
        from mpl_toolkits.mplot3d.art3d import Poly3DCollection

        light = light_direction(elev, azim)
        edges = (0, 0, 0, 0.15) if n_faces <= 20_000 else "none"  # cell edges while few enough to tell apart
        for conn in faces:
            face_colors = _face_colors(points, conn, assignment, ghosts, colors, light)
            # no antialiasing: its seams between tiny faces let the faces behind shine through
            coll = Poly3DCollection(points[conn], facecolors=face_colors, edgecolors=edges, linewidths=0.1,
                                    antialiased=False)
            ax.add_collection3d(coll)
    else:
        if faces:  # huge surface: scatter its nodes only (the interior would hide nothing anyway)
            shown = np.unique(np.concatenate([f.reshape(-1) for f in faces]))
        else:
            shown = np.arange(len(points))
        shown = shown[_subsample_parts(assignment[shown], num_parts, max_points, seed)]
        size = marker_size_3d(len(shown))
        ax.computed_zorder = False  # ghosts always on top of the cloud (a cloud hides nothing anyway)
        ax.scatter(points[shown, 0], points[shown, 1], points[shown, 2], c=colors[assignment[shown]],
                   s=size, linewidths=0, depthshade=False, rasterized=True, zorder=1)
        if ghosts is not None:
            g = shown[ghosts[shown]]
            if len(g):
                ax.scatter(points[g, 0], points[g, 1], points[g, 2], c="k", s=max(1.5, 2.5 * size),
                           linewidths=0, depthshade=False, rasterized=True, zorder=2)
    frame_3d(ax, points, elev, azim)


def _draw_3d_panels(fig, cells, points, mesh, assignment, num_parts, ghosts, views, max_points, seed, cutaway):
    """One 3D axes per view in the grid ``cells``: the whole surface first, then (``cutaway``) the
    mesh cut open facing the camera. Returns the axes."""
    faces = surface_faces(mesh)
    axes = []
    for i, ((elev, azim), cell) in enumerate(zip(views, cells)):
        ax = fig.add_subplot(cell, projection="3d")
        cut = _cutaway(points, mesh, elev, azim) if cutaway and i > 0 else None
        _draw_3d(ax, points, mesh, assignment, num_parts, ghosts, elev, azim, max_points, seed,
                 cut[0] if cut else faces)
        what = cut[1] if cut else "surface" if faces else "points"
        ax.set_title(f"{what} (elev={elev:g}, azim={azim:g})", fontsize=8)
        axes.append(ax)
    return axes


def _draw_projection(ax, points, assignment, num_parts, ghosts, max_points, seed):
    """A 3D cloud on a plain 2D axes: project onto the two axes of largest extent."""
    order = np.argsort(-np.ptp(points, axis=0))[:2]
    order.sort()
    _draw_2d(ax, points[:, order], None, assignment, num_parts, ghosts)
    ax.set_xlabel("xyz"[order[0]])
    ax.set_ylabel("xyz"[order[1]])


def _edge_index_for(mesh, points, edge_index):
    if edge_index is not None:
        return edge_index
    if mesh is not None and not mesh.is_point_cloud:
        return mesh.edge_index()
    return None  # a bare point cloud: no graph, hence no ghosts to mark


def _legend(ax, num_parts, sizes=None):
    if num_parts > 12:
        return
    from matplotlib.patches import Patch

    colors = part_colors(num_parts)
    handles = [Patch(color=colors[r], label=f"part {r}" + (f" ({sizes[r]})" if sizes is not None else ""))
               for r in range(num_parts)]
    ax.legend(handles=handles, fontsize=6, loc="upper right", framealpha=0.8, ncols=1 if num_parts <= 6 else 2)


# ----------------------------------------------------------------------------- public

def plot_partition(
    mesh_or_points,
    partition,
    edge_index=None,
    show_ghosts: bool = True,
    ax=None,
    path: Optional[PathLike] = None,
    title: Optional[str] = None,
    zoom: Union[str, None, Sequence[float]] = "auto",
    max_points: Optional[int] = None,
    views: Sequence[Tuple[float, float]] = ((20.0, -60.0), (20.0, 120.0)),
    figsize: Optional[Tuple[float, float]] = None,
    dpi: int = 120,
    seed: int = 0,
    cutaway: bool = True,
):
    r"""Draw a partition: cells (2D) or points/surface faces (3D) coloured by part.

    Parts too small to see in the whole view (a graded mesh puts whole parts in its fine region)
    get a label in their colour pointing at them, and the zoom panel shows them.

    Args:
        mesh_or_points: a :class:`~meshshard.io.Mesh`, or points [N, 2] / [N, 3].
        partition: a :class:`~meshshard.partitioners.Partition` or an int assignment [N].
        edge_index: node graph [2, E] used to find ghost nodes; defaults to the mesh's element
            graph (a bare point cloud without it shows no ghosts).
        show_ghosts: mark ghost nodes (nodes with a neighbour in another part) in black; on a
            drawn 3D surface the faces at them are darker.
        ax: draw into this axes (a 3D axes for 3D views; a 2D axes gets a 2D projection).
            When ``None`` a new figure is made: 2D with a zoom panel where parts meet (``zoom``),
            3D with one panel per entry of ``views``.
        path: save the figure there (PNG, PDF, SVG by suffix; written atomically).
        title: figure title.
        zoom: ``"auto"`` (:func:`cut_zoom_box`; for one part, :func:`auto_zoom_box`), ``None``
            (no zoom panel) or a box ``(xmin, xmax, ymin, ymax)``. 2D only.
        max_points: scatter at most about this many points per panel (drawn at random per part,
            ``seed``, keeping some of every part); default 200,000 in 2D, 50,000 in 3D.
        views: (elevation, azimuth) of each 3D panel.
        figsize, dpi: figure size in inches and resolution.
        cutaway: 3D volume meshes: the panels after the first show the mesh cut open near its
            mid-plane facing the camera (the near half removed), so cavities and the parts
            inside show; the first panel shows the whole boundary surface.

    Returns:
        the :class:`matplotlib.figure.Figure`.
    """
    points, mesh = points_and_mesh(mesh_or_points)
    assignment, num_parts = _assignment(partition, len(points))
    ei = _edge_index_for(mesh, points, edge_index)
    ghosts = ghost_mask(assignment, ei) if show_ghosts and ei is not None else None
    sizes = np.bincount(assignment, minlength=num_parts)
    three_d = points.shape[1] == 3
    max_points = max_points or (MAX_POINTS_3D if three_d else 200_000)

    if ax is not None:
        fig = ax.figure
        if three_d and getattr(ax, "name", "") == "3d":
            elev, azim = views[0]
            _draw_3d(ax, points, mesh, assignment, num_parts, ghosts, elev, azim, max_points, seed,
                     surface_faces(mesh))
        elif three_d:
            _draw_projection(ax, points, assignment, num_parts, ghosts, max_points, seed)
        else:
            box = None if zoom is None or isinstance(zoom, str) else _zoom_box(points, mesh, zoom, assignment,
                                                                               num_parts, ei)
            _draw_2d(ax, points, mesh, assignment, num_parts, ghosts, box=box)
            if box is None:
                _label_small_parts(ax, points, assignment, num_parts)
        if title:
            ax.set_title(title, fontsize=9)
        save_figure(fig, path, dpi)
        return fig

    if three_d:
        fig = new_figure(figsize or (6.0 * len(views), 4.5), dpi)
        grid = fig.add_gridspec(1, len(views))
        axes = _draw_3d_panels(fig, [grid[0, i] for i in range(len(views))], points, mesh, assignment, num_parts,
                               ghosts, views, max_points, seed, cutaway)
        _legend(axes[0], num_parts, sizes)
    else:
        box = _zoom_box(points, mesh, zoom, assignment, num_parts, ei)
        panels = 2 if box is not None else 1
        fig = new_figure(figsize or (6.5 * panels, 5.5), dpi)
        a = fig.add_subplot(1, panels, 1)
        _draw_overview_2d(a, points, mesh, assignment, num_parts, ghosts, box)
        _legend(a, num_parts, sizes)
        if box is not None:
            _draw_zoom_2d(fig.add_subplot(1, panels, 2), points, mesh, assignment, num_parts, ghosts, box)
    fig.suptitle(title or _default_title(mesh, num_parts, len(points), ghosts, _ghost_style(points, mesh)),
                 fontsize=10)
    save_figure(fig, path, dpi)
    return fig


def _draw_overview_2d(ax, points, mesh, assignment, num_parts, ghosts, box):
    _draw_2d(ax, points, mesh, assignment, num_parts, ghosts)
    _label_small_parts(ax, points, assignment, num_parts)
    if box is not None:
        _mark_box(ax, box)


def _draw_zoom_2d(ax, points, mesh, assignment, num_parts, ghosts, box):
    _draw_2d(ax, points, mesh, assignment, num_parts, ghosts, box=box, show_cell_edges=True)
    inside = (points[:, 0] >= box[0]) & (points[:, 0] <= box[1]) & (points[:, 1] >= box[2]) & (points[:, 1] <= box[3])
    shown = np.unique(assignment[inside])
    ax.set_title("zoom where parts " + ", ".join(str(r) for r in shown[:8]) + (" ..." if len(shown) > 8 else "")
                 + " meet", fontsize=9)


def mesh_zoom_box(mesh) -> Optional[Box]:
    """The zoom box of a 2D mesh around its finest cells (see :func:`auto_zoom_box`).

    Independent of any partition, so that plots of several partitions of one mesh share it; for
    a box centred where the parts of one partition meet, use :func:`cut_zoom_box`.

    Args:
        mesh: a :class:`~meshshard.io.Mesh`.

    Returns:
        ``(xmin, xmax, ymin, ymax)``, or ``None`` for 3D meshes, point clouds and meshes without a
        much finer region. Pass it as ``zoom=`` to :func:`plot_partition` (also with ``ax=``).
    """
    points, mesh = points_and_mesh(mesh)
    if points.shape[1] != 2:
        return None
    return _fine_box(points, mesh)


def _zoom_box(points, mesh, zoom, assignment, num_parts, edge_index) -> Optional[Box]:
    if zoom is None:
        return None
    if not isinstance(zoom, str):
        return check_box(zoom)
    if zoom != "auto":
        raise ValueError(f"zoom must be 'auto', None or a box, got {zoom!r}")
    if points.shape[1] != 2:
        return None
    box = _cut_zoom_box(points, mesh, assignment, num_parts, edge_index)
    return box if box is not None else _fine_box(points, mesh)


def _mark_box(ax, box):
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((box[0], box[2]), box[1] - box[0], box[3] - box[2], fill=False, ec="k", lw=0.8, ls="--"))


def _ghost_style(points, mesh) -> str:
    """How ghost nodes show: black dots, or darker faces on a drawn 3D surface."""
    if points.shape[1] == 3 and mesh is not None and not mesh.is_point_cloud:
        return "black, or faces at them darker"
    return "black"


def _default_title(mesh, num_parts, n, ghosts, style="black") -> str:
    if mesh is None:
        name = "points"
    else:
        name = mesh.source.name if mesh.source is not None else "mesh"
    s = f"{name}: {n:,} nodes in {num_parts} parts"
    if ghosts is not None:
        s += f", {int(ghosts.sum()):,} distinct ghost nodes ({style})"
    return s


def plot_part_sizes(partition, ax=None, path: Optional[PathLike] = None, title: Optional[str] = None,
                    figsize: Tuple[float, float] = (6.0, 3.5), dpi: int = 120):
    """Bar chart of nodes per part, coloured like :func:`plot_partition`, with the mean marked.

    Args:
        partition: a :class:`~meshshard.partitioners.Partition` or an int assignment [N].
        ax: draw into this axes (a new figure when None).
        path: save the figure there.

    Returns:
        the :class:`matplotlib.figure.Figure`.
    """
    a = partition.assignment if hasattr(partition, "assignment") else partition
    n = len(a)
    assignment, num_parts = _assignment(partition, n)
    sizes = np.bincount(assignment, minlength=num_parts)
    fig = ax.figure if ax is not None else new_figure(figsize, dpi)
    ax = ax if ax is not None else fig.add_subplot(1, 1, 1)
    ax.bar(np.arange(num_parts), sizes, color=part_colors(num_parts), edgecolor="k", linewidth=0.3)
    mean = sizes.mean()
    ax.axhline(mean, color="k", ls="--", lw=0.8, label=f"mean {mean:,.0f}")
    imbalance = sizes.max() / mean if mean > 0 else float("nan")
    ax.set_xlabel("part")
    ax.set_ylabel("nodes")
    if num_parts <= 32:
        ax.set_xticks(np.arange(num_parts))
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title or f"part sizes (max/mean = {imbalance:.3f})", fontsize=9)
    save_figure(fig, path, dpi)
    return fig


def plot_partition_summary(
    mesh_or_points,
    partition,
    edge_index=None,
    quality: Optional[dict] = None,
    path: Optional[PathLike] = None,
    title: Optional[str] = None,
    show_ghosts: bool = True,
    zoom: Union[str, None, Sequence[float]] = "auto",
    max_points: Optional[int] = None,
    dpi: int = 120,
):
    """One figure for the CLI: the partition view(s), a zoom (2D), part sizes and quality numbers.

    Two ghost counts appear and are named apart: "distinct ghost nodes" (nodes with a neighbour
    in another part, each counted once: the black dots) and the quality report's ``ghost_nodes``,
    shown as "ghosts (1-hop, sum over parts)" (each part counts the outside nodes next to it, so a node
    next to two other parts counts twice; it is the sum of ``meshshard info``'s per-part
    "ghosts" column at one halo hop).

    Args:
        mesh_or_points, partition, edge_index, show_ghosts, zoom, max_points: as
            :func:`plot_partition`.
        quality: optional dict of :func:`meshshard.partition_quality` numbers, printed beside the
            size chart.
        path: save the figure there.

    Returns:
        the :class:`matplotlib.figure.Figure`.
    """
    points, mesh = points_and_mesh(mesh_or_points)
    assignment, num_parts = _assignment(partition, len(points))
    ei = _edge_index_for(mesh, points, edge_index)
    ghosts = ghost_mask(assignment, ei) if show_ghosts and ei is not None else None
    sizes = np.bincount(assignment, minlength=num_parts)
    three_d = points.shape[1] == 3
    max_points = max_points or (MAX_POINTS_3D if three_d else 200_000)
    box = None if three_d else _zoom_box(points, mesh, zoom, assignment, num_parts, ei)
    n_views = 2 if (three_d or box is not None) else 1
    fig = new_figure((5.5 * n_views + 4.5, 5.5), dpi)
    grid = fig.add_gridspec(2, n_views + 1, width_ratios=[5.5] * n_views + [4.5], height_ratios=[3, 2])
    if three_d:
        _draw_3d_panels(fig, [grid[:, 0], grid[:, 1]], points, mesh, assignment, num_parts, ghosts,
                        ((20.0, -60.0), (20.0, 120.0)), max_points, 0, cutaway=True)
    else:
        _draw_overview_2d(fig.add_subplot(grid[:, 0]), points, mesh, assignment, num_parts, ghosts, box)
        if box is not None:
            _draw_zoom_2d(fig.add_subplot(grid[:, 1]), points, mesh, assignment, num_parts, ghosts, box)
    bars = fig.add_subplot(grid[0, n_views])
    plot_part_sizes(assignment if not hasattr(partition, "num_parts") else partition, ax=bars)
    text = fig.add_subplot(grid[1, n_views])
    text.axis("off")
    text.text(0.0, 1.0, "\n".join(_summary_lines(sizes, ghosts, quality, _ghost_style(points, mesh))), va="top",
              ha="left", family="monospace", fontsize=8)
    fig.suptitle(title or _default_title(mesh, num_parts, len(points), ghosts, _ghost_style(points, mesh)),
                 fontsize=10)
    save_figure(fig, path, dpi)
    return fig


# how the summary names the quality report's keys whose meaning the bare key hides
_QUALITY_LABELS = {"ghost_nodes": "ghosts (1-hop, sum over parts)"}


def _summary_lines(sizes, ghosts, quality, style) -> list:
    lines = [f"nodes: {int(sizes.sum()):,}   parts: {len(sizes)}", f"sizes: min {sizes.min():,}  max {sizes.max():,}"]
    if ghosts is not None:
        lines.append(f"distinct ghost nodes ({style}): {int(ghosts.sum()):,}")
    for key, value in (quality or {}).items():
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
            label = _QUALITY_LABELS.get(key, key)
            lines.append(f"{label}: {value:,.4g}" if isinstance(value, (float, np.floating)) else f"{label}: {value:,}")
    return lines
