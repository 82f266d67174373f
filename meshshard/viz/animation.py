"""Animations of point fields over time steps: one field, or truth, prediction and error per frame.

What ``meshshard plot CASE.pvd --compare velocity --animate -o rollout.gif`` draws from the files
``meshshard rollout`` writes (``<f>``, ``<f>_pred``, ``<f>_error`` per step). The colour limits
are fixed over all frames (truth and prediction share theirs, the error's are symmetric about
zero), so a colour means the same value in every frame. 2D meshes are drawn with ``tripcolor``
(values interpolated over the triangles), 3D meshes as their boundary surface (the rendering of
:mod:`meshshard.viz.field_plot`), point clouds as coloured points; the figure is built once and
each frame only changes the colours. Frames go through matplotlib's animation writers:
``PillowWriter`` for ``.gif``, ``FFMpegWriter`` for ``.mp4`` (needs ``ffmpeg`` on the ``PATH``).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np

from meshshard._fileutil import atomic_path
from meshshard.io import Mesh, Trajectory
from meshshard.viz._render import (MAX_POINTS_3D, PathLike, light_direction, marker_size, marker_size_3d, new_figure,
                                   shade)
from meshshard.viz.field_plot import (DEFAULT_VIEW, View, _colorbar, _frame_panel, _Geometry, _limits, _panel_figsize,
                                      _subsample, field_values, prediction_field_names)

__all__ = ["FieldAnimation", "animate_field", "animate_field_comparison", "read_frames", "check_animation_path",
           "ANIMATION_SUFFIXES"]

#: the file types an animation is written as
ANIMATION_SUFFIXES = (".gif", ".mp4")

FramesLike = Union[PathLike, Trajectory, Sequence[Mesh]]
FieldSpec = Union[str, Sequence[str]]


def read_frames(frames: FramesLike) -> Tuple[List[Mesh], np.ndarray]:
    """The frames of an animation: one :class:`~meshshard.io.Mesh` per time step, and the times.

    Args:
        frames: a ``.pvd`` collection (its steps ``.vtu`` or ``.pvtu``; anything
            :func:`meshshard.io.read_trajectory` reads), a :class:`~meshshard.io.Trajectory`, or a
            sequence of meshes of one mesh (times ``0, 1, ...``).

    Returns:
        ``(meshes, times [T])``.

    Raises:
        ValueError: no frames, or meshes of different node counts.
    """
    if isinstance(frames, (str, os.PathLike)):
        from meshshard.io import read_trajectory

        frames = read_trajectory(frames)
    if isinstance(frames, Trajectory):
        return [frames.step(k) for k in range(frames.num_steps)], np.asarray(frames.times, dtype=np.float64)
    meshes = list(frames)
    if not meshes:
        raise ValueError("an animation needs at least one frame, got none")
    bad = [k for k, m in enumerate(meshes) if not isinstance(m, Mesh)]
    if bad:
        raise TypeError(f"frames must be meshshard.io.Mesh objects; frame {bad[0]} is {type(meshes[bad[0]]).__name__}")
    n = meshes[0].num_nodes
    other = [k for k, m in enumerate(meshes) if m.num_nodes != n]
    if other:
        raise ValueError(f"the frames must share one mesh: frame {other[0]} has {meshes[other[0]].num_nodes} nodes, "
                         f"frame 0 {n}")
    return meshes, np.arange(len(meshes), dtype=np.float64)


def _stack(meshes: List[Mesh], spec: FieldSpec, what: str) -> Tuple[np.ndarray, str]:
    """``(values [T, N], label)`` of a field spec in every frame (the message names the frame)."""
    rows, label = [], None
    for k, m in enumerate(meshes):
        try:
            v, label = field_values(m, spec)
        except ValueError as exc:
            where = f" ({m.source.name})" if m.source is not None else ""
            raise ValueError(f"frame {k}{where}: {what}: {exc}") from None
        rows.append(v)
    return np.stack(rows), label


class _Panel:
    """One axes of the animation: its values per frame, colour norm and the artists it recolours."""

    def __init__(self, fig, ax, geo: _Geometry, values: np.ndarray, norm, cmap, view: View, max_points: int,
                 seed: int):
        self.values, self.norm, self.cmap, self.geo = values, norm, cmap, geo
        p = geo.points
        self.update = None
        if geo.triangulation is not None and geo.tri_cell is not None:  # cell data: a flat colour per cell
            art = ax.tripcolor(geo.triangulation, facecolors=values[0][geo.tri_cell], cmap=cmap, norm=norm,
                               edgecolors="none", rasterized=True)
            self.update = lambda v: art.set_array(v[geo.tri_cell])
            self.mappable = art
        elif geo.triangulation is not None:
            art = ax.tripcolor(geo.triangulation, values[0], shading="gouraud", cmap=cmap, norm=norm, rasterized=True)
            self.update = art.set_array
            self.mappable = art
        elif geo.faces is not None:  # 3D surface: faces coloured by their corners' mean, shaded
            from matplotlib.cm import ScalarMappable
            from mpl_toolkits.mplot3d.art3d import Poly3DCollection

            light = light_direction(*view)
            arts = []
            for conn in geo.faces:
                art = Poly3DCollection(p[conn], edgecolors="none", antialiased=False)
                ax.add_collection3d(art)
                arts.append((conn, art))

            def recolour(v):
                for conn, art in arts:
                    art.set_facecolor(shade(p, conn, cmap(norm(v[conn].mean(1))), light, ambient=0.75))

            recolour(values[0])
            self.update = recolour
            self.mappable = ScalarMappable(norm=norm, cmap=cmap)
        else:  # points (a cloud, or a surface too large to draw face by face)
            idx = geo.nodes[_subsample(len(geo.nodes), max_points, seed)]
            if geo.three_d:
                ax.computed_zorder = False
                art = ax.scatter(p[idx, 0], p[idx, 1], p[idx, 2], c=values[0][idx], cmap=cmap, norm=norm,
                                 s=marker_size_3d(len(idx)), linewidths=0, depthshade=False, rasterized=True)
            else:
                art = ax.scatter(p[idx, 0], p[idx, 1], c=values[0][idx], cmap=cmap, norm=norm,
                                 s=marker_size(len(idx)), linewidths=0, rasterized=True)
            self.update = lambda v: art.set_array(v[idx])
            self.mappable = art
        _frame_panel(ax, geo, p, view)


class FieldAnimation:
    """Point fields of one mesh over ``T`` frames, drawn into one figure with fixed colour limits.

    Built by :func:`animate_field` and :func:`animate_field_comparison`; :meth:`draw` shows a
    frame, :meth:`save` writes every frame to a ``.gif`` / ``.mp4``.

    Args:
        mesh: the mesh every frame is drawn on (:class:`~meshshard.io.Mesh`).
        panels: per panel ``(title, values [T, N], label, (vmin, vmax), cmap name)``.
        times: ``[T]`` the frames' times (shown in the title).
        title: the figure's title (the frame's step and time are appended).
        units: appended to every colour bar's label as ``[units]``.
        view: (elevation, azimuth) of the camera, 3D only.
        max_points: scatter at most about this many points (point clouds).
        figsize, dpi: figure size in inches and resolution.
        seed: the random subsample of points.

    Attributes:
        figure: the matplotlib ``Figure``; num_frames: ``T``; times: ``[T]``;
        limits: the colour limits ``(vmin, vmax)`` of each panel (fixed over all frames);
        frames_written: the frames the last :meth:`save` wrote (0 before).
    """

    def __init__(self, mesh: Mesh, panels: Sequence[tuple], times, *, title: str = "", units: Optional[str] = None,
                 view: View = DEFAULT_VIEW, max_points: Optional[int] = None,
                 figsize: Optional[Tuple[float, float]] = None, dpi: int = 100, seed: int = 0):
        from matplotlib import colormaps
        from matplotlib.colors import Normalize

        geo = _Geometry(mesh)
        self.times = np.asarray(times, dtype=np.float64).reshape(-1)
        self.num_frames = int(self.times.size)
        for what, values, *_ in panels:
            if values.shape != (self.num_frames, mesh.num_nodes):
                raise ValueError(f"panel {what!r}: values must be [T={self.num_frames}, N={mesh.num_nodes}], "
                                 f"got {list(values.shape)}")
        self.limits = [tuple(float(v) for v in lim) for _, _, _, lim, _ in panels]
        self.dpi, self._title = int(dpi), title
        stacked = len(panels) > 1 and not geo.three_d and geo.aspect() > 1.6  # wide domains: one above the other
        rows, cols = (len(panels), 1) if stacked else (1, len(panels))
        figsize = figsize or _panel_figsize(geo, rows, cols)
        self.figure = fig = new_figure(figsize, self.dpi)
        max_points = max_points or (MAX_POINTS_3D if geo.three_d else 200_000)
        self._panels = []
        for i, (what, values, label, lim, cmap) in enumerate(panels):
            ax = fig.add_subplot(rows, cols, i + 1, projection="3d" if geo.three_d else None)
            panel = _Panel(fig, ax, geo, values, Normalize(*lim), colormaps[cmap], view, max_points, seed)
            _colorbar(fig, panel.mappable, ax, label, units, geo.three_d)
            ax.set_title(what, fontsize=9)
            if stacked and i < len(panels) - 1:
                ax.set_xlabel("")
            self._panels.append(panel)
        self._suptitle = fig.suptitle(self._frame_title(0), fontsize=10)
        fig.canvas.draw()  # lay out once (constrained layout), then keep the axes still between frames
        fig.set_layout_engine("none")
        self.frame = 0
        self.frames_written = 0

    @property
    def mappables(self) -> list:
        """The colour-mapped artist of each panel (``get_clim()`` gives its fixed limits)."""
        return [panel.mappable for panel in self._panels]

    def _frame_title(self, k: int) -> str:
        head = f"{self._title}: " if self._title else ""
        return f"{head}step {k + 1} of {self.num_frames}, t = {self.times[k]:.4g}"

    def draw(self, k: int):
        """Show frame ``k`` (recolour every panel, retitle).

        Args:
            k: frame index in ``[-T, T)``.

        Returns:
            the ``Figure``.
        """
        if not -self.num_frames <= k < self.num_frames:
            raise IndexError(f"frame {k} out of range for {self.num_frames} frames")
        k %= self.num_frames
        for panel in self._panels:
            panel.update(panel.values[k])
        self._suptitle.set_text(self._frame_title(k))
        self.frame = k
        return self.figure

    def save(self, path: PathLike, fps: float = 5.0, every: int = 1, progress: bool = True) -> Path:
        """Write the frames as an animation, atomically (a temporary file renamed onto ``path``).

        Args:
            path: a ``.gif`` (PillowWriter) or ``.mp4`` (FFMpegWriter; needs ffmpeg) file.
            fps: frames per second.
            every: write every ``every``-th frame (the last frame always).
            progress: a progress bar over the frames (stderr).

        Returns:
            ``path``.

        Raises:
            ValueError: another suffix, ``.mp4`` without ffmpeg (the message says how to get it),
                ``fps <= 0`` or ``every < 1``.
        """
        from matplotlib import animation
        from tqdm import tqdm

        path = Path(path)
        writer_class = check_animation_path(path)
        if not fps > 0:
            raise ValueError(f"fps must be > 0, got {fps!r}")
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        if writer_class is animation.FFMpegWriter:
            writer = animation.FFMpegWriter(fps=fps, codec="h264", extra_args=["-pix_fmt", "yuv420p"])
        else:
            writer = animation.PillowWriter(fps=fps)
        frames = list(range(0, self.num_frames, every))
        if frames[-1] != self.num_frames - 1:
            frames.append(self.num_frames - 1)
        with atomic_path(path) as tmp:
            out = tmp.with_name(tmp.name + path.suffix.lower())  # the writers choose the format by the suffix
            try:
                with writer.saving(self.figure, str(out), self.dpi):
                    for k in tqdm(frames, desc=f"animate {path.name}", unit="frame", disable=not progress,
                                  file=sys.stderr):
                        self.draw(k)
                        writer.grab_frame()
                os.replace(out, tmp)
                self.frames_written = len(frames)
            finally:
                if out.exists():
                    out.unlink()
        return path


def check_animation_path(path: PathLike):
    """The matplotlib writer class for an animation file, checked before any frame is drawn.

    Args:
        path: the ``.gif`` or ``.mp4`` file to write.

    Returns:
        ``matplotlib.animation.PillowWriter`` (``.gif``) or ``FFMpegWriter`` (``.mp4``).

    Raises:
        ValueError: another suffix, or ``.mp4`` without ffmpeg on the ``PATH`` (the message names the fix).
    """
    from matplotlib import animation

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in ANIMATION_SUFFIXES:
        raise ValueError(f"{path}: an animation is written as {' or '.join(ANIMATION_SUFFIXES)}, not "
                         f"{suffix or 'a file without suffix'!r}")
    if suffix == ".gif":
        return animation.PillowWriter
    if not animation.writers.is_available("ffmpeg"):
        raise ValueError(f"{path}: writing .mp4 needs ffmpeg on the PATH, and none was found; install it (apt install "
                         "ffmpeg, conda install -c conda-forge ffmpeg, or brew install ffmpeg), or write a .gif")
    return animation.FFMpegWriter


def _finish(anim: FieldAnimation, path, fps, every, progress) -> FieldAnimation:
    if path is not None:
        anim.save(path, fps=fps, every=every, progress=progress)
    anim.draw(0)
    return anim


def animate_field(frames: FramesLike, field: FieldSpec, path: Optional[PathLike] = None, *, fps: float = 5.0,
                  every: int = 1, title: Optional[str] = None, units: Optional[str] = None, cmap: str = "viridis",
                  view: View = DEFAULT_VIEW, dpi: int = 100, figsize: Optional[Tuple[float, float]] = None,
                  progress: bool = True) -> FieldAnimation:
    """Animate one point field over the frames, with colour limits fixed over all of them.

    Args:
        frames: a ``.pvd`` (steps ``.vtu`` / ``.pvtu``), a :class:`~meshshard.io.Trajectory`, or
            meshes of one mesh (see :func:`read_frames`).
        field: a field spec (``"pressure"``, ``"velocity"`` as its magnitude, ``"velocity[0]"``;
            see :func:`meshshard.viz.field_values`).
        path: write the animation there (``.gif`` / ``.mp4``, see :meth:`FieldAnimation.save`);
            ``None``: only build it.
        fps, every: frames per second; write every ``every``-th frame.
        title: the figure's title (default: the case's name and the field).
        units: the field's units on the colour bar.
        cmap: a matplotlib colormap name.
        view: (elevation, azimuth), 3D only.
        dpi, figsize: resolution and size in inches.
        progress: a progress bar while writing.

    Returns:
        the :class:`FieldAnimation` (showing frame 0).

    Raises:
        ValueError: the field is missing in a frame (the message names the frame and the fields it
            has), a bad suffix, ``.mp4`` without ffmpeg.
    """
    if path is not None:
        check_animation_path(path)
    meshes, times = read_frames(frames)
    values, label = _stack(meshes, field, "field")
    name = _case_name(frames, meshes)
    anim = FieldAnimation(meshes[0], [(label, values, label, _limits(values), cmap)], times,
                          title=title or f"{name}: {label}", units=units, view=view, dpi=dpi, figsize=figsize)
    return _finish(anim, path, fps, every, progress)


def animate_field_comparison(frames: FramesLike, truth: FieldSpec, path: Optional[PathLike] = None, *,
                             pred: Optional[FieldSpec] = None, error: Optional[FieldSpec] = None, fps: float = 5.0,
                             every: int = 1, title: Optional[str] = None, units: Optional[str] = None,
                             cmap: str = "viridis", error_cmap: str = "RdBu_r", view: View = DEFAULT_VIEW,
                             dpi: int = 100, figsize: Optional[Tuple[float, float]] = None,
                             progress: bool = True) -> FieldAnimation:
    """Animate truth | prediction | error of one field per frame (a rollout's files).

    Truth and prediction share their colour limits, the range of both over every frame; the
    error's are ``[-m, m]``, ``m`` its largest magnitude over every frame (a diverging map, white
    at zero). A vector field is shown as its magnitude (its error as the error's magnitude).

    Args:
        frames: a ``.pvd`` (steps ``.vtu`` / ``.pvtu``), a :class:`~meshshard.io.Trajectory`, or
            meshes of one mesh (see :func:`read_frames`), e.g. ``OUT/<name>.pvd`` of ``meshshard
            rollout``.
        truth: the true field's spec (``"velocity"``, ``"temperature"``, ``"velocity[0]"``).
        path: write the animation there (``.gif`` / ``.mp4``); ``None``: only build it.
        pred, error: the prediction's and error's specs (default: as ``meshshard rollout`` and
            ``meshshard predict`` name them, ``<f>_pred`` and ``<f>_error``, found by
            :func:`meshshard.viz.prediction_field_names`; without an error field, prediction
            minus truth).
        fps, every: frames per second; write every ``every``-th frame.
        title: the figure's title (default: the case's name and the field).
        units: the field's units on the colour bars.
        cmap: colormap of truth and prediction; ``error_cmap``: of the error.
        view: (elevation, azimuth), 3D only.
        dpi, figsize: resolution and size in inches.
        progress: a progress bar while writing.

    Returns:
        the :class:`FieldAnimation` (showing frame 0); its ``limits`` are the panels' colour limits.

    Raises:
        ValueError: a field missing in a frame (the message names the frame and the fields it has),
            a bad suffix, ``.mp4`` without ffmpeg.
    """
    if path is not None:
        check_animation_path(path)
    meshes, times = read_frames(frames)
    t, t_label = _stack(meshes, truth, "the truth")
    if pred is None:
        try:
            pred, found_error = prediction_field_names(truth if isinstance(truth, str) else truth[0], meshes[0])
        except ValueError as exc:
            raise ValueError(f"frame 0: {exc}") from None
        error = found_error if error is None else error
    p, p_label = _stack(meshes, pred, "the prediction")
    if error is None:
        e, e_label = p - t, f"{p_label} - {t_label}"
    else:
        e, e_label = _stack(meshes, error, "the error")
    shared = _limits(t, p)
    name = _case_name(frames, meshes)
    panels = [("truth", t, t_label, shared, cmap), ("prediction", p, p_label, shared, cmap),
              ("error", e, e_label, _limits(e, symmetric=True), error_cmap)]
    anim = FieldAnimation(meshes[0], panels, times, title=title or f"{name}: {t_label}", units=units, view=view,
                          dpi=dpi, figsize=figsize)
    return _finish(anim, path, fps, every, progress)


def _case_name(frames, meshes) -> str:
    if isinstance(frames, (str, os.PathLike)):
        return Path(frames).stem
    if isinstance(frames, Trajectory):
        return frames.name
    return meshes[0].source.stem if meshes[0].source is not None else "frames"
