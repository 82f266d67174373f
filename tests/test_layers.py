"""DESIGN.md's layering, for the whole package.

Each package imports only from its own layer and the ones below it, and only layer 0
(``meshshard.distributed``) reaches ``torch.distributed`` directly, in any form: ``import``,
``from torch import distributed``, ``torch.distributed.x`` attribute use, relative imports and
import-by-string (``importlib.import_module("torch.distributed")``).
"""
import ast
import textwrap
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parent.parent / "meshshard"

# DESIGN.md's table; private helpers (_fileutil, _lazy, _optional, _compile) and the test harness sit at layer 0.
LAYER = {
    "distributed": 0, "_fileutil": 0, "_lazy": 0, "_optional": 0, "_compile": 0, "testing": 0,
    "partitioners": 1, "io": 1,
    "tensor": 2, "graph": 2,
    "ops": 3,
    "models": 4, "datasets": 4, "viz": 4,
    "cli": 5, "__main__": 5,
}
# who may touch torch.distributed itself: layer 0, and the test harness that spawns process groups
TORCH_DISTRIBUTED_OK = {"distributed", "testing"}


def _resolve(module, level, package):
    if level == 0:
        return module or ""
    base = package.split(".")[: len(package.split(".")) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def violations(source: str, module: str):
    """Every import in ``source`` (the text of meshshard module ``module``) that breaks the layering."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    package = module[: -len(".__init__")] if module.endswith(".__init__") else ".".join(parts[:-1])
    own = LAYER.get(top)
    may_use_dist = top in TORCH_DISTRIBUTED_OK
    bad = []
    for node in ast.walk(ast.parse(source)):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(node.module, node.level, package)
            mods = [mod] + [f"{mod}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute) and node.attr == "distributed" and not may_use_dist:
            if isinstance(node.value, ast.Name) and node.value.id == "torch":
                bad.append("torch.distributed (attribute)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and not may_use_dist:
            if node.value.strip().startswith("torch.distributed") and " " not in node.value.strip():
                bad.append(f"{node.value!r} (string, e.g. importlib)")
        for m in mods:
            if not may_use_dist and (m == "torch.distributed" or m.startswith("torch.distributed.")):
                bad.append(m)
            mp = m.split(".")
            if own is not None and mp[0] == "meshshard" and len(mp) > 1 and mp[1] in LAYER:
                if LAYER[mp[1]] > own:
                    bad.append(f"{m} (layer {LAYER[mp[1]]} from layer {own})")
                elif own == 1 and mp[1] in TORCH_DISTRIBUTED_OK:
                    bad.append(f"{m} (layer 1 never reaches torch.distributed, not even through layer 0)")
    return bad


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG.parent).with_suffix("")
        name = ".".join(rel.parts)
        if name.endswith(".__init__"):
            name = name[: -len(".__init__")]
            yield path, name, True
        else:
            yield path, name, False


def test_every_module_respects_the_layers():
    offenders = []
    count = 0
    for path, name, is_pkg in _modules():
        top = name.split(".")[1] if "." in name else None
        if top is not None:
            assert top in LAYER, f"{name}: package {top!r} is missing from the layer table of this test"
        module = name + ".__init__" if is_pkg else name
        offenders += [f"{path.relative_to(PKG)}: {m}" for m in violations(path.read_text(), module)]
        count += 1
    assert count >= 50
    assert not offenders, "layering broken:\n" + "\n".join(offenders)


@pytest.mark.parametrize("module,snippet", [
    ("meshshard.ops.conv", "import torch.distributed"),
    ("meshshard.graph.plan", "import torch.distributed as dist"),
    ("meshshard.tensor.spec", "from torch import distributed as dist"),
    ("meshshard.models.mlp", "from torch.distributed import all_reduce"),
    ("meshshard.viz.colors", "import torch\nx = torch.distributed.is_initialized()"),
    ("meshshard.datasets.stats", "importlib.import_module('torch.distributed')"),
    ("meshshard.partitioners.sfc", "from meshshard.distributed import get_rank"),
    ("meshshard.io.read", "from meshshard import graph"),
    ("meshshard.partitioners.graph_engines", "from ..ops import gather_v"),
    ("meshshard.graph.halo", "from ..ops.knn import sharded_knn"),
    ("meshshard.tensor.__init__", "from ..models import MeshGraphNet"),
    ("meshshard.ops.knn", "from meshshard.datasets import MeshDataset"),
    ("meshshard.models.training", "from meshshard.cli import main"),
])
def test_the_checker_catches_each_form(module, snippet):
    assert violations(textwrap.dedent(snippet), module), snippet


def test_the_checker_allows_lower_layers():
    ok = {
        "meshshard.distributed.comm": "import torch.distributed as dist\nfrom torch.distributed import all_reduce",
        "meshshard.ops.conv": "from meshshard.graph import ShardedGraph\nfrom ..distributed import get_rank\n"
                              "from . import knn\n'''mentions torch.distributed in prose only'''",
        "meshshard.models.meshgraphnet": "from meshshard.ops.conv import ShardedConv\nfrom meshshard.io import Mesh",
        "meshshard.cli.demo": "from meshshard.models import MeshGraphNet\nfrom meshshard.viz import plot_partition",
    }
    for module, src in ok.items():
        assert violations(src, module) == [], module
