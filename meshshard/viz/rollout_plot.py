"""The error of an autoregressive rollout against its step (what ``meshshard rollout`` draws)."""
from __future__ import annotations

import os
from typing import Mapping, Optional, Sequence, Union

import numpy as np

from meshshard.viz._render import new_figure, save_figure

__all__ = ["plot_rollout_error"]

PathLike = Union[str, os.PathLike]


def plot_rollout_error(steps: Sequence[int], errors: Mapping[str, Sequence[float]], path: Optional[PathLike] = None,
                       *, title: str = "rollout error", ylabel: str = "RMSE", figsize=(6.0, 3.6), dpi: int = 120):
    """Error curves of a rollout, one line per entry of ``errors`` (a log scale when they span
    more than two decades).

    Args:
        steps: the x values (rollout steps) ``[K]``.
        errors: name -> ``[K]`` error per step (e.g. ``{"temperature": rmse}``).
        path: image file to write atomically (format from its suffix); ``None``: only return it.
        title, ylabel: the axes' labels.
        figsize, dpi: figure size in inches and resolution.

    Returns:
        the matplotlib ``Figure``.

    Raises:
        ValueError: no curves, or a curve whose length is not ``len(steps)``.
    """
    if not errors:
        raise ValueError("plot_rollout_error: no error curves given")
    x = np.asarray(steps, dtype=float)
    fig = new_figure(figsize, dpi)
    ax = fig.add_subplot()
    positive = []
    for name, values in errors.items():
        y = np.asarray(values, dtype=float)
        if y.shape != x.shape:
            raise ValueError(f"plot_rollout_error: curve {name!r} has {y.size} values for {x.size} steps")
        ax.plot(x, y, marker="." if x.size <= 60 else None, label=name)
        positive += y[np.isfinite(y) & (y > 0)].tolist()
    if positive and max(positive) > 100 * min(positive):
        ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if len(errors) > 1:
        ax.legend()
    save_figure(fig, path, dpi)
    return fig
