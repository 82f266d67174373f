"""`meshshard rollout`: the files it writes (a .pvd of step files with <field>_pred and
<field>_error, the error plot), Dirichlet boundaries from the truth, the RMSE it prints, rollouts at
2, 3 and 4 ranks equal to one process over 50 steps (float64, 1e-10), their .pvtu steps written piece
by piece (one .vtu per rank) equal to the one-process files when read back merged, and bad inputs."""
import numpy as np
import pytest
import torch

import meshshard as ms
from meshshard.cli import main
from meshshard.models import rollout_to_files as rollout
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

    got = {}
    for size in (2, 3, 4):
        group = new_group(list(range(size)))  # every rank takes part in making it
        if rank < size:
            res = rollout(ckpt, pvd, out / f"r{size}", start=4, steps=50, method="kdtree", group=group, **QUIET)
            got[size] = (res["states"], res["node_ids"], res["rmse"])
    return got


def _by_coordinates(traj):
    """The node order that sorts a trajectory's points (pieces read back merged number them otherwise)."""
    return np.lexsort(traj.points.T[::-1])


def assert_same_files(pvd, ref_pvd):
    """A rollout's files read back merged equal the one-process files: the same nodes (matched by their
    coordinates), cells and times, and every field to float64 1e-10."""
    got, ref = ms.read_trajectory(pvd), ms.read_trajectory(ref_pvd)
    assert got.num_steps == ref.num_steps and np.array_equal(got.times, ref.times)
    g, r = _by_coordinates(got), _by_coordinates(ref)
    np.testing.assert_array_equal(got.points[g], ref.points[r])
    assert sorted(got.fields) == sorted(ref.fields) and sorted(got.static) == sorted(ref.static)
    for name, values in ref.fields.items():
        np.testing.assert_allclose(got.fields[name][:, g], values[:, r], rtol=0,
                                   atol=1e-10 * max(np.abs(values).max(), 1.0), err_msg=name)
    for name, values in ref.static.items():
        np.testing.assert_array_equal(got.static[name][g], values[r], err_msg=name)
    to_ref = np.empty(len(g), dtype=np.int64)
    to_ref[g] = r  # a merged node's index in the reference
    assert sorted(got.cells) == sorted(ref.cells)
    for t, cells in ref.cells.items():
        mapped = np.sort(to_ref[got.cells[t]], axis=1)
        assert sorted(map(tuple, mapped)) == sorted(map(tuple, np.sort(cells, axis=1))), t


@pytest.mark.timeout(400)
def test_sharded_rollouts_equal_one_process_over_50_steps(case):
    """The states stay on their ranks (each returns its owned rows) and every rank writes its piece of
    every step: the .pvtu steps read back merged equal the one-process files."""
    ref = rollout(case["ckpt"], case["pvd"], case["tmp"] / "ref", start=4, steps=50, **QUIET)
    one = ref["states"]
    assert one.shape == (51, 72, 1) and torch.isfinite(one).all()
    assert torch.equal(ref["node_ids"], torch.arange(72))
    results = run_distributed(_rollouts, 4, args=(case["ckpt"], case["pvd"], case["tmp"]), timeout=380)
    for size in (2, 3, 4):
        ids = torch.cat([results[r][size][1] for r in range(size)])
        assert sorted(ids.tolist()) == list(range(72))  # the ranks own every node once
        for r in range(size):
            states, owned, rmse = results[r][size]
            assert 0 < len(owned) < 72 and states.shape == (51, len(owned), 1)
            diff = (states - one[:, owned]).abs().max().item()
            assert diff <= 1e-10 * one.abs().max().item(), (size, r, diff)
            np.testing.assert_allclose(rmse["temperature"], ref["rmse"]["temperature"], rtol=1e-10, atol=1e-14)
        out = case["tmp"] / f"r{size}"
        assert_same_files(out / "heat.pvd", case["tmp"] / "ref" / "heat.pvd")
        frames = out / "heat"
        assert sorted(p.name for p in frames.glob("*.pvtu")) == [f"heat_{k:04d}.pvtu" for k in range(51)]
        pieces = sorted(p.name for p in (frames / "heat_0050").iterdir())
        assert pieces == [f"heat_0050_{r:04d}.vtu" for r in range(size)]
        for piece in pieces:  # no rank wrote the whole mesh
            assert ms.read_mesh(frames / "heat_0050" / piece).num_nodes < 72
        assert (out / "heat_rollout_error.png").stat().st_size > 1000


def _cli(rank, world, ckpt, pvd, out):
    return main(["rollout", "--checkpoint", str(ckpt), str(pvd), "-o", str(out), "--steps", "20", "-q"])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [2, 3])
def test_command_under_a_process_group_writes_pieces(case, world, capsys):
    """The command as torchrun starts it (every rank runs it and writes its pieces): the collection read
    back merged equals one process over 20 steps, and `meshshard plot --animate` draws it."""
    one = case["tmp"] / "cli1"
    if not (one / "heat.pvd").is_file():
        assert main(["rollout", "--checkpoint", str(case["ckpt"]), str(case["pvd"]), "-o", str(one), "--steps", "20",
                     "-q"]) == 0
    out = case["tmp"] / f"cli{world}"
    assert run_distributed(_cli, world, args=(case["ckpt"], case["pvd"], out), timeout=280) == [0] * world
    assert_same_files(out / "heat.pvd", one / "heat.pvd")
    assert ms.read_trajectory(out / "heat.pvd").num_steps == 21
    from meshshard.io.pvtu_meshio import read_pvtu_meshio

    last, merged = ms.read_mesh(out / "heat" / "heat_0020.pvtu"), read_pvtu_meshio(out / "heat" / "heat_0020.pvtu")
    np.testing.assert_array_equal(merged.points, last.points)  # readable without the vtk package too
    np.testing.assert_array_equal(merged.point_data["temperature_pred"], last.point_data["temperature_pred"])
    gif = out / "rollout.gif"
    capsys.readouterr()
    assert main(["plot", str(out / "heat.pvd"), "--compare", "temperature", "--animate", "-o", str(gif), "--dpi", "30",
                 "-q"]) == 0, capsys.readouterr()
    assert gif.stat().st_size > 1000


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
