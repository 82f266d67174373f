"""`meshshard info`: tables for an intact shard folder, non-zero exit naming a damaged file."""
import json

import pytest

from meshshard.cli import main


@pytest.fixture()
def shards(data_dir, tmp_path):
    out = tmp_path / "shards"
    assert main(["partition", str(data_dir / "rae2822_turb.su2"), "-k", "3", "-m", "graph", "-o", str(out), "-q"]) == 0
    return out


def test_info_tables(shards, capsys):
    capsys.readouterr()
    assert main(["info", str(shards), "-q"]) == 0
    out = capsys.readouterr().out
    for needle in ("3 parts of 13,937 nodes", "owned", "ghosts", "neighbours", "quality", "checksums: all 4 files OK",
                   "rae2822_turb.su2"):
        assert needle in out, needle


def test_info_json(shards, capsys):
    capsys.readouterr()
    assert main(["info", str(shards), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] and len(data["parts"]) == 3
    assert sum(p["owned"] for p in data["parts"]) == 13937
    assert all(p["ghosts"] > 0 and p["neighbours"] >= 1 for p in data["parts"])


def test_info_detects_corrupt_part(shards, capsys):
    path = shards / "part_0001.pt"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["info", str(shards)]) == 1
    err = capsys.readouterr().err
    assert "part_0001.pt" in err and "sha256" in err and "part_0000.pt" not in err


def test_info_detects_missing_part(shards, capsys):
    (shards / "part_0002.pt").unlink()
    assert main(["info", str(shards)]) == 1
    assert "part_0002.pt: missing" in capsys.readouterr().err


def test_info_on_non_shard_folders(tmp_path, capsys):
    assert main(["info", str(tmp_path)]) == 2
    assert "meta.json" in capsys.readouterr().err
    assert main(["info", str(tmp_path / "nothing")]) == 2
    (tmp_path / "meta.json").write_text("{not json")
    assert main(["info", str(tmp_path)]) == 2
    assert "JSON" in capsys.readouterr().err


def test_info_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["info", "--help"])
    assert e.value.code == 0 and "checksums" in capsys.readouterr().out


@pytest.fixture()
def dataset(data_dir, tmp_path):
    out = tmp_path / "ds"
    assert main(["preprocess", str(data_dir / "cylinder_crossflow_re35.vtu"), str(data_dir / "naca0012_inviscid.su2"),
                 "-k", "2", "-m", "hilbert", "-o", str(out), "--features", "pos", "--targets", "pos[1]",
                 "--quiet"]) == 0
    return out


def test_info_on_a_preprocessed_dataset(dataset, capsys):
    capsys.readouterr()
    assert main(["info", str(dataset), "-q"]) == 0
    out = capsys.readouterr().out
    for needle in ("preprocessed dataset", "2 sample(s), 2 parts each", "00000_cylinder_crossflow_re35",
                   "00001_naca0012_inviscid", "14,831", "5,233", "edge cut", "x: pos_0", "y: pos_1",
                   "edge_attr: norm", "checksums: all 8 files of 2 sample(s) OK", "'airfoil'"):
        assert needle in out, (needle, out)
    assert main(["info", str(dataset), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["verified"] and [s["nodes"] for s in data["samples"]] == [14831, 5233]


def test_info_on_a_damaged_dataset(dataset, capsys):
    bad = dataset / "00001_naca0012_inviscid" / "part_0000.pt"
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 3] ^= 0x01
    bad.write_bytes(bytes(raw))
    capsys.readouterr()
    assert main(["info", str(dataset), "-q"]) == 1
    err = capsys.readouterr().err
    assert "00001_naca0012_inviscid/part_0000.pt" in err and "sha256" in err and "00000_" not in err


def test_info_names_the_ghost_counts(shards, data_dir, capsys):
    """Per-part "ghosts", their sum over parts (= the quality report's 1-hop ghost_nodes at one
    halo hop) and the distinct ghost nodes (the plot's black dots) are printed and named apart."""
    from meshshard.io import read_mesh
    from meshshard.partitioners import Partition
    from meshshard.viz import ghost_mask

    capsys.readouterr()
    assert main(["info", str(shards), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    total = sum(p["ghosts"] for p in data["parts"])
    assert total == data["meta"]["quality"]["ghost_nodes"]
    part = Partition.load(shards / "partition.pt")
    distinct = int(ghost_mask(part.assignment, read_mesh(data_dir / "rae2822_turb.su2").edge_index()).sum())
    assert data["distinct_ghosts"] == distinct < total
    assert main(["info", str(shards), "-q"]) == 0
    out = capsys.readouterr().out
    assert f"ghosts: {total:,} summed over parts, {distinct:,} distinct nodes" in out
    assert "ghosts (1-hop, sum over parts)" in out and "ghost_nodes" not in out


def test_info_of_a_mesh_file_and_cells_as_nodes(data_dir, shards, capsys):
    from meshshard.io import cell_adjacency, read_mesh

    src = data_dir / "rae2822_turb.su2"
    capsys.readouterr()
    assert main(["info", str(src)]) == 0
    out = capsys.readouterr().out
    for needle in ("13,937 nodes", "graph mesh_edges", "triangle 18,042, quad 4,800", "boundary cells: line 232",
                   "AIRFOIL (192)", "(nodes each)"):
        assert needle in out, (needle, out)
    assert main(["info", str(src), "--nodes", "cells", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["nodes"] == "cells" and data["graph"] == "cell_faces" and data["num_nodes"] == 22842
    assert data["num_edges"] == cell_adjacency(read_mesh(src).cells).shape[1]
    assert data["node_sets"]["AIRFOIL"] == 192  # the cells owning one of the 192 airfoil lines
    # a folder's nodes are its own
    assert main(["info", str(shards), "--nodes", "cells"]) == 2
    assert "was written with nodes = points; drop --nodes" in capsys.readouterr().err


def test_info_counts_polyhedra(tmp_path, capsys):
    from tests.io._openfoam_case import write_openfoam_polyhedra

    write_openfoam_polyhedra(tmp_path / "snappy")
    capsys.readouterr()
    assert main(["info", str(tmp_path / "snappy" / "case.foam"), "--nodes", "cells", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["cells"] == {"hexahedron": 10, "wedge": 4, "polyhedron": 2} and data["num_nodes"] == 16
    assert data["boundary_cells"] == {"quad": 30, "polygon5": 6, "triangle": 8}
    assert data["num_edges"] == 2 * 27 and data["node_sets"] == {"inlet": 2, "outlet": 8, "walls": 16}
    assert main(["info", str(tmp_path / "snappy" / "case.foam")]) == 0
    assert "cells: hexahedron 10, wedge 4, polyhedron 2" in capsys.readouterr().out
