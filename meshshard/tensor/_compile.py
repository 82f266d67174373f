"""ShardTensor under ``torch.compile``: every ShardTensor op is a graph break and runs eagerly.

Dynamo cannot trace a ShardTensor: it would model it as the plain ``DTensor`` it derives from
(even shards, DTensor's op rules), which is not what ShardTensor's handlers compute. So, once
``torch._dynamo`` is loaded (``torch.compile`` loads it), ShardTensor is registered as a
*nontraceable* tensor subclass (dynamo then graph-breaks on every op that touches one) and its
``__torch_function__`` / ``__torch_dispatch__`` run with dynamo disabled (the handlers, their
collectives and everything they call run eagerly, exactly as without compile). Code between
ShardTensor ops that works on plain tensors (a graph model's layers on local rows) still compiles.

Nothing imports ``torch._dynamo`` eagerly (it is slow to import): :func:`install` registers at once
when it is already loaded, else right after its import (a one-shot import hook).
"""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys

__all__ = ["install", "register_with_dynamo", "refuse_before_registration"]

_STATE = {"done": False}


def register_with_dynamo(cls) -> None:
    """Make ``cls`` (ShardTensor) opaque to dynamo, if ``torch._dynamo`` is loaded (idempotent).

    Args:
        cls: the ShardTensor class; its ``__torch_function__`` and ``__torch_dispatch__`` are
            replaced by dynamo-disabled versions of themselves.
    """
    if _STATE["done"] or "torch._dynamo" not in sys.modules:
        return
    _STATE["done"] = True
    import torch._dynamo

    torch._dynamo.config.nontraceable_tensor_subclasses.add(cls)
    for name in ("__torch_function__", "__torch_dispatch__"):
        impl = cls.__dict__[name].__func__
        setattr(cls, name, classmethod(torch._dynamo.disable(impl, reason="ShardTensor ops run eagerly")))


class _AfterDynamoImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when ``torch._dynamo`` is imported, it lets the usual finders find it
    and wraps its loader so that ``register_with_dynamo`` runs once the module has executed."""

    def __init__(self, cls) -> None:
        self.cls = cls

    def find_spec(self, fullname, path, target=None):
        if fullname != "torch._dynamo":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # one shot; also keeps find_spec below from finding this hook
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run, cls = spec.loader.exec_module, self.cls

        def exec_module(module):
            run(module)
            register_with_dynamo(cls)

        spec.loader.exec_module = exec_module
        return spec


def install(cls) -> None:
    """Register ``cls`` (ShardTensor) with dynamo now if ``torch._dynamo`` is loaded, else as soon
    as it is imported.

    Args:
        cls: the ShardTensor class.
    """
    if "torch._dynamo" in sys.modules:
        register_with_dynamo(cls)
    elif not any(isinstance(f, _AfterDynamoImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterDynamoImport(cls))


def refuse_before_registration(func_name: str) -> None:
    """Raise the clear error for a ShardTensor that dynamo started to trace as a plain DTensor (the
    class was not registered in time, e.g. ``torch._dynamo`` was imported in a way the import hook
    did not see); the registration is done now, so the next call compiles.

    Args:
        func_name: the metadata function dynamo asked for.

    Raises:
        RuntimeError: always.
    """
    raise RuntimeError(
        f"ShardTensor: torch.compile started to trace a ShardTensor (it asked for {func_name}) before ShardTensor "
        "was registered with torch._dynamo, so dynamo would have treated it as a plain DTensor. ShardTensor is "
        "now registered as opaque to dynamo (each ShardTensor op runs eagerly); call the compiled function again")
