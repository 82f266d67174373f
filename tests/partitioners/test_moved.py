"""meshshard.partitioners._moved: the old module paths keep working, warn, and give the same objects."""
import subprocess
import sys

import pytest

import meshshard.partitioners as P
from meshshard.partitioners import graph_engines, registry, result

MOVED = [  # (old module, new module, names read through the old one)
    ("meshshard.partitioners.partition", result, ["Partition"]),
    ("meshshard.partitioners.partitioners", registry, ["partition", "PARTITIONERS", "DEFAULT_IMBALANCE",
                                                       "BasePartitioner", "KDTreePartitioner", "GraphPartitioner"]),
    ("meshshard.partitioners.graph", graph_engines, ["GRAPH_ENGINES", "graph_assignment", "metis_assignment",
                                                     "fill_empty_parts", "_clip_heavy"]),
]


@pytest.mark.parametrize("old,new,names", MOVED)
def test_old_path_warns_and_returns_the_new_object(old, new, names):
    module = sys.modules.get(old) or __import__(old, fromlist=["_"])
    for name in names:
        with pytest.warns(DeprecationWarning, match=f"{old} is deprecated: import {name} from {new.__name__}"):
            got = getattr(module, name)
        assert got is getattr(new, name)
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match=f"module '{old}' has no attribute 'nothing_here'"):
        module.nothing_here


def test_from_import_of_an_old_path_warns():
    with pytest.warns(DeprecationWarning, match="import Partition from meshshard.partitioners.result"):
        from meshshard.partitioners.partition import Partition
    assert Partition is P.Partition


def test_the_package_function_partition_survives_importing_the_old_module():
    # importing a submodule binds it on the package: the old module ``partition`` must not replace the function
    code = ("import importlib, meshshard.partitioners as P\n"
            "old = importlib.import_module('meshshard.partitioners.partition')\n"
            "from meshshard.partitioners import partition\n"
            "assert callable(P.partition) and P.partition is partition and partition is not old, P.partition\n"
            "assert P.partition.__module__ == 'meshshard.partitioners.registry'\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", "-c", code], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
