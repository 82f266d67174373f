"""Deprecation aliases for modules of :mod:`meshshard.partitioners` that moved: the old path keeps working.

An alias module names the module that now holds its contents; reading any name from the alias imports that
module, warns ``DeprecationWarning`` (naming the new path) and returns the object itself, so code written
against the old path gets the same objects as code written against the new one.
"""
from __future__ import annotations

import importlib
import warnings
from typing import Callable, List, Tuple

__all__ = ["moved_module"]


def moved_module(old: str, new: str) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` of the alias module ``old`` for the module ``new``.

    Args:
        old: the alias module's ``__name__`` (the old path).
        new: absolute name of the module that now defines the names.

    Returns:
        ``(__getattr__, __dir__)``: the first warns ``DeprecationWarning`` and returns ``new``'s attribute of
        that name (``AttributeError`` naming ``old`` when ``new`` has none); the second lists ``new``'s names.
    """

    def __getattr__(name: str):
        if name.startswith("__"):  # import machinery and introspection probes (__path__, __wrapped__, ...)
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        target = importlib.import_module(new)
        if not hasattr(target, name):
            raise AttributeError(f"module {old!r} has no attribute {name!r} (it moved to {new!r}, which has none)")
        warnings.warn(f"{old} is deprecated: import {name} from {new} (or from meshshard.partitioners)",
                      DeprecationWarning, stacklevel=2)
        return getattr(target, name)

    def __dir__() -> List[str]:
        return sorted(dir(importlib.import_module(new)))

    return __getattr__, __dir__
