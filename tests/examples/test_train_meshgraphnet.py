"""examples/train_meshgraphnet.py under torchrun with 2 gloo ranks: trains, checks against a
single-process reference with a per-step verdict, checkpoints atomically, and resumes with exactly
the losses of an uninterrupted run."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_meshgraphnet.py"
STEP = re.compile(r"step (\d+): loss ([0-9.e+-]+) \(reference [0-9.e+-]+\), relative difference of loss ([0-9.e+-]+) "
                  r"\(tol 1e-10\), of gradients ([0-9.e+-]+) \(tol 1e-10\): pass")


def _torchrun(*args, timeout=240):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(EXAMPLE), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _losses(out):
    return {int(m.group(1)): float(m.group(2)) for m in STEP.finditer(out)}


@pytest.mark.timeout(420)
def test_torchrun_two_ranks_check_and_resume(tmp_path, data_dir):
    from meshshard.datasets import preprocess_dataset

    data = tmp_path / "data"
    preprocess_dataset([data_dir / "cylinder_crossflow_re35.vtu"], data, 2, ["velocity[0,1]"], ["pressure"],
                       halo_hops=2, dtype="float64", progress=False)
    ckpt = tmp_path / "ckpt.pt"
    common = ["--data", str(data), "--hidden", "16", "--layers", "2", "--dtype", "float64", "--lr", "1e-3",
              "--save-every", "2", "--check"]
    # stopped after step 3 of 5, then resumed from its checkpoint
    out = _torchrun(*common, "--save", str(ckpt), "--steps", "3", "--exchange", "once")
    m = re.search(r"largest relative difference of loss ([0-9.e+-]+), of parameter gradients ([0-9.e+-]+) over 3 steps: "
                  r"PASS \(tolerances float64: loss 1e-10, gradients 1e-10\)", out)
    assert m, out
    assert float(m.group(1)) < 1e-10 and float(m.group(2)) < 1e-10, out
    assert "backend gloo" in out and "steps 0..3" in out
    assert "train: 100%" in out and "loss=" in out  # rank 0's progress bar with the whole-mesh loss
    first = _losses(out)
    assert sorted(first) == [0, 1, 2], out  # one verdict line per step
    state = torch.load(ckpt, weights_only=True)
    assert state["step"] == 3 and not list(tmp_path.glob(".ckpt.pt.*")), "no temporary checkpoint left"
    out = _torchrun(*common, "--save", str(ckpt), "--steps", "5", "--resume", "--exchange", "per_layer")
    assert "steps 3..5" in out, out
    assert re.search(r"over 2 steps: PASS", out), out
    resumed = {**first, **_losses(out)}
    assert torch.load(ckpt, weights_only=True)["step"] == 5
    # the same 5 steps without interruption: the same loss at every step
    out = _torchrun(*common, "--save", str(tmp_path / "whole.pt"), "--steps", "5", "--exchange", "once")
    whole = _losses(out)
    assert sorted(whole) == sorted(resumed) == [0, 1, 2, 3, 4], out
    for step, loss in whole.items():
        assert abs(resumed[step] - loss) <= 1e-12 * abs(loss), (step, resumed[step], loss)


@pytest.mark.timeout(200)
def test_check_failure_exits_non_zero(tmp_path, data_dir, monkeypatch, capsys):
    """One process (no torchrun): a tolerance no difference can meet makes every step FAIL."""
    from meshshard.datasets import preprocess_dataset

    for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    data = tmp_path / "data"
    preprocess_dataset([data_dir / "cylinder_crossflow_re35.vtu"], data, 1, ["velocity[0,1]"], ["pressure"],
                       dtype="float32", progress=False)
    spec = importlib.util.spec_from_file_location("train_meshgraphnet", EXAMPLE)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.TOLERANCE["float32"] == {"loss": 1e-5, "grad": 1e-4}  # as the README and --help state
    monkeypatch.setitem(example.TOLERANCE, "float32", {"loss": -1.0, "grad": -1.0})
    code = example.main(["--data", str(data), "--hidden", "8", "--layers", "1", "--steps", "2", "--check"])
    out = capsys.readouterr().out
    assert code == 1, out
    assert len(re.findall(r"^step \d+: .*\(tol -1\): FAIL$", out, re.M)) == 2, out
    assert "2 steps: FAIL at steps [0, 1]" in out, out
