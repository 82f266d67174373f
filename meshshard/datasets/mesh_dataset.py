"""A folder (or list) of mesh files with point fields, as PyG ``Data`` samples, single process."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import torch

from meshshard.datasets.fields import mesh_to_data
from meshshard.io.graph import DEFAULT_KNN
from meshshard.datasets.stats import DatasetStats, sample_moments

__all__ = ["MeshDataset", "list_mesh_files", "node_type_vocabulary", "model_inputs"]

PathLike = Union[str, os.PathLike]
_SKIP_SUFFIXES = {".json", ".pt", ".txt", ".md", ".png"}


def list_mesh_files(root_or_files: Union[PathLike, Sequence[PathLike]]) -> List[Path]:
    """The mesh files of a folder (sorted, every suffix :func:`meshshard.io.read_mesh` knows), or
    the given list of files (order kept).

    Args:
        root_or_files: a folder, one file, or a list of files.

    Returns:
        the mesh file paths.

    Raises:
        FileNotFoundError: a path does not exist. ValueError: no mesh files.
    """
    from meshshard.io import supported_suffixes

    if isinstance(root_or_files, (str, os.PathLike)):
        root = Path(root_or_files)
        if not root.exists():
            raise FileNotFoundError(f"{root}: no such file or folder")
        if root.is_dir():
            known = set(supported_suffixes())
            files = sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")
                           and p.suffix.lower() in known and p.suffix.lower() not in _SKIP_SUFFIXES)
            if not files:
                raise ValueError(f"{root}: no mesh files (suffixes {sorted(known)})")
            return files
        return [root]
    files = [Path(p) for p in root_or_files]
    if not files:
        raise ValueError("no input files given")
    for p in files:
        if not p.is_file():
            raise FileNotFoundError(f"{p}: no such file")
    return files


def node_type_vocabulary(meshes_node_set_names: Sequence[Sequence[str]]) -> List[str]:
    """Node types of a dataset: the sorted union of every sample's node-set (marker) names.

    Args:
        meshes_node_set_names: per sample, its node-set names.

    Returns:
        sorted names; type ``k + 1`` is the ``k``-th (type 0 is interior).
    """
    return sorted({name for names in meshes_node_set_names for name in names})


def model_inputs(data, stats: DatasetStats) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """MeshGraphNet inputs of one sample: ``(cat(norm x, node_type), norm edge_attr, norm y)``.

    Works on a whole-mesh ``Data`` and on a :class:`~meshshard.datasets.ShardedSample` alike (whose
    ShardTensor fields give ShardTensor ``x_in`` and ``y``).

    Args:
        data: with ``x [n, F]``, ``node_type [n, T + 1]``, ``edge_attr [E, d + 1]``, ``y [n, C]``.
        stats: the dataset's :class:`DatasetStats`.

    Returns:
        ``(x_in [n, F + T + 1], edge_attr_in [E, d + 1], y [n, C])``.
    """
    x_in = torch.cat([stats.x.normalize(data.x), data.node_type.to(data.x.dtype)], dim=1)
    return x_in, stats.edge_attr.normalize(data.edge_attr), stats.y.normalize(data.y)


class MeshDataset(torch.utils.data.Dataset):
    r"""Mesh files with point fields as PyG ``Data``: ``pos, x, y, edge_index, edge_attr, node_type``.

    * ``x`` / ``y``: the point fields named in ``features`` / ``targets``, column-wise (a vector
      field flattens to several columns; ``"velocity[0,1]"`` picks components; ``"pos"`` is the
      coordinates).
    * ``edge_index``: the mesh's element edges (both directions); for a point cloud (a file
      without cells, e.g. ``.npz``) the ``knn`` nearest neighbours of every point.
      ``edge_attr``: ``pos[src] - pos[dst]`` and its norm (``[E, d + 1]``).
    * ``node_type``: one-hot ``[N, T + 1]``; type 0 is interior, type ``k + 1`` a node in the
      dataset's ``k``-th node set (boundary marker, sorted by name; first wins when a node is in
      several).
    * :attr:`stats`: mean / std of ``x``, ``y``, ``edge_attr`` over the WHOLE dataset, computed
      once (or read from a ``stats.json`` / preprocessed ``meta.json``) and :meth:`save_stats`.

    Args:
        root_or_files: a folder of mesh files (every format meshio reads) or a list of files.
        features: field specs for ``x``.
        targets: field specs for ``y``.
        node_types: node-set names in type order; default: the sorted union over all files
            (found by reading them once).
        stats: a :class:`DatasetStats`, or a path to a JSON file holding one (``stats.json``, or a
            preprocessed dataset's ``meta.json``); default: computed on first use.
        dtype: floating dtype of the returned tensors.
        cache: keep built samples in memory.
        knn: neighbours per point for files without cells (point clouds).
        nodes: ``"points"`` (the mesh vertices are the nodes, point fields their fields) or
            ``"cells"`` (cell-centred data: the volume cells are the nodes, the cell fields their
            fields, cells sharing a face their edges; :func:`meshshard.io.cells_as_nodes`).

    Shapes (``ds[i]``):
        ``pos [N, d]``, ``x [N, F]``, ``y [N, T]``, ``edge_index [2, E]``, ``edge_attr [E, d + 1]``,
        ``node_type [N, len(node_types) + 1]`` (one-hot).

    Example::

        ds = MeshDataset("cases/", features=["velocity[0,1]"], targets=["pressure"])
        data = ds[0]
        x_in, e_in, y = ds.model_inputs(data)
    """

    def __init__(
        self,
        root_or_files: Union[PathLike, Sequence[PathLike]],
        features: Sequence[str],
        targets: Sequence[str],
        node_types: Optional[Sequence[str]] = None,
        stats: Optional[Union[DatasetStats, PathLike]] = None,
        dtype: torch.dtype = torch.float32,
        cache: bool = True,
        knn: int = DEFAULT_KNN,
        nodes: str = "points",
    ) -> None:
        if nodes not in ("points", "cells"):
            raise ValueError(f"nodes must be 'points' (mesh vertices) or 'cells' (cell centres), got {nodes!r}")
        self.files = list_mesh_files(root_or_files)
        self.knn = knn
        self.nodes = nodes
        if isinstance(features, str) or isinstance(targets, str):
            raise TypeError("features and targets must be lists of field names, not a single string")
        self.features, self.targets = list(features), list(targets)
        self._node_types = list(node_types) if node_types is not None else None
        self.dtype = dtype
        self.cache = cache
        self._cache: dict = {}
        self._stats: Optional[DatasetStats] = None
        if stats is not None:
            self._stats = stats if isinstance(stats, DatasetStats) else self.load_stats(stats)

    # ----------------------------------------------------------------- samples
    def __len__(self) -> int:
        return len(self.files)

    @property
    def node_types(self) -> List[str]:
        """Node-set names in type order (type ``k + 1`` is ``node_types[k]``)."""
        if self._node_types is None:
            from meshshard.io import read_mesh

            self._node_types = node_type_vocabulary([list(read_mesh(f, nodes=self.nodes).node_sets) for f in self.files])
        return self._node_types

    def _build64(self, idx: int):
        from meshshard.io import read_mesh

        return mesh_to_data(read_mesh(self.files[idx], nodes=self.nodes), self.features, self.targets, self.node_types,
                            dtype=torch.float64, knn=self.knn)

    def __getitem__(self, idx: int):
        if not -len(self) <= idx < len(self):
            raise IndexError(f"sample {idx} out of range for {len(self)} samples")
        idx %= len(self)
        if idx in self._cache:
            return self._cache[idx].clone()
        data = self._build64(idx)
        for key in ("pos", "x", "y", "edge_attr", "node_type"):
            data[key] = data[key].to(self.dtype)
        if self.cache:
            self._cache[idx] = data
            return data.clone()
        return data

    # ----------------------------------------------------------------- statistics
    @property
    def stats(self) -> DatasetStats:
        """Normalisation statistics over the whole dataset (computed on first use)."""
        if self._stats is None:
            self._stats = self.compute_stats()
        return self._stats

    def compute_stats(self, progress: bool = False) -> DatasetStats:
        """Mean / std of ``x``, ``y``, ``edge_attr`` over every node / edge of every sample
        (float64, merged in file order; equals what ``meshshard preprocess`` stores).

        Args:
            progress: show a tqdm bar over files.
        """
        from tqdm.auto import tqdm

        per_sample = [sample_moments(self._build64(i))
                      for i in tqdm(range(len(self)), desc="statistics", disable=not progress)]
        return DatasetStats.from_sample_moments(per_sample)

    def save_stats(self, path: PathLike) -> None:
        """Write :attr:`stats` as JSON (atomic).

        Args:
            path: the JSON file (read back with :meth:`load_stats` or ``stats=path``).
        """
        from meshshard._fileutil import atomic_path

        with atomic_path(path) as tmp:
            Path(tmp).write_text(json.dumps({"stats": self.stats.to_dict()}, indent=1))

    @staticmethod
    def load_stats(path: PathLike) -> DatasetStats:
        """Read statistics from a JSON file with a ``"stats"`` entry (``stats.json`` / ``meta.json``).

        Args:
            path: the JSON file.
        """
        with open(path) as f:
            d = json.load(f)
        if "stats" not in d:
            raise ValueError(f"{path}: no 'stats' entry")
        return DatasetStats.from_dict(d["stats"])

    def model_inputs(self, data) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x_in, edge_attr_in, y)`` normalised with :attr:`stats`; ``x_in`` has the one-hot node type appended.

        Args:
            data: a sample ``ds[i]``.

        Returns:
            ``(x_in [N, F + T + 1], edge_attr_in [E, d + 1], y [N, C])``.
        """
        return model_inputs(data, self.stats)

    @property
    def num_node_features(self) -> int:
        """Width of ``x_in`` from :meth:`model_inputs`."""
        d = self[0]
        return d.x.shape[1] + d.node_type.shape[1]

    def __repr__(self) -> str:
        return f"MeshDataset({len(self)} files, features={self.features}, targets={self.targets})"
