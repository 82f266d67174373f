"""Layer 1 (meshshard.io, meshshard.partitioners) stays single-process and documented.

DESIGN.md: partitioners and io are pure single-process code and never touch torch.distributed.
The source-level import rules of every layer are checked in tests/test_layers.py; here, importing
and running layer 1 must load no upper layer, and its public names carry docstrings with ``Args:``
and every module declares ``__all__``.
"""
import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "meshshard"
LAYER1 = ("io", "partitioners")
ALLOWED = {"io", "partitioners", "_fileutil", "_optional"}  # meshshard.<x> that layer 1 may use


def test_importing_layer1_loads_no_upper_layer():
    code = ("import sys, meshshard as ms, meshshard.io, meshshard.partitioners\n"
            "import numpy as np\n"
            "pts = np.random.default_rng(0).random((200, 3))\n"
            "ms.partition(pts, 4, 'hilbert', edge_index=ms.knn_graph(pts, 4))\n"
            "ms.partition(pts, 4, 'graph', edge_index=ms.knn_graph(pts, 4))\n"
            "bad = sorted(m for m in sys.modules if m.startswith('meshshard.') and m.split('.')[1] not in "
            f"{sorted(ALLOWED)!r})\n"
            "print(bad)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=PKG.parent, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def _public_objects():
    for sub in LAYER1:
        pkg = importlib.import_module(f"meshshard.{sub}")
        mods = [pkg] + [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]
        for mod in mods:
            yield mod, None, None
            for name in mod.__all__:
                obj = getattr(mod, name)
                yield mod, name, obj
                if inspect.isclass(obj):
                    for attr, val in vars(obj).items():
                        if attr.startswith("_"):
                            continue
                        if isinstance(val, (classmethod, staticmethod)):
                            val = val.__func__
                        elif isinstance(val, property):
                            val = val.fget
                        if inspect.isfunction(val):
                            yield mod, f"{name}.{attr}", val


def test_layer1_modules_declare_all_and_document_public_functions():
    problems = []
    for mod, name, obj in _public_objects():
        if name is None:
            if not isinstance(getattr(mod, "__all__", None), (list, tuple)):
                problems.append(f"{mod.__name__}: no __all__")
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        doc = inspect.getdoc(obj) or ""
        if not doc.strip():
            problems.append(f"{mod.__name__}.{name}: no docstring")
            continue
        if inspect.isfunction(obj):
            params = [p for p in inspect.signature(obj).parameters if p not in ("self", "cls")]
            is_prop = "." in name and isinstance(inspect.getattr_static(getattr(mod, name.split(".")[0]),
                                                                          name.split(".")[1]), property)
            if params and not is_prop and "Args:" not in doc:
                problems.append(f"{mod.__name__}.{name}: docstring without Args:")
    assert not problems, "\n".join(problems)
