"""meshshard.partitioners._kernels.jit: the notice logged while the kernels compile for long (and only then), and any_layout."""
import logging
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from meshshard.partitioners._kernels import jit as _jit


def _kernel_in(module: str):
    """A fresh jitted function that claims to live in ``module`` (uncached: its first call compiles)."""
    def add_one(x):
        return x + 1

    add_one.__module__ = module
    return _jit.njit(add_one)


def _notices(caplog):
    return [r for r in caplog.records if r.getMessage() == _jit.COMPILE_NOTICE]


def test_notice_once_per_process_for_partitioner_kernels_only(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "_announced", False)
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 0.0)  # due at the start of a compilation
    with caplog.at_level(logging.WARNING, logger="meshshard"):
        _kernel_in("tests.elsewhere")(1)  # not a partitioner kernel: no notice
        assert not _notices(caplog)
        _kernel_in("meshshard.partitioners._probe")(1)
        _kernel_in("meshshard.partitioners._probe")(2.5)  # a second compilation: no second notice
    got = _notices(caplog)
    assert len(got) == 1 and got[0].name == "meshshard" and got[0].levelno == logging.WARNING
    assert _jit._listener.depth == 0 and _jit._listener.timer is None


def test_short_compilations_stay_quiet(monkeypatch, caplog):
    monkeypatch.setattr(_jit, "_announced", False)
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 120.0)
    with caplog.at_level(logging.WARNING, logger="meshshard"):
        _kernel_in("meshshard.partitioners._probe")(1)  # compiles in well under two minutes
    assert not _notices(caplog)
    assert _jit._listener.depth == 0 and _jit._listener.timer is None  # the pending notice was cancelled


def test_notice_comes_while_a_long_compilation_runs(monkeypatch, caplog):
    # the listener driven by hand: a compilation (with one nested) that runs past the delay
    monkeypatch.setattr(_jit, "_announced", False)
    monkeypatch.setattr(_jit, "NOTICE_AFTER_S", 0.05)
    listener = _jit._SlowCompileNotice()
    mine = SimpleNamespace(data={"dispatcher": _kernel_in("meshshard.partitioners._probe")})
    with caplog.at_level(logging.WARNING, logger="meshshard"):
        listener.on_start(mine)
        listener.on_start(mine)  # nested: no second timer
        listener.on_end(mine)
        deadline = time.monotonic() + 30
        while not _notices(caplog) and time.monotonic() < deadline:
            time.sleep(0.01)
        listener.on_end(mine)
    assert len(_notices(caplog)) == 1 and listener.depth == 0 and listener.timer is None


def test_cached_kernels_compile_nothing_in_a_new_process(tmp_path):
    import meshshard as ms

    pts = np.random.default_rng(0).random((400, 3))
    np.save(tmp_path / "pts.npy", pts)
    ms.partition(pts, 3, "kdtree", edge_index=ms.knn_graph(pts, 6))  # compiled (or loaded) and cached here
    code = ("import numpy as np, meshshard as ms\n"
            "from meshshard.partitioners._kernels import jit as _jit\n"
            "_jit.NOTICE_AFTER_S = 0.0  # any compilation at all would log\n"
            f"p = np.load({str(tmp_path / 'pts.npy')!r})\n"
            "ms.partition(p, 3, 'kdtree', edge_index=ms.knn_graph(p, 6))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _jit.COMPILE_NOTICE not in done.stderr, done.stderr


def test_any_layout_compiles_once_for_contiguous_and_strided_arrays():
    def weighted_sum(idx, data):
        total = 0.0
        for i in range(idx.shape[0]):
            total += data[idx[i]]
        return total

    weighted_sum.__module__ = "tests.elsewhere"
    kernel = _jit.njit(weighted_sum)
    call = _jit.any_layout(kernel, "data")
    idx = np.array([0, 2, 2, 5])
    dense = np.arange(6.0)
    strided = np.repeat(np.arange(6.0), 2)[::2]  # the same values, stride 2
    ones = np.broadcast_to(np.float64(1.0), (6,))  # read-only, stride 0
    assert call(idx, dense) == call(idx, strided) == 9.0 and call(idx, ones) == 4.0
    assert len(kernel.signatures) == 1  # one compilation served all three layouts
    assert call.__doc__ == weighted_sum.__doc__ and call.kernel is kernel
    with pytest.raises(TypeError, match="takes 2 positional arguments, got 1"):
        call(idx.astype(np.int32))


def test_a_first_refined_partition_compiles_one_variant_of_each_kernel_it_calls_and_no_other(data_dir):
    # what ``meshshard demo`` runs first: kdtree refined on a mesh graph (the finest level's unit edge weights are
    # a zero-stride view, the coarse levels' arrays); a fresh process, whose kernels load from the cache or compile
    code = ("import sys, numpy as np, meshshard as ms\n"
            "from numba.core.registry import CPUDispatcher\n"
            f"mesh = ms.read_mesh({str(data_dir / 'cylinder_crossflow_re35.vtu')!r})\n"
            "ms.partition(mesh.points, 2, 'kdtree', edge_index=mesh.edge_index())\n"
            "for name, mod in sorted(sys.modules.items()):\n"
            "    if name.startswith('meshshard.partitioners.'):\n"
            "        for k, v in sorted(vars(mod).items()):\n"
            "            if isinstance(v, CPUDispatcher) and v.py_func.__module__ == name and v.signatures:\n"
            "                print(name.split('.')[-1] + '.' + k, len(v.signatures))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    variants = dict(line.split() for line in done.stdout.split("\n") if line)
    assert {"fm._fm_passes", "rebalance.rebalance", "axis_split.split_at", "coarsen.contract"} <= set(variants)
    assert all(count == "1" for count in variants.values()), variants
    # kernels of other methods or paths stay uncompiled: curve keys, bucketed runs, two-thread contraction, edge lists
    assert not {"sfc_keys.hilbert_kernel", "runs.bucketed_runs", "coarsen.contract_range", "csr.build_csr",
                "components.label_components_edges"} & set(variants), variants
