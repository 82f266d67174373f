"""write_trajectory: a Trajectory as a .pvd of .vtu steps that read_trajectory reads back unchanged."""
import numpy as np
import pytest

from meshshard.io import Trajectory, read_trajectory, write_trajectory


def _trajectory(steps=3):
    pts = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    tri = np.array([[0, 1, 2], [1, 3, 2]])
    rng = np.random.default_rng(0)
    fields = {"u": rng.normal(size=(steps, 4, 3)), "p": rng.normal(size=(steps, 4))}
    return Trajectory(pts, {"triangle": tri}, fields=fields, static={"node_type": np.array([1, 0, 0, 1])}, times=[0.0, 0.25, 1.5][:steps], name="t")


def test_round_trip_keeps_fields_static_fields_and_times(tmp_path):
    traj = _trajectory()
    pvd = write_trajectory(traj, tmp_path / "my case.pvd")
    assert pvd == tmp_path / "my case.pvd"
    assert sorted(p.name for p in (tmp_path / "my_case").iterdir()) == [f"my_case_{k:04d}.vtu" for k in range(3)]
    back = read_trajectory(pvd)
    assert back.times.tolist() == [0.0, 0.25, 1.5] and back.num_steps == 3
    assert np.array_equal(back.fields["u"], traj.fields["u"]) and np.array_equal(back.fields["p"], traj.fields["p"])
    assert np.array_equal(back.static["node_type"], traj.static["node_type"])
    assert np.array_equal(back.cells["triangle"], traj.cells["triangle"])
    assert not [p for p in tmp_path.rglob(".*")]  # no temporary file left


def test_refuses_a_path_that_is_no_collection(tmp_path):
    with pytest.raises(ValueError, match=r"must end in \.pvd"):
        write_trajectory(_trajectory(), tmp_path / "case.vtu")
    assert not list(tmp_path.iterdir())
