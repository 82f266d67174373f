"""``write_trajectory``: a :class:`~meshshard.io.Trajectory` as a ParaView collection (``CASE.pvd``
listing one ``.vtu`` per step), the layout :func:`meshshard.io.read_pvd` and ``meshshard
preprocess CASE.pvd --state ...`` read back."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

from meshshard.io.trajectory import Trajectory
from meshshard.io.write import write_pvd, write_vtu

__all__ = ["write_trajectory"]

PathLike = Union[str, os.PathLike]


def write_trajectory(trajectory: Trajectory, path: PathLike) -> Path:
    """Write every step of ``trajectory`` as ``.vtu`` files and a ``.pvd`` collection listing them.

    The step files are ``<stem>/<stem>_XXXX.vtu`` beside ``path`` (``<stem>`` the ``.pvd``'s name
    without suffix); each holds the static fields and that step's fields as point data. Every file
    is written atomically, the ``.pvd`` last, so a reader never finds a collection whose steps are
    missing.

    Args:
        trajectory: the trajectory (``T`` steps of one mesh).
        path: the ``.pvd`` file to write.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ValueError: ``path`` does not end in ``.pvd``.
    """
    path = Path(path)
    if path.suffix.lower() != ".pvd":
        raise ValueError(f"write_trajectory writes a ParaView collection: {path} must end in .pvd")
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem) or "trajectory"
    folder = path.parent / stem
    width = max(4, len(str(trajectory.num_steps - 1)))
    entries = []
    for k in range(trajectory.num_steps):
        f = folder / f"{stem}_{k:0{width}d}.vtu"
        write_vtu(f, trajectory.step(k))
        entries.append((float(trajectory.times[k]), f.relative_to(path.parent)))
    return write_pvd(path, entries)
