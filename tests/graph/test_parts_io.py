"""On-disk shard format: round trip, checksums, corruption detection, atomic writes, bad input."""
import json

import pytest
import torch

from meshshard.graph import build_halo, load_part, read_meta, save_parts, verify_parts
from tests.graph.graph_data import load_graph, make_partition


@pytest.fixture(scope="module")
def brick(data_dir):
    pts, ei = load_graph(data_dir, "brick_tets.su2")
    return pts, ei, make_partition(pts, ei, 3, "kdtree")


def _save(out, brick, **kw):
    pts, ei, part = brick
    edge_w = torch.arange(ei.shape[1], dtype=torch.float32).view(-1, 1)
    return save_parts(out, ei, part, node_data={"pos": pts, "id": torch.arange(pts.shape[0])},
                      edge_data={"w": edge_w}, progress=False, **kw)


def test_round_trip(tmp_path, brick):
    pts, ei, part = brick
    from meshshard._fileutil import sha256_file
    from meshshard.graph import FORMAT_VERSION
    from meshshard.partitioners import partition_quality

    out = _save(tmp_path / "s", brick, halo_hops=2, meta={"source": "brick_tets.su2", "source_sha256": "ab" * 32})
    meta = read_meta(out)
    assert meta["format_version"] == FORMAT_VERSION and meta["source_sha256"] == "ab" * 32
    quality = partition_quality(part, ei)
    assert set(meta["quality"]) == set(quality)
    assert meta["quality"]["edge_cut"] == quality["edge_cut"] and meta["quality"]["ghost_nodes"] == quality["ghost_nodes"]
    for name, digest in meta["files"].items():
        assert sha256_file(out / name) == digest
    assert meta["num_parts"] == 3 and meta["num_nodes"] == pts.shape[0] and meta["num_edges"] == ei.shape[1]
    assert meta["dim"] == 3 and meta["halo_hops"] == 2 and meta["method"] == part.method
    assert meta["source"] == "brick_tets.su2" and meta["sizes"] == part.sizes
    assert meta["node_features"] == {"pos": {"shape": [3], "dtype": "float64"}, "id": {"shape": [], "dtype": "int64"}}
    assert meta["edge_features"] == {"w": {"shape": [1], "dtype": "float32"}}
    assert set(meta["files"]) == {"partition.pt", "part_0000.pt", "part_0001.pt", "part_0002.pt"}
    assert verify_parts(out) == []
    from meshshard.partitioners import Partition

    assert Partition.load(out / "partition.pt") == part
    for r in range(3):
        p = load_part(out, r)
        lay = build_halo(ei, part, r, 2)
        assert p["rank"] == r and p["num_parts"] == 3 and p["halo_hops"] == 2
        for key in ("owned_ids", "ghost_ids", "ghost_owner", "ghost_owner_index", "node_hop", "edge_index", "edge_ids", "edge_hop_ptr"):
            assert torch.equal(p[key], getattr(lay, key)), key
        gids = torch.cat([p["owned_ids"], p["ghost_ids"]])
        assert torch.equal(p["node_data"]["pos"], pts[gids])
        assert torch.equal(p["node_data"]["id"], gids)
        assert torch.equal(p["edge_data"]["w"].view(-1).long(), p["edge_ids"])
        assert torch.equal(gids[p["edge_index"]], ei[:, p["edge_ids"]])


def test_same_input_gives_byte_identical_files(tmp_path, brick):
    # torch.save used to name the archive's records after the random temporary file
    a = read_meta(_save(tmp_path / "a", brick, halo_hops=2))["files"]
    b = read_meta(_save(tmp_path / "b", brick, halo_hops=2))["files"]
    assert a == b
    for name in a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_int32_edge_index_writes_the_same_files(tmp_path, brick):
    """preprocess keeps its edges as int32 (half the memory of the largest array): the files are the same bytes."""
    pts, ei, part = brick
    a = read_meta(_save(tmp_path / "a", brick, halo_hops=2))["files"]
    b = read_meta(_save(tmp_path / "b", (pts, ei.to(torch.int32), part), halo_hops=2))["files"]
    assert a == b
    for name in a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


def test_corruption_detected(tmp_path, brick):
    out = _save(tmp_path / "s", brick)
    victim = out / "part_0001.pt"
    data = bytearray(victim.read_bytes())
    data[100] ^= 0x01
    victim.write_bytes(bytes(data))
    assert verify_parts(out) == ["part_0001.pt: sha256 mismatch (file changed or corrupt)"]
    with pytest.raises(ValueError, match="sha256"):
        load_part(out, 1)
    load_part(out, 0)  # the intact parts still load
    (out / "part_0002.pt").unlink()
    assert "part_0002.pt: missing" in verify_parts(out)
    with pytest.raises(FileNotFoundError):
        load_part(out, 2)
    with pytest.raises(ValueError, match="rank"):
        load_part(out, 3)
    (out / "meta.json").write_text("{not json")
    assert len(verify_parts(out)) == 1
    with pytest.raises(ValueError, match="JSON"):
        read_meta(out)
    (out / "meta.json").unlink()
    with pytest.raises(FileNotFoundError, match="meta.json"):
        load_part(out, 0)


def test_interrupted_write_leaves_no_valid_output(tmp_path, brick, monkeypatch):
    out = _save(tmp_path / "s", brick)  # a complete earlier run in the same directory
    real_save = torch.save

    def save_then_fail(obj, f, *a, **k):
        if isinstance(obj, dict) and obj.get("rank") == 1:
            f.write(b"half a part")  # bytes already on disk when the process dies
            raise KeyboardInterrupt("simulated crash while writing part 1")
        return real_save(obj, f, *a, **k)

    monkeypatch.setattr(torch, "save", save_then_fail)
    before = (out / "part_0001.pt").read_bytes()
    with pytest.raises(KeyboardInterrupt):
        _save(out, brick, halo_hops=2)
    monkeypatch.undo()
    # No half part under the final name, no temp files, and no meta.json vouching for anything.
    assert (out / "part_0001.pt").read_bytes() == before
    assert not list(out.glob(".*.tmp"))
    assert not (out / "meta.json").exists()
    with pytest.raises(FileNotFoundError):
        read_meta(out)
    assert verify_parts(out) != []
    # A fresh directory interrupted the same way has no part_0001.pt at all.
    monkeypatch.setattr(torch, "save", save_then_fail)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path / "fresh", brick)
    monkeypatch.undo()
    assert not (tmp_path / "fresh" / "part_0001.pt").exists()
    assert (tmp_path / "fresh" / "part_0000.pt").exists() and not (tmp_path / "fresh" / "meta.json").exists()
    assert not list((tmp_path / "fresh").glob(".*.tmp"))


def test_quality_and_part_files_are_done_beside_the_halos(tmp_path, brick, monkeypatch):
    # the quality report and the part files' serialise + hash + write run in threads beside the halo building:
    # same checksums and report as computed in this thread, one part file in flight at a time
    import threading

    import meshshard.graph.parts_io as parts_io
    import meshshard.partitioners as partitioners

    pts, ei, part = brick
    real_save, real_quality = parts_io.atomic_torch_save, partitioners.partition_quality
    saved, in_flight, quality_threads = [], [], []

    def save(obj, path):
        in_flight.append(path.name)
        assert len(in_flight) == 1, in_flight
        saved.append((path.name, threading.current_thread() is threading.main_thread()))
        try:
            return real_save(obj, path)
        finally:
            in_flight.remove(path.name)

    def quality(*args, **kw):
        quality_threads.append(threading.current_thread() is threading.main_thread())
        return real_quality(*args, **kw)

    monkeypatch.setattr(parts_io, "atomic_torch_save", save)
    monkeypatch.setattr(partitioners, "partition_quality", quality)
    out = _save(tmp_path / "s", brick)
    assert saved == [("partition.pt", True), ("part_0000.pt", False), ("part_0001.pt", False), ("part_0002.pt", False)]
    assert quality_threads == [False]
    monkeypatch.undo()
    meta = read_meta(out)
    assert meta["quality"] == real_quality(part, ei) and verify_parts(out) == []
    assert meta["files"] == read_meta(_save(tmp_path / "t", brick))["files"]


def test_bad_input(tmp_path, brick):
    pts, ei, part = brick
    n = pts.shape[0]
    with pytest.raises(ValueError, match="node_data"):
        save_parts(tmp_path / "a", ei, part, node_data={"pos": pts[:-1]}, progress=False)
    with pytest.raises(ValueError, match="edge_data"):
        save_parts(tmp_path / "a", ei, part, edge_data={"w": torch.zeros(ei.shape[1] + 1)}, progress=False)
    bad = ei.clone()
    bad[1, 0] = n
    with pytest.raises(ValueError, match="outside"):
        save_parts(tmp_path / "a", bad, part, progress=False)
    from meshshard.partitioners import Partition

    with pytest.raises(ValueError, match="outside"):  # a partition of fewer nodes than the graph has
        save_parts(tmp_path / "a", ei, Partition(part.assignment[:-5], 3), progress=False)
    with pytest.raises(ValueError, match="halo_hops"):
        save_parts(tmp_path / "a", ei, part, halo_hops=0, progress=False)
    with pytest.raises(TypeError, match="Partition"):
        save_parts(tmp_path / "a", ei, part.assignment, progress=False)
    with pytest.raises(TypeError, match="integer"):
        save_parts(tmp_path / "a", ei.double(), part, progress=False)
    assert not (tmp_path / "a" / "meta.json").exists()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "meta.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(ValueError, match="meta.json"):
        read_meta(tmp_path / "b")


def test_rewriting_with_fewer_parts_leaves_no_stale_part(tmp_path, brick):
    pts, ei, _ = brick
    out = _save(tmp_path / "s", (pts, ei, make_partition(pts, ei, 4, "hilbert")))
    assert (out / "part_0003.pt").exists()
    _save(out, brick)  # 3 parts into the same folder
    assert sorted(p.name for p in out.glob("part_*.pt")) == ["part_0000.pt", "part_0001.pt", "part_0002.pt"]
    assert read_meta(out)["num_parts"] == 3 and verify_parts(out) == []
