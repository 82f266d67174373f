"""Point fields drawn on a mesh: one field, or truth, prediction and error side by side.

- 2D meshes: filled contours on the cells (quads and polygons split into fan triangles).
- 3D volume meshes: the boundary surface, each face coloured by the mean of its corners' values.
- Surface meshes in 3D: their cells, coloured the same way.
- Point clouds (no cells): the points coloured by the field.

Figures are made with :class:`matplotlib.figure.Figure` directly (no pyplot), as in
:mod:`meshshard.viz.partition_plot`, with the triangulation and surface extraction of
:mod:`meshshard.viz._render` that both share.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from meshshard.io.fields import parse_field, select_fields
from meshshard.io.write import ERROR_SUFFIX, PRED_SUFFIX
from meshshard.io import Mesh
from meshshard.viz._render import (MAX_FACES_3D, MAX_POINTS_3D, PathLike, cell_drawing_2d, check_box, fan_triangles,
                                  frame_3d,
                                    light_direction, marker_size, marker_size_3d, new_figure, points_and_mesh,
                                    save_figure, shade, surface_faces)

__all__ = ["field_values", "prediction_field_names", "plot_field", "plot_field_comparison", "DEFAULT_VIEW"]

FieldSpec = Union[str, List[str]]
FieldLike = Union[str, Sequence[str], np.ndarray, torch.Tensor]
View = Tuple[float, float]

#: (elevation, azimuth) of the camera of 3D field plots: the box's front, top and right side in view
DEFAULT_VIEW: View = (25.0, -60.0)
_LEVELS = 32  # filled-contour bands in 2D: smooth to the eye, still showing iso-lines' shape


def field_values(mesh: Mesh, spec: Union[str, Sequence[str]]) -> Tuple[np.ndarray, str]:
    """One value per node of a point field of ``mesh``, and a label for it.

    ``"pressure"``: the field itself; a vector field ``"velocity"`` ([N, 3]): its magnitude,
    labelled ``"|velocity|"``; ``"velocity[0]"``: component 0; ``"velocity[0,1]"``: the magnitude
    of components 0 and 1. A list of specs takes their columns together (``["velocity_0_pred",
    "velocity_1_pred"]``: the magnitude of both, as :func:`prediction_field_names` may give them).

    Args:
        mesh: a :class:`~meshshard.io.Mesh` with ``point_data``.
        spec: ``"name"`` or ``"name[i,...]"`` (see :func:`meshshard.datasets.parse_field`), or a
            list of them.

    Returns:
        ``(values [N] float64, label)``.

    Raises:
        ValueError: a field does not exist (the message lists the point fields that do), a
            component is out of range, a value is NaN / inf, or the list is empty.
    """
    specs = [spec] if isinstance(spec, str) else list(spec)
    if not specs:
        raise ValueError("field_values needs a field spec, got an empty list")
    cols = select_fields(mesh, specs)  # [N, C]; names the available fields when missing
    if len(specs) == 1:
        name, comps = parse_field(specs[0])
        label = name if comps is None else f"{name}[{','.join(str(c) for c in comps)}]"
    else:
        label = ", ".join(specs)
    if cols.shape[1] == 1:
        return cols[:, 0], label
    return np.linalg.norm(cols, axis=1), f"|{label}|"


# pred - error gives back the truth a prediction column was compared with, to rounding (of a float32
# file too); a relative tolerance well above that tells the components of a field apart
_SAME_TRUTH_RTOL = 1e-5


def prediction_field_names(truth: str, mesh: Optional[Mesh] = None) -> Tuple[FieldSpec, Optional[FieldSpec]]:
    """The point fields ``meshshard predict`` and ``meshshard demo`` write beside a target.

    Without ``mesh``: the names for a target ``truth`` (``"pressure"`` -> ``("pressure_pred",
    "pressure_error")``, ``"velocity[0]"`` -> ``("velocity_pred[0]", "velocity_error[0]")``,
    component 0 of a whole-field prediction).

    With ``mesh`` (a file ``meshshard predict`` wrote): the fields of ``mesh`` that hold the
    prediction and error of ``truth``'s components, whichever way predict named them: a model
    trained on ``velocity[0,2]`` wrote ``velocity_pred`` with 2 columns, so ``"velocity[2]"`` is
    ``"velocity_pred[1]"``; one trained on ``velocity[0]`` and ``velocity[1]`` wrote
    ``velocity_0_pred`` and ``velocity_1_pred``, so ``"velocity[0,1]"`` is both of them (a list).
    Which components a ``<name>_pred`` field holds is read from ``<name>_pred - <name>_error``,
    the truth each column was compared with; without the error field, a ``<name>_pred`` of as many
    columns as the field holds all of them, one of as many as ``truth`` asks for holds those.

    Args:
        truth: a field spec, ``"pressure"`` or ``"velocity[0]"``.
        mesh: a :class:`~meshshard.io.Mesh` with the truth and the prediction as point data.

    Returns:
        ``(prediction, error)``: field specs for :func:`field_values` (a spec, or a list of specs
        whose columns go together); with ``mesh``, ``error`` is ``None`` when the file has none.

    Raises:
        ValueError: ``mesh`` lacks the truth, or holds no prediction of some of its components
            (the message names the point fields it has, or the components that were predicted).
    """
    name, comps = parse_field(truth)
    if mesh is None:
        suffix = "" if comps is None else f"[{','.join(str(c) for c in comps)}]"
        return f"{name}{PRED_SUFFIX}{suffix}", f"{name}{ERROR_SUFFIX}{suffix}"
    select_fields(mesh, [truth])  # the truth exists and has these components
    t = select_fields(mesh, [name])  # [N, m]
    want = list(range(t.shape[1])) if comps is None else comps
    fields = mesh.point_data
    pred, error = f"{name}{PRED_SUFFIX}", f"{name}{ERROR_SUFFIX}"
    if pred in fields:
        p = select_fields(mesh, [pred])
        e = select_fields(mesh, [error]) if error in fields else None
        if e is not None and e.shape != p.shape:
            raise ValueError(f"{error!r} has {e.shape[1]} columns but {pred!r} {p.shape[1]}: not a prediction "
                             "file of meshshard predict")
        cols = _prediction_columns(truth, t, p, e, want, pred, error)
        if cols == list(range(p.shape[1])):
            return pred, None if e is None else error
        sel = f"[{','.join(str(c) for c in cols)}]"
        return pred + sel, None if e is None else error + sel
    split = [f"{name}_{c}{PRED_SUFFIX}" for c in want]  # two targets of one field: a field per column
    if all(s in fields for s in split):
        errors = [f"{name}_{c}{ERROR_SUFFIX}" for c in want]
        if not all(s in fields for s in errors):
            errors = None
        return (split[0], errors and errors[0]) if len(want) == 1 else (split, errors)
    predicted = [c for c in range(t.shape[1]) if f"{name}_{c}{PRED_SUFFIX}" in fields]
    where = f" in {mesh.source.name}" if mesh.source is not None else ""
    if predicted:
        raise ValueError(f"{truth!r}: only components {predicted} of {name!r} have a prediction{where} "
                         f"({', '.join(f'{name}_{c}_pred' for c in predicted)})")
    raise ValueError(f"no prediction of {truth!r}{where}: no point field {pred!r} or {name}_<i>_pred; "
                     f"its point fields: {sorted(fields)}")


def _prediction_columns(truth, t, p, e, want, pred, error) -> List[int]:
    """The columns of the prediction ``p`` [N, k] of the truth field ``t`` [N, m] that predict
    components ``want``, checked against (or, when the model's components are not the obvious
    ones, read from) the error field ``e`` = ``p`` - truth [N, k] when there is one."""
    k, m = p.shape[1], t.shape[1]
    if e is not None:
        held = p - e  # the truth column each prediction column was compared with
        scale = np.maximum(np.abs(p).max(0, initial=0.0), np.abs(e).max(0, initial=0.0))
        match = [{c for c in range(m) if np.abs(held[:, j] - t[:, c]).max(initial=0.0)
                  <= _SAME_TRUTH_RTOL * max(scale[j], np.abs(t[:, c]).max(initial=0.0))} for j in range(k)]
    # the obvious readings first: all of the field (a whole-field target), or the components asked for
    for held_comps in ([list(range(m))] if k == m else []) + ([want] if len(want) == k else []):
        if e is None or all(c in match[j] for j, c in enumerate(held_comps)):
            return [held_comps.index(c) for c in want]
    name = parse_field(truth)[0]
    if e is None:
        raise ValueError(f"{pred!r} holds {k} of the {m} components of {name!r} and there is no {error!r} to tell "
                         f"which: compare {name}[i,...] with the {k} components the model predicts")
    if not any(match):
        raise ValueError(f"{pred!r} - {error!r} is no component of {name!r}: the file's {name!r} is not the truth "
                         "the prediction was compared with")
    cols = []
    for c in want:
        js = [j for j in range(k) if c in match[j]]
        if not js:
            predicted = sorted(set().union(*match))
            raise ValueError(f"{truth!r}: {pred!r} predicts components {predicted} of {name!r} (read from "
                             f"{error!r}), not {c}")
        if len(js) > 1:
            raise ValueError(f"{truth!r} is ambiguous: columns {js} of {pred!r} were all compared with component {c} "
                             f"of {name!r} (equal truth values)")
        cols.append(js[0])
    return cols


def _values(mesh: Mesh, field: FieldLike, what: str) -> Tuple[np.ndarray, str]:
    """A field spec looked up in ``mesh``, or an array [N] / [N, C] (magnitude when C > 1)."""
    if isinstance(field, str) or (isinstance(field, (list, tuple)) and all(isinstance(f, str) for f in field)):
        return field_values(mesh, field)
    v = field.detach().cpu().numpy() if isinstance(field, torch.Tensor) else np.asarray(field)
    if v.ndim not in (1, 2) or v.shape[0] != mesh.num_nodes:
        raise ValueError(f"{what} must have shape [{mesh.num_nodes}] or [{mesh.num_nodes}, C] (one row per node), "
                         f"got {v.shape}")
    if not (np.issubdtype(v.dtype, np.number) or v.dtype == bool) or np.iscomplexobj(v):
        raise TypeError(f"{what} must hold real numbers, got dtype {v.dtype}")
    v = v.astype(np.float64)
    if not np.isfinite(v).all():
        raise ValueError(f"{what} holds {int((~np.isfinite(v)).sum())} NaN or infinite values")
    if v.ndim == 2:
        return (v[:, 0], what) if v.shape[1] == 1 else (np.linalg.norm(v, axis=1), f"|{what}|")
    return v, what


def _limits(*arrays: np.ndarray, symmetric: bool = False) -> Tuple[float, float]:
    """The data range of all ``arrays`` (``[-m, m]`` with ``m`` the largest magnitude when
    ``symmetric``), widened a little when it is a single value so that a norm can be built."""
    lo = min(float(a.min()) for a in arrays)
    hi = max(float(a.max()) for a in arrays)
    if symmetric:
        hi = max(abs(lo), abs(hi))
        lo = -hi
    if hi <= lo:
        pad = max(abs(hi), 1.0) * 1e-6
        lo, hi = lo - pad, hi + pad
    return lo, hi


class _Geometry:
    """What every panel of one mesh draws from, built once: 2D triangles or 3D surface faces."""

    def __init__(self, mesh_or_points, zoom=None):
        self.points, mesh = points_and_mesh(mesh_or_points)
        self.mesh = mesh if mesh is not None else Mesh.from_points(self.points)
        self.three_d = self.points.shape[1] == 3
        if zoom is not None and self.three_d:
            raise ValueError("zoom is a 2D box (xmin, xmax, ymin, ymax); a 3D mesh takes a view instead")
        p = self.points
        # the box shown: the whole mesh, or the zoom
        self.box = check_box(zoom) if zoom is not None else (p[:, 0].min(), p[:, 0].max(), p[:, 1].min(),
                                                                 p[:, 1].max())
        self.triangulation = None  # 2D cells
        self.faces = None  # 3D: the surface faces to draw
        self.nodes = np.arange(len(p))  # else: the nodes to scatter
        self.tri_cell = None  # cell-centred 2D data: the cell (node) of each triangle, one colour per cell
        cells_2d = cell_drawing_2d(self.mesh) if not self.three_d else None
        if cells_2d is not None:
            from matplotlib.tri import Triangulation

            vx, tris, self.tri_cell = cells_2d
            self.triangulation = Triangulation(vx[:, 0], vx[:, 1], tris)
            if zoom is None:
                self.box = (vx[:, 0].min(), vx[:, 0].max(), vx[:, 1].min(), vx[:, 1].max())
        elif not self.three_d and not self.mesh.is_point_cloud and self.mesh.topological_dim == 2:
            from matplotlib.tri import Triangulation

            tris, _ = fan_triangles(self.mesh.cells, np.zeros(self.mesh.num_nodes, dtype=np.int64))
            self.triangulation = Triangulation(p[:, 0], p[:, 1], tris)
        elif self.three_d:
            faces = surface_faces(self.mesh)
            if faces and sum(len(f) for f in faces) <= MAX_FACES_3D:
                self.faces = faces
            elif faces:  # too many faces to draw one by one: the surface's nodes (the interior hides anyway)
                self.nodes = np.unique(np.concatenate([f.reshape(-1) for f in faces]))

    def aspect(self) -> float:
        """Width / height of the 2D box shown (1 for 3D)."""
        if self.three_d:
            return 1.0
        w, h = self.box[1] - self.box[0], self.box[3] - self.box[2]
        return float(np.clip(w / max(h, 1e-300), 0.2, 5.0))


def _subsample(n: int, max_points: int, seed: int) -> np.ndarray:
    if n <= max_points:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, max_points, replace=False))


def _draw(ax, geo: _Geometry, values, norm, cmap, view: View, max_points: int, seed: int):
    """Draw ``values`` [N] on ``ax``; returns the mappable for the colour bar."""
    from matplotlib.cm import ScalarMappable

    p = geo.points
    if geo.tri_cell is not None:  # cell data: a flat colour per cell, no interpolation between cells
        mappable = ax.tripcolor(geo.triangulation, facecolors=values[geo.tri_cell], cmap=cmap, norm=norm,
                                edgecolors="none", linewidth=0.0, rasterized=True)
    elif geo.triangulation is not None:
        levels = np.linspace(norm.vmin, norm.vmax, _LEVELS + 1)
        mappable = ax.tricontourf(geo.triangulation, values, levels=levels, cmap=cmap, norm=norm)
    elif not geo.three_d:
        idx = geo.nodes[_subsample(len(geo.nodes), max_points, seed)]
        mappable = ax.scatter(p[idx, 0], p[idx, 1], c=values[idx], cmap=cmap, norm=norm, s=marker_size(len(idx)),
                              linewidths=0, rasterized=True)
    elif geo.faces is not None:
        from mpl_toolkits.mplot3d.art3d import Poly3DCollection

        light = light_direction(*view)
        for conn in geo.faces:
            # mild shading: enough to see the shape, little enough to read the colour against the bar
            rgba = shade(p, conn, cmap(norm(values[conn].mean(1))), light, ambient=0.75)
            ax.add_collection3d(Poly3DCollection(p[conn], facecolors=rgba, edgecolors="none", antialiased=False))
        mappable = ScalarMappable(norm=norm, cmap=cmap)
    else:
        shown = geo.nodes[_subsample(len(geo.nodes), max_points, seed)]
        ax.computed_zorder = False
        mappable = ax.scatter(p[shown, 0], p[shown, 1], p[shown, 2], c=values[shown], cmap=cmap, norm=norm,
                              s=marker_size_3d(len(shown)), linewidths=0, depthshade=False, rasterized=True)
    _frame_panel(ax, geo, p, view)
    return mappable


def _frame_panel(ax, geo, points, view) -> None:
    """Frame one field panel: the 3D view (the colour bar, not another 3D panel, sits beside it), or
    the 2D box with equal axes and small labels."""
    if geo.three_d:
        frame_3d(ax, points, *view, zoom=1.0)
    else:
        ax.set_xlim(geo.box[0], geo.box[1])
        ax.set_ylim(geo.box[2], geo.box[3])
        ax.set_aspect("equal")
        ax.set_xlabel("x", fontsize=8)
        ax.set_ylabel("y", fontsize=8)
        ax.tick_params(labelsize=7)


def _colorbar(fig, mappable, ax, label: str, units: Optional[str], three_d: bool):
    from matplotlib.ticker import MaxNLocator

    text = f"{label} [{units}]" if units else label
    # a 3D axes draws its z label outside its box: keep the bar clear of it
    cb = fig.colorbar(mappable, ax=ax, shrink=0.7 if three_d else 0.9, pad=0.1 if three_d else 0.02,
                      aspect=25)
    # round-number ticks (a contour plot's bar would tick its band edges: 885, 663, ...)
    lo, hi = mappable.get_clim()
    ticks = MaxNLocator(nbins=7).tick_values(lo, hi)
    span = hi - lo
    cb.set_ticks(ticks[(ticks >= lo - 1e-9 * span) & (ticks <= hi + 1e-9 * span)])  # outside ticks would widen the bar
    cb.ax.tick_params(labelsize=7)
    cb.set_label(text, fontsize=8)


def _default_title(geo: _Geometry) -> str:
    m = geo.mesh
    name = m.source.name if m.source is not None else "points" if m.is_point_cloud else "mesh"
    return f"{name}: {m.num_nodes:,} nodes"


def _panel_figsize(geo: _Geometry, rows: int, cols: int) -> Tuple[float, float]:
    """Inches for ``rows x cols`` panels of the mesh's proportions plus their colour bars."""
    if geo.three_d:  # a 3D axes keeps a margin around its box whatever the figure: keep the figure low
        return 4.8 * cols, 3.6 * rows + 0.3
    width = 5.6 if cols > 1 else 7.0
    # the axes get the width less the y labels and the colour bar; each row adds its title and x ticks
    return width * cols, ((width - 1.6) / geo.aspect() + 0.65) * rows + 0.35


def plot_field(
    mesh_or_points,
    values: FieldLike,
    ax=None,
    path: Optional[PathLike] = None,
    title: Optional[str] = None,
    label: Optional[str] = None,
    units: Optional[str] = None,
    cmap: str = "viridis",
    vmin: Optional[float] = None,
    vmax: Optional[float] = None,
    view: View = DEFAULT_VIEW,
    zoom: Optional[Sequence[float]] = None,
    max_points: Optional[int] = None,
    figsize: Optional[Tuple[float, float]] = None,
    dpi: int = 120,
    seed: int = 0,
):
    """Draw one point field on a mesh, with a colour bar.

    2D meshes get filled contours on their cells, 3D volume meshes their boundary surface
    coloured by the field, point clouds coloured points. Cell-centred data (a mesh of
    ``read_mesh(path, nodes="cells")``) gets one flat colour per cell in 2D, and coloured points
    at the cell centres in 3D. Colour limits are the data range unless ``vmin`` / ``vmax`` are
    given.

    Args:
        mesh_or_points: a :class:`~meshshard.io.Mesh`, or points ``[N, 2]`` / ``[N, 3]``.
        values: a point field's name in ``mesh.point_data`` (``"pressure_pred"``, a vector
            field's magnitude ``"velocity"``, a component ``"velocity_pred[0]"``; see
            :func:`field_values`), or an array / tensor ``[N]`` or ``[N, C]`` (magnitude when C > 1).
        ax: draw into this axes (a 3D axes for a 3D mesh) and put the colour bar beside it; a new
            figure when ``None``.
        path: save the figure there (PNG, PDF, SVG by suffix; written atomically).
        title: the figure's title (default: the mesh's name and size), or the axes' with ``ax``.
        label: the colour bar's label (default: the field's name, ``"value"`` for an array).
        units: appended to the label as ``[units]``.
        cmap: a matplotlib colormap name.
        vmin, vmax: colour limits (default: the data range).
        view: (elevation, azimuth) of the camera, 3D only.
        zoom: 2D only: show the box ``(xmin, xmax, ymin, ymax)`` instead of the whole mesh (e.g. the
            airfoil of a far-field mesh); the colour limits stay the whole field's.
        max_points: scatter at most about this many points (random, ``seed``); default 200,000
            in 2D, 50,000 in 3D.
        figsize, dpi: figure size in inches and resolution.
        seed: the random subsample of points.

    Returns:
        the :class:`matplotlib.figure.Figure`.
    """
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    geo = _Geometry(mesh_or_points, zoom)
    v, name = _values(geo.mesh, values, label or "value")
    lo, hi = _limits(v)
    norm = Normalize(lo if vmin is None else vmin, hi if vmax is None else vmax)
    if norm.vmin >= norm.vmax:
        raise ValueError(f"vmin must be below vmax, got {norm.vmin} and {norm.vmax}")
    max_points = max_points or (MAX_POINTS_3D if geo.three_d else 200_000)
    if ax is None:
        fig = new_figure(figsize or _panel_figsize(geo, 1, 1), dpi)
        ax = fig.add_subplot(1, 1, 1, projection="3d" if geo.three_d else None)
        fig.suptitle(title or _default_title(geo), fontsize=10)
    else:
        fig = ax.figure
        if geo.three_d != (getattr(ax, "name", "") == "3d"):
            raise ValueError(f"a {'3D' if geo.three_d else '2D'} mesh needs a {'3D' if geo.three_d else '2D'} axes")
        if title:
            ax.set_title(title, fontsize=9)
    mappable = _draw(ax, geo, v, norm, colormaps[cmap], view, max_points, seed)
    _colorbar(fig, mappable, ax, label or name, units, geo.three_d)
    save_figure(fig, path, dpi)
    return fig


def plot_field_comparison(
    mesh_or_points,
    truth: FieldLike,
    pred: FieldLike,
    error: Optional[FieldLike] = None,
    path: Optional[PathLike] = None,
    title: Optional[str] = None,
    units: Optional[str] = None,
    cmap: str = "viridis",
    error_cmap: str = "RdBu_r",
    view: View = DEFAULT_VIEW,
    zoom: Optional[Sequence[float]] = None,
    max_points: Optional[int] = None,
    figsize: Optional[Tuple[float, float]] = None,
    dpi: int = 120,
    seed: int = 0,
):
    """Truth, prediction and error of one field side by side (stacked for wide 2D domains).

    Truth and prediction share their colour limits (the range of both), so equal colours mean
    equal values; the error panel uses a diverging map with limits ``[-m, m]``, ``m`` the largest
    absolute error, so white is zero error. The error panel's title gives the relative L2 error
    ``||pred - truth|| / ||truth||`` and the largest absolute error.

    Args:
        mesh_or_points: a :class:`~meshshard.io.Mesh`, or points ``[N, 2]`` / ``[N, 3]``.
        truth, pred: field specs of ``mesh.point_data`` (see :func:`field_values`; vector
            fields become magnitudes; a list of specs takes their columns together) or arrays /
            tensors ``[N]`` (``[N, C]``: magnitude).
        error: the error field (spec(s) or ``[N]`` array), e.g. ``"pressure_error"`` as ``meshshard
            predict`` writes it (``prediction_field_names(truth, mesh)`` finds a file's prediction
            and error fields); default ``pred - truth``.
        path: save the figure there (PNG, PDF, SVG by suffix; written atomically).
        title: the figure's title (default: the mesh's name and size).
        units: the fields' units, shown on every colour bar as ``[units]``.
        cmap: colormap of truth and prediction; ``error_cmap``: of the error (diverging).
        view: (elevation, azimuth) of the camera, 3D only.
        zoom: 2D only: the box ``(xmin, xmax, ymin, ymax)`` every panel shows (see :func:`plot_field`).
        max_points: scatter at most about this many points (see :func:`plot_field`).
        figsize, dpi: figure size in inches and resolution.
        seed: the random subsample of points.

    Returns:
        the :class:`matplotlib.figure.Figure`.
    """
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    geo = _Geometry(mesh_or_points, zoom)
    t, t_name = _values(geo.mesh, truth, "truth")
    p, p_name = _values(geo.mesh, pred, "prediction")
    if error is None:
        e, e_name = p - t, f"{p_name} - {t_name}"
    else:
        e, e_name = _values(geo.mesh, error, "error")
    shared = Normalize(*_limits(t, p))
    err_norm = Normalize(*_limits(e, symmetric=True))
    rel = float(np.linalg.norm(e) / max(np.linalg.norm(t), 1e-300))
    panels = [("truth", t, t_name, shared, cmap), ("prediction", p, p_name, shared, cmap),
              (f"error (relative L2 {rel:.3g}, max |error| {np.abs(e).max():.4g})", e, e_name, err_norm, error_cmap)]

    stacked = not geo.three_d and geo.aspect() > 1.6  # wide domains read better one above the other
    rows, cols = (3, 1) if stacked else (1, 3)
    fig = new_figure(figsize or _panel_figsize(geo, rows, cols), dpi)
    max_points = max_points or (MAX_POINTS_3D if geo.three_d else 200_000)
    for i, (what, v, name, norm, cm) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1, projection="3d" if geo.three_d else None)
        mappable = _draw(ax, geo, v, norm, colormaps[cm], view, max_points, seed)
        _colorbar(fig, mappable, ax, name, units, geo.three_d)
        ax.set_title(what, fontsize=9)
        if stacked and i < len(panels) - 1:
            ax.set_xlabel("")  # one x label under the stack
    fig.suptitle(title or _default_title(geo), fontsize=10)
    save_figure(fig, path, dpi)
    return fig
