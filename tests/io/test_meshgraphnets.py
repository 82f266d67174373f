"""The MeshGraphNets layout (meta.json + <split>.tfrecord) read without TensorFlow, on datasets the
tests write following the format."""
import json

import numpy as np
import pytest

import meshshard as ms
from meshshard.io import (MESHGRAPHNETS_NODE_TYPES, TFRecordError, count_meshgraphnets, iter_meshgraphnets,
                          read_meshgraphnets, read_meshgraphnets_meta)
from tests.io._tfrecord_files import encode_example, write_mgn_dataset, write_tfrecord

T = 5
META = {
    "simulator": "comsol", "dt": 0.01, "collision_radius": None,
    "field_names": ["cells", "mesh_pos", "node_type", "velocity", "pressure"],
    "features": {
        "cells": {"type": "static", "shape": [1, -1, 3], "dtype": "int32"},
        "mesh_pos": {"type": "static", "shape": [1, -1, 2], "dtype": "float32"},
        "node_type": {"type": "static", "shape": [1, -1, 1], "dtype": "int32"},
        "velocity": {"type": "dynamic", "shape": [T, -1, 2], "dtype": "float32"},
        "pressure": {"type": "dynamic", "shape": [T, -1, 1], "dtype": "float32"},
    },
    "trajectory_length": T,
}


def _grid_case(nx, seed):
    """A strip of nx x 2 nodes in triangles, with MeshGraphNets' node type codes and random states."""
    x, y = np.meshgrid(np.arange(nx, dtype=np.float32), np.arange(2, dtype=np.float32))
    pos = np.c_[x.ravel(), y.ravel()]
    n = len(pos)
    cells = np.array([[i, i + 1, nx + i] for i in range(nx - 1)] + [[i + 1, nx + i + 1, nx + i] for i in range(nx - 1)],
                     dtype=np.int32)
    node_type = np.full(n, MESHGRAPHNETS_NODE_TYPES["normal"], dtype=np.int32)
    node_type[x.ravel() == 0] = MESHGRAPHNETS_NODE_TYPES["inflow"]
    node_type[x.ravel() == nx - 1] = MESHGRAPHNETS_NODE_TYPES["outflow"]
    rng = np.random.default_rng(seed)
    return {"cells": cells[None], "mesh_pos": pos[None], "node_type": node_type[None, :, None],
            "velocity": rng.standard_normal((T, n, 2)).astype(np.float32),
            "pressure": rng.standard_normal((T, n, 1)).astype(np.float32)}


@pytest.fixture
def dataset(tmp_path):
    cases = [_grid_case(nx, seed) for seed, nx in enumerate([4, 6, 5])]  # every trajectory its own mesh
    write_mgn_dataset(tmp_path / "cylinder_flow", cases, META, split="train")
    write_mgn_dataset(tmp_path / "cylinder_flow", cases[:1], META, split="valid")
    return tmp_path / "cylinder_flow", cases


def _check(traj, case):
    np.testing.assert_array_equal(traj.points, case["mesh_pos"][0].astype(np.float64))
    np.testing.assert_array_equal(traj.cells["triangle"], case["cells"][0])
    assert traj.static["node_type"].dtype == np.int32
    np.testing.assert_array_equal(traj.static["node_type"], case["node_type"][0])
    for key in ("velocity", "pressure"):
        assert traj.fields[key].dtype == np.float32
        np.testing.assert_array_equal(traj.fields[key], case[key])
    np.testing.assert_allclose(traj.times, 0.01 * np.arange(T), rtol=0, atol=1e-15)


def test_round_trip_every_trajectory(dataset):
    folder, cases = dataset
    assert count_meshgraphnets(folder) == 3 and count_meshgraphnets(folder, "valid") == 1
    for i, case in enumerate(cases):
        traj = ms.read_trajectory(folder, index=i)
        _check(traj, case)
        assert traj.name == f"train_{i}" and traj.num_nodes == case["mesh_pos"].shape[1]
    _check(read_meshgraphnets(folder, index=-1), cases[-1])
    trajs = list(iter_meshgraphnets(folder))
    assert len(trajs) == 3
    for traj, case in zip(trajs, cases):
        _check(traj, case)
    assert len(list(ms.io.iter_trajectories(folder, split="valid"))) == 1
    # a .tfrecord file path reads with the meta.json beside it
    _check(ms.read_trajectory(folder / "valid.tfrecord"), cases[0])
    assert ms.read_trajectory(folder / "valid.tfrecord").name == "valid_0"
    # node types by name
    nt = trajs[0].static["node_type"][:, 0]
    assert (nt == MESHGRAPHNETS_NODE_TYPES["inflow"]).sum() == 2 and (nt == 5).sum() == 2


def test_field_selection_and_graph(dataset):
    folder, cases = dataset
    traj = read_meshgraphnets(folder, fields=["velocity"])
    assert list(traj.fields) == ["velocity"] and traj.static == {}
    assert traj.edge_index().shape[1] == 2 * (3 + 3 + 4 + 3)  # 4 x 2 strip: rows, rungs, diagonals
    with pytest.raises(ValueError, match=r"fields \['temperature'\] are not in meta.json"):
        read_meshgraphnets(folder, fields=["temperature"])
    with pytest.raises(IndexError, match="trajectory 3 out of range: the file holds 3"):
        read_meshgraphnets(folder, index=3)
    with pytest.raises(FileNotFoundError, match=r"no split 'test' \(test.tfrecord\); splits: \['train', 'valid'\]"):
        read_meshgraphnets(folder, split="test")
    with pytest.raises(ValueError, match="static= does not apply"):
        ms.read_trajectory(folder, static=["node_type"])


def test_corrupted_record_raises(dataset):
    folder, _ = dataset
    path = folder / "train.tfrecord"
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # inside record 0's data
    path.write_bytes(bytes(data))
    with pytest.raises(TFRecordError, match="CRC of its .* data bytes does not match"):
        ms.read_trajectory(folder)
    assert ms.read_trajectory(folder, index=1).num_steps == T  # the index reads only the framing headers


def test_record_missing_a_field(tmp_path):
    case = _grid_case(4, 0)
    del case["pressure"]
    write_mgn_dataset(tmp_path, [case], META)
    with pytest.raises(ValueError, match=r"record 0: field 'pressure' \(in meta.json\) is missing from the record"):
        ms.read_trajectory(tmp_path)


def test_field_of_the_wrong_size(tmp_path):
    case = _grid_case(4, 0)
    case["velocity"] = case["velocity"][:, :-1]  # one node short: its N differs from mesh_pos's
    write_mgn_dataset(tmp_path, [case], META)
    with pytest.raises(ValueError, match=r"field 'velocity' must have shape \[T=5, N=8, F\]"):
        ms.read_trajectory(tmp_path)
    case["velocity"] = np.zeros(7, np.float32)  # 7 values: not a whole number of [T, -1, 2]
    write_mgn_dataset(tmp_path, [case], META)
    with pytest.raises(ValueError, match=r"field 'velocity' has 7 values, which do not fit meta.json's shape"):
        ms.read_trajectory(tmp_path)
    write_tfrecord(tmp_path / "train.tfrecord", [encode_example({"mesh_pos": np.zeros(4, np.float32)})])
    with pytest.raises(ValueError, match="field 'mesh_pos' must be a bytes list"):
        ms.read_trajectory(tmp_path)


def _meta(tmp_path, **change):
    meta = json.loads(json.dumps(META))
    for key, value in change.items():
        if key in meta["features"]:
            meta["features"][key] = value
        else:
            meta[key] = value
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    return tmp_path / "meta.json"


@pytest.mark.parametrize("change,match", [
    (dict(velocity={"type": "dynamic_varlen", "shape": [-1, 2], "dtype": "float32"}),
     "'dynamic_varlen': this dataset is remeshed, the steps have different meshes"),
    (dict(velocity={"type": "sometimes", "shape": [T, -1, 2], "dtype": "float32"}), "has type 'sometimes'"),
    (dict(velocity={"type": "dynamic", "shape": [T, -1, -1], "dtype": "float32"}), "at most one -1"),
    (dict(velocity={"type": "dynamic", "shape": [T, -1, 2], "dtype": "complex-ish"}), "unknown dtype"),
    (dict(velocity={"type": "dynamic"}), "needs 'type', 'shape' and 'dtype'"),
    (dict(trajectory_length=0), "'trajectory_length' must be a positive integer"),
    (dict(dt=-1.0), "'dt' must be a positive number"),
    (dict(field_names=["velocity", "vorticity"]), r"field_names \['vorticity'\] have no entry"),
])
def test_bad_meta_raises(tmp_path, change, match):
    with pytest.raises(ValueError, match=match):
        read_meshgraphnets_meta(_meta(tmp_path, **change))


def test_meta_without_positions_or_features(tmp_path):
    meta = json.loads(json.dumps(META))
    del meta["features"]["mesh_pos"]
    meta["field_names"].remove("mesh_pos")
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="no 'mesh_pos' feature"):
        read_meshgraphnets_meta(tmp_path / "meta.json")
    (tmp_path / "meta.json").write_text(json.dumps({"bounds": [[0, 1]], "sequence_length": 320, "dim": 2}))
    with pytest.raises(ValueError, match="Learning-to-Simulate particle format"):
        read_meshgraphnets_meta(tmp_path / "meta.json")
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON file"):
        read_meshgraphnets_meta(tmp_path / "meta.json")


def test_single_step_and_missing_meta(tmp_path):
    meta = json.loads(json.dumps(META))
    meta["trajectory_length"] = 1
    for key in ("velocity", "pressure"):
        meta["features"][key]["shape"][0] = 1
    case = _grid_case(4, 0)
    case["velocity"], case["pressure"] = case["velocity"][:1], case["pressure"][:1]
    write_mgn_dataset(tmp_path / "one", [case], meta)
    with pytest.raises(ValueError, match="at least 2 time steps, got 1"):
        ms.read_trajectory(tmp_path / "one")
    write_tfrecord(tmp_path / "lonely.tfrecord", [])
    with pytest.raises(FileNotFoundError, match="no meta.json beside"):
        ms.read_trajectory(tmp_path / "lonely.tfrecord")


def test_3d_tetra_dataset_with_a_dynamic_position(tmp_path):
    # the deforming-plate shape: 3D mesh_pos, tetrahedra, world_pos per step, float64 stress
    meta = {"field_names": ["cells", "mesh_pos", "node_type", "world_pos", "stress"], "trajectory_length": 3,
            "features": {"cells": {"type": "static", "shape": [1, -1, 4], "dtype": "int32"},
                         "mesh_pos": {"type": "static", "shape": [1, -1, 3], "dtype": "float32"},
                         "node_type": {"type": "static", "shape": [1, -1, 1], "dtype": "int32"},
                         "world_pos": {"type": "dynamic", "shape": [3, -1, 3], "dtype": "float32"},
                         "stress": {"type": "dynamic", "shape": [3, -1, 1], "dtype": "float64"}}}
    pos = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 1]], dtype=np.float32)
    case = {"cells": np.array([[[0, 1, 2, 3], [1, 2, 3, 4]]], dtype=np.int32), "mesh_pos": pos[None],
            "node_type": np.array([0, 0, 3, 3, 0], dtype=np.int32)[None, :, None],
            "world_pos": np.stack([pos + 0.1 * k for k in range(3)]),
            "stress": np.arange(15, dtype=np.float64).reshape(3, 5, 1) / 7}
    write_mgn_dataset(tmp_path, [case], meta)
    traj = ms.read_trajectory(tmp_path)
    assert set(traj.cells) == {"tetra"} and traj.dim == 3 and traj.num_steps == 3
    np.testing.assert_array_equal(traj.fields["world_pos"], case["world_pos"])
    assert traj.fields["stress"].dtype == np.float64
    np.testing.assert_array_equal(traj.fields["stress"], case["stress"])
    np.testing.assert_array_equal(traj.times, [0.0, 1.0, 2.0])  # no dt: step numbers
