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
    return out


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
