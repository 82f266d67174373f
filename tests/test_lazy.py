"""meshshard._lazy: package attributes imported on first use."""
import subprocess
import sys
import types

import pytest

from meshshard._lazy import lazy_exports


def test_a_name_is_imported_on_first_read_and_kept(tmp_path, monkeypatch):
    pkg = tmp_path / "lazypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "heavy.py").write_text("LOADS = []\nLOADS.append(1)\nvalue = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = types.ModuleType("lazypkg")
    module.__path__ = [str(pkg)]
    monkeypatch.setitem(sys.modules, "lazypkg", module)
    module.__getattr__, module.__dir__ = lazy_exports("lazypkg", {"value": "lazypkg.heavy"}, ["heavy"])
    assert "lazypkg.heavy" not in sys.modules and "value" in dir(module) and "heavy" in dir(module)
    assert module.value == 42 and "value" in vars(module)  # stored: later reads skip __getattr__
    assert module.heavy is sys.modules["lazypkg.heavy"] and module.heavy.LOADS == [1]
    with pytest.raises(AttributeError, match="'lazypkg' has no attribute 'missing'"):
        module.missing
    monkeypatch.delitem(sys.modules, "lazypkg.heavy")


def test_packages_load_their_heavy_names_only_when_read():
    code = ("import sys, meshshard, meshshard.datasets, meshshard.distributed, meshshard.ops\n"
            "before = sorted(m for m in sys.modules if m.startswith(('torch.distributed.tensor', 'meshshard.tensor',"
            " 'meshshard.datasets.sharded', 'meshshard.ops.')))\n"
            "assert 'DTensor' in dir(meshshard.distributed) and 'ShardedMeshDataset' in dir(meshshard.datasets)\n"
            "meshshard.distributed.DTensor, meshshard.datasets.ShardedMeshDataset\n"
            "print(before, 'torch.distributed.tensor' in sys.modules, 'meshshard.datasets.sharded' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True", "True"], out.stdout
