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
    "DomainParallel": "meshshard.ops.domain_parallel",
    "sharded_forward": "meshshard.ops.domain_parallel",
    "partition_distributed": "meshshard.ops.partition",
    "DistributedPartition": "meshshard.ops.partition",
}

__all__ = sorted(_EXPORTS)


_lazy_getattr, __dir__ = lazy_exports(__name__, _EXPORTS)

# moved to meshshard.models (layer 4): the old names keep working with a DeprecationWarning
_MOVED = {"MLP": "meshshard.models.mlp", "MeshGraphNetBlock": "meshshard.models.meshgraphnet"}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(f"meshshard.ops.{name} moved to meshshard.models.{name}; import it from there",
                      DeprecationWarning, stacklevel=2)
        # by name, at first use: ops (layer 3) imports nothing of models (layer 4) on its own
        return getattr(importlib.import_module(_MOVED[name]), name)
    return _lazy_getattr(name)
