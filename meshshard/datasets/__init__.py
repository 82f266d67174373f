"""meshshard.datasets: meshes with point fields as training samples, whole or sharded.

- :class:`MeshDataset`: a folder of mesh files (any meshio format) as PyG ``Data``
  (``pos, x, y, edge_index, edge_attr, node_type``) with dataset-wide normalisation statistics.
- :class:`ShardedMeshDataset`: a folder written by ``meshshard preprocess``; each rank reads only
  its own part of every sample (a :class:`meshshard.ShardedGraph`, the node fields as ShardTensors
  of the owned rows, the local edges' features).
- :class:`DatasetStats`, :class:`FieldStats`, :class:`Moments`: mean / std computed once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from meshshard._lazy import lazy_exports

# names -> defining submodule, imported on first use: ``meshshard partition`` needs only ``fields`` and
# would otherwise pull in the ShardTensor and DTensor stack through ``sharded`` (slow imports)
_EXPORTS = {name: f"{__name__}.{module}" for module, names in {
    # mesh_graph: a deprecated alias of meshshard.io.mesh_graph (not in __all__; it warns when read)
    "fields": ("edge_features", "field_columns", "mesh_graph", "mesh_to_data", "node_type_ids", "parse_field",
               "select_fields"),
    "mesh_dataset": ("MeshDataset", "list_mesh_files", "model_inputs", "node_type_vocabulary"),
    "preprocess": ("PreprocessResult", "check_dataset_dir", "is_dataset_dir", "preprocess_dataset", "read_dataset_meta",
                   "verify_dataset"),
    "sharded": ("ShardedMeshDataset", "ShardedSample"),
    "stats": ("DatasetStats", "FieldStats", "Moments", "sample_moments"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover - for static analysers only
    from meshshard.datasets.fields import (edge_features, field_columns, mesh_to_data, node_type_ids, parse_field,
                                          select_fields)
    from meshshard.datasets.mesh_dataset import MeshDataset, list_mesh_files, model_inputs, node_type_vocabulary
    from meshshard.datasets.preprocess import (PreprocessResult, check_dataset_dir, is_dataset_dir, preprocess_dataset,
                                              read_dataset_meta, verify_dataset)
    from meshshard.datasets.sharded import ShardedMeshDataset, ShardedSample
    from meshshard.datasets.stats import DatasetStats, FieldStats, Moments, sample_moments

__all__ = [
    "MeshDataset",
    "ShardedMeshDataset",
    "ShardedSample",
    "preprocess_dataset",
    "PreprocessResult",
    "read_dataset_meta",
    "verify_dataset",
    "is_dataset_dir",
    "check_dataset_dir",
    "list_mesh_files",
    "model_inputs",
    "node_type_vocabulary",
    "DatasetStats",
    "FieldStats",
    "Moments",
    "sample_moments",
    "edge_features",
    "field_columns",
    "mesh_to_data",
    "node_type_ids",
    "parse_field",
    "select_fields",
]

# transient datasets: trajectories partitioned once, state per part [T, n_local, S] (issue 41)
_TRAJECTORY_NAMES = ("preprocess_trajectories", "TrajectoryPreprocessResult", "load_trajectory_part",
                     "load_trajectory_whole", "read_trajectory_dataset_meta", "trajectory_columns",
                     "trajectory_node_types")
_EXPORTS.update({name: f"{__name__}.trajectories" for name in _TRAJECTORY_NAMES})
_EXPORTS.update({name: f"{__name__}.sharded_trajectories" for name in ("ShardedTrajectoryDataset", "TrajectoryShard")})
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ += list(_TRAJECTORY_NAMES) + ["ShardedTrajectoryDataset", "TrajectoryShard"]
if TYPE_CHECKING:  # pragma: no cover - for static analysers only
    from meshshard.datasets.sharded_trajectories import ShardedTrajectoryDataset, TrajectoryShard
    from meshshard.datasets.trajectories import (TrajectoryPreprocessResult, load_trajectory_part,
                                                load_trajectory_whole, preprocess_trajectories,
                                                read_trajectory_dataset_meta, trajectory_columns,
                                                trajectory_node_types)
