"""`meshshard preprocess` on real meshes: parallel workers, statistics, an interrupted run that
resumes, and a corrupted part file that is detected and rewritten."""
import signal
import subprocess
import sys
import time

import pytest
import torch

from meshshard.cli import main


def _samples(tmp_path, data_dir, n):
    """n sample files: links to the real CFD solution under different names (no copies)."""
    src = tmp_path / "cases"
    src.mkdir()
    for i in range(n):
        (src / f"case{i}.vtu").symlink_to(data_dir / "cylinder_crossflow_re35.vtu")
    return src


def test_preprocess_real_meshes_with_workers(tmp_path, data_dir, capsys):
    from meshshard.datasets import DatasetStats, MeshDataset, ShardedMeshDataset, read_dataset_meta, verify_dataset

    files = [data_dir / "naca0012_inviscid.su2", data_dir / "rae2822_turb.su2", data_dir / "cylinder_laminar.su2"]
    out = tmp_path / "out"
    rc = main(["preprocess", *map(str, files), "-k", "3", "-m", "kdtree", "-o", str(out),
               "--features", "pos", "--targets", "pos[0]", "--halo-hops", "2", "--workers", "2", "--quiet"])
    assert rc == 0
    assert "3 written" in capsys.readouterr().out
    meta = read_dataset_meta(out)
    assert [s["source"] for s in meta["samples"]] == list(map(str, files))
    assert meta["num_parts"] == 3 and meta["halo_hops"] == 2
    assert meta["feature_columns"] == ["pos_0", "pos_1"] and meta["target_columns"] == ["pos_0"]
    assert meta["node_types"] == ["AIRFOIL", "FARFIELD", "airfoil", "cylinder", "farfield"]
    assert verify_dataset(out) == []
    # statistics computed once, by worker processes, equal the single-process dataset's exactly
    ref = MeshDataset(files, ["pos"], ["pos[0]"])
    assert DatasetStats.from_dict(meta["stats"]).equal(ref.stats)
    ds = ShardedMeshDataset(out)  # this process is world size 1: the 3 parts merged on load
    assert ds[0].graph.world_size == 1 and ds[0].x.shape[0] == meta["samples"][0]["num_nodes"]


def test_interrupted_preprocess_resumes(tmp_path, data_dir, capsys):
    from meshshard.datasets import MeshDataset, read_dataset_meta, verify_dataset
    from meshshard.graph import verify_parts

    src = _samples(tmp_path, data_dir, 3)
    out = tmp_path / "out"
    args = [str(src), "-k", "2", "-o", str(out), "--features", "velocity[0,1]", "--targets", "pressure",
            "--halo-hops", "2", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "meshshard", "preprocess", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    first = out / "00000_case0" / "meta.json"
    deadline = time.monotonic() + 120
    try:
        while not first.exists():  # kill it as soon as the first sample is complete
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "preprocess wrote nothing within 120 s"
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not (out / "meta.json").exists(), "an interrupted run must not leave a dataset meta.json"
    done = sorted(d.name for d in out.iterdir() if d.is_dir() and verify_parts(d) == [])
    assert "00000_case0" in done and len(done) < 3
    for part in out.glob("*/part_*.pt"):  # no partial file under a real part name
        torch.load(part, weights_only=True)

    assert main(["preprocess", *args]) == 0
    assert f"{3 - len(done)} written, {len(done)} already done" in capsys.readouterr().out
    assert verify_dataset(out) == []
    assert not list(out.glob("*/.*.tmp")), "stale temporary files left behind"
    meta = read_dataset_meta(out)
    ref = MeshDataset(sorted(src.iterdir()), ["velocity[0,1]"], ["pressure"])
    from meshshard.datasets import DatasetStats

    assert DatasetStats.from_dict(meta["stats"]).equal(ref.stats)


def test_corrupted_part_is_detected_and_rewritten(tmp_path, data_dir, capsys):
    from meshshard.datasets import read_dataset_meta, verify_dataset
    from meshshard.graph import load_part

    src = _samples(tmp_path, data_dir, 2)
    out = tmp_path / "out"
    args = [str(src), "-k", "2", "-m", "kdtree", "-o", str(out), "--features", "velocity", "--targets", "pressure", "--quiet"]
    assert main(["preprocess", *args]) == 0
    before = read_dataset_meta(out)
    bad = out / "00001_case1" / "part_0001.pt"
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad.write_bytes(bytes(raw))
    problems = verify_dataset(out)
    assert problems and all("00001_case1/part_0001.pt" in p for p in problems)
    with pytest.raises(ValueError, match="sha256"):
        load_part(out / "00001_case1", 1)
    capsys.readouterr()
    assert main(["preprocess", *args]) == 0
    assert "1 written, 1 already done" in capsys.readouterr().out
    assert verify_dataset(out) == []
    after = read_dataset_meta(out)
    assert after["stats"] == before["stats"]
    assert after["samples"][0]["meta_sha256"] == before["samples"][0]["meta_sha256"]  # untouched sample kept


def test_preprocess_bad_input(tmp_path, data_dir, capsys):
    vtu = str(data_dir / "cylinder_crossflow_re35.vtu")
    assert main(["preprocess", vtu, "-k", "2", "-o", str(tmp_path / "o"), "--features", "nosuchfield", "--quiet"]) == 2
    err = capsys.readouterr().err
    # names the missing field and lists the ones the file has
    assert "'nosuchfield' not found" in err and "available" in err
    assert all(f in err for f in ("pressure", "velocity", "vorticity_mag")), err
    assert main(["preprocess", vtu, "-k", "99999", "-o", str(tmp_path / "o"), "--features", "velocity", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "99999" in err and "14831" in err, err  # more parts than nodes: both numbers named
    assert main(["partition", vtu, "-k", "2", "-o", str(tmp_path / "shards"), "-q"]) == 0
    capsys.readouterr()
    assert main(["preprocess", vtu, "-k", "2", "-o", str(tmp_path / "shards"), "--features", "velocity", "--quiet"]) == 2
    assert "meshshard partition" in capsys.readouterr().err
    assert (tmp_path / "shards" / "meta.json").exists()
    assert main(["preprocess", str(tmp_path / "missing.vtu"), "-k", "2", "-o", str(tmp_path / "o")]) == 2
    assert main(["preprocess", vtu, "-k", "0", "-o", str(tmp_path / "o"), "--quiet"]) == 2
    mixed = [vtu, str(data_dir / "brick_tets.su2")]  # 2D and 3D: pos has 2 vs 3 columns
    capsys.readouterr()
    assert main(["preprocess", *mixed, "-k", "2", "-o", str(tmp_path / "m"), "--features", "pos", "--quiet"]) == 2
    assert "disagree" in capsys.readouterr().err


def test_trajectories_with_state(tmp_path, capsys):
    """--state preprocesses trajectories (a .pvd here); a rerun skips what is done; a trajectory
    without --state, and steady-only options with it, are refused with what to do."""
    from meshshard.datasets import load_trajectory_part, read_trajectory_dataset_meta
    from tests.datasets._diffusion_case import write_diffusion_pvd

    pvd = write_diffusion_pvd(tmp_path / "case", nx=6, ny=5, steps=5)
    out = tmp_path / "out"
    args = ["preprocess", str(pvd), "-k", "2", "-o", str(out), "--state", "temperature", "--features", "pos",
            "--node-type", "node_type", "--dtype", "float64", "-q"]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "1 trajectories in" in text and "1 written, 0 already done" in text and "increment mean" in text
    meta = read_trajectory_dataset_meta(out)
    assert meta["num_parts"] == 2 and meta["state_columns"] == ["temperature"] and meta["node_type"] == "node_type"
    assert load_trajectory_part(out, 0, 1)["state"].shape[:1] == (5,)
    assert main(args) == 0
    assert "0 written, 1 already done" in capsys.readouterr().out
    for extra, message in ((["--targets", "temperature"], "--targets does not apply to trajectories"),
                           (["--workers", "2"], "--workers does not apply to trajectories")):
        assert main([*args, *extra]) == 2
        assert message in capsys.readouterr().err
    assert main(["preprocess", str(pvd), "-k", "2", "-o", str(tmp_path / "o2"), "--features", "temperature"]) == 2
    assert "is a trajectory (time steps of one mesh): name the fields that evolve with --state" in capsys.readouterr().err


def test_preprocess_cells_as_nodes(tmp_path, data_dir, capsys):
    """--nodes cells on rae2822: one node per cell (centre as pos), the markers as cell node types,
    the settings and `info` say nodes = cells; a cell field missing is named as a cell field."""
    from meshshard.datasets import read_dataset_meta
    from meshshard.datasets.fields import node_type_ids
    from meshshard.graph import load_part
    from meshshard.io import read_mesh

    src = data_dir / "rae2822_turb.su2"
    out = tmp_path / "ds"
    assert main(["preprocess", str(src), "--nodes", "cells", "-k", "3", "-o", str(out), "--features", "pos",
                 "--targets", "pos[1]", "--dtype", "float64", "-q"]) == 0
    meta = read_dataset_meta(out)
    assert meta["nodes"] == "cells" and meta["node_types"] == ["AIRFOIL", "FARFIELD"]
    assert meta["samples"][0]["num_nodes"] == 22842
    mesh = read_mesh(src, nodes="cells")
    types = node_type_ids(mesh, meta["node_types"])
    for r in range(3):
        part = load_part(out / meta["samples"][0]["dir"], r)
        ids = torch.cat([part["owned_ids"], part["ghost_ids"]])
        assert torch.equal(part["node_data"]["pos"], torch.from_numpy(mesh.points)[ids])
        assert torch.equal(part["node_data"]["node_type_id"], types[ids])
    capsys.readouterr()
    assert main(["info", str(out), "-q"]) == 0
    assert "nodes: mesh cells" in capsys.readouterr().out
    assert main(["preprocess", str(src), "--nodes", "cells", "-k", "2", "-o", str(tmp_path / "no"),
                 "--features", "pressure", "-q"]) == 2
    assert "cell fields (nodes = cells) missing" in capsys.readouterr().err


def test_preprocess_openfoam_polyhedra(tmp_path):
    """An OpenFOAM case with polyhedra preprocesses by vertices and by cells (cell fields as node fields)."""
    from meshshard.datasets import read_dataset_meta
    from meshshard.graph import load_part
    from meshshard.io import read_mesh
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    src = tmp_path / "snappy" / "case.foam"
    for nodes in ("points", "cells"):
        out = tmp_path / nodes
        assert main(["preprocess", str(src), "--nodes", nodes, "-k", "2", "-o", str(out), "--features", "pos",
                     "--targets", "p", "--dtype", "float64", "-q"]) == 0
        meta = read_dataset_meta(out)
        mesh = read_mesh(src, nodes=nodes)
        assert meta["samples"][0]["num_nodes"] == mesh.num_nodes == (48 if nodes == "points" else 16)
        for r in range(2):
            part = load_part(out / meta["samples"][0]["dir"], r)
            ids = torch.cat([part["owned_ids"], part["ghost_ids"]])
            assert torch.equal(part["node_data"]["pos"], torch.from_numpy(mesh.points)[ids])
            assert torch.equal(part["node_data"]["y"].reshape(-1),
                               torch.from_numpy(mesh.point_data["p"]).double()[ids])
