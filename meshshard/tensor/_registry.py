"""Handler tables consulted by ShardTensor's ``__torch_function__`` / ``__torch_dispatch__``.

User handlers (registered through the ShardTensor class methods) are looked up before the
built-in ones, so a user can override any built-in behaviour.
"""
from __future__ import annotations

from typing import Callable, Dict

__all__ = ["FUNCTION_HANDLERS", "NAMED_FUNCTION_HANDLERS", "DISPATCH_HANDLERS", "BUILTIN_FUNCTION_HANDLERS",
           "function_names"]

FUNCTION_HANDLERS: Dict[Callable, Callable] = {}        # user: torch function -> handler
NAMED_FUNCTION_HANDLERS: Dict[str, Callable] = {}       # user: "torch.Tensor.sum" style name -> handler
DISPATCH_HANDLERS: Dict[object, Callable] = {}          # user: aten op overload/packet -> handler
BUILTIN_FUNCTION_HANDLERS: Dict[Callable, Callable] = {}  # meshshard's own handlers


def function_names(func) -> list:
    """Names a function handler may be registered under: ``str(func)``, ``__name__`` and qualified names."""
    names = [str(func)]
    name = getattr(func, "__name__", None)
    if name:
        names.append(name)
        qual = getattr(func, "__qualname__", name)
        mod = getattr(func, "__module__", None)
        objclass = getattr(func, "__objclass__", None)
        if objclass is not None:
            names.append(f"torch.Tensor.{name}")
        elif mod:
            names.append(f"{mod}.{qual}")
            if mod.startswith("torch._C"):
                names.append(f"torch.{qual}")
    return names
