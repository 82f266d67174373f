"""preprocess_dataset: whole samples only (an interrupted or failed run leaves no partial sample
folder and no empty output folder, and a rerun completes), sample names, the early field check."""
import shutil

import pytest

import meshshard.graph.parts_io as parts_io
from meshshard.datasets import preprocess_dataset, read_dataset_meta, verify_dataset
from meshshard.datasets.preprocess import sample_dir_name


def _cases(tmp_path, data_dir, names):
    src = tmp_path / "cases"
    src.mkdir()
    for n in names:
        (src / n).symlink_to(data_dir / "naca0012_inviscid.su2")
    return [src / n for n in names]


def _interrupt_after_first_part(monkeypatch, sample):
    """Make save_parts raise KeyboardInterrupt right after it wrote part_0000.pt of ``sample``."""
    real = parts_io.atomic_torch_save

    def save(obj, path):
        digest = real(obj, path)  # save_parts records it as the file's checksum
        if path.name == "part_0000.pt" and sample in str(path):
            raise KeyboardInterrupt
        return digest

    monkeypatch.setattr(parts_io, "atomic_torch_save", save)


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_interrupted_sample_leaves_nothing_partial_and_rerun_completes(tmp_path, data_dir, monkeypatch):
    files = _cases(tmp_path, data_dir, ["a.su2", "b.su2"])
    out = tmp_path / "out"
    kw = dict(num_parts=2, features=["pos"], targets=["pos[0]"], progress=False)
    _interrupt_after_first_part(monkeypatch, "00001_b")
    with pytest.raises(KeyboardInterrupt):
        preprocess_dataset(files, out, **kw)
    # the finished first sample stays (a rerun resumes from it); nothing of the second, no temporaries
    assert [p.name for p in out.iterdir()] == ["00000_a"]
    assert {"meta.json", "partition.pt", "part_0000.pt", "part_0001.pt"} == {p.name for p in (out / "00000_a").iterdir()}
    monkeypatch.undo()
    res = preprocess_dataset(files, out, **kw)
    assert (res.written, res.skipped) == (["00001_b"], ["00000_a"])
    assert verify_dataset(out) == []


def test_failed_first_sample_removes_the_output_folder_it_made(tmp_path, data_dir, monkeypatch):
    files = _cases(tmp_path, data_dir, ["a.su2"])
    out = tmp_path / "new" / "out"
    _interrupt_after_first_part(monkeypatch, "00000_a")
    with pytest.raises(KeyboardInterrupt):
        preprocess_dataset(files, out, 2, ["pos"], [], progress=False)
    assert list(tmp_path.iterdir()) == [tmp_path / "cases"], "the run made new/out: it must remove both"
    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(KeyboardInterrupt):
        preprocess_dataset(files, existing, 2, ["pos"], [], progress=False)
    assert existing.is_dir() and list(existing.iterdir()) == [], "a folder that was there before stays"


def test_failed_rerun_keeps_the_finished_dataset(tmp_path, data_dir, monkeypatch):
    files = _cases(tmp_path, data_dir, ["a.su2", "b.su2"])
    out = tmp_path / "out"
    preprocess_dataset(files, out, 2, ["pos"], [], progress=False)
    before = _listing(out)
    meta = (out / "meta.json").read_bytes()
    # a rerun with other settings rewrites samples: interrupted in its first one, nothing changed yet
    _interrupt_after_first_part(monkeypatch, "00000_a")
    with pytest.raises(KeyboardInterrupt):
        preprocess_dataset(files, out, 3, ["pos"], [], progress=False)
    assert _listing(out) == before and (out / "meta.json").read_bytes() == meta
    assert verify_dataset(out) == []


def test_rerun_after_a_killed_run_removes_its_temporary_folder(tmp_path, data_dir):
    files = _cases(tmp_path, data_dir, ["a.su2"])
    out = tmp_path / "out"
    stale = out / ".00000_a.0123abcd.tmp"  # what a killed worker leaves
    stale.mkdir(parents=True)
    (stale / "part_0000.pt").write_bytes(b"partial")
    preprocess_dataset(files, out, 2, ["pos"], [], progress=False)
    assert sorted(p.name for p in out.iterdir()) == ["00000_a", "meta.json"]


def test_sample_names_keep_the_whole_stem():
    assert sample_dir_name(0, "/x/box_U1.0.vtu") == "00000_box_U1.0"
    assert sample_dir_name(1, "box_U1.5.vtu") == "00001_box_U1.5"
    assert sample_dir_name(2, "case.vol.gz") == "00002_case"  # a double suffix meshio reads
    assert sample_dir_name(3, "we ird#name.su2") == "00003_we_ird_name"


def test_samples_with_dots_in_their_names_get_their_own_folders(tmp_path, data_dir):
    files = _cases(tmp_path, data_dir, ["box_U1.0.su2", "box_U1.5.su2"])
    preprocess_dataset(files, tmp_path / "out", 2, ["pos"], [], progress=False)
    assert [s["dir"] for s in read_dataset_meta(tmp_path / "out")["samples"]] == ["00000_box_U1.0", "00001_box_U1.5"]


def test_missing_fields_are_reported_for_every_file_before_any_work(tmp_path, data_dir, monkeypatch):
    src = tmp_path / "cases"
    src.mkdir()
    shutil.copy(data_dir / "cylinder_crossflow_re35.vtu", src / "a_flow.vtu")
    (src / "b_mesh.su2").symlink_to(data_dir / "naca0012_inviscid.su2")
    (src / "c_mesh.su2").symlink_to(data_dir / "cylinder_laminar.su2")

    def no_partition(*a, **k):
        raise AssertionError("partitioned before the field check")

    monkeypatch.setattr("meshshard.partitioners.partition", no_partition)
    out = tmp_path / "out"
    with pytest.raises(ValueError) as err:
        preprocess_dataset(src, out, 2, ["velocity[0,1]", "pos"], ["pressure", "nosuch"], progress=False)
    msg = str(err.value)
    assert "3 input files" in msg
    for f in ("a_flow.vtu", "b_mesh.su2", "c_mesh.su2"):
        assert f in msg and "'nosuch' not found (targets)" in msg.split(f)[1].split("\n")[0]
    b_line = msg.split("b_mesh.su2")[1].split("\n")[0]
    assert "'velocity' not found (features)" in b_line and "'pressure' not found (targets)" in b_line
    assert "'velocity'" not in msg.split("a_flow.vtu")[1].split("\n")[0].split("available")[0]
    assert not out.exists(), "a run that fails before its first sample leaves no output folder"


def _triangles_vtu(path, with_type: bool):
    import meshio
    import numpy as np

    pts = np.array([(i, j, 0.0) for j in range(4) for i in range(4)])
    tris = [(a, a + 1, a + 5) for a in (0, 1, 2, 4, 5, 6, 8, 9, 10)] + [(a, a + 5, a + 4) for a in (0, 1, 2, 4, 5, 6, 8, 9, 10)]
    on_edge = ((pts[:, 0] % 3 == 0) | (pts[:, 1] % 3 == 0)).astype(np.int32)
    point_data = {"p": pts[:, 0].copy()}
    if with_type:
        point_data["node_type"] = on_edge * np.where(pts[:, 0] == 0, 4, 6)  # inflow 4 on x = 0, walls 6
    meshio.write(path, meshio.Mesh(pts, [("triangle", np.array(tris))], point_data=point_data))
    return point_data


def test_no_boundary_information_warns_once_naming_the_fix(tmp_path):
    src = tmp_path / "cases"
    src.mkdir()
    for n in ("a.vtu", "b.vtu"):
        _triangles_vtu(src / n, with_type=False)
    with pytest.warns(UserWarning, match=r"2 of 2 samples have no boundary information.*--node-type FIELD") as rec:
        preprocess_dataset(src, tmp_path / "out", 2, ["p"], [], progress=False)
    assert sum("boundary information" in str(w.message) for w in rec) == 1


def test_node_types_from_a_field(tmp_path, recwarn):
    import torch

    from meshshard.graph import load_part

    src = tmp_path / "cases"
    src.mkdir()
    fields = _triangles_vtu(src / "a.vtu", with_type=True)
    out = tmp_path / "out"
    preprocess_dataset(src, out, 2, ["p"], [], progress=False, node_type_field="node_type")
    assert not [w for w in recwarn if "boundary information" in str(w.message)]
    meta = read_dataset_meta(out)
    assert meta["node_types"] == ["node_type=4", "node_type=6"] and meta["node_type_field"] == "node_type"
    want = torch.tensor([{0: 0, 4: 1, 6: 2}[int(v)] for v in fields["node_type"]])
    sample = out / meta["samples"][0]["dir"]
    got = torch.full((16,), -1)
    for r in range(2):
        part = load_part(sample, r)
        ids = part["owned_ids"]
        got[ids] = part["node_data"]["node_type_id"][:len(ids)]
    assert got.tolist() == want.tolist()


@pytest.mark.timeout(200)
def test_worker_log_lines_are_logged_again_in_the_parent(caplog):
    """preprocess's worker processes (--workers > 1) send their log records (numba's compile notice)
    to the parent, which logs them through its own handlers: the CLI prints them above its progress
    bar instead of splicing them into it from another process."""
    import logging
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    from logging.handlers import QueueListener

    from meshshard.datasets.preprocess import _log_to_queue, _RelogHandler

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    listener = QueueListener(queue, _RelogHandler())
    listener.start()
    with caplog.at_level(logging.WARNING, logger="meshshard"):
        with ProcessPoolExecutor(1, mp_context=ctx, initializer=_log_to_queue, initargs=(queue,)) as pool:
            pool.submit(logging.Logger.warning, logging.getLogger("meshshard"), "compiling in a worker").result()
        listener.stop()
    assert [r.getMessage() for r in caplog.records if r.name == "meshshard"] == ["compiling in a worker"]
