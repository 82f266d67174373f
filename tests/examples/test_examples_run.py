"""The example scripts run as documented, on real data: the ones that spawn ranks through their
``main(argv)`` in this process (the same program as ``python examples/x.py ARGS`` without starting
another interpreter; their ranks are the session's kept ones), the others and the torchrun runs as
subprocesses."""
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _run(name, argv, capsys):
    """``examples/NAME.py``'s ``main(argv)``: its exit status must be success; returns its stdout."""
    module = importlib.import_module(f"examples.{name}")  # a package path, so spawned ranks can import it
    capsys.readouterr()
    assert module.main([str(a) for a in argv]) in (0, None)
    return capsys.readouterr().out


@pytest.mark.timeout(240)
def test_partition_cfd_mesh(tmp_path, data_dir):
    png = tmp_path / "cmp.png"  # a script run (it starts no ranks, so running it in-process saves little)
    proc = subprocess.run([sys.executable, str(EXAMPLES / "partition_cfd_mesh.py"), str(data_dir / "rae2822_turb.su2"),
                           "-k", "3", "--out", str(png)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "13937 nodes" in out
    for method in ("kdtree", "morton", "hilbert", "graph"):
        row = re.search(rf"^{method}\s+(\d+)\s+([0-9.]+)", out, flags=re.M)
        assert row, out
        assert int(row.group(1)) > 0 and 1.0 <= float(row.group(2)) < 1.2  # a cut exists; balanced parts
    assert png.stat().st_size > 10_000
    import matplotlib.image as mpimg

    h, w = mpimg.imread(png).shape[:2]
    assert (h, w) == (int(8.4 * 110), int(18 * 110)), (h, w)  # 4 methods, and a zoom row on the airfoil


@pytest.mark.timeout(300)
def test_point_cloud_knn_matches_single_process(data_dir, capsys):
    out = _run("point_cloud_knn", ["--points", data_dir / "drivaer_body_points.npz", "--ranks", "2", "--check",
                                   "--max-points", "4000", "-k", "6", "--hidden", "8", "--layers", "2"], capsys)
    assert "4000 points, k=6, 2 ranks" in out
    m = re.search(r"largest output difference ([0-9.e+-]+), loss difference ([0-9.e+-]+), relative gradient difference ([0-9.e+-]+)", out)
    assert m, out
    assert all(float(v) < 1e-10 for v in m.groups()), out
    ghosts = [int(g) for g in re.findall(r"owned \+ (\d+) ghost", out)]
    assert len(ghosts) == 2 and min(ghosts) > 0


@pytest.mark.timeout(200)
def test_distributed_core_spawned_with_an_empty_rank(capsys):
    out = _run("distributed_core", ["--ranks", "4", "--empty-rank"], capsys)
    assert "all checks passed on 4 ranks" in out, out
    diffs = [float(d) for d in re.findall(r"max \|diff\| ([0-9.e+-]+)", out)]
    assert len(diffs) == 12 and max(diffs) <= 1e-12, out
    assert "st + moved (other boundaries, rebalanced)" in out


@pytest.mark.timeout(200)
def test_distributed_core_under_torchrun():
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(EXAMPLES / "distributed_core.py")], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all checks passed on 2 ranks" in proc.stdout


def _sharded_conv_diffs(out, world):
    assert f"all checks passed on {world} ranks" in out, out
    diffs = dict(re.findall(r"^(\S.*?)\s+max \|diff\| ([0-9.e+-]+)$", out, flags=re.M))
    assert set(diffs) == {"dot product", "conv2d output", "loss", "input gradient (sharded like the input)",
                          "weight gradient (all-reduced)", "bias gradient (all-reduced)"}, out
    assert all(float(v) < 1e-4 for v in diffs.values()), out


@pytest.mark.timeout(200)
def test_sharded_conv_spawned_uneven(capsys):
    out = _run("sharded_conv", ["--ranks", "3", "--size", "20"], capsys)
    _sharded_conv_diffs(out, 3)
    assert "image rows per rank [7, 7, 6], output rows per rank [7, 7, 6]" in out, out


@pytest.mark.timeout(200)
def test_sharded_conv_under_torchrun():
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(EXAMPLES / "sharded_conv.py"), "--size", "21"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _sharded_conv_diffs(proc.stdout, 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("model", ["unet", "transolver"])
def test_train_any_model_matches_one_process(model, capsys):
    out = _run("train_any_model", ["--model", model, "--ranks", "3", "--steps", "3"], capsys)
    assert f"{model}: 3 ranks" in out, out
    diff = float(re.search(r"largest loss difference: (\S+)", out).group(1))
    assert diff < 1e-10, out
    losses = [float(line.split()[1]) for line in out.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(losses) == 3 and losses[-1] < losses[0], out  # it trains
