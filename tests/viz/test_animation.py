"""Animations of a time series: one frame per step, colour limits fixed over all frames, a GIF that
PIL reads back with its frame count, .pvtu steps, 3D surfaces, and one clear error for a bad field."""
import numpy as np
import pytest
from PIL import Image

from meshshard.datasets.synthetic import jittered_grid_mesh
from meshshard.io import Mesh, Trajectory, write_trajectory
from meshshard.viz import animate_field, animate_field_comparison, read_frames


def _rollout_like(mesh, steps=5, width=2, seed=0):
    """A trajectory holding f, f_pred and f_error (as meshshard rollout writes them), whose ranges
    differ from frame to frame (so per-frame limits would differ from the fixed ones)."""
    rng = np.random.default_rng(seed)
    n = mesh.num_nodes
    truth = np.stack([np.sin(3 * mesh.points[:, :1] + k) * (1 + k) + rng.normal(0, 0.1, (n, width))
                      for k in range(steps)])
    pred = truth + rng.normal(0, 0.05, truth.shape) * np.arange(1, steps + 1)[:, None, None]
    return Trajectory(mesh.points, mesh.cells, fields={"f": truth, "f_pred": pred, "f_error": pred - truth},
                      times=0.5 * np.arange(steps), name="roll")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("anim")
    traj = _rollout_like(jittered_grid_mesh(150, seed=0), steps=5)
    return traj, write_trajectory(traj, tmp / "roll.pvd")


def test_comparison_has_a_frame_per_step_and_limits_fixed_over_all_frames(case, tmp_path):
    traj, pvd = case
    gif = tmp_path / "roll.gif"
    anim = animate_field_comparison(pvd, "f", gif, dpi=30, progress=False)
    assert anim.num_frames == 5 and anim.frames_written == 5 and np.allclose(anim.times, traj.times)
    mag = {k: np.linalg.norm(traj.fields[k], axis=2) for k in ("f", "f_pred", "f_error")}
    lo, hi = min(mag["f"].min(), mag["f_pred"].min()), max(mag["f"].max(), mag["f_pred"].max())
    m = mag["f_error"].max()
    assert anim.limits[0] == anim.limits[1] == pytest.approx((lo, hi), rel=1e-12)
    assert anim.limits[2] == pytest.approx((-m, m), rel=1e-12)
    per_frame = [(mag["f"][k].min(), mag["f"][k].max()) for k in range(5)]
    assert len(set(per_frame)) == 5  # each frame alone would have had other limits
    for k in range(5):
        anim.draw(k)
        assert np.allclose([a.get_clim() for a in anim.mappables], anim.limits, rtol=1e-12, atol=0)
        assert np.allclose(anim.mappables[0].get_array(), mag["f"][k])  # the panel shows frame k
        assert np.allclose(anim.mappables[2].get_array(), mag["f_error"][k])
    with Image.open(gif) as im:
        assert im.n_frames == 5 and im.format == "GIF"
        sizes = set()
        for k in range(im.n_frames):
            im.seek(k)
            sizes.add(im.size)
        assert len(sizes) == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_every_keeps_the_last_frame_and_a_single_field_animates(case, tmp_path):
    traj, pvd = case
    gif = tmp_path / "every.gif"
    anim = animate_field(pvd, "f[0]", gif, every=3, dpi=30, progress=False)
    assert anim.frames_written == 3 and len(anim.limits) == 1  # frames 0 and 3, then the last (4)
    anim = animate_field(traj, "f[0]", gif, every=4, dpi=30, progress=False)
    assert anim.frames_written == 2  # frames 0 and 4, the last
    with Image.open(gif) as im:
        assert im.n_frames == 2
    col = traj.fields["f"][:, :, 0]
    assert anim.limits[0] == pytest.approx((col.min(), col.max()), rel=1e-12)


def test_a_bad_field_is_one_clear_error(case, tmp_path):
    _, pvd = case
    gif = tmp_path / "bad.gif"
    with pytest.raises(ValueError, match=r"frame 0 .*'pressure' not found.*\['f', 'f_error', 'f_pred'"):
        animate_field_comparison(pvd, "pressure", gif, progress=False)
    with pytest.raises(ValueError, match=r"an animation is written as \.gif or \.mp4"):
        animate_field_comparison(pvd, "f", tmp_path / "x.png", progress=False)
    assert not gif.exists()


def test_mp4_without_ffmpeg_names_the_fix(case, tmp_path, monkeypatch):
    from matplotlib import animation

    monkeypatch.setattr(animation.writers, "is_available", lambda name: False)
    with pytest.raises(ValueError, match="needs ffmpeg on the PATH.*install it"):
        animate_field_comparison(case[1], "f", tmp_path / "r.mp4", progress=False)


def test_pvtu_steps_and_a_3d_surface(tmp_path):
    import vtk  # the [vtk] extra reads .pvtu: installed in CI, missing means fail

    from vtkmodules.vtkFiltersParallel import vtkExtractUnstructuredGridPiece

    from tests.datasets.test_synthetic import _hex_cube

    traj = _rollout_like(_hex_cube(4), steps=3, width=3)
    vtus = write_trajectory(traj, tmp_path / "vtu" / "cube.pvd").parent / "cube"
    rows = []
    for k in range(3):  # each step as a .pvtu of two pieces, written by vtk
        reader = vtk.vtkXMLUnstructuredGridReader()
        reader.SetFileName(str(vtus / f"cube_{k:04d}.vtu"))
        split = vtkExtractUnstructuredGridPiece()
        split.SetInputConnection(reader.GetOutputPort())
        w = vtk.vtkXMLPUnstructuredGridWriter()
        w.SetFileName(str(tmp_path / f"cube_{k}.pvtu"))
        w.SetInputConnection(split.GetOutputPort())
        w.SetNumberOfPieces(2)
        w.SetStartPiece(0)
        w.SetEndPiece(1)
        assert w.Write() == 1
        rows.append(f'<DataSet timestep="{k}" part="0" file="cube_{k}.pvtu"/>')
    pvd = tmp_path / "cube.pvd"
    pvd.write_text('<?xml version="1.0"?><VTKFile type="Collection" version="0.1"><Collection>'
                   + "".join(rows) + "</Collection></VTKFile>")
    meshes, times = read_frames(pvd)
    assert len(meshes) == 3 and meshes[0].num_nodes == 64 and list(times) == [0.0, 1.0, 2.0]
    gif = tmp_path / "cube.gif"
    anim = animate_field_comparison(pvd, "f", gif, dpi=30, progress=False)
    err = np.linalg.norm(traj.fields["f_error"], axis=2).max()
    assert anim.limits[2] == pytest.approx((-err, err), rel=1e-12)
    with Image.open(gif) as im:
        assert im.n_frames == 3


def test_frames_given_as_meshes_must_share_one_mesh():
    a = jittered_grid_mesh(50, seed=0)
    b = jittered_grid_mesh(80, seed=0)
    with pytest.raises(ValueError, match="share one mesh: frame 1"):
        read_frames([a, b])
    with pytest.raises(ValueError, match="at least one frame"):
        read_frames([])
    meshes, times = read_frames([a, a])
    assert len(meshes) == 2 and list(times) == [0.0, 1.0] and isinstance(meshes[0], Mesh)
