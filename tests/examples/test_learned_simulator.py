"""examples/learned_simulator.py runs its whole path (generate, preprocess, train on 2 ranks, sharded
rollout, animation and error plot) in its reduced --quick mode, and --generate-only writes cases
that `meshshard preprocess --state` reads."""
import importlib
import re

import pytest


@pytest.mark.timeout(400)
def test_learned_simulator_quick_runs_the_whole_path(tmp_path, capsys):
    from PIL import Image

    from meshshard.io import read_trajectory

    example = importlib.import_module("examples.learned_simulator")  # a package path: spawned ranks import it
    out = tmp_path / "demo"
    assert example.main(["--out", str(out), "--quick"]) == 0
    printed = capsys.readouterr().out
    assert "generated 2 training cases and a held-out case" in printed
    assert re.search(r"trained 4 steps on 2 ranks in \d+ s: final loss [0-9.e+-]+", printed), printed
    rmse = re.search(r"rolled out 7 steps on 2 ranks .*RMSE velocity step 1 ([0-9.e+-]+)", printed)
    assert rmse and float(rmse.group(1)) > 0, printed
    rollout = read_trajectory(out / "rollout" / "test.pvd")
    assert rollout.num_steps == 8 and {"velocity_pred", "velocity_error", "concentration_pred"} <= set(rollout.fields)
    with Image.open(out / "rollout.gif") as im:
        assert im.n_frames == 8
    assert (out / "rollout" / "test_rollout_error.png").stat().st_size > 5_000
    assert (out / "sim.pt").is_file()


@pytest.mark.timeout(200)
def test_generate_only_writes_cases_the_cli_preprocesses(tmp_path, capsys):
    from meshshard.cli import main as cli
    from meshshard.datasets import read_trajectory_dataset_meta

    example = importlib.import_module("examples.learned_simulator")
    out = tmp_path / "demo"
    assert example.main(["--out", str(out), "--quick", "--generate-only", "--cases", "3"]) == 0
    cases = sorted(p.name for p in (out / "cases").glob("*.pvd"))
    assert cases == ["test.pvd", "train_0.pvd", "train_1.pvd", "train_2.pvd"] and not (out / "data").exists()
    pvds = [str(p) for p in sorted((out / "cases").glob("train_*.pvd"))]
    assert cli(["preprocess", *pvds, "-k", "2", "-o", str(out / "data"), "--state", "velocity", "concentration",
                "--node-type", "node_type", "-q"]) == 0
    meta = read_trajectory_dataset_meta(out / "data")
    assert len(meta["samples"]) == 3 and meta["state"] == ["velocity", "concentration"]
