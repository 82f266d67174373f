"""Package attributes imported on first use (PEP 562 module ``__getattr__``).

A package names what it exports and which module defines each name; nothing is imported until a
name is read, so ``import meshshard`` and the single-process layers stay cheap and never pull in
the distributed stack they do not use.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Iterable, List, Mapping, Tuple

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 submodules: Iterable[str] = ()) -> Tuple[Callable[[str], object], Callable[[], List[str]]]:
    """Module-level ``__getattr__`` and ``__dir__`` for ``package``.

    Args:
        package: the package's ``__name__`` (it must be in ``sys.modules``, as it is while its
            ``__init__`` runs).
        exports: ``{name: absolute name of the module that defines it}``.
        submodules: names of ``package``'s submodules that are also loaded on first use.

    Returns:
        ``(__getattr__, __dir__)``. The first imports a name's module when the name is first read
        and stores the value in the package's namespace (later reads are plain attribute reads);
        an unknown name raises ``AttributeError``. The second lists the loaded and the lazy names.
    """
    namespace = vars(sys.modules[package])
    exports = dict(exports)
    submodules = frozenset(submodules)

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(exports[name]), name)
        elif name in submodules:
            value = importlib.import_module(f"{package}.{name}")
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> List[str]:
        return sorted(set(namespace) | set(exports) | submodules)

    return __getattr__, __dir__
