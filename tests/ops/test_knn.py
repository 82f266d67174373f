"""Sharded kNN / radius graph: equal to a single-process reference on real point clouds, at 1-4 ranks."""
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from meshshard.ops.knn import knn_reference, radius_reference, sharded_knn, sharded_radius_graph
from meshshard.testing import run_distributed

TIMEOUT = 300


# --------------------------------------------------------------------------- data
def _load(data_dir: Path):
    """Three real clouds: DrivAer (20k subsample), a 2-D mesh with duplicated points, a 3-D lattice-like mesh."""
    import meshshard as ms

    rng = np.random.default_rng(0)
    car = np.load(data_dir / "drivaer_body_points.npz")["points"]
    car = car[np.sort(rng.choice(len(car), 20000, replace=False))]
    cyl = ms.read_mesh(data_dir / "cylinder_laminar.su2").points
    dup = cyl[rng.choice(len(cyl), 300, replace=False)]
    cyl = np.concatenate([cyl, dup, dup[:40]])  # double and triple points
    cyl = cyl[rng.permutation(len(cyl))]
    brick = ms.read_mesh(data_dir / "brick_tets.su2").points  # many exact distance ties
    return {"car": torch.from_numpy(car), "cyl": torch.from_numpy(cyl), "brick": torch.from_numpy(brick)}


def _split(points: torch.Tensor, world: int, how: str, seed: int = 0):
    """Reorder points into rank blocks; returns (ordered points, sizes).

    ``geometric``: sorted along x into uneven slabs, with a 3-point part and (W >= 3) an empty one.
    ``random``: a random assignment (every rank's box spans the whole cloud).
    """
    n = points.shape[0]
    if how == "geometric":
        order = torch.argsort(points[:, 0], stable=True)
        if world == 1:
            sizes = [n]
        else:
            sizes = [3] + ([0] if world >= 3 else [])
            rest = world - len(sizes)
            w = np.arange(1, rest + 1, dtype=float)
            cut = np.floor(w / w.sum() * (n - 3)).astype(int)
            cut[-1] = n - 3 - cut[:-1].sum()
            sizes = sizes + cut.tolist()
            sizes = sizes[1:] + sizes[:1]  # the small part is not first
    else:
        g = torch.Generator().manual_seed(seed)
        assign = torch.randint(0, world, (n,), generator=g)
        order = torch.argsort(assign, stable=True)
        sizes = torch.bincount(assign, minlength=world).tolist()
    return points[order], sizes


KNN_CASES = {"geometric": [(1, True), (8, True), (8, False), (32, True)], "random": [(8, True), (32, False)]}
RADIUS_CASES = {"geometric": [(True, None), (False, None), (True, 5)], "random": [(True, None)]}


def _radius(ordered):
    """A radius giving about 10-20 neighbours (median 12th-neighbour distance of a spread sample)."""
    sample = ordered[:: max(1, len(ordered) // 200)]
    return float(torch.cdist(sample, ordered).kthvalue(12, dim=1).values.median())


def _mine(edge_index, sizes, rank):
    lo, hi = sum(sizes[:rank]), sum(sizes[: rank + 1])
    keep = (edge_index[1] >= lo) & (edge_index[1] < hi)
    return edge_index[:, keep]


# --------------------------------------------------------------------------- one spawned function per world size
def _check_world(rank, world, data_dir):
    import meshshard.distributed as msd

    clouds = _load(Path(data_dir))
    out = {}  # (kind, cloud, split, param, loop, max) -> (edge_index, stats); compared in the parent
    for name, pts in clouds.items():
        for how in ("geometric", "random"):
            ordered, sizes = _split(pts, world, how)
            lo = sum(sizes[:rank])
            mine = ordered[lo:lo + sizes[rank]]
            for k, loop in KNN_CASES[how]:
                ei, st = sharded_knn(mine, k, loop=loop, return_stats=True)
                out[("knn", name, how, k, loop, None)] = (ei, st)
            r = _radius(ordered)
            for loop, mnn in RADIUS_CASES[how]:
                out[("radius", name, how, r, loop, mnn)] = (sharded_radius_graph(mine, r, loop=loop, max_num_neighbors=mnn), None)

    # the torch (brute-force, GPU) path on CPU, on a smaller cloud with ties and duplicates
    ordered, sizes = _split(clouds["cyl"][:4000], world, "random", seed=1)
    lo = sum(sizes[:rank])
    mine = ordered[lo:lo + sizes[rank]]
    for k, loop in ((8, True), (5, False)):
        ei = sharded_knn(mine, k, loop=loop, backend="torch")
        assert torch.equal(ei, _mine(knn_reference(ordered, k, loop), sizes, rank)), f"torch knn k={k} loop={loop}"
    ei = sharded_radius_graph(mine, 0.05, backend="torch")
    assert torch.equal(ei, _mine(radius_reference(ordered, 0.05), sizes, rank)), "torch radius"

    # differentiable edge vectors and the graph, on the geometric split of the 3-D mesh
    ordered, sizes = _split(clouds["brick"], world, "geometric")
    lo = sum(sizes[:rank])
    x = ordered[lo:lo + sizes[rank]].clone().requires_grad_(True)
    ei, graph, vec = sharded_knn(x, 8, loop=False, return_graph=True, return_edge_vec=True)
    w = torch.sin(0.37 * ei[0] + 1.1 * ei[1]).double()[:, None]
    loss = (w * vec).sum() + (vec ** 2).sum()
    loss.backward()
    full = ordered.clone().requires_grad_(True)
    ref = knn_reference(full, 8, loop=False)
    vref = full[ref[0]] - full[ref[1]]
    wref = torch.sin(0.37 * ref[0] + 1.1 * ref[1]).double()[:, None]
    ((wref * vref).sum() + (vref ** 2).sum()).backward()
    mref = (ref[1] >= lo) & (ref[1] < lo + sizes[rank])
    torch.testing.assert_close(vec, vref[mref].detach(), rtol=0, atol=1e-12)
    torch.testing.assert_close(x.grad, full.grad[lo:lo + sizes[rank]], rtol=1e-10, atol=1e-10)
    assert graph.num_owned == sizes[rank]
    remote = torch.unique(ei[0][(ei[0] < lo) | (ei[0] >= lo + sizes[rank])])
    assert torch.equal(torch.sort(graph.global_ids[graph.num_owned:]).values, remote)
    # one message-passing step through the graph equals the whole-graph one
    feat = ordered[:, :1] * 3 + 1
    x_ext = graph.exchange(feat[lo:lo + sizes[rank]])
    agg = torch.zeros(graph.num_owned, 1, dtype=feat.dtype).index_add_(0, graph.edge_index[1], x_ext[graph.edge_index[0]])
    agg_ref = torch.zeros(len(ordered), 1, dtype=feat.dtype).index_add_(0, ref[1], feat[ref[0]])
    torch.testing.assert_close(agg, agg_ref[lo:lo + sizes[rank]], rtol=1e-12, atol=1e-12)

    # float32 input: gradients in float32, same graph as float64
    x32 = ordered[lo:lo + sizes[rank]].float().requires_grad_(True)
    ei32, vec32 = sharded_knn(x32, 4, return_edge_vec=True)
    assert vec32.dtype == torch.float32
    vec32.sum().backward()
    assert x32.grad.shape == x32.shape

    # bad input: the same clear error on every rank, and the group still works afterwards
    n_total = sum(sizes)
    bad_cases = [
        (lambda: sharded_knn(x.detach(), 0), ValueError, "k must be in"),
        (lambda: sharded_knn(x.detach(), n_total + 1), ValueError, "k must be in"),
        (lambda: sharded_knn(x.detach(), n_total, loop=False), ValueError, "k must be in"),
        (lambda: sharded_knn(x.detach(), 2.5), TypeError, "k must be an int"),
        (lambda: sharded_radius_graph(x.detach(), -1.0), ValueError, "r must be"),
    ]
    if world > 1:
        nan_pts = x.detach().clone()
        if rank == world - 1 and nan_pts.numel():
            nan_pts[0, 0] = float("nan")
        elif rank == world - 1:
            nan_pts = torch.full((1, 3), float("nan"), dtype=torch.float64)
        bad_cases += [
            (lambda: sharded_knn(nan_pts, 4), ValueError, "finite"),
            (lambda: sharded_knn(x.detach()[:, : (2 if rank == 0 else 3)], 4), msd.CollectiveMismatchError, "point dim"),
            (lambda: sharded_knn(x.detach(), 4 + (rank == 1)), msd.CollectiveMismatchError, "do not match"),
            (lambda: sharded_radius_graph(x.detach(), 0.1 + 0.1 * (rank == 0)), msd.CollectiveMismatchError, "r (bits)"),
        ]
    else:
        bad_cases += [(lambda: sharded_knn(torch.tensor([[0.0, float("inf")]]), 1), ValueError, "finite")]
    for fn, exc, text in bad_cases:
        with pytest.raises(exc, match=text.replace("(", r"\(").replace(")", r"\)")):
            fn()
    ei = sharded_knn(x.detach(), 4)
    assert torch.equal(ei, _mine(knn_reference(ordered, 4), sizes, rank))
    _check_shard_tensor(rank, world, clouds["car"])
    return out


def _shard(full: torch.Tensor, sizes, rank, requires_grad=False):
    """(ShardTensor of this rank's rows of ``full``, its local leaf)."""
    from meshshard.tensor import ShardTensor

    lo = sum(sizes[:rank])
    leaf = full[lo:lo + sizes[rank]].clone().requires_grad_(requires_grad)
    return ShardTensor.from_local(leaf, sharding_shapes=list(sizes)), leaf


def _check_shard_tensor(rank, world, car):
    """ShardTensor inputs: the kNN / radius graphs, a point-cloud GNN through them, point-set searches."""
    import torch_geometric.nn as pyg

    import meshshard.distributed as msd
    from meshshard.ops import ShardedConv, edge_vectors, knn_search, radius_search
    from meshshard.ops._knn_local import knn_window
    from meshshard.ops.conv import all_reduce_gradients

    rng = np.random.default_rng(1)
    sub = car[torch.from_numpy(np.sort(rng.choice(len(car), 6000, replace=False)))].double()
    ordered, sizes = _split(sub, world, "geometric")  # uneven, a 3-point rank, an empty one at W >= 3
    lo, hi = sum(sizes[:rank]), sum(sizes[: rank + 1])
    pos, leaf = _shard(ordered, sizes, rank, requires_grad=True)

    # kNN graph: plain global-id edges as for plain tensors; edge vectors a ShardTensor over local edges
    k = 8
    ei, g, vec = sharded_knn(pos, k, loop=False, return_graph=True, return_edge_vec=True)
    ref = knn_reference(ordered, k, loop=False)
    assert type(ei) is torch.Tensor and torch.equal(ei, _mine(ref, sizes, rank))
    assert vec.shard_sizes() == [s * k for s in sizes] and vec.placements == pos.placements
    full = ordered.clone().requires_grad_(True)
    vref = full[ref[0]] - full[ref[1]]
    torch.testing.assert_close(vec.full_tensor(), vref.detach(), rtol=0, atol=0)
    w = torch.cos(0.3 * ei[0] - 0.7 * ei[1]).double()[:, None]
    ((w * vec.to_local()).sum() + (vec.to_local() ** 3).sum()).backward()
    wref = torch.cos(0.3 * ref[0] - 0.7 * ref[1]).double()[:, None]
    ((wref * vref).sum() + (vref ** 3).sum()).backward()
    torch.testing.assert_close(leaf.grad, full.grad[lo:hi], rtol=1e-10, atol=1e-10)
    vec2 = edge_vectors(pos, ei)  # the public function takes the ShardTensor too
    assert torch.equal(vec2.to_local(), vec.to_local())

    # point-cloud pipeline: EdgeConv -> GINEConv(edge_attr = the sharded edge vectors) -> GCNConv
    torch.manual_seed(0)
    mlp = lambda i, o: torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.Tanh(), torch.nn.Linear(o, o))  # noqa: E731
    convs = torch.nn.ModuleList([pyg.EdgeConv(mlp(6, 16)), pyg.GINEConv(mlp(16, 16), edge_dim=3),
                                 pyg.GCNConv(16, 4)]).double()
    feat = torch.sin(3 * ordered) + ordered.sum(1, keepdim=True)
    xs, xleaf = _shard(feat, sizes, rank, requires_grad=True)
    vec_d = vec.detach()
    h = torch.relu(ShardedConv(convs[0])(xs, g))
    h = torch.relu(ShardedConv(convs[1])(h, g, edge_attr=vec_d))
    out = ShardedConv(convs[2])(h, g)
    (out ** 2).sum().backward()
    all_reduce_gradients(convs)
    grads = [p.grad.clone() for p in convs.parameters()]
    convs.zero_grad()
    fx = feat.clone().requires_grad_(True)
    hr = torch.relu(convs[0](fx, ref))
    hr = torch.relu(convs[1](hr, ref, edge_attr=vref.detach()))
    oref = convs[2](hr, ref)
    (oref ** 2).sum().backward()
    torch.testing.assert_close(out, oref[lo:hi].detach(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(xleaf.grad, fx.grad[lo:hi], rtol=1e-10, atol=1e-10)
    for a, p in zip(grads, convs.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-10, atol=1e-10)

    # radius graph: edge vectors over a number of local edges known only after the search
    r = _radius(ordered)
    eir, vr = sharded_radius_graph(pos.detach(), r, return_edge_vec=True)
    rref = radius_reference(ordered, r)
    assert torch.equal(eir, _mine(rref, sizes, rank))
    owner = torch.searchsorted(torch.tensor(np.cumsum(sizes)), rref[1], right=True)
    assert vr.shard_sizes() == torch.bincount(owner, minlength=world).tolist()

    # point-set searches: queries laid out unlike the points (another subset, random uneven split)
    queries_full, qsizes = _split(car[::37][:1500].double(), world, "random", seed=2)
    qlo, qhi = sum(qsizes[:rank]), sum(qsizes[: rank + 1])
    qst, _ = _shard(queries_full, qsizes, rank)
    pos.grad = None
    leaf.grad = None
    fst, fleaf = _shard(torch.cos(ordered[:, :2] * 5), sizes, rank, requires_grad=True)
    idx, dist, nbr, nfeat = knn_search(pos, qst, 5, return_dists=True, return_points=True, features=fst)
    d_ref, i_ref, _ = knn_window(cKDTree(ordered.numpy()), queries_full.numpy(), 5, None, -1)
    for t, shape in ((idx, (5,)), (dist, (5,)), (nbr, (5, 3)), (nfeat, (5, 2))):
        assert t.placements == qst.placements and t.shard_sizes() == qsizes and t.shape == (len(queries_full),) + shape
    assert torch.equal(idx.full_tensor(), torch.from_numpy(i_ref))
    torch.testing.assert_close(dist.full_tensor(), torch.from_numpy(d_ref), rtol=0, atol=0)
    wq = torch.sin(torch.arange(qlo, qhi, dtype=torch.float64))[:, None, None]
    ((wq * nbr.to_local()).sum() + (nfeat.to_local() ** 2).sum()).backward()
    fp = ordered.clone().requires_grad_(True)
    ff = torch.cos(ordered[:, :2] * 5).requires_grad_(True)
    iref = torch.from_numpy(i_ref)
    wqr = torch.sin(torch.arange(len(queries_full), dtype=torch.float64))[:, None, None]
    ((wqr * fp[iref]).sum() + (ff[iref] ** 2).sum()).backward()
    torch.testing.assert_close(leaf.grad, fp.grad[lo:hi], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(fleaf.grad, ff.grad[lo:hi], rtol=1e-10, atol=1e-10)

    rq = 1.5 * r
    lists = cKDTree(ordered.numpy()).query_ball_point(queries_full.numpy(), rq)
    ridx, rdist = radius_search(pos.detach(), qst, rq, return_dists=True)
    width = max(map(len, lists))
    assert ridx.shape == (len(queries_full), width) and ridx.shard_sizes() == qsizes
    for q, row, drow in zip(range(qlo, qhi), ridx.to_local().tolist(), rdist.to_local()):
        got = [j for j in row if j >= 0]
        assert sorted(got) == sorted(lists[q]), q
        assert torch.all(drow[len(got):] == 0) and torch.all(drow[1:len(got)] >= drow[:len(got) - 1])
    capped = radius_search(pos.detach(), qst, rq, max_points=3)
    assert capped.shape == (len(queries_full), 3)
    assert torch.equal(capped.to_local(), ridx.to_local()[:, :3])  # the nearest three, in order
    plain = knn_search(leaf.detach(), qst.to_local(), 5)  # plain tensors: this rank's query rows
    assert type(plain) is torch.Tensor and torch.equal(plain, idx.to_local())

    # bad input: the same clear error on every rank, and the group still works afterwards
    n_total = sum(sizes)
    nan_pos, _ = _shard(torch.where(torch.arange(n_total)[:, None] == n_total - 1, float("nan"), ordered), sizes, rank)
    other_mesh = msd.init_device_mesh("cpu", (world,), mesh_dim_names=("other",))
    from meshshard.tensor import ShardTensor

    q_other = ShardTensor.from_local(qst.to_local(), other_mesh, sharding_shapes=list(qsizes))
    bad_rows, _ = _shard(ordered[:, :1].repeat(1, 2), sizes, rank)
    short = torch.zeros(max(0, sizes[rank] - (rank == world - 1)), 2, dtype=torch.float64)
    bad_cases = [
        (lambda: sharded_knn(nan_pos, 4), ValueError, "finite"),
        (lambda: knn_search(nan_pos, qst, 4), ValueError, "finite"),
        (lambda: knn_search(pos.detach(), qst, n_total + 1), ValueError, "k must be in"),
        (lambda: sharded_knn(pos.detach(), n_total, loop=False), ValueError, "k must be in"),
        (lambda: knn_search(pos.detach(), q_other, 4), ValueError, "same device mesh"),
        (lambda: knn_search(pos.detach(), qst.to_local(), 4), TypeError, "both be ShardTensors"),
        (lambda: knn_search(pos.detach(), bad_rows, 4), ValueError, "queries have dim 2"),
        (lambda: sharded_knn(pos.detach(), 4, group=other_mesh.get_group(0)), ValueError, "pass group= only"),
        (lambda: knn_search(leaf.detach(), qst.to_local(), 4, features=short), ValueError, "one row per point"),
        (lambda: radius_search(pos.detach(), qst, -0.5), ValueError, "r must be"),
        (lambda: radius_search(pos.detach(), qst, 0.1, max_points=0), ValueError, "max_points must be"),
    ]
    for fn, exc, text in bad_cases:
        with pytest.raises(exc, match=text):
            fn()
    assert torch.equal(knn_search(pos.detach(), qst, 5).to_local(), idx.to_local())


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_sharded_knn_matches_reference(world, data_dir):
    results = run_distributed(_check_world, world, args=(str(data_dir),), timeout=TIMEOUT)
    clouds = _load(data_dir)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the references' small torch ops crawl with threads on a busy machine
    try:
        refs = {}
        for key in results[0]:
            kind, name, how, param, loop, mnn = key
            ordered, sizes = _split(clouds[name], world, how)
            refs[key] = knn_reference(ordered, param, loop) if kind == "knn" else radius_reference(ordered, param, loop, mnn)
    finally:
        torch.set_num_threads(threads)
    for key in results[0]:
        kind, name, how, param, loop, mnn = key
        ordered, sizes = _split(clouds[name], world, how)
        ref = refs[key]
        for rank, res in enumerate(results):
            ei = res[key][0]
            if kind == "knn":
                assert ei.shape == (2, sizes[rank] * param), (key, rank, ei.shape)
            assert torch.equal(ei, _mine(ref, sizes, rank)), f"{key} differs from the reference on rank {rank}"
    # Communication stays local for geometric splits: far fewer queries move than points exist.
    if world > 1:
        n = len(clouds["car"])
        sent = sum(res[("knn", "car", "geometric", 8, True, None)][1]["queries_sent"] for res in results)
        assert 0 < sent < 0.25 * n, sent
        sent_random = sum(res[("knn", "car", "random", 8, True, None)][1]["queries_sent"] for res in results)
        assert sent_random > sent  # random splits must ask more (pruning has nothing to work with)


# --------------------------------------------------------------------------- single process
def test_reference_equals_plain_ckdtree_without_ties(data_dir):
    """The reference tie rule changes nothing where cKDTree's answer is unambiguous (full DrivAer cloud)."""
    pts = np.load(data_dir / "drivaer_body_points.npz")["points"].astype(np.float64)
    k = 16
    d, i = cKDTree(pts).query(pts, k=k + 1, workers=-1)
    ref = knn_reference(torch.from_numpy(pts), k)[0].view(-1, k).numpy()
    clear = d[:, k - 1] < d[:, k]  # no tie at the k-th place
    assert clear.mean() > 0.9
    np.testing.assert_array_equal(np.sort(ref[clear], 1), np.sort(i[clear, :k], 1))
    # and where there are ties, the reference picks the lowest ids among the tied ones
    for q in np.nonzero(~clear)[0][:50]:
        dist = np.linalg.norm(pts - pts[q], axis=1)
        order = np.lexsort((np.arange(len(pts)), dist))[:k]
        np.testing.assert_array_equal(np.sort(ref[q]), np.sort(order))


def test_radius_reference_equals_query_ball_point(data_dir):
    import meshshard as ms

    pts = ms.read_mesh(data_dir / "brick_tets.su2").points
    r = 0.08
    ref = radius_reference(torch.from_numpy(pts), r)
    lists = cKDTree(pts).query_ball_point(pts, r)
    want = sorted((j, q) for q, lst in enumerate(lists) for j in lst)
    got = sorted(map(tuple, ref.t().tolist()))
    assert got == want


def test_backends_agree_edge_for_edge_on_a_mesh_with_ties(data_dir):
    """The default backend (the tree) and the torch backend (brute force) give the same graphs,
    order included, on the 2-D mesh with duplicated points: both order by :func:`pair_distance`,
    whose square root is correctly rounded. (torch's CPU sqrt was one ulp off, and the torch
    backend swapped 12 of 109k neighbour pairs against scipy's.)"""
    pts = _load(data_dir)["cyl"]
    for k, loop in ((8, True), (5, False)):
        ref = knn_reference(pts, k, loop)
        assert torch.equal(sharded_knn(pts, k, loop=loop, backend="torch"), ref), (k, loop)
        assert torch.equal(sharded_knn(pts, k, loop=loop), ref), (k, loop)
    ref = radius_reference(pts, 0.05)
    assert torch.equal(sharded_radius_graph(pts, 0.05, backend="torch"), ref)


def test_exact_sqrt_and_pair_distance_are_correctly_rounded():
    from meshshard.ops._knn_local import _window_distance, exact_sqrt, pair_distance, sum_squares

    ss = torch.tensor([float.fromhex("0x1.8bc2ccb4bb234p-10")], dtype=torch.float64)
    assert exact_sqrt(ss).item().hex() == "0x1.3e4cc37f3947bp-5"  # torch.sqrt gave ...7cp-5 on the CPU
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(20000, 3, generator=gen, dtype=torch.float64)
    b = torch.rand(20000, 3, generator=gen, dtype=torch.float64)
    ss = ((a - b) ** 2).sum(1)
    assert torch.equal(exact_sqrt(ss), torch.from_numpy(np.sqrt(ss.numpy())))
    assert torch.equal(pair_distance(a, b), torch.from_numpy(np.sqrt(sum_squares((a - b).numpy()))))
    # the tree backend's window distances: the same numbers, one dim at a time
    idx = torch.randint(0, 20000, (500, 9), generator=gen)
    got = _window_distance(a[:500].numpy(), b.numpy(), idx.numpy())
    want = pair_distance(a[:500].repeat_interleave(9, 0), b[idx.reshape(-1)]).reshape(500, 9)
    assert torch.equal(torch.from_numpy(got), want)


def test_single_process_duplicates_and_small_clouds():
    """Without a process group: duplicates at the k-th place, loop=False, clouds of k points."""
    pts = torch.tensor([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0], [2.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    ei = sharded_knn(pts, 2)
    # point 3 is a triple point: its two nearest are the lowest ids among {0, 2, 3}
    assert ei[0][ei[1] == 3].tolist() == [0, 2]
    assert torch.equal(ei, knn_reference(pts, 2))
    ei = sharded_knn(pts, 2, loop=False)
    assert ei[0][ei[1] == 0].tolist() == [2, 3]
    assert torch.equal(ei, knn_reference(pts, 2, loop=False))
    assert torch.equal(sharded_knn(pts, 6), knn_reference(pts, 6))
    assert torch.equal(sharded_knn(pts, 5, loop=False), knn_reference(pts, 5, loop=False))
    with pytest.raises(ValueError, match="k must be in"):
        sharded_knn(pts, 6, loop=False)
    with pytest.raises(ValueError, match="shape"):
        sharded_knn(torch.zeros(4), 1)
