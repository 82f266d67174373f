"""Layer 1 (meshshard.io, meshshard.partitioners) stays single-process and documented.

DESIGN.md: partitioners and io are pure single-process code and never touch torch.distributed;
they may import only each other and the shared helpers. Public names carry docstrings with
``Args:``, and every module declares ``__all__``.
"""
import ast
import importlib
import inspect
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "meshshard"
LAYER1 = ("io", "partitioners")
ALLOWED = {"io", "partitioners", "_fileutil", "_optional"}  # meshshard.<x> that layer 1 may use


def _resolve(module, level, package):
    if level == 0:
        return module or ""
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def layer1_violations(source: str, package: str):
    """Every way ``source`` (a module of ``package``) reaches torch.distributed or an upper layer."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(node.module, node.level, package)
            mods = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "distributed":
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                bad.append("torch.distributed (attribute)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if "torch.distributed" in node.value and " " not in node.value.strip():
                bad.append(f"{node.value!r} (string, e.g. importlib)")
        for m in mods:
            if m == "torch.distributed" or m.startswith("torch.distributed."):
                bad.append(m)
            parts = m.split(".")
            if parts[0] == "meshshard" and len(parts) > 1 and parts[1] not in ALLOWED:
                bad.append(m)
    return bad


def _layer1_files():
    for sub in LAYER1:
        for path in sorted((PKG / sub).rglob("*.py")):
            # the package a relative import starts from: the folder holding the file
            yield path, ".".join(path.relative_to(PKG.parent).parent.parts)


def test_layer1_sources_never_reach_torch_distributed():
    offenders = []
    files = list(_layer1_files())
    assert len(files) >= 10
    for path, package in files:
        offenders += [f"{path.relative_to(PKG)}: {m}" for m in layer1_violations(path.read_text(), package)]
    assert not offenders, "layer 1 must stay single-process: " + ", ".join(offenders)


@pytest.mark.parametrize("snippet", [
    "import torch.distributed",
    "import torch.distributed as dist",
    "from torch import distributed as dist",
    "from torch.distributed import all_reduce",
    "import torch\nx = torch.distributed.is_initialized()",
    "importlib.import_module('torch.distributed')",
    "from meshshard.distributed import get_rank",
    "from meshshard import graph",
    "from ..ops import gather_v",
    "from .. import tensor",
])
def test_the_checker_catches_each_form(snippet):
    assert layer1_violations(textwrap.dedent(snippet), "meshshard.partitioners")


def test_the_checker_allows_layer1_imports():
    ok = ("import torch\nimport numpy as np\nfrom meshshard.io.mesh import Mesh\n"
          "from .partition import Partition\nfrom .. import _fileutil\nfrom meshshard._optional import require\n"
          "'''uses no torch.distributed at all'''")
    assert layer1_violations(ok, "meshshard.partitioners") == []


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
