"""Partitioners (layer 1): pure single-process code, never torch.distributed.

``partition(points, num_parts, method=...)`` splits a mesh or point cloud with recursive
coordinate bisection (``"kdtree"``), recursive inertial bisection (``"inertial"``), Morton or
Hilbert space-filling curves, or a graph engine (``"graph"``: METIS, KaMinPar, Mt-KaHyPar); geometric
partitions are refined along their boundary when an ``edge_index`` is given. ``partition_quality`` reports
edge cut, balance and halo sizes.

Layout: :mod:`.registry` (the partitioner classes, the method table ``PARTITIONERS`` and :func:`partition`),
:mod:`.result` (the :class:`Partition` value), :mod:`.quality`; the algorithms :mod:`.kdtree`, :mod:`.inertial`,
:mod:`.sfc`, :mod:`.graph_engines` and :mod:`.multilevel` (boundary refinement); private helpers (input checks,
CSR building, balanced runs, threads) and ``_kernels``, the compiled numba kernels, one module per algorithm.
The modules ``partition``, ``partitioners`` and ``graph`` are deprecated aliases of ``result``, ``registry`` and
``graph_engines``.
"""
# the deprecated alias module ``partition`` is loaded before the function ``partition`` is bound: importing a
# submodule sets the package's attribute of its name, so a first import of it later would replace the function
from meshshard.partitioners import partition as _partition_alias  # noqa: F401
from meshshard.partitioners.result import Partition
from meshshard.partitioners.registry import (
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
