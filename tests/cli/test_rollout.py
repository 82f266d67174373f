"""`meshshard rollout`: the files it writes (a .pvd of step files with <field>_pred and
<field>_error, the error plot), Dirichlet boundaries from the truth, the RMSE it prints, rollouts at
2, 3 and 4 ranks equal to one process over 50 steps (float64, 1e-10), and bad inputs."""
import numpy as np
import pytest
import torch

import meshshard as ms
from meshshard.cli import main
from meshshard.cli.rollout import rollout
from meshshard.testing import run_distributed
from tests.datasets._diffusion_case import trained_checkpoint, write_diffusion_pvd

QUIET = dict(progress=False, echo=lambda *a: None)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rollout")
    pvd = write_diffusion_pvd(tmp / "case")
    return dict(tmp=tmp, pvd=pvd, ckpt=trained_checkpoint(tmp, pvd))


def test_one_process_writes_the_rollout_with_truth_on_the_boundary(case, capsys):
    out = case["tmp"] / "one"
    rc = main(["rollout", "--checkpoint", str(case["ckpt"]), str(case["pvd"]), "-o", str(out), "--start", "2",
               "--steps", "6", "-q"])
    text = capsys.readouterr().out
    assert rc == 0, text
    truth = ms.read_trajectory(case["pvd"])
    got = ms.read_trajectory(out / "heat.pvd")
    assert got.num_steps == 7 and np.allclose(got.times, truth.times[2:9])
    pred, err = got.fields["temperature_pred"][:, :, 0], got.fields["temperature_error"][:, :, 0]
    true = truth.fields["temperature"][2:9, :, 0]
    np.testing.assert_allclose(err, pred - true, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(got.fields["temperature"][:, :, 0], true)  # the truth is kept beside
    assert np.abs(err[0]).max() == 0  # the start is the truth
    boundary = truth.static["node_type"][:, 0] == 1
    assert np.abs(err[:, boundary]).max() == 0 and np.abs(err[1:, ~boundary]).max() > 0  # Dirichlet; interior moves
    rmse = np.sqrt((err ** 2).mean(axis=1))
    for k in range(7):
        assert f"step {2 + k}: RMSE temperature {rmse[k]:.6g}" in text, text
    assert (out / "heat_rollout_error.png").stat().st_size > 1000
    assert sorted(p.name for p in (out / "heat").iterdir()) == [f"heat_{k:04d}.vtu" for k in range(7)]


def _rollouts(rank, world, ckpt, pvd, out):
    """Rollouts on the first 2, 3 and 4 ranks (one spawned group of 4, sub-groups)."""
    from meshshard.distributed import new_group

    states = {}
    for size in (2, 3, 4):
        group = new_group(list(range(size)))  # every rank takes part in making it
        if rank < size:
            res = rollout(ckpt, pvd, out / f"r{size}", start=4, steps=50, method="kdtree", group=group, **QUIET)
            states[size] = res.get("states")
    return states


@pytest.mark.timeout(300)
def test_sharded_rollouts_equal_one_process_over_50_steps(case):
    one = rollout(case["ckpt"], case["pvd"], case["tmp"] / "ref", start=4, steps=50, **QUIET)["states"]
    assert one.shape == (51, 72, 1) and torch.isfinite(one).all()
    results = run_distributed(_rollouts, 4, args=(case["ckpt"], case["pvd"], case["tmp"]), timeout=280)
    for size in (2, 3, 4):
        assert all(results[r][size] is None for r in range(1, size))  # rank 0 gathers
        diff = (results[0][size] - one).abs().max().item()
        assert diff <= 1e-10 * one.abs().max().item(), (size, diff)
    written = ms.read_trajectory(case["tmp"] / "r3" / "heat.pvd")
    np.testing.assert_array_equal(written.fields["temperature_pred"], results[0][3].numpy())


def _cli(rank, world, ckpt, pvd, out):
    return main(["rollout", "--checkpoint", str(ckpt), str(pvd), "-o", str(out), "--steps", "3", "-q"])


@pytest.mark.timeout(200)
def test_command_under_a_process_group(case):
    """The command as torchrun starts it (every rank runs it; rank 0 writes)."""
    assert run_distributed(_cli, 2, args=(case["ckpt"], case["pvd"], case["tmp"] / "cli2"), timeout=180) == [0, 0]
    got = ms.read_trajectory(case["tmp"] / "cli2" / "heat.pvd")
    assert got.num_steps == 4 and "temperature_pred" in got.fields


def test_bad_inputs(case, tmp_path, data_dir):
    from meshshard._fileutil import atomic_torch_save
    from meshshard.datasets import MeshDataset
    from meshshard.models import MeshGraphNet, training_checkpoint

    with pytest.raises(ValueError, match=r"--steps 60: from step 0 the trajectory has 59 steps left"):
        rollout(case["ckpt"], case["pvd"], tmp_path / "a", steps=60, **QUIET)
    with pytest.raises(ValueError, match=r"--start 59 is outside the trajectory's steps 0..58"):
        rollout(case["ckpt"], case["pvd"], tmp_path / "a", start=59, **QUIET)
    other = write_diffusion_pvd(tmp_path / "other", steps=3)
    text = other.read_text()
    for k in range(3):  # the same case with the state field renamed
        import meshio

        m = meshio.read(other.parent / f"heat_{k:03d}.vtu")
        m.point_data["heat"] = m.point_data.pop("temperature")
        meshio.write(other.parent / f"heat_{k:03d}.vtu", m)
    assert text == other.read_text()
    with pytest.raises(ValueError, match=r"missing field 'temperature' \(state\)"):
        rollout(case["ckpt"], other, tmp_path / "b", **QUIET)
    ds = MeshDataset([data_dir / "naca0012_inviscid.su2"], ["pos"], ["pos[1]"])
    steady = tmp_path / "steady.pt"
    atomic_torch_save(training_checkpoint(MeshGraphNet(ds.num_node_features, 3, 1, hidden=4, num_layers=1), ds), steady)
    with pytest.raises(ValueError, match="is a steady model's checkpoint"):
        rollout(steady, case["pvd"], tmp_path / "c", **QUIET)
    from meshshard.cli.predict import predict

    with pytest.raises(ValueError, match="is a learned simulator's checkpoint"):
        predict(case["ckpt"], [data_dir / "naca0012_inviscid.su2"], tmp_path / "d", **QUIET)
