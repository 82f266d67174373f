"""`meshshard predict`: the VTU it writes (its writer, meshshard.io.write_prediction, is tested in
tests/io/test_write.py), sharded == single
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
from meshshard.cli.predict import AMP_BF16_TOLERANCE, predict
from meshshard.datasets import MeshDataset, preprocess_dataset
from meshshard.models import MeshGraphNet, load_checkpoint, training_checkpoint
from meshshard.testing import run_distributed

ROOT = Path(__file__).resolve().parents[2]
CYL, NACA = "cylinder_crossflow_re35.vtu", "naca0012_inviscid.su2"
QUIET = dict(progress=False, echo=lambda *a: None)
MAX_RANKS = 4


def _checkpoint(path, files, features, targets, hidden=8, **ds_kwargs):
    """Random float64 weights of a tiny MeshGraphNet, saved as a training checkpoint."""
    ds = MeshDataset(files, features, targets, dtype=torch.float64, **ds_kwargs)
    torch.manual_seed(0)
    net = MeshGraphNet(ds.num_node_features, ds[0].edge_attr.shape[1], len(ds[0].y[0]), hidden=hidden, num_layers=2)
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


@pytest.fixture(scope="module")
def cells(tmp_path_factory, data_dir):
    """A checkpoint trained on cell-centred data (the cylinder solution averaged onto its cells), a
    2-part dataset of it, and its single-process prediction."""
    from tests.cli._cell_meshes import write_cylinder_cells

    tmp = tmp_path_factory.mktemp("predict_cells")
    src = write_cylinder_cells(tmp / "cyl_cells.vtu", data_dir)
    ck = _checkpoint(tmp / "cells.pt", [src], ["velocity[0,1]"], ["pressure"], nodes="cells")
    ds_root = tmp / "ds"
    preprocess_dataset([src], ds_root, 2, ["velocity[0,1]"], ["pressure"], dtype="float64", progress=False,
                       nodes="cells")
    single = predict(ck, [src], tmp / "single", **QUIET)[0]
    return dict(tmp=tmp, src=src, ck=ck, ds_root=ds_root, single=single)


def _cell_fields(path):
    m = meshio.read(path)
    return {k: np.concatenate(v) for k, v in m.cell_data.items()}


def test_cell_centred_prediction_is_cell_data_of_the_input(cells):
    res = cells["single"]
    assert res["num_nodes"] == 14594 and load_checkpoint(cells["ck"])[1].nodes == "cells"
    out, src = _cell_fields(res["path"]), _cell_fields(cells["src"])
    assert not meshio.read(res["path"]).point_data
    model, info = load_checkpoint(cells["ck"])
    ds = MeshDataset([cells["src"]], info.features, info.targets, stats=info.stats, dtype=torch.float64, nodes="cells")
    x, e, _ = ds.model_inputs(ds[0])
    with torch.no_grad():
        expect = info.stats.y.denormalize(model(x, ds[0].edge_index, e))[:, 0].numpy()
    # the blocks of this file are one per type, in Mesh order: the concatenation is the Mesh's cell order
    np.testing.assert_allclose(out["pressure_pred"], expect, rtol=0, atol=1e-12 * np.abs(expect).max())
    np.testing.assert_allclose(out["pressure_error"], expect - src["pressure"], rtol=0, atol=1e-9 * np.abs(expect).max())
    np.testing.assert_array_equal(out["velocity"], src["velocity"])  # the input's cell fields are kept
    assert res["metrics"]["pressure"]["rel_l2"] > 0


def _cells_sharded(rank, world, cells):
    from meshshard.distributed import new_group

    groups = {w: new_group(range(w)) for w in range(2, world + 1)}
    for w, g in groups.items():
        if rank < w:
            predict(cells["ck"], [cells["src"]], cells["tmp"] / f"file_w{w}", group=g, **QUIET)
            predict(cells["ck"], [cells["ds_root"]], cells["tmp"] / f"ds_w{w}", group=g, **QUIET)
    return 0


@pytest.mark.timeout(300)
def test_cell_centred_sharded_equals_single_process(cells):
    assert run_distributed(_cells_sharded, 3, args=(cells,), timeout=280) == [0] * 3
    ref = _cell_fields(cells["single"]["path"])["pressure_pred"]
    for w in (2, 3):
        _assert_close(_cell_fields(cells["tmp"] / f"file_w{w}" / "cyl_cells.vtu")["pressure_pred"], ref, 1e-10)
        _assert_close(_cell_fields(cells["tmp"] / f"ds_w{w}" / "00000_cyl_cells.vtu")["pressure_pred"], ref, 1e-10)


def test_nodes_must_match_the_checkpoint(cells, setup, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["predict", "-q", "--checkpoint", str(cells["ck"]), str(cells["src"]), "--nodes", "points",
                 "-o", str(out)]) == 2
    assert "was trained with nodes = cells" in capsys.readouterr().err
    # a vertex checkpoint on a cell-centred dataset, and a cell checkpoint on a vertex dataset
    for ck, ds in ((setup["ck"]["cyl"], cells["ds_root"]), (cells["ck"], setup["ds_root"])):
        assert main(["predict", "-q", "--checkpoint", str(ck), str(ds), "-o", str(out)]) == 2
        err = capsys.readouterr().err
        assert "preprocess it again with --nodes" in err or "feature columns" in err, err
        assert not out.exists()


# ---- a .pvtu read piece-wise under a process group -------------------------------------------------

@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """A tet mesh as 5 uneven pieces (global point ids), a checkpoint on it, the one-process output."""
    from tests.io._piece_files import delaunay_mesh, write_split

    tmp = tmp_path_factory.mktemp("predict_pieces")
    src = write_split(tmp / "cube.pvtu", *delaunay_mesh(4, 200, 3), [0.15, 0.3, 0.6, 0.7], ids=True)
    ck = _checkpoint(tmp / "ck.pt", [src], ["q"], ["p"])
    single = predict(ck, [src], tmp / "single", **QUIET)[0]
    return dict(tmp=tmp, src=src, ck=ck, single=single)


def _pieces_sharded(rank, world, pieces):
    from meshshard.distributed import new_group

    groups = {w: new_group(range(w)) for w in range(2, world + 1)}
    out = {}
    for w, g in groups.items():
        if rank < w:
            out[w] = predict(pieces["ck"], [pieces["src"]], pieces["tmp"] / f"w{w}", group=g, **QUIET)
    return out


@pytest.mark.timeout(300)
def test_pieces_read_and_written_piece_wise_equal_the_one_file_output(pieces, capsys):
    import vtk

    from meshshard.io import read_mesh

    results = run_distributed(_pieces_sharded, MAX_RANKS, args=(pieces,), timeout=280)
    ref_res = pieces["single"]
    ref = read_mesh(ref_res["path"])
    order_ref = np.lexsort(ref.points.T)
    for w in range(2, MAX_RANKS + 1):
        res = results[0][w][0]
        assert all(results[r][w] == [] for r in range(1, w))
        out = pieces["tmp"] / f"w{w}"
        assert res["path"] == out / "cube.pvtu" and res["num_nodes"] == ref.num_nodes
        assert sorted(p.name for p in (out / "cube").iterdir()) == [f"cube_{r:04d}.vtu" for r in range(w)]
        for key in ("mse", "rel_l2", "max_abs"):
            np.testing.assert_allclose(res["metrics"]["p"][key], ref_res["metrics"]["p"][key], rtol=1e-10)
        # ParaView's reader opens it: every cell once, the pieces' border points repeated
        reader = vtk.vtkXMLPUnstructuredGridReader()
        reader.SetFileName(str(res["path"]))
        reader.Update()
        assert reader.GetOutput().GetNumberOfCells() == ref.num_cells
        # merged back, it is the one-file output (float64 1e-10)
        got = read_mesh(res["path"])
        assert got.num_nodes == ref.num_nodes and got.num_cells == ref.num_cells
        order = np.lexsort(got.points.T)
        np.testing.assert_array_equal(got.points[order], ref.points[order_ref])
        for name in ("q", "p"):
            np.testing.assert_array_equal(got.point_data[name][order], ref.point_data[name][order_ref])
        for name in ("p_pred", "p_error"):
            _assert_close(got.point_data[name][order], ref.point_data[name][order_ref], 1e-10)
        assert sorted(got.cell_data["c"]) == sorted(ref.cell_data["c"])


def _few_pieces(rank, world, pieces, src):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        predict(pieces["ck"], [src], pieces["tmp"] / "few", progress=False, echo=lambda *a: None)
    return err.getvalue()


@pytest.mark.timeout(200)
def test_fewer_pieces_than_ranks_reads_the_whole_mesh_with_one_line(pieces):
    from tests.io._piece_files import delaunay_mesh, write_split

    src = write_split(pieces["tmp"] / "few.pvtu", *delaunay_mesh(4, 200, 3), [0.5], ids=False)
    err = run_distributed(_few_pieces, 3, args=(pieces, src), timeout=180)
    line = "few.pvtu has 2 piece(s), fewer than the 3 ranks: every rank reads the whole mesh"
    assert line in err[0] and not any(line in e for e in err[1:])
    assert (pieces["tmp"] / "few" / "few.vtu").is_file() and not (pieces["tmp"] / "few" / "few.pvtu").exists()


@pytest.fixture(scope="module")
def poly(tmp_path_factory):
    """An OpenFOAM case with polyhedra, checkpoints trained on it by vertices and by cells, and
    their single-process predictions."""
    from tests.io._openfoam_case import write_openfoam_polyhedra

    tmp = tmp_path_factory.mktemp("predict_poly")
    write_openfoam_polyhedra(tmp / "snappy")
    src = tmp / "snappy" / "case.foam"
    # hidden 50: above the 48 nodes, so no rank's row count equals it (the graph guard would find the node
    # axis of a [k, k] product ambiguous)
    ck = {n: _checkpoint(tmp / f"{n}.pt", [src], ["pos"], ["p", "U[0]"], hidden=50, nodes=n) for n in ("points", "cells")}
    single = {n: predict(ck[n], [src], tmp / f"single_{n}", **QUIET)[0] for n in ck}
    return dict(tmp=tmp, src=src, ck=ck, single=single)


def test_polyhedra_prediction_is_written_back_with_the_polyhedra(poly):
    """The prediction is point data (vertices) or cell data (cells) of the original mesh, polyhedra
    and all: VTK reads them back, and so does read_mesh, equal to the model run on the mesh."""
    from meshshard.io import read_mesh

    for nodes in ("points", "cells"):
        res = poly["single"][nodes]
        mesh = read_mesh(poly["src"], nodes=nodes)
        model, info = load_checkpoint(poly["ck"][nodes])
        ds = MeshDataset([poly["src"]], info.features, info.targets, stats=info.stats, dtype=torch.float64,
                         nodes=nodes)
        x, e, _ = ds.model_inputs(ds[0])
        with torch.no_grad():
            expect = info.stats.y.denormalize(model(x, ds[0].edge_index, e)).numpy()
        back = read_mesh(res["path"], nodes=nodes)  # through vtk: the file holds polyhedra
        base = back.vertex_mesh if nodes == "cells" else back
        assert base.cell_counts() == {"hexahedron": 10, "wedge": 4, "polyhedron": 2} and base.num_nodes == 48
        assert base.polyhedra == (mesh.vertex_mesh if nodes == "cells" else mesh).polyhedra
        np.testing.assert_allclose(back.points, mesh.points, atol=1e-12)
        for j, name in enumerate(("p", "U")):  # a target is named by its field: U[0] -> U_pred
            np.testing.assert_allclose(back.point_data[f"{name}_pred"], expect[:, j], rtol=0,
                                       atol=1e-12 * np.abs(expect).max())
        np.testing.assert_allclose(back.point_data["p_error"], expect[:, 0] - mesh.point_data["p"], rtol=0,
                                   atol=1e-9 * np.abs(expect).max())
        assert ("p_pred" in base.cell_data) == (nodes == "cells")


def _poly_sharded(rank, world, poly):
    from meshshard.distributed import new_group

    groups = {w: new_group(range(w)) for w in range(2, world + 1)}
    for w, g in groups.items():
        if rank < w:
            for n in ("points", "cells"):
                predict(poly["ck"][n], [poly["src"]], poly["tmp"] / f"{n}_w{w}", group=g, **QUIET)
    return 0


@pytest.mark.timeout(300)
def test_polyhedra_sharded_equals_single_process(poly):
    from meshshard.io import read_mesh

    assert run_distributed(_poly_sharded, 3, args=(poly,), timeout=280) == [0] * 3
    for n in ("points", "cells"):
        ref = read_mesh(poly["single"][n]["path"], nodes=n).point_data["p_pred"]
        for w in (2, 3):
            _assert_close(read_mesh(poly["tmp"] / f"{n}_w{w}" / "case.vtu", nodes=n).point_data["p_pred"], ref, 1e-10)
