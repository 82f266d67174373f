"""The notice logged when the partitioners' numba kernels compile (and only then)."""
import logging
import subprocess
import sys

import numpy as np

from meshshard.partitioners import _jit


def _kernel_in(module: str):
    """A fresh jitted function that claims to live in ``module`` (uncached: every call site compiles)."""
    def add_one(x):
        return x + 1

    add_one.__module__ = module
    return _jit.njit(add_one)


def test_first_compile_of_a_partitioner_kernel_logs_one_notice(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "_announced", False)
    with caplog.at_level(logging.WARNING, logger="meshshard"):
        _kernel_in("tests.elsewhere")(1)  # not a meshshard kernel: no notice
        assert _jit.COMPILE_NOTICE not in caplog.text
        _kernel_in("meshshard.partitioners._probe")(1)
        _kernel_in("meshshard.partitioners._probe")(2.5)  # a second compilation: no second notice
    notices = [r for r in caplog.records if r.getMessage() == _jit.COMPILE_NOTICE]
    assert len(notices) == 1 and notices[0].name == "meshshard" and notices[0].levelno == logging.WARNING


def test_cached_kernels_compile_nothing_in_a_new_process(tmp_path):
    import meshshard as ms

    pts = np.random.default_rng(0).random((400, 3))
    np.save(tmp_path / "pts.npy", pts)
    ms.partition(pts, 3, "kdtree", edge_index=ms.knn_graph(pts, 6))  # compiled (or loaded) and cached here
    code = ("import numpy as np, meshshard as ms\n"
            f"p = np.load({str(tmp_path / 'pts.npy')!r})\n"
            "ms.partition(p, 3, 'kdtree', edge_index=ms.knn_graph(p, 6))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _jit.COMPILE_NOTICE not in done.stderr, done.stderr
