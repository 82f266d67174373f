"""Real test meshes for the partitioner tests (read once per session)."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from tests.conftest import MESH_FILES

__all__ = ["MESH_FILES", "load_mesh", "load_drivaer", "partition_of", "mesh_arrays", "grid_graph"]


@functools.lru_cache(maxsize=None)
def load_mesh(data_dir: Path, name: str):
    """(points float64 [N, d], edge_index LongTensor [2, E] both directions) of a real mesh."""
    import meshshard as ms

    mesh = ms.read_mesh(Path(data_dir) / name)
    return np.asarray(mesh.points, dtype=np.float64), mesh.edge_index()


@functools.lru_cache(maxsize=None)
def load_drivaer(data_dir: Path, k: int = 6):
    """DrivAer surface cloud: (points float32 [125446, 3], kNN edge_index)."""
    import meshshard as ms

    pts = np.load(Path(data_dir) / "drivaer_body_points.npz")["points"]
    return pts, ms.knn_graph(torch.from_numpy(pts), k)


@functools.lru_cache(maxsize=None)
def partition_of(data_dir: Path, name: str, method: str, num_parts: int = 7, refine: bool = True):
    """``ms.partition`` of a real mesh, graph given (cached: several tests share the result)."""
    import meshshard as ms

    pts, ei = load_mesh(data_dir, name)
    return ms.partition(pts, num_parts, method, edge_index=ei, refine=refine)


def mesh_arrays(data_dir: Path, name: str):
    """(points [N, d], edge_index int64 numpy [2, E] both directions) of a real mesh, read afresh."""
    import meshshard as ms

    mesh = ms.read_mesh(Path(data_dir) / name)
    return np.asarray(mesh.points), mesh.edge_index().numpy()


def grid_graph(k: int):
    """k x k grid graph (both directions, int64 numpy [2, E]) and node coordinates float [k * k, 2]."""
    idx = np.arange(k * k).reshape(k, k)
    e = np.concatenate([np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()]),
                        np.stack([idx[:-1].ravel(), idx[1:].ravel()])], axis=1)
    return np.concatenate([e, e[::-1]], axis=1), np.stack(np.divmod(np.arange(k * k), k), axis=1).astype(float)
