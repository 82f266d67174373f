"""`meshshard partition` in-process on the real meshes: shard folders, contents, bad input."""
import json

import numpy as np
import pytest
import torch

from meshshard._fileutil import sha256_file
from meshshard.cli import main
from meshshard.graph import load_part, read_meta, verify_parts
from meshshard.io import knn_graph, read_mesh
from meshshard.partitioners import Partition


def _check_folder(out, mesh, k, edge_index):
    assert verify_parts(out) == []
    meta = read_meta(out)
    assert meta["num_parts"] == k and meta["num_nodes"] == mesh.num_nodes
    assert meta["source_sha256"] == sha256_file(mesh.source)
    assert meta["dim"] == mesh.dim
    part = Partition.load(out / "partition.pt")
    assert part.num_parts == k and part.num_nodes == mesh.num_nodes
    owned = []
    for r in range(k):
        p = load_part(out, r)
        assert torch.equal(p["owned_ids"], part.part_nodes(r))
        ids = torch.cat([p["owned_ids"], p["ghost_ids"]])
        # node features are the mesh's own numbers, owned rows then ghost rows
        assert torch.equal(p["node_data"]["pos"], torch.from_numpy(mesh.points)[ids])
        for name, arr in mesh.point_data.items():
            assert torch.equal(p["node_data"][name], torch.from_numpy(arr)[ids])
        # local edges are global edges (in local ids)
        glob = ids[p["edge_index"]]
        assert torch.equal(glob, edge_index[:, p["edge_ids"]])
        owned.append(p["owned_ids"])
    assert torch.equal(torch.cat(owned).sort().values, torch.arange(mesh.num_nodes))
    return meta


@pytest.mark.parametrize("method", ["kdtree", "inertial", "morton", "hilbert", "graph"])
def test_partition_2d_airfoil_all_methods(data_dir, tmp_path, capsys, method):
    src = data_dir / "naca0012_inviscid.su2"
    out = tmp_path / "shards"
    assert main(["partition", str(src), "-k", "4", "-m", method, "-o", str(out), "-q"]) == 0
    mesh = read_mesh(src)
    meta = _check_folder(out, mesh, 4, mesh.edge_index())
    assert meta["method"] == method and meta["graph"] == "mesh_edges"
    assert meta["node_sets"] == {"airfoil": 200, "farfield": 50}
    text = capsys.readouterr().out
    assert "quality" in text and "4 parts" in text and str(out) in text


def test_partition_vtu_with_point_data_and_two_halo_hops(data_dir, tmp_path):
    src = data_dir / "cylinder_crossflow_re35.vtu"
    out = tmp_path / "cf"
    assert main(["partition", str(src), "-k", "3", "-m", "graph", "-o", str(out), "--halo-hops", "2",
                 "--no-refine", "-q"]) == 0
    mesh = read_mesh(src)
    meta = _check_folder(out, mesh, 3, mesh.edge_index())
    assert meta["halo_hops"] == 2 and meta["refine"] is False
    assert set(meta["node_features"]) == {"pos", "pressure", "velocity", "vorticity_mag"}


def test_partition_3d_tets(data_dir, tmp_path):
    src = data_dir / "brick_tets.su2"
    out = tmp_path / "brick"
    assert main(["partition", str(src), "-k", "5", "-m", "hilbert", "-o", str(out), "-q"]) == 0
    mesh = read_mesh(src)
    _check_folder(out, mesh, 5, mesh.edge_index())


def test_partition_point_cloud_uses_knn(data_dir, tmp_path):
    src = data_dir / "drivaer_body_points.npz"
    out = tmp_path / "car"
    assert main(["partition", str(src), "-k", "3", "-o", str(out), "--knn", "4", "-q"]) == 0
    cloud = read_mesh(src)
    meta = _check_folder(out, cloud, 3, knn_graph(cloud.points, 4))
    assert meta["graph"] == "knn" and meta["knn_k"] == 4 and meta["num_edges"] == 4 * cloud.num_nodes


def test_rerun_overwrites_cleanly(data_dir, tmp_path):
    src = data_dir / "naca0012_inviscid.su2"
    out = tmp_path / "s"
    assert main(["partition", str(src), "-k", "4", "-o", str(out), "-q"]) == 0
    assert main(["partition", str(src), "-k", "2", "-o", str(out), "-q", "--seed", "3"]) == 0
    meta = json.loads((out / "meta.json").read_text())
    assert meta["num_parts"] == 2 and meta["seed"] == 3
    assert verify_parts(out) == []
    assert sorted(p.name for p in out.iterdir()) == ["meta.json", "part_0000.pt", "part_0001.pt", "partition.pt"]


def test_output_folder_of_another_kind_is_refused(data_dir, tmp_path, capsys):
    src = str(data_dir / "naca0012_inviscid.su2")
    ds = tmp_path / "ds"
    assert main(["preprocess", src, "-k", "2", "-o", str(ds), "--features", "pos", "--quiet"]) == 0
    before = sorted(p.name for p in ds.iterdir())
    capsys.readouterr()
    assert main(["partition", src, "-k", "2", "-o", str(ds), "-q"]) == 2
    assert "meshshard preprocess" in capsys.readouterr().err
    assert sorted(p.name for p in ds.iterdir()) == before and (ds / "meta.json").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "results.csv").write_text("1,2")
    assert main(["partition", src, "-k", "2", "-o", str(mine), "-q"]) == 2
    assert "results.csv" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["results.csv"]


@pytest.mark.parametrize("argv,needle", [
    (["{data}/nope.su2", "-k", "2"], "nope.su2"),
    (["{tmp}/bad.foo", "-k", "2"], "bad.foo"),
    (["{data}/naca0012_inviscid.su2", "-k", "0"], "num-parts"),
    (["{data}/naca0012_inviscid.su2", "-k", "2", "--halo-hops", "0"], "halo-hops"),
    (["{data}/naca0012_inviscid.su2", "-k", "999999"], "more parts"),
    (["{tmp}/tiny.npz", "-k", "2", "--knn", "8"], "knn: k must be in [1, 4]"),
])
def test_bad_input_exits_nonzero_with_message(data_dir, tmp_path, capsys, argv, needle):
    (tmp_path / "bad.foo").write_text("x")
    np.savez(tmp_path / "tiny.npz", points=np.random.default_rng(0).random((5, 3)))
    argv = [a.format(data=data_dir, tmp=tmp_path) for a in argv]
    rc = main(["partition", *argv, "-o", str(tmp_path / "out"), "-q"])
    err = capsys.readouterr().err
    assert rc != 0 and needle in err and "error" in err
    assert not (tmp_path / "out" / "meta.json").exists()


def test_help_and_bad_choice(capsys):
    with pytest.raises(SystemExit) as e:
        main(["partition", "--help"])
    assert e.value.code == 0 and "--halo-hops" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        main(["partition", "x.su2", "-k", "2", "-o", "o", "-m", "bogus"])
    assert e.value.code == 2


def test_reader_internal_fields_are_not_stored(tmp_path, capsys):
    from tests.conftest import write_gmsh_square

    write_gmsh_square(tmp_path / "sq.msh", 0.2)
    assert "gmsh:dim_tags" in read_mesh(tmp_path / "sq.msh").point_data  # meshio adds it
    assert main(["partition", str(tmp_path / "sq.msh"), "-k", "2", "-o", str(tmp_path / "out"), "-q"]) == 0
    assert "gmsh:dim_tags" in capsys.readouterr().out  # named in the note on what was not stored
    assert set(read_meta(tmp_path / "out")["node_features"]) == {"pos"}
    assert set(load_part(tmp_path / "out", 0)["node_data"]) == {"pos"}


def test_interrupted_partition_leaves_the_output_as_it_was(data_dir, tmp_path, monkeypatch):
    import meshshard.graph.parts_io as parts_io

    real = parts_io.atomic_torch_save

    def save_then_interrupt(obj, path):
        digest = real(obj, path)
        if path.name == "part_0000.pt":
            raise KeyboardInterrupt
        return digest

    src = str(data_dir / "naca0012_inviscid.su2")
    old = tmp_path / "old"
    assert main(["partition", src, "-k", "3", "-o", str(old), "-q"]) == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    monkeypatch.setattr(parts_io, "atomic_torch_save", save_then_interrupt)
    assert main(["partition", src, "-k", "2", "-o", str(old), "-q"]) == 130
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before and verify_parts(old) == []
    assert main(["partition", src, "-k", "2", "-o", str(tmp_path / "a" / "new"), "-q"]) == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"], "no partial, empty or temporary folder left"


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_written_files_follow_the_umask(data_dir, tmp_path, umask):
    import os
    import stat

    old = os.umask(umask)
    try:
        out = tmp_path / "new" / "out"
        assert main(["partition", str(data_dir / "naca0012_inviscid.su2"), "-k", "2", "--no-refine", "-o", str(out),
                     "-q"]) == 0
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "new", out, *out.iterdir()]}
    assert modes == {"new": 0o777 & ~umask, "out": 0o777 & ~umask, "meta.json": 0o666 & ~umask,
                     "partition.pt": 0o666 & ~umask, "part_0000.pt": 0o666 & ~umask, "part_0001.pt": 0o666 & ~umask}


def test_partition_command_does_not_import_the_dtensor_stack(data_dir, tmp_path):
    # `meshshard partition` needs torch for its part files but not DTensor: torch.distributed.tensor is
    # 0.9 s of imports (a fifth of the command on a 2M-node mesh)
    import subprocess
    import sys

    code = ("import sys\n"
            "from meshshard.cli import main\n"
            f"rc = main(['partition', {str(data_dir / 'naca0012_inviscid.su2')!r}, '-k', '3', '-o', "
            f"{str(tmp_path / 'out')!r}, '-q'])\n"
            "print(rc, sorted(m for m in sys.modules if m.startswith(('torch.distributed.tensor', "
            "'meshshard.tensor', 'meshshard.datasets.sharded'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "0 []", out.stdout
    assert read_meta(tmp_path / "out")["num_parts"] == 3


def test_partition_cells_as_nodes(data_dir, tmp_path, capsys):
    """--nodes cells: the parts hold the cells (centres as pos, cell fields as node fields), the graph
    is the cell graph, meta.json says so; on a small mixed mesh and on the rae2822 markers."""
    from tests.cli._cell_meshes import write_mixed_cells

    src = write_mixed_cells(tmp_path / "mixed.vtu")
    out = tmp_path / "mixed"
    assert main(["partition", str(src), "--nodes", "cells", "-k", "3", "-o", str(out), "-q"]) == 0
    mesh = read_mesh(src, nodes="cells")
    assert sorted(mesh.point_data) == ["u", "v"] and mesh.num_nodes == 18
    meta = _check_folder(out, mesh, 3, mesh.edge_index())
    assert meta["nodes"] == "cells" and meta["graph"] == "cell_faces" and meta["cell_types"] == ["quad", "triangle"]
    assert "18 cells as nodes" in capsys.readouterr().out
    src = data_dir / "rae2822_turb.su2"
    out = tmp_path / "rae"
    assert main(["partition", str(src), "--nodes", "cells", "-k", "4", "-m", "graph", "-o", str(out), "-q"]) == 0
    mesh = read_mesh(src, nodes="cells")
    meta = _check_folder(out, mesh, 4, mesh.edge_index())
    assert meta["num_nodes"] == 18042 + 4800
    assert meta["node_sets"] == {k: int(v.numel()) for k, v in mesh.node_sets.items()} and meta["node_sets"]["AIRFOIL"] > 0


def test_partition_openfoam_polyhedra(tmp_path):
    """An OpenFOAM case with polyhedra (hanging nodes) partitions by its vertices and by its cells."""
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    src = tmp_path / "snappy" / "case.foam"
    for nodes, k in (("points", 3), ("cells", 2)):
        out = tmp_path / nodes
        assert main(["partition", str(src), "--nodes", nodes, "-k", str(k), "-o", str(out), "-q"]) == 0
        mesh = read_mesh(src, nodes=nodes)
        meta = _check_folder(out, mesh, k, mesh.edge_index())
        assert meta["cell_types"] == ["hexahedron", "polyhedron", "wedge"]
        assert meta["num_nodes"] == (48 if nodes == "points" else 16)
