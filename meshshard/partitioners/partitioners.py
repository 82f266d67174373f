"""Deprecated alias of :mod:`meshshard.partitioners.registry` (the partitioner classes, the method table and ``partition()``).

Import from that module or from :mod:`meshshard.partitioners`; reading a name here warns ``DeprecationWarning``
and returns that module's object.
"""
from meshshard.partitioners._moved import moved_module

__all__ = ["BasePartitioner", "KDTreePartitioner", "InertialPartitioner", "MortonPartitioner", "HilbertPartitioner",
           "GraphPartitioner", "PARTITIONERS", "DEFAULT_IMBALANCE", "partition"]

__getattr__, __dir__ = moved_module(__name__, "meshshard.partitioners.registry")
