"""Deprecated alias of :mod:`meshshard.partitioners.graph_engines` (the graph engines: METIS, KaMinPar, Mt-KaHyPar).

Import from that module or from :mod:`meshshard.partitioners`; reading a name here warns ``DeprecationWarning``
and returns that module's object.
"""
from meshshard.partitioners._moved import moved_module

__all__ = ["GRAPH_ENGINES", "graph_assignment", "metis_assignment", "kaminpar_assignment",
           "mtkahypar_assignment", "fill_empty_parts"]

__getattr__, __dir__ = moved_module(__name__, "meshshard.partitioners.graph_engines")
