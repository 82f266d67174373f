"""Partitioners (layer 1): pure single-process code, never torch.distributed.

``partition(points, num_parts, method=...)`` splits a mesh or point cloud with recursive
coordinate bisection (``"kdtree"``), recursive inertial bisection (``"inertial"``), Morton or
Hilbert space-filling curves, or a graph engine (``"graph"``: METIS, KaMinPar, Mt-KaHyPar); geometric partitions are refined along their boundary when an ``edge_index`` is
given. ``partition_quality`` reports edge cut, balance and halo sizes.
"""
from meshshard.partitioners.partition import Partition
from meshshard.partitioners.partitioners import (
    GraphPartitioner,
    HilbertPartitioner,
    InertialPartitioner,
    KDTreePartitioner,
    MortonPartitioner,
    partition,
)
from meshshard.partitioners.quality import partition_quality

__all__ = [
    "Partition",
    "partition",
    "partition_quality",
    "KDTreePartitioner",
    "InertialPartitioner",
    "MortonPartitioner",
    "HilbertPartitioner",
    "GraphPartitioner",
]
