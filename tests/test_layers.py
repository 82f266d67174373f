"""DESIGN.md's layering: only meshshard.distributed may import torch.distributed directly."""
import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "meshshard"


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_only_layer0_imports_torch_distributed():
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "distributed" or rel.name == "testing.py":
            continue
        for mod in _imports(path):
            if mod == "torch.distributed" or mod.startswith("torch.distributed."):
                offenders.append(f"{rel}: {mod}")
    assert not offenders, "import torch.distributed only in meshshard.distributed: " + ", ".join(offenders)


def test_partitioners_and_io_stay_single_process():
    offenders = []
    for sub in ("partitioners", "io"):
        for path in (PKG / sub).rglob("*.py"):
            for mod in _imports(path):
                if mod.startswith("meshshard.") and mod.split(".")[1] not in ("partitioners", "io", "_fileutil", "_optional"):
                    offenders.append(f"{path.relative_to(PKG)}: {mod}")
    assert not offenders, "layer 1 may import only layer 1 and helpers: " + ", ".join(offenders)
