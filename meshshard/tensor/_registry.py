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
    """Names a handler may be registered under, most readable last: ``str(func)``, ``__name__``,
    then ``torch.Tensor.<name>`` (methods), ``torch.<name>`` (torch functions) or ``module.qualname``."""
    names = [str(func)]
    name = getattr(func, "__name__", None)
    if not name:
        return names
    owner = getattr(func, "__self__", None)
    if name == "__get__" and getattr(owner, "__objclass__", None) is not None:
        # a Tensor property getter (x.T, x.mT, x.data ...): name the property
        return names + [f"torch.Tensor.{owner.__name__}.__get__", f"torch.Tensor.{owner.__name__}"]
    names.append(name)
    qual = getattr(func, "__qualname__", name) or name
    mod = getattr(func, "__module__", None)
    if getattr(func, "__objclass__", None) is not None or qual.startswith(("TensorBase.", "Tensor.")):
        names.append(f"torch.Tensor.{name}")
    elif qual.startswith("_VariableFunctionsClass.") or mod in (None, "torch", "torch._C", "torch._C._VariableFunctions"):
        names.append(f"torch.{name}")
    elif mod == "torch._C._nn":
        names += [f"{mod}.{qual}", f"torch.nn.functional.{name}"]
    else:
        names.append(f"{mod}.{qual}")
    return names
