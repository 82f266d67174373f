"""meshshard: domain decomposition of meshes and point clouds for PyTorch.

Split one huge mesh or point cloud into uneven shards, give every rank its owned plus ghost
nodes, and run kNN, message passing and variable-size collectives across ranks with exact
gradients: a sharded run gives the numbers of a single-process run on the whole mesh.

Top-level names are imported lazily, so ``import meshshard`` stays cheap and the pure
single-process parts (io, partitioners) never pull in the distributed stack.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from meshshard._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    # layer 1: io and partitioners
    "Mesh": "meshshard.io",
    "read_mesh": "meshshard.io",
    "knn_graph": "meshshard.io",
    "Trajectory": "meshshard.io",
    "read_trajectory": "meshshard.io",
    "Partition": "meshshard.partitioners",
    "partition": "meshshard.partitioners",
    "partition_quality": "meshshard.partitioners",
    # layer 0: process groups and placements
    "init_distributed": "meshshard.distributed",
    "destroy_distributed": "meshshard.distributed",
    "get_rank": "meshshard.distributed",
    "get_world_size": "meshshard.distributed",
    "DeviceMesh": "meshshard.distributed",
    "init_device_mesh": "meshshard.distributed",
    "Shard": "meshshard.distributed",
    "Replicate": "meshshard.distributed",
    "Partial": "meshshard.distributed",
    # layer 2: tensor and graph
    "ShardTensor": "meshshard.tensor",
    "scatter_tensor": "meshshard.tensor",
    "ShardedGraph": "meshshard.graph",
    # layer 3: ops
    "partition_distributed": "meshshard.ops",
    "DomainParallel": "meshshard.ops",
}

_SUBMODULES = {"io", "partitioners", "distributed", "tensor", "graph", "ops", "models", "datasets", "viz", "cli", "testing"}

__all__ = sorted(_EXPORTS) + ["__version__"]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, _SUBMODULES)


if TYPE_CHECKING:  # pragma: no cover - for static analysers only
    from meshshard.distributed import (DeviceMesh, Partial, Replicate, Shard, destroy_distributed,
                                       get_rank, get_world_size, init_device_mesh, init_distributed)
    from meshshard.graph import ShardedGraph
    from meshshard.io import Mesh, knn_graph, read_mesh
    from meshshard.io import Trajectory, read_trajectory
    from meshshard.ops import DomainParallel, partition_distributed
    from meshshard.partitioners import Partition, partition, partition_quality
    from meshshard.tensor import ShardTensor, scatter_tensor
