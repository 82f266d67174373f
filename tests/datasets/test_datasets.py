"""MeshDataset on real meshes; preprocessed + ShardedMeshDataset rows and statistics equal the
single-process dataset on 2 and 3 ranks (world size 1 is covered by the CLI and example tests)."""
import numpy as np
import pytest
import torch

from meshshard.testing import run_distributed

FIELDS = (["velocity"], ["pressure", "vorticity_mag"])  # vector field flattens to 3 columns


def _marker_files(data_dir):
    return [data_dir / "naca0012_inviscid.su2", data_dir / "rae2822_turb.su2", data_dir / "cylinder_crossflow_re35.vtu"]


def test_mesh_dataset_fields_and_stats(data_dir):
    import meshio

    from meshshard.datasets import MeshDataset

    vtu = data_dir / "cylinder_crossflow_re35.vtu"
    ds = MeshDataset([vtu], *FIELDS, dtype=torch.float64)
    d = ds[0]
    raw = meshio.read(vtu)
    n = raw.points.shape[0]
    assert d.x.shape == (n, 3) and d.y.shape == (n, 2) and d.pos.shape == (n, 2)
    np.testing.assert_array_equal(d.x.numpy(), raw.point_data["velocity"].astype(np.float64))
    np.testing.assert_array_equal(d.y[:, 1].numpy(), raw.point_data["vorticity_mag"].astype(np.float64))
    src, dst = d.edge_index
    torch.testing.assert_close(d.edge_attr[:, :2], d.pos[src] - d.pos[dst], rtol=0, atol=0)
    torch.testing.assert_close(d.edge_attr[:, 2], (d.pos[src] - d.pos[dst]).norm(dim=1), rtol=0, atol=0)
    assert d.node_type.shape == (n, 1) and bool((d.node_type == 1).all())  # no markers: all interior
    # statistics = plain numpy mean / population std; the constant z-velocity only gets centred
    s = ds.stats
    np.testing.assert_allclose(s.x.mean.numpy(), raw.point_data["velocity"].astype(np.float64).mean(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(s.y.std.numpy()[1], raw.point_data["vorticity_mag"].astype(np.float64).std(), rtol=1e-12)
    assert s.edge_attr.count == d.edge_index.shape[1]
    x_in, e_in, y_in = ds.model_inputs(d)
    np.testing.assert_allclose(y_in.mean(0).numpy(), 0, atol=1e-10)
    np.testing.assert_allclose(y_in.std(0, unbiased=False).numpy(), 1, rtol=1e-10)
    assert torch.equal(x_in[:, 2], torch.zeros(n, dtype=torch.float64))  # constant column centred, not blown up
    assert x_in.shape == (n, 3 + 1)
    # component selection and a clear error for a missing field
    assert MeshDataset([vtu], ["velocity[0,1]"], ["pressure"])[0].x.shape == (n, 2)
    with pytest.raises(ValueError, match="temperature"):
        MeshDataset([vtu], ["temperature"], [])[0]
    with pytest.raises(ValueError, match="components"):
        MeshDataset([vtu], ["velocity[5]"], [])[0]


def test_node_types_from_markers_over_several_files(data_dir):
    from meshshard.datasets import MeshDataset
    from meshshard.io import read_mesh

    files = _marker_files(data_dir)
    ds = MeshDataset(files, ["pos"], ["pos[1]"], dtype=torch.float64)
    assert ds.node_types == ["AIRFOIL", "FARFIELD", "airfoil", "farfield"]
    naca = ds[0]
    mesh = read_mesh(files[0])
    types = naca.node_type.argmax(1)
    assert naca.node_type.shape[1] == 5 and bool((naca.node_type.sum(1) == 1).all())
    assert torch.equal(torch.nonzero(types == 3).flatten(), mesh.node_sets["airfoil"])
    assert int((types == 0).sum()) == mesh.num_nodes - len(set(mesh.node_sets["airfoil"].tolist()) | set(mesh.node_sets["farfield"].tolist()))
    # stats merge over files = stats of the concatenation
    allx = torch.cat([ds[i].pos.double() for i in range(len(ds))])
    torch.testing.assert_close(ds.stats.x.mean, allx.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ds.stats.x.std, allx.std(0, unbiased=False), rtol=1e-12, atol=1e-12)


def _record_opened_files():
    """Patch builtins.open (used by torch.load and sha256_file) to record every .pt file opened."""
    import builtins

    opened = []
    inner = builtins.open

    def recording_open(file, *args, **kwargs):
        if str(file).endswith(".pt"):
            opened.append(str(file))
        return inner(file, *args, **kwargs)

    builtins.open = recording_open
    return opened


def _sharded_rank(rank, world_size, roots, references, bad):
    from pathlib import Path

    import torch.nn.functional as F

    from meshshard.datasets import ShardedMeshDataset, model_inputs
    from meshshard.distributed import Replicate, Shard, new_group
    from meshshard.tensor import ShardTensor

    # A bad file on the last rank only: every rank raises, naming that rank and the cause.
    last = world_size - 1
    on_last = rf"invalid input on rank\(s\) \[{last}\] \(rank {last}: "
    with pytest.raises(ValueError, match=on_last + r"ValueError: .*meta.json: not valid JSON"):
        ShardedMeshDataset(bad["meta"] if rank == last else roots[0])
    ds = ShardedMeshDataset(bad["part"])
    with pytest.raises(ValueError, match=r"ShardedGraph.load: " + on_last + rf"ValueError: .*part_{last:04d}.pt: sha256"):
        ds[0]

    opened = _record_opened_files()
    out = {}
    for root, (samples, stats, node_types) in zip(roots, references):
        ds = ShardedMeshDataset(root)
        for i in range(len(ds)):
            ds[i]
        # each rank reads only its own part file of every sample, nothing else
        names = sorted({Path(f).name for f in opened})
        assert names == [f"part_{rank:04d}.pt"], names
        assert len({str(Path(f).parent) for f in opened}) == len(ds)
        opened.clear()
        assert ds.stats.equal(stats), "stored statistics differ from the single-process dataset's"
        assert ds.node_types == node_types
        re = ds.compute_stats()  # from owned rows on every rank, all-reduced
        assert re.equal(stats, rtol=1e-12, atol=1e-12)
        for i in range(len(ds)):
            s, d = ds[i], samples[i]
            own = s.owned_ids
            for key in ("x", "y", "pos", "node_type"):
                st = getattr(s, key)  # a ShardTensor of the owned rows, sharded like the graph
                assert isinstance(st, ShardTensor) and st.placements == (Shard(0),), key
                assert st.shard_sizes() == s.graph.sizes and st.shape == getattr(d, key).shape, key
                assert torch.equal(st.to_local(), getattr(d, key)[own]), f"{key} rows of sample {i}"
            assert torch.equal(s.edge_attr, d.edge_attr[s.graph.edge_ids])
            xs, es, ys = ds.model_inputs(s)
            xr, er, yr = model_inputs(d, stats)
            assert torch.equal(xs.to_local(), xr[own]) and torch.equal(es, er[s.graph.edge_ids])
            assert torch.equal(ys.to_local(), yr[own])
            # The loop reads like single-process code: a row-wise model and the loss of the whole mesh.
            torch.manual_seed(i)
            lin = torch.nn.Linear(xr.shape[1], yr.shape[1]).double()
            loss, ref = F.mse_loss(lin(xs), ys), F.mse_loss(lin(xr), yr)
            assert loss.placements == (Replicate(),)
            torch.testing.assert_close(loss.to_local(), ref, rtol=1e-10, atol=1e-12)
        out[str(root)] = int(sum(ds[i].graph.num_owned for i in range(len(ds))))
    # Over an explicit group the items' ShardTensors live on a mesh of that group.
    ds_g, s_w = ShardedMeshDataset(roots[0], group=new_group(list(range(world_size)))), ShardedMeshDataset(roots[0])[0]
    s_g = ds_g[0]
    assert s_g.x.device_mesh.size() == world_size and torch.equal(s_g.x.to_local(), s_w.x.to_local())
    ones = torch.ones(s_w.x.shape, dtype=torch.float64)  # plain, global shape: each rank pairs its own rows
    torch.testing.assert_close(F.l1_loss(s_g.x, ones).to_local(), F.l1_loss(s_w.x, ones).to_local())
    return out


@pytest.fixture(scope="module")
def references(data_dir):
    """Single-process datasets (float64) of both test datasets: samples, stats, node types."""
    from meshshard.datasets import MeshDataset

    out = []
    for files, feats, targs in (([data_dir / "cylinder_crossflow_re35.vtu"], *FIELDS),
                                (_marker_files(data_dir), ["pos"], ["pos[1]"])):
        ds = MeshDataset(files, feats, targs, dtype=torch.float64)
        out.append(([ds[i] for i in range(len(ds))], ds.stats, ds.node_types))
    return out


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory, data_dir):
    from meshshard.datasets import preprocess_dataset

    vtu = data_dir / "cylinder_crossflow_re35.vtu"
    roots = {}
    for k in (2, 3):
        base = tmp_path_factory.mktemp(f"ds{k}")
        preprocess_dataset([vtu], base / "fields", k, *FIELDS, method="kdtree", halo_hops=2, dtype="float64", progress=False)
        preprocess_dataset(_marker_files(data_dir), base / "markers", k, ["pos"], ["pos[1]"], method="kdtree",
                           dtype="float64", progress=False)
        roots[k] = base
    return roots


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_dataset_equals_single_process(preprocessed, references, world_size, tmp_path):
    import shutil

    base = preprocessed[world_size]
    bad = {k: tmp_path / k for k in ("meta", "part")}
    for d in bad.values():
        shutil.copytree(base / "fields", d)
    (bad["meta"] / "meta.json").write_text("{ not json")
    victim = next(bad["part"].glob(f"*/part_{world_size - 1:04d}.pt"))
    victim.write_bytes(victim.read_bytes()[:-10])
    res = run_distributed(_sharded_rank, world_size, timeout=220,
                          args=([base / "fields", base / "markers"], references, bad))
    # every node is owned by exactly one rank
    total = {k: sum(r[k] for r in res) for k in res[0]}
    assert total[str(base / "fields")] == 14831
    assert total[str(base / "markers")] == 5233 + 13937 + 14831


def test_sharded_dataset_on_another_number_of_ranks_merges_its_parts(preprocessed, references):
    """One process reads a 2-part dataset whole (both parts merged on load; tests/datasets/test_sharded.py
    trains on 1-3 ranks); a folder that is no dataset is refused."""
    from meshshard.datasets import ShardedMeshDataset

    ds = ShardedMeshDataset(preprocessed[2] / "fields")  # world size 1 here
    s, d = ds[0], references[0][0][0]
    assert s.graph.world_size == 1 and ds.meta["num_parts"] == 2 and "1 (2 parts stored)" in repr(ds)
    assert torch.equal(s.x.to_local(), d.x[s.owned_ids]) and torch.equal(s.edge_attr, d.edge_attr[s.graph.edge_ids])
    assert torch.equal(s.owned_ids.sort().values, torch.arange(d.num_nodes))
    with pytest.raises(FileNotFoundError, match="meta.json"):
        ShardedMeshDataset(preprocessed[2])  # not a dataset folder


def test_point_cloud_files_get_a_knn_graph(tmp_path, data_dir):
    """A file without cells (.npz point cloud with a point field): MeshDataset and preprocess build
    the same kNN graph, so statistics and edges agree; too few points give a clear error."""
    from meshshard.datasets import DatasetStats, MeshDataset, preprocess_dataset, read_dataset_meta
    from meshshard.graph import load_part
    from meshshard.io import knn_graph

    pts = np.load(data_dir / "drivaer_body_points.npz")["points"][:3000].astype(np.float64)
    np.savez(tmp_path / "car.npz", points=pts, height=pts[:, 2] ** 2)
    ds = MeshDataset([tmp_path / "car.npz"], ["pos"], ["height"], knn=5, dtype=torch.float64)
    d = ds[0]
    assert torch.equal(d.edge_index, knn_graph(pts, 5)) and d.edge_attr.shape == (5 * 3000, 4)
    out = tmp_path / "out"
    preprocess_dataset([tmp_path / "car.npz"], out, 2, ["pos"], ["height"], knn=5, dtype="float64", progress=False)
    meta = read_dataset_meta(out)
    assert meta["knn"] == 5 and meta["samples"][0]["num_edges"] == 5 * 3000
    assert DatasetStats.from_dict(meta["stats"]).equal(ds.stats)
    p = load_part(out / meta["samples"][0]["dir"], 1)
    ids = torch.cat([p["owned_ids"], p["ghost_ids"]])
    assert torch.equal(ids[p["edge_index"]], d.edge_index[:, p["edge_ids"]])
    np.savez(tmp_path / "tiny.npz", points=pts[:4], height=pts[:4, 2])
    with pytest.raises(ValueError, match=r"tiny.npz: knn: k must be in \[1, 3\] for 4 points"):
        MeshDataset([tmp_path / "tiny.npz"], ["pos"], ["height"])[0]


def test_output_folder_of_another_kind_is_refused(tmp_path, data_dir):
    from meshshard.datasets import preprocess_dataset
    from meshshard.graph import save_parts
    from meshshard.io import read_mesh
    from meshshard.partitioners import partition

    vtu = data_dir / "cylinder_crossflow_re35.vtu"
    mesh = read_mesh(vtu)
    shards = tmp_path / "shards"
    save_parts(shards, mesh.edge_index(), partition(mesh.points, 2), progress=False)
    before = sorted(p.name for p in shards.iterdir())
    with pytest.raises(ValueError, match="meshshard partition"):
        preprocess_dataset([vtu], shards, 2, ["velocity"], ["pressure"], progress=False)
    assert sorted(p.name for p in shards.iterdir()) == before  # nothing deleted or added
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="notes.txt"):
        preprocess_dataset([vtu], other, 2, ["velocity"], ["pressure"], progress=False)
    with pytest.raises(ValueError, match="not a folder"):
        preprocess_dataset([vtu], other / "notes.txt", 2, ["velocity"], ["pressure"], progress=False)


def test_synthetic_cylinder_channel():
    import numpy as np

    from meshshard.datasets.synthetic import cylinder_channel_mesh, potential_flow_fields

    mesh = cylinder_channel_mesh(3000)
    assert 2000 < mesh.num_nodes < 4500
    assert {k for k, v in mesh.node_sets.items() if v.numel()} == {"cylinder", "inlet", "outlet", "walls"}
    cyl = mesh.node_sets["cylinder"].numpy()
    rel = mesh.points[cyl] - np.array([3.0, 0.0])
    np.testing.assert_allclose(np.linalg.norm(rel, axis=1), 0.5, atol=1e-6)
    vel = mesh.point_data["velocity"]
    normal = (vel[cyl] * rel).sum(1) / 0.5
    np.testing.assert_allclose(normal, 0, atol=1e-6)  # no flow through the cylinder
    far = potential_flow_fields(np.array([[1e4, 3.0]]))
    np.testing.assert_allclose(far["velocity"], [[1.0, 0.0]], atol=1e-6)
    assert mesh.edge_index().shape[1] > 5 * mesh.num_nodes
