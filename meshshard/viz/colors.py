"""Qualitative part colours that stay distinguishable for up to ~20 parts (and cycle beyond)."""
from __future__ import annotations

import numpy as np

__all__ = ["part_colors", "part_colormap"]


def part_colors(num_parts: int) -> np.ndarray:
    """RGBA colours [num_parts, 4] for parts 0..num_parts-1.

    Up to 10 parts: ``tab10``. Up to 20: ``tab20`` with its strong colours first and their light
    partners after, so parts r and r+1 never get the two shades of one hue. Beyond 20: ``tab20``,
    ``tab20b``, ``tab20c`` in turn, then cycling (neighbouring parts may then share a colour).

    Args:
        num_parts: number of parts (``>= 1``).
    """
    from matplotlib import colormaps

    if num_parts < 1:
        raise ValueError(f"num_parts must be >= 1, got {num_parts}")
    if num_parts <= 10:
        base = colormaps["tab10"].colors
    else:
        t20 = list(colormaps["tab20"].colors)
        base = t20[0::2] + t20[1::2]
        if num_parts > 20:
            for name in ("tab20b", "tab20c"):
                c = list(colormaps[name].colors)
                # one shade per hue group first, the others after
                base += [c[i] for j in range(4) for i in range(j, 20, 4)]
    rgb = np.array([base[i % len(base)] for i in range(num_parts)], dtype=float)
    return np.c_[rgb, np.ones(num_parts)]


def part_colormap(num_parts: int):
    """A ``ListedColormap`` with one entry per part (value r -> colour of part r).

    Args:
        num_parts: number of parts.
    """
    from matplotlib.colors import ListedColormap

    return ListedColormap(part_colors(num_parts), name=f"meshshard_parts_{num_parts}")
