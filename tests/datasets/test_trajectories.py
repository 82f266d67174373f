"""preprocess_trajectories: trajectories in K parts, each rank reading only its rows; statistics of
states and increments over every step; resumable, atomic."""
import json

import numpy as np
import pytest
import torch

import meshshard as ms
from meshshard.datasets import load_trajectory_part, preprocess_trajectories, read_trajectory_dataset_meta
from tests.io._tfrecord_files import write_mgn_dataset
from tests.io.test_meshgraphnets import META, T, _grid_case


@pytest.fixture
def mgn(tmp_path):
    cases = [_grid_case(nx, seed) for seed, nx in enumerate([7, 9])]
    write_mgn_dataset(tmp_path / "mgn", cases, META)
    return tmp_path / "mgn", cases


@pytest.mark.parametrize("k", [1, 2, 3])
def test_parts_hold_the_rows_of_each_rank(mgn, tmp_path, k):
    folder, cases = mgn
    out = tmp_path / "out"
    res = preprocess_trajectories(folder, out, k, state=["velocity", "pressure"], features=["pos"],
                                  node_type="node_type", dtype="float64", method="graph")
    assert res.written == ["00000_train_0", "00001_train_1"] and res.skipped == []
    meta = read_trajectory_dataset_meta(out)
    assert meta["state_columns"] == ["velocity[0]", "velocity[1]", "pressure"]
    assert meta["feature_columns"] == ["pos[0]", "pos[1]"]
    for s, case in enumerate(cases):
        truth = np.concatenate([case["velocity"], case["pressure"]], axis=2).astype(np.float64)  # [T, N, 3]
        n = truth.shape[1]
        owned = []
        for r in range(k):
            part = load_trajectory_part(out, s, r)
            ids = torch.cat([part["owned_ids"], part["ghost_ids"]]).numpy()
            assert part["state"].shape == (T, len(ids), 3) and part["state"].dtype == torch.float64
            np.testing.assert_array_equal(part["state"].numpy(), truth[:, ids])
            np.testing.assert_array_equal(part["pos"].numpy(), case["mesh_pos"][0][ids])
            np.testing.assert_array_equal(part["features"].numpy(), case["mesh_pos"][0][ids])
            np.testing.assert_array_equal(part["node_type"].numpy(), case["node_type"][0, ids, 0])
            assert part["edge_attr"].shape == (part["edge_index"].shape[1], 3)
            np.testing.assert_allclose(part["times"].numpy(), 0.01 * np.arange(T), rtol=0, atol=1e-15)
            owned.append(part["owned_ids"].numpy())
        assert sorted(np.concatenate(owned).tolist()) == list(range(n))  # every node owned once


def test_statistics_over_every_step(mgn, tmp_path):
    folder, cases = mgn
    res = preprocess_trajectories(folder, tmp_path / "out", 2, state=["velocity"], dtype="float32")
    states = [c["velocity"].astype(np.float64) for c in cases]  # [T, N, 2] each
    all_states = np.concatenate([s.reshape(-1, 2) for s in states])
    all_incr = np.concatenate([(s[1:] - s[:-1]).reshape(-1, 2) for s in states])
    for key, ref in (("state", all_states), ("increment", all_incr)):
        st = res.stats[key]
        assert st.count == len(ref)
        np.testing.assert_allclose(st.mean.numpy(), ref.mean(axis=0), rtol=0, atol=1e-12)
        np.testing.assert_allclose(st.std.numpy(), ref.std(axis=0), rtol=1e-12, atol=0)
    meta = json.loads((tmp_path / "out" / "meta.json").read_text())
    assert meta["stats"]["increment"]["mean"] == res.stats["increment"].mean.tolist()
    assert res.stats["features"].count == sum(c["mesh_pos"].shape[1] for c in cases)  # no columns, every node


def test_rerun_skips_and_changed_settings_rewrite(mgn, tmp_path):
    folder, _ = mgn
    out = tmp_path / "out"
    first = preprocess_trajectories(folder, out, 2, state=["velocity"])
    again = preprocess_trajectories(folder, out, 2, state=["velocity"])
    assert again.written == [] and again.skipped == first.written
    other = preprocess_trajectories(folder, out, 3, state=["velocity"])
    assert other.written == first.written
    assert read_trajectory_dataset_meta(out)["num_parts"] == 3


def test_pvd_input(tmp_path):
    from tests.io.test_read_trajectory import _write_pvd, _write_step

    for k in range(3):
        _write_step(tmp_path / f"c_{k}.vtu", k)
    _write_pvd(tmp_path / "c.pvd", [(float(k), f"c_{k}.vtu", 0) for k in range(3)])
    res = preprocess_trajectories(tmp_path / "c.pvd", tmp_path / "out", 2, state=["velocity"],
                                  features=["node_type"], node_type="node_type")
    assert res.written == ["00000_c"]
    traj = ms.read_trajectory(tmp_path / "c.pvd")
    part = load_trajectory_part(tmp_path / "out", 0, 1)
    ids = torch.cat([part["owned_ids"], part["ghost_ids"]]).numpy()
    np.testing.assert_allclose(part["state"].numpy(), traj.fields["velocity"][:, ids], rtol=1e-7)


def test_errors(mgn, tmp_path):
    folder, _ = mgn
    with pytest.raises(ValueError, match=r"missing field 'vorticity' \(state\)"):
        preprocess_trajectories(folder, tmp_path / "a", 2, state=["vorticity"])
    with pytest.raises(ValueError, match="feature 'velocity' changes over the steps"):
        preprocess_trajectories(folder, tmp_path / "b", 2, state=["pressure"], features=["velocity"])
    with pytest.raises(ValueError, match="node type field 'pressure' changes over the steps"):
        preprocess_trajectories(folder, tmp_path / "c", 2, state=["velocity"], node_type="pressure")
    with pytest.raises(ValueError, match="state must name at least one field"):
        preprocess_trajectories(folder, tmp_path / "d", 2, state=[])
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"holds files that are not part of .* \(notes.txt\)"):
        preprocess_trajectories(folder, busy, 2, state=["velocity"])
    with pytest.raises(FileNotFoundError, match="not a trajectory dataset"):
        read_trajectory_dataset_meta(tmp_path / "a")


def test_a_failed_run_leaves_no_dataset_meta(mgn, tmp_path):
    folder, cases = mgn
    out = tmp_path / "out"
    preprocess_trajectories(folder, out, 2, state=["velocity"])
    bad = dict(cases[1])
    del bad["pressure"]  # the second trajectory lacks a field the first has
    write_mgn_dataset(folder, [cases[0], bad], META)
    with pytest.raises(ValueError, match="'pressure'"):
        preprocess_trajectories(folder, out, 2, state=["velocity", "pressure"])
    assert not (out / "meta.json").exists()  # no meta.json vouches for a partial dataset
    assert sorted(p.name for p in out.iterdir()) == ["00000_train_0", "00001_train_1"]  # no temporaries
    with pytest.raises(FileNotFoundError, match="did not finish"):
        load_trajectory_part(out, 0, 0)


def test_point_cloud_steps_get_a_knn_graph(tmp_path):
    rng = np.random.default_rng(0)
    pts = rng.random((40, 3))
    vel = rng.standard_normal((3, 40, 3))
    steps = tmp_path / "steps"
    steps.mkdir()
    for k in range(3):
        np.savez(steps / f"step_{k}.npz", points=pts, velocity=vel[k])
    preprocess_trajectories(steps, tmp_path / "out", 2, state=["velocity"], dtype="float64")
    part = load_trajectory_part(tmp_path / "out", 0, 0)
    ids = torch.cat([part["owned_ids"], part["ghost_ids"]]).numpy()
    np.testing.assert_array_equal(part["state"].numpy(), vel[:, ids])
    assert read_trajectory_dataset_meta(tmp_path / "out")["samples"][0]["num_nodes"] == 40
    assert json.loads((tmp_path / "out" / "00000_steps" / "meta.json").read_text())["num_edges"] == 40 * 8


def test_whole_trajectory_from_its_parts_and_node_type_codes(mgn, tmp_path):
    from meshshard.datasets import load_trajectory_whole

    folder, cases = mgn
    out = tmp_path / "out"
    preprocess_trajectories(folder, out, 3, state=["velocity"], features=["pos"], node_type="node_type",
                            dtype="float64", method="graph")
    meta = read_trajectory_dataset_meta(out)
    codes = sorted(set(np.concatenate([c["node_type"][0, :, 0] for c in cases]).tolist()))
    assert meta["node_type_codes"] == codes and len(codes) > 1
    traj = next(iter(ms.io.iter_trajectories(folder)))
    whole = load_trajectory_whole(out, 0)
    np.testing.assert_array_equal(whole["state"].numpy(), cases[0]["velocity"])
    np.testing.assert_array_equal(whole["node_type"].numpy(), cases[0]["node_type"][0, :, 0])
    ref = traj.edge_index()
    got = whole["edge_index"]
    assert sorted(map(tuple, got.t().tolist())) == sorted(map(tuple, ref.t().tolist()))  # every edge once
    rel = whole["pos"][got[0]] - whole["pos"][got[1]]
    np.testing.assert_allclose(whole["edge_attr"][:, :2].numpy(), rel.numpy(), rtol=0, atol=1e-15)
