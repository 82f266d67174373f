"""Layer 1 (meshshard.io, meshshard.partitioners) stays single-process at run time.

DESIGN.md: partitioners and io are pure single-process code and never touch torch.distributed.
The source-level import rules of every layer are checked in tests/test_layers.py and the public
surface (``__all__``, docstrings) in tests/test_public_api.py; here, importing and running layer 1
must load no upper layer at run time.
"""
import subprocess
import sys
from pathlib import Path


PKG = Path(__file__).resolve().parents[2] / "meshshard"
ALLOWED = {"io", "partitioners", "_fileutil", "_lazy", "_optional"}  # meshshard.<x> that layer 1 may use


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
