"""`meshshard predict`: the VTU it writes (its writer, shared with `meshshard demo`), sharded == single
process (float64 1e-10) at 1-4 ranks for mesh files and preprocessed datasets, a checkpoint trained on
4 ranks predicted on 1, --amp bf16 within its documented tolerance, torchrun, atomic writes, and bad
inputs."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import meshio
import numpy as np
import pytest
import torch

from meshshard._fileutil import atomic_torch_save
from meshshard.cli import main
from meshshard.cli.predict import AMP_BF16_TOLERANCE, predict, write_prediction, write_vtu
from meshshard.datasets import MeshDataset, field_columns, preprocess_dataset, select_fields
from meshshard.models import MeshGraphNet, load_checkpoint, training_checkpoint
from meshshard.testing import run_distributed

ROOT = Path(__file__).resolve().parents[2]
CYL, NACA = "cylinder_crossflow_re35.vtu", "naca0012_inviscid.su2"
QUIET = dict(progress=False, echo=lambda *a: None)
MAX_RANKS = 4


def _checkpoint(path, files, features, targets, **ds_kwargs):
    """Random float64 weights of a tiny MeshGraphNet, saved as a training checkpoint."""
    ds = MeshDataset(files, features, targets, dtype=torch.float64, **ds_kwargs)
    torch.manual_seed(0)
    net = MeshGraphNet(ds.num_node_features, ds[0].edge_attr.shape[1], len(ds[0].y[0]), hidden=8, num_layers=2)
    atomic_torch_save(training_checkpoint(net.double(), ds), path)
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, data_dir):
    """Checkpoints (cylinder: pressure from velocity; naca: pos[1] from pos with node types in an
    order unlike the dataset's), a 4-part float64 dataset of the naca mesh, single-process outputs."""
    tmp = tmp_path_factory.mktemp("predict")
    cyl, naca = data_dir / CYL, data_dir / NACA
    ck = {"cyl": _checkpoint(tmp / "cyl.pt", [cyl], ["velocity[0,1]"], ["pressure"]),
          "naca": _checkpoint(tmp / "naca.pt", [naca], ["pos"], ["pos[1]"], node_types=["farfield", "airfoil"])}
    ds_root = tmp / "naca_ds"
    preprocess_dataset([naca], ds_root, MAX_RANKS, ["pos"], ["pos[1]"], dtype="float64", progress=False)
    single = {"cyl": predict(ck["cyl"], [cyl], tmp / "single_cyl", **QUIET)[0],
              "cyl32": predict(ck["cyl"], [cyl], tmp / "single_cyl32", dtype="float32", **QUIET)[0],
              "ds": predict(ck["naca"], [ds_root], tmp / "single_ds", **QUIET)[0]}
    return dict(tmp=tmp, ck=ck, cyl=cyl, naca=naca, ds_root=ds_root, single=single)


def _fields(path):
    return meshio.read(path).point_data


def _assert_close(a, b, rel):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape
    assert np.abs(a - b).max() <= rel * np.abs(b).max(), np.abs(a - b).max()


def test_single_process_output_holds_the_mesh_prediction_error_and_metrics(setup, data_dir):
    res = setup["single"]["cyl"]
    src = meshio.read(data_dir / CYL)
    out = meshio.read(res["path"])
    assert res["path"] == setup["tmp"] / "single_cyl" / "cylinder_crossflow_re35.vtu"
    assert len(out.points) == res["num_nodes"] == 14831 and [c.type for c in out.cells] == [c.type for c in src.cells]
    for name, values in src.point_data.items():  # the input's own fields are kept
        np.testing.assert_array_equal(out.point_data[name], values)
    pred, err, truth = out.point_data["pressure_pred"], out.point_data["pressure_error"], src.point_data["pressure"].astype(np.float64)
    assert pred.shape == (14831,) and np.isfinite(pred).all() and pred.std() > 0
    np.testing.assert_allclose(err, pred - truth, rtol=0, atol=1e-9 * np.abs(truth).max())
    m = res["metrics"]["pressure"]
    np.testing.assert_allclose([m["mse"], m["max_abs"]], [np.mean(err ** 2), np.abs(err).max()], rtol=1e-12)
    np.testing.assert_allclose(m["rel_l2"], np.linalg.norm(err) / np.linalg.norm(truth), rtol=1e-12)
    # de-normalised with the checkpoint's statistics: the model's own output, scaled back
    model, info = load_checkpoint(setup["ck"]["cyl"])
    ds = MeshDataset([data_dir / CYL], info.features, info.targets, stats=info.stats, dtype=torch.float64)
    x, e, _ = ds.model_inputs(ds[0])
    with torch.no_grad():
        expect = info.stats.y.denormalize(model(x, ds[0].edge_index, e))[:, 0].numpy()
    np.testing.assert_allclose(pred, expect, rtol=0, atol=1e-12 * np.abs(expect).max())


def _sharded(rank, world, setup, train_script):
    """Every group size 2..world on subgroups of one spawned world; last, 2 training steps on all ranks."""
    from meshshard.distributed import new_group

    tmp = setup["tmp"]
    groups = {w: new_group(range(w)) for w in range(2, world + 1)}  # every rank makes every group
    for w, g in groups.items():
        if rank < w:
            predict(setup["ck"]["cyl"], [setup["cyl"]], tmp / f"cyl_w{w}", group=g, **QUIET)
            # the dataset's own parts at w == its 4 parts, its source partitioned again otherwise
            predict(setup["ck"]["naca"], [setup["ds_root"]], tmp / f"ds_w{w}", group=g, **QUIET)
    if rank < 2:
        predict(setup["ck"]["cyl"], [setup["cyl"]], tmp / "bf16_w2", group=groups[2], dtype="float32", amp="bf16",
                **QUIET)
    spec = importlib.util.spec_from_file_location("train_meshgraphnet", train_script)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    # ends the process group: the last thing this rank does
    return train.main(["--data", str(setup["ds_root"]), "--steps", "2", "--hidden", "8", "--layers", "2",
                       "--dtype", "float64", "--lr", "1e-3", "--save", str(tmp / "trained.pt")])


@pytest.mark.timeout(300)
def test_sharded_equals_single_process_and_a_checkpoint_trained_on_4_ranks_predicts_on_1(setup):
    tmp, single = setup["tmp"], setup["single"]
    assert run_distributed(_sharded, MAX_RANKS, args=(setup, ROOT / "examples" / "train_meshgraphnet.py"),
                           timeout=280) == [0] * MAX_RANKS
    ref = _fields(single["cyl"]["path"])
    for w in range(2, MAX_RANKS + 1):
        got = _fields(tmp / f"cyl_w{w}" / CYL)
        for key in ("pressure_pred", "pressure_error"):
            _assert_close(got[key], ref[key], 1e-10)
        got = _fields(tmp / f"ds_w{w}" / single["ds"]["path"].name)
        _assert_close(got["pos_pred"], _fields(single["ds"]["path"])["pos_pred"], 1e-10)
    # --amp bf16 sharded: within the documented tolerance of float32 (in target standard deviations)
    std = float(load_checkpoint(setup["ck"]["cyl"])[1].stats.y.std[0])
    f32 = _fields(single["cyl32"]["path"])["pressure_pred"]
    assert np.abs(_fields(tmp / "bf16_w2" / CYL)["pressure_pred"] - f32).max() <= AMP_BF16_TOLERANCE * std

    model, info = load_checkpoint(tmp / "trained.pt")  # trained on 4 ranks, predicted on 1
    assert info.step == 2 and info.node_types == ["airfoil", "farfield"] and info.extra["args"]["hidden"] == 8
    res = predict(tmp / "trained.pt", [setup["naca"]], tmp / "trained_out", **QUIET)[0]
    pred = _fields(res["path"])["pos_pred"]
    assert np.isfinite(pred).all() and res["metrics"]["pos_1"]["rel_l2"] > 0


def test_amp_bf16_single_process_is_within_tolerance_of_float32(setup):
    """bf16 on one process: the measured difference to float32, against AMP_BF16_TOLERANCE; a float64
    run with --amp is refused (autocast leaves float64 alone)."""
    res = predict(setup["ck"]["cyl"], [setup["cyl"]], setup["tmp"] / "bf16_w1", dtype="float32", amp="bf16", **QUIET)
    bf16, f32 = _fields(res[0]["path"])["pressure_pred"], _fields(setup["single"]["cyl32"]["path"])["pressure_pred"]
    std = float(load_checkpoint(setup["ck"]["cyl"])[1].stats.y.std[0])
    diff = np.abs(bf16 - f32).max() / std
    assert 0 < diff <= AMP_BF16_TOLERANCE, diff  # bf16 really ran, and stayed within tolerance
    with pytest.raises(ValueError, match="add --dtype float32"):
        predict(setup["ck"]["cyl"], [setup["cyl"]], setup["tmp"] / "no", amp="bf16", **QUIET)


@pytest.mark.timeout(200)
def test_torchrun_two_ranks_writes_the_single_process_output(setup):
    out = setup["tmp"] / "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "-m", "meshshard",
                           "predict", "-q", "--checkpoint", str(setup["ck"]["cyl"]), str(setup["cyl"]), "-o", str(out)],
                          capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 rank(s)" in proc.stdout and "pressure: MSE" in proc.stdout and f"wrote 1 file(s) to {out}" in proc.stdout
    ref = _fields(setup["single"]["cyl"]["path"])
    _assert_close(_fields(out / CYL)["pressure_pred"], ref["pressure_pred"], 1e-10)


def test_quiet_cli_and_interrupted_write_leaves_no_file(setup, capsys, monkeypatch):
    out = setup["tmp"] / "cli"
    assert main(["predict", "-q", "--checkpoint", str(setup["ck"]["naca"]), str(setup["naca"]), "-o", str(out)]) == 0
    stdout, stderr = capsys.readouterr()
    assert stderr == "" and "pos_1: MSE" in stdout and f"wrote 1 file(s) to {out}" in stdout
    # the mesh's boundary markers and cells are in the VTU, with the prediction
    written = meshio.read(out / "naca0012_inviscid.vtu")
    assert {c.type for c in written.cells} == {"triangle", "line"} and set(written.point_data) == {"pos_pred", "pos_error"}

    def killed_mid_write(path, mesh, file_format=None):
        Path(path).write_bytes(b"<VTKFile partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(meshio, "write", killed_mid_write)
    again = setup["tmp"] / "interrupted"
    assert main(["predict", "-q", "--checkpoint", str(setup["ck"]["naca"]), str(setup["naca"]), "-o", str(again)]) == 130
    assert not again.exists()  # no .vtu, no temporary file, and the folder made for them is gone


def test_bad_inputs_raise_clear_errors_and_write_nothing(setup, data_dir, tmp_path, capsys):
    ck, cyl, naca = setup["ck"], str(setup["cyl"]), str(setup["naca"])
    old = tmp_path / "old.pt"
    atomic_torch_save({"model": load_checkpoint(ck["cyl"])[0].state_dict(), "step": 1}, old)
    out = tmp_path / "out"
    cases = [
        (["--checkpoint", str(ck["cyl"]), naca], [f"{naca}: 'velocity' not found (features)"]),
        (["--checkpoint", str(old), cyl], ["no 'meshshard' entry", "older train_meshgraphnet.py"]),
        (["--checkpoint", str(tmp_path / "none.pt"), cyl], ["no such checkpoint file"]),
        (["--checkpoint", str(ck["cyl"]), cyl, "--amp", "bf16"], ["add --dtype float32"]),
        (["--checkpoint", str(ck["naca"]), str(data_dir / "brick_tets.su2")], ["a 3D mesh", "trained on 2D meshes"]),
        (["--checkpoint", str(ck["cyl"]), cyl, cyl], ["same OUT/<sample>.vtu", "cylinder_crossflow_re35"]),
        (["--checkpoint", str(ck["cyl"]), str(tmp_path / "nothing.vtu")], ["nothing.vtu: no such file"]),
    ]
    for argv, messages in cases:
        assert main(["predict", "-q", *argv, "-o", str(out)]) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("meshshard predict: error:") and all(m in err for m in messages), (argv, err)
        assert not out.exists()


def test_write_vtu_keeps_cells_points_and_fields_and_leaves_no_partial_file(tmp_path, data_dir, monkeypatch):
    """The writer of predict and the demo (its prediction and its gmsh fallback's mesh): the mesh reads
    back the same (a 2D mesh with its zero z dropped, a point cloud as a point cloud), with the source
    file's boundary cells when given it; an interrupted write leaves no file."""
    from meshshard.io import Mesh, read_mesh

    mesh = read_mesh(data_dir / CYL)
    back = read_mesh(write_vtu(tmp_path / "m.vtu", mesh, {"p_pred": mesh.point_data["pressure"] * 2}))
    assert np.array_equal(back.points, mesh.points) and back.cells.keys() == mesh.cells.keys()
    assert all(np.array_equal(back.cells[t], c) for t, c in mesh.cells.items())
    assert list(back.point_data) == [*mesh.point_data, "p_pred"]
    assert np.array_equal(back.point_data["p_pred"], mesh.point_data["pressure"] * 2)
    cloud = Mesh.from_points(np.random.default_rng(0).random((50, 3)))
    back = read_mesh(write_vtu(tmp_path / "c.vtu", cloud, {"a": np.arange(50.0)}))
    assert back.is_point_cloud and np.array_equal(back.points, cloud.points)
    assert np.array_equal(back.point_data["a"], np.arange(50.0))
    naca = read_mesh(data_dir / NACA)
    def cell_types(path):
        return {c.type for c in meshio.read(path).cells}

    assert "line" not in naca.cells and cell_types(write_vtu(tmp_path / "n.vtu", naca)) == {"triangle"}
    assert cell_types(write_vtu(tmp_path / "n.vtu", naca, source=data_dir / NACA)) == {"triangle", "line"}
    with pytest.raises(ValueError, match="point field 'a' has 49 rows, the mesh 50 points"):
        write_vtu(tmp_path / "short.vtu", cloud, {"a": np.arange(49.0)})

    def killed_mid_write(path, mesh, file_format=None):
        Path(path).write_bytes(b"<VTKFile partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(meshio, "write", killed_mid_write)
    with pytest.raises(KeyboardInterrupt):
        write_vtu(tmp_path / "killed.vtu", cloud)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.vtu", "m.vtu", "n.vtu"]


def test_write_prediction_fields_metrics_and_bad_shapes(tmp_path, data_dir):
    """<target>_pred / _error named by prediction_field_names (a target's selected components are its
    field's columns; by column where two targets share a field), metrics per column, no error field
    and no metrics without the truth."""
    from meshshard.io import read_mesh
    from meshshard.viz import prediction_field_names

    mesh = read_mesh(data_dir / CYL)
    targets = ["velocity[0,1]", "pressure"]
    truth = torch.from_numpy(select_fields(mesh, targets))
    pred = truth * 3.0  # error 2 * truth: relative L2 2 per column
    metrics = write_prediction(tmp_path / "p.vtu", mesh, pred, targets, field_columns(mesh, targets),
                               source=data_dir / CYL)
    out = _fields(tmp_path / "p.vtu")
    for key, cols in (("velocity", slice(0, 2)), ("pressure", 2)):
        pred_name, error_name = prediction_field_names(key)
        np.testing.assert_array_equal(out[pred_name], pred[:, cols].numpy())
        np.testing.assert_array_equal(out[error_name], 2 * truth[:, cols].numpy())
    assert list(metrics) == ["velocity_0", "velocity_1", "pressure"]
    assert all(np.isclose(m["rel_l2"], 2.0) for m in metrics.values())
    p = truth[:, 2].numpy()
    assert np.isclose(metrics["pressure"]["mse"], np.mean((2 * p) ** 2))
    assert np.isclose(metrics["pressure"]["max_abs"], np.abs(2 * p).max())

    zero = mesh.point_data["velocity"].copy()
    zero[:, 2] = 0.0  # a 2D flow's third component: relative L2 is undefined (NaN), not inf
    mesh.point_data["velocity"] = zero
    metrics = write_prediction(tmp_path / "z.vtu", mesh, torch.ones(mesh.num_nodes, 3), ["velocity"],
                               field_columns(mesh, ["velocity"]))
    assert np.isnan(metrics["velocity_2"]["rel_l2"]) and np.isfinite(metrics["velocity_0"]["rel_l2"])
    assert metrics["velocity_2"]["mse"] == metrics["velocity_2"]["max_abs"] == 1.0

    split = ["velocity[0]", "velocity[1]"]  # two targets of one field: the outputs are named by column
    write_prediction(tmp_path / "s.vtu", mesh, pred[:, :2], split, field_columns(mesh, split))
    names = {"velocity_0_pred", "velocity_0_error", "velocity_1_pred", "velocity_1_error"}
    assert names <= set(_fields(tmp_path / "s.vtu"))

    del mesh.point_data["pressure"]  # no truth: the prediction alone
    assert write_prediction(tmp_path / "n.vtu", mesh, pred[:, 2:], ["pressure"], ["pressure"]) is None
    assert set(_fields(tmp_path / "n.vtu")) == {"velocity", "vorticity_mag", "pressure_pred"}
    with pytest.raises(ValueError, match=r"pred must have shape \[14831, 1\].*got \[14831, 3\]"):
        write_prediction(tmp_path / "bad.vtu", mesh, pred, ["pressure"], ["pressure"])
    with pytest.raises(ValueError, match=r"got \[10, 1\]"):
        write_prediction(tmp_path / "bad.vtu", mesh, pred[:10, 2:], ["pressure"], ["pressure"])
    assert not (tmp_path / "bad.vtu").exists()
