"""Deprecated alias of :mod:`meshshard.partitioners.result` (the ``Partition`` value).

Import from that module or from :mod:`meshshard.partitioners`; reading a name here warns ``DeprecationWarning``
and returns that module's object.
"""
from meshshard.partitioners._moved import moved_module

__all__ = ["Partition"]

__getattr__, __dir__ = moved_module(__name__, "meshshard.partitioners.result")
