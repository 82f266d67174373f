"""Run a function eagerly under ``torch.compile`` without importing ``torch._dynamo`` eagerly.

``torch._dynamo.disable`` needs ``torch._dynamo`` imported, which is slow; nothing compiles until
``torch.compile`` has imported it. :func:`eager_under_compile` wraps a function so that it calls
the dynamo-disabled version once ``torch._dynamo`` is loaded and the plain one before.
"""
from __future__ import annotations

import functools
import sys
from typing import Callable, Dict

__all__ = ["eager_under_compile"]

_DISABLED: Dict[Callable, Callable] = {}


def eager_under_compile(fn: Callable) -> Callable:
    """``fn``, run with dynamo disabled (a graph break, then eager code, recursively).

    Args:
        fn: the function (its callees run eagerly too).

    Returns:
        A wrapper with ``fn``'s signature.
    """

    @functools.wraps(fn)
    def inner(*args, **kwargs):
        if "torch._dynamo" not in sys.modules:
            return fn(*args, **kwargs)
        disabled = _DISABLED.get(fn)
        if disabled is None:
            import torch._dynamo

            disabled = _DISABLED[fn] = torch._dynamo.disable(fn, reason=f"{fn.__qualname__} runs eagerly")
        return disabled(*args, **kwargs)

    return inner
