"""`meshshard rollout` on a .pvd of .pvtu steps under a process group: read piece-wise (no rank holds
the whole mesh), rolled out and written back piece by piece, equal to the one-process rollout of the
same trajectory (float64, 1e-10) at 2 and 3 ranks over 20 steps, with and without global point ids;
a step cut differently from the first is refused on every rank."""
import numpy as np
import pytest
import torch

import meshshard as ms
from meshshard.models import rollout_to_files as rollout
from meshshard.testing import run_distributed
from tests.cli.test_rollout import assert_same_files
from tests.datasets._diffusion_case import trained_checkpoint, write_diffusion_pvd
from tests.io._piece_files import write_split

QUIET = dict(progress=False, echo=lambda *a: None)


def write_pieces_pvd(pvd, out_pvd, fractions, ids: bool):
    """The trajectory ``pvd`` again, every step a .pvtu cut into ``len(fractions) + 1`` uneven pieces."""
    traj = ms.read_trajectory(pvd)
    (tri,) = traj.cells.values()
    rows = []
    for k in range(traj.num_steps):
        fields = {name: values[:, 0] for name, values in traj.step(k).point_data.items()}
        step = write_split(out_pvd.parent / f"{out_pvd.stem}_{k:03d}.pvtu", traj.points, tri, fields, {}, fractions,
                           ids=ids)
        rows.append(f'    <DataSet timestep="{float(traj.times[k])!r}" part="0" file="{step.name}"/>')
    out_pvd.write_text('<?xml version="1.0"?>\n<VTKFile type="Collection" version="0.1">\n  <Collection>\n'
                       + "\n".join(rows) + "\n  </Collection>\n</VTKFile>\n")
    return out_pvd


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rollout_pieces")
    pvd = write_diffusion_pvd(tmp / "case", steps=26)
    ckpt = trained_checkpoint(tmp, pvd)
    with_ids = write_pieces_pvd(pvd, tmp / "ids" / "heat.pvd", [0.2, 0.45, 0.8], ids=True)
    coords = write_pieces_pvd(pvd, tmp / "coords" / "heat.pvd", [0.35, 0.6, 0.7], ids=False)
    return dict(tmp=tmp, pvd=pvd, ckpt=ckpt, ids=with_ids, coords=coords)


def _rollout(rank, world, ckpt, pvd, out):
    lines = []
    res = rollout(ckpt, pvd, out, start=2, steps=20, group=None, progress=False, echo=lines.append)
    return res["states"], res["points"], res["node_ids"], lines


@pytest.mark.timeout(400)
@pytest.mark.parametrize("kind", ["ids", "coords"])
def test_piecewise_rollout_equals_one_process(case, kind):
    one = rollout(case["ckpt"], case["pvd"], case["tmp"] / "one", start=2, steps=20, **QUIET)
    key = {tuple(p): i for i, p in enumerate(one["points"].tolist())}
    for world in (2, 3):
        out = case["tmp"] / f"{kind}{world}"
        results = run_distributed(_rollout, world, args=(case["ckpt"], case[kind], out), timeout=180)
        assert "read piece-wise" in results[0][3][0], results[0][3][0]
        owned = 0
        for states, points, node_ids, _ in results:
            assert node_ids is None and 0 < len(points) < 72
            rows = [key[tuple(p)] for p in points.tolist()]  # the same nodes, matched by coordinates
            owned += len(rows)
            diff = (states - one["states"][:, rows]).abs().max().item()
            assert diff <= 1e-10 * one["states"].abs().max().item(), (world, diff)
        assert owned == 72
        assert_same_files(out / "heat.pvd", case["tmp"] / "one" / "heat.pvd")
        pieces = sorted((out / "heat" / "heat_0020").iterdir())
        assert len(pieces) == world and all(ms.read_mesh(p).num_nodes < 72 for p in pieces)


def _expect_error(rank, world, ckpt, pvd, out):
    try:
        rollout(ckpt, pvd, out, steps=2, **QUIET)
    except ValueError as exc:
        return str(exc)
    return None


@pytest.mark.timeout(200)
def test_a_step_cut_otherwise_is_refused_on_every_rank(case, tmp_path):
    import shutil

    bad = tmp_path / "bad" / "heat.pvd"
    shutil.copytree(case["ids"].parent, bad.parent)
    traj = ms.read_trajectory(case["pvd"])
    (tri,) = traj.cells.values()
    fields = {name: values[:, 0] for name, values in traj.step(1).point_data.items()}
    write_split(bad.parent / "heat_001.pvtu", traj.points, tri, fields, {}, [0.5, 0.6, 0.9], ids=True)
    errors = run_distributed(_expect_error, 2, args=(case["ckpt"], bad, tmp_path / "out"), timeout=180)
    assert all(e and "hold other points than those of step 0" in e for e in errors), errors


def test_fewer_pieces_than_ranks_reads_whole(case, tmp_path):
    """Two pieces on three ranks: rank 0 says so and every rank reads the whole trajectory."""
    two = write_pieces_pvd(case["pvd"], tmp_path / "two" / "heat.pvd", [0.5], ids=True)
    results = run_distributed(_rollout, 3, args=(case["ckpt"], two, tmp_path / "out"), timeout=180)
    assert "has 2 piece(s)" not in results[0][3][0]
    assert "fewer than the 3 ranks: every rank reads the whole trajectory" in results[0][3][0], results[0][3]
    assert all(r[2] is not None for r in results)  # partitioned from the whole mesh: node ids known
    assert torch.isfinite(results[0][0]).all() and np.isfinite(results[1][1].numpy()).all()
