"""Public surface of every meshshard module, in PyG's style.

Every module declares ``__all__``; every name it lists exists; every public class and function
(and every public method of an exported class) has a docstring; what a package exports to users
documents its arguments (``Args:``, in the class or its ``__init__``) wherever it takes any. Layer-specific checks (what layer 1 may load at run
time) live beside their packages; import rules are in tests/test_layers.py.
"""
import importlib
import inspect
import pkgutil

import pytest

import meshshard

SKIP_MODULES = {"meshshard.__main__"}  # runs the CLI on import


def _modules():
    yield meshshard
    for info in pkgutil.walk_packages(meshshard.__path__, "meshshard."):
        if info.name not in SKIP_MODULES:
            yield importlib.import_module(info.name)


def _documented_callables(mod):
    for name in mod.__all__:
        obj = getattr(mod, name, None)
        if getattr(obj, "__module__", "").split(".")[0] != "meshshard":
            continue  # re-exports of torch or other libraries
        if inspect.isfunction(obj) or inspect.isclass(obj):
            yield name, obj
        if inspect.isclass(obj):
            for attr, val in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(val, (classmethod, staticmethod)):
                    val = val.__func__
                elif isinstance(val, property):
                    val = val.fget
                # only methods written in the class's own module: PyG generates propagate() & co.
                # per MessagePassing subclass, in modules of its own, when the first one is built
                if inspect.isfunction(val) and val.__module__ == obj.__module__:
                    yield f"{name}.{attr}", val


def _is_public(mod) -> bool:
    """Users import from packages (``meshshard.ops``), not from private or inner modules."""
    return hasattr(mod, "__path__") and not any(p.startswith("_") for p in mod.__name__.split("."))


def _class_documents_arguments(cls) -> bool:
    """A class documents its constructor in its own docstring (``Args:``, or ``Attributes:`` for a
    record type), in ``__init__``'s, or in those of the base class that defines ``__init__``."""
    if "Attributes:" in (inspect.getdoc(cls) or ""):
        return True
    owner = next(c for c in cls.__mro__ if "__init__" in vars(c))
    return any("Args:" in (inspect.getdoc(x) or "") for x in (cls, owner, owner.__init__))


def _takes_arguments(obj) -> bool:
    if inspect.isclass(obj):
        obj = obj.__init__
        if obj is object.__init__:
            return False
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               for p in params)


def check(modules):
    """Problems with the public surface of ``modules``, one line each."""
    problems = []
    for mod in modules:
        names = getattr(mod, "__all__", None)
        if not isinstance(names, (list, tuple)):
            problems.append(f"{mod.__name__}: no __all__")
            continue
        for name in names:
            if not hasattr(mod, name):
                problems.append(f"{mod.__name__}.__all__ lists {name!r}, which it does not define")
        for name, obj in _documented_callables(mod):
            doc = inspect.getdoc(obj) or ""
            if not doc.strip():
                problems.append(f"{mod.__name__}.{name}: no docstring")
            elif "." not in name and _is_public(mod) and _takes_arguments(obj) and "Args:" not in doc \
                    and not (inspect.isclass(obj) and _class_documents_arguments(obj)):
                problems.append(f"{mod.__name__}.{name}: docstring without Args:")
    return problems


# deprecated alias modules (meshshard.partitioners.partition, ...) warn on every name read; they are checked too
@pytest.mark.filterwarnings("ignore:meshshard.partitioners.* is deprecated:DeprecationWarning")
def test_every_module_declares_all_and_documents_its_public_names():
    mods = list(_modules())
    assert len(mods) > 40
    problems = check(mods)
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems)


def test_checker_finds_each_problem():
    import types

    def undocumented(x):
        return x

    def no_args(x):
        """Does a thing."""
        return x

    for fn in (undocumented, no_args):
        fn.__module__ = "meshshard.fake"
    mod = types.ModuleType("meshshard.fake")
    mod.__all__ = ["undocumented", "no_args", "missing"]
    mod.__path__ = []  # a package: what users import
    mod.undocumented, mod.no_args = undocumented, no_args
    problems = "\n".join(check([mod]))
    assert "undocumented: no docstring" in problems
    assert "no_args: docstring without Args:" in problems
    assert "lists 'missing'" in problems
    assert check([types.ModuleType("meshshard.bare")]) == ["meshshard.bare: no __all__"]
