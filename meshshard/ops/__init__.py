"""Layer 3: differentiable collectives, halo exchange, sharded kNN, sharded message passing, and
partitioning of point sets spread over ranks.

The variable-size collectives keep PhysicsNeMo's ``physicsnemo.distributed`` signatures, so code
written against it ports by changing the import. They are implemented in layer 0
(:mod:`meshshard.distributed.autograd`) because ShardTensor (layer 2) needs them too.
"""
from __future__ import annotations

from meshshard._lazy import lazy_exports

_EXPORTS = {
    "all_gather_v": "meshshard.distributed.autograd",
    "gather_v": "meshshard.distributed.autograd",
    "scatter_v": "meshshard.distributed.autograd",
    "all_to_all_v": "meshshard.distributed.autograd",
    "indexed_all_to_all_v": "meshshard.distributed.autograd",
    "all_reduce_v": "meshshard.distributed.autograd",
    "sharded_knn": "meshshard.ops.knn",
    "sharded_radius_graph": "meshshard.ops.knn",
    "edge_vectors": "meshshard.ops.knn",
    "knn_search": "meshshard.ops.knn",
    "radius_search": "meshshard.ops.knn",
    "ShardedConv": "meshshard.ops.conv",
    "MeshGraphNetBlock": "meshshard.ops.conv",
    "MLP": "meshshard.ops.conv",
    "DomainParallel": "meshshard.ops.domain_parallel",
    "sharded_forward": "meshshard.ops.domain_parallel",
    "partition_distributed": "meshshard.ops.partition",
    "DistributedPartition": "meshshard.ops.partition",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
