"""examples/train_meshgraphnet.py under torchrun with 2 gloo ranks: trains, checks against a
single-process reference, checkpoints atomically, resumes."""
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_meshgraphnet.py"


def _torchrun(*args, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


@pytest.mark.timeout(300)
def test_torchrun_two_ranks_check_and_resume(tmp_path, data_dir):
    from meshshard.datasets import preprocess_dataset

    data = tmp_path / "data"
    preprocess_dataset([data_dir / "cylinder_crossflow_re35.vtu"], data, 2, ["velocity[0,1]"], ["pressure"],
                       halo_hops=2, dtype="float64", progress=False)
    ckpt = tmp_path / "ckpt.pt"
    common = ["--data", str(data), "--hidden", "16", "--layers", "2", "--dtype", "float64", "--lr", "1e-3",
              "--save", str(ckpt), "--save-every", "2"]
    out = _torchrun(*common, "--steps", "3", "--check", "--exchange", "once")
    m = re.search(r"largest relative difference of loss ([0-9.e+-]+), of parameter gradients ([0-9.e+-]+) over 3 steps", out)
    assert m, out
    assert float(m.group(1)) < 1e-10 and float(m.group(2)) < 1e-10, out
    assert "backend gloo" in out and "steps 0..3" in out
    assert "train: 100%" in out and "loss=" in out  # rank 0's progress bar with the whole-mesh loss
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 3 and not list(tmp_path.glob(".ckpt.pt.*")), "no temporary checkpoint left"
    out = _torchrun(*common, "--steps", "5", "--resume", "--check", "--exchange", "per_layer")
    assert "steps 3..5" in out, out
    m = re.search(r"of loss ([0-9.e+-]+), of parameter gradients ([0-9.e+-]+) over 2 steps", out)
    assert m and float(m.group(1)) < 1e-10 and float(m.group(2)) < 1e-10, out
    assert torch.load(ckpt, weights_only=True)["step"] == 5
