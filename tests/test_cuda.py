"""The CUDA paths against single-process references on the same GPU.

CI has no GPU, so this module is skipped there (every path it runs also has a CPU test in the
module that mirrors its package file); on a machine with CUDA, ``pytest tests/test_cuda.py`` runs
it. Each check runs in one spawned group per configuration:

- ``("nccl", 1)``: NCCL with one rank (one GPU: NCCL refuses two ranks on the same device), so the
  collectives run through NCCL's ``all_to_all_single`` / ``all_gather_into_tensor`` on CUDA tensors;
- ``("gloo", 2)``, ``("gloo", 3)``: several ranks sharing one GPU, each computing on CUDA while gloo
  moves the tensors through the CPU (``comm_device`` is the CPU) -- the halo exchanges, ring
  attention and kNN queries between ranks with CUDA inputs.

What runs: the variable-size collectives (forward exact, backward by gradcheck, both all-gather
paths); DomainParallel over the PyG models and MeshGraphNet of ``tests/ops/test_domain_parallel.py``
(outputs, gradients and one optimizer step); norms with global statistics, ring attention, grid
convolutions / pools / pads / interpolations and extrema on ShardTensors; sharded kNN and radius
graphs with both backends (the host tree and brute force on the GPU) equal to scipy's reference
edge for edge, the neighbour distances bit-identical on the CPU and the GPU; ShardTensor points:
edge vectors, EdgeConv / GINEConv / GCNConv through ShardedConv, ``knn_search`` and
``radius_search``; ``partition_distributed`` of CUDA points equal to ``ms.partition`` of the
concatenation, its results on the points' device.
TF32 is turned off in the ranks: the reference and the sharded run sum in different orders, and
TF32's 10-bit mantissa would need tolerances loose enough to hide real errors.
"""
from pathlib import Path

import pytest
import torch

from meshshard.testing import run_distributed

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (CI has none)")

CONFIGS = [("nccl", 1), ("gloo", 2), ("gloo", 3)]
TIMEOUT = 300


def _device(device_type):
    if device_type == "cpu":  # a dry run of these checks without a GPU (by hand; not part of the suite)
        return torch.device("cpu")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device("cuda", torch.cuda.current_device())


def _collectives(rank, world, dev):
    import meshshard.distributed as msd
    import meshshard.distributed.autograd as ag
    from tests.distributed.test_autograd import LAYOUTS, _cases, _ReplicateFromShard, _ShardFromReplicated

    done = []
    for p2p_min in (ag._P2P_MIN_BYTES, 0):  # the all-gather's all-to-all path and its point-to-point path
        previous, ag._P2P_MIN_BYTES = ag._P2P_MIN_BYTES, p2p_min
        try:
            for dim, shape in LAYOUTS:
                gen = torch.Generator().manual_seed(7 + dim)
                for name, full, in_sizes, op, out_sizes, expected in _cases(world, rank, dim, shape, gen):
                    full, expected = full.to(dev), expected.to(dev)
                    shard = full.narrow(dim, sum(in_sizes[:rank]), in_sizes[rank])
                    got = op(shard)
                    assert got.device == dev, f"{name}: result on {got.device}, input on {dev}"
                    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, msg=f"{name} dim={dim} forward")

                    def composite(x, op=op, in_sizes=in_sizes, out_sizes=out_sizes, dim=dim):
                        y = op(_ShardFromReplicated.apply(x, in_sizes, dim))
                        return y if out_sizes is None else _ReplicateFromShard.apply(y, out_sizes, dim)

                    torch.manual_seed(0)
                    with msd.validation(False):
                        assert torch.autograd.gradcheck(composite, (full.clone().requires_grad_(True),), eps=1e-6,
                                                        atol=1e-9, rtol=1e-7, fast_mode=True), f"{name} dim={dim} gradcheck"
                    done.append(name)
        finally:
            ag._P2P_MIN_BYTES = previous
    return len(done)


def _domain_parallel(rank, world, dev, data_dir):
    import meshshard as ms
    from meshshard.distributed import Shard
    from meshshard.models import global_mse_loss
    from meshshard.tensor import ShardTensor
    from tests.ops.test_domain_parallel import CASES, METHODS, _close, _edge_kwargs, _inputs, _mesh, _model

    pos, ei = _mesh(data_dir)
    n, num_e = pos.shape[0], ei.shape[1]
    part = ms.partition(pos, world, method=METHODS[world], edge_index=ei, refine=False)
    graphs = {h: ms.ShardedGraph.from_partition(ei, part, halo_hops=h).to(dev) for h in (1, 2)}
    ei = ei.to(dev)
    for kind, dtype, hops, shard_input, global_edges in CASES:
        g = graphs[hops]
        x, e, ew, y = (t.to(dev) for t in _inputs(n, num_e, dtype))
        what = f"cuda {kind} {dtype} halo_hops={hops} rank {rank}/{world}"
        ref = _model(kind).to(device=dev, dtype=dtype)
        opt = torch.optim.SGD(ref.parameters(), lr=0.1)
        out_ref = ref(x, ei, **_edge_kwargs(kind, e, ew))
        torch.nn.functional.mse_loss(out_ref, y).backward()
        grads_ref = [p.grad.clone() for p in ref.parameters()]
        opt.step()
        model = _model(kind).to(device=dev, dtype=dtype)
        dp = ms.DomainParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        owned = g.owned_ids.to(dev)
        xin = ShardTensor.from_local(x[owned], placements=[Shard(0)]) if shard_input else x[owned]
        edge_ids = g.edge_ids
        e_in, ew_in = (e, ew) if global_edges else (e[edge_ids], ew[edge_ids])
        out = dp(xin, g, **_edge_kwargs(kind, e_in, ew_in))
        assert isinstance(out, ShardTensor) and out.to_local().device == dev, what
        _close(out.to_local().detach(), out_ref.detach()[owned], dtype, what + " output")
        global_mse_loss(out.to_local(), y[owned]).backward()
        for (name, p), gr in zip(model.named_parameters(), grads_ref):
            assert p.grad.device == dev, f"{what} grad {name} on {p.grad.device}"
            _close(p.grad, gr, dtype, f"{what} grad {name}")
        opt.step()
        for (name, p), pr in zip(model.named_parameters(), ref.parameters()):
            _close(p.detach(), pr.detach(), dtype, f"{what} {name} after one step")
    return len(CASES)


def _knn(rank, world, dev, data_dir):
    from meshshard.ops._knn_local import pair_distance
    from meshshard.ops.knn import knn_reference, radius_reference, sharded_knn, sharded_radius_graph
    from tests.ops.test_knn import _load, _mine, _split

    clouds = _load(Path(data_dir))
    checked = 0
    for name in ("cyl", "car"):
        for how in ("geometric", "random"):
            ordered, sizes = _split(clouds[name][:20000], world, how, seed=1)
            lo = sum(sizes[:rank])
            mine = ordered[lo:lo + sizes[rank]].to(dev)
            for k, loop in ((8, True), (5, False)):
                want = _mine(knn_reference(ordered, k, loop), sizes, rank)
                for backend in (None, "torch"):  # the default (a tree on the host) and brute force on the GPU
                    ei = sharded_knn(mine, k, loop=loop, backend=backend)
                    assert ei.device == dev, f"knn result on {ei.device}"
                    assert torch.equal(ei.cpu(), want), f"cuda knn {backend} {name} {how} k={k} loop={loop} rank {rank}"
                    checked += 1
            if name == "cyl":  # the 2-D mesh with duplicated points (about 30 neighbours within 0.05)
                want = _mine(radius_reference(ordered, 0.05), sizes, rank)
                ei = sharded_radius_graph(mine, 0.05)
                assert torch.equal(ei.cpu(), want), f"cuda radius {how} rank {rank}"
                # brute force on the GPU: the same edges in the same order (its distances round as the CPU's)
                ei = sharded_radius_graph(mine, 0.05, backend="torch").cpu()
                assert torch.equal(ei, want), f"cuda radius, torch backend, {how} rank {rank}"
                checked += 2
    # the distances that order neighbours are bit-identical on the CPU and the GPU
    cyl = clouds["cyl"]
    ref = radius_reference(cyl, 0.05)
    a, b = cyl[ref[1]], cyl[ref[0]]
    diff = int((pair_distance(a, b) != pair_distance(a.to(dev), b.to(dev)).cpu()).sum())
    assert diff == 0, f"pair_distance differs on {diff} of {ref.shape[1]} pairs between the CPU and {dev}"
    # differentiable edge vectors on the GPU
    ordered, sizes = _split(clouds["brick"], world, "geometric")
    lo = sum(sizes[:rank])
    x = ordered[lo:lo + sizes[rank]].to(dev).requires_grad_(True)
    ei, vec = sharded_knn(x, 8, loop=False, return_edge_vec=True)
    (vec ** 2).sum().backward()
    full = ordered.clone().requires_grad_(True)
    ref = knn_reference(full, 8, loop=False)
    ((full[ref[0]] - full[ref[1]]) ** 2).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), full.grad[lo:lo + sizes[rank]], rtol=1e-10, atol=1e-10)
    return checked + 1 + _point_cloud(rank, world, dev, clouds["car"])


def _point_cloud(rank, world, dev, car):
    """ShardTensor points on the GPU: kNN graph with edge vectors, a PyG pipeline through
    ShardedConv, knn_search / radius_search with uneven query shards, against one process."""
    import torch_geometric.nn as pyg
    from scipy.spatial import cKDTree

    from meshshard.ops import ShardedConv, knn_search, radius_search
    from meshshard.ops.conv import all_reduce_gradients
    from meshshard.ops.knn import knn_reference, sharded_knn
    from meshshard.tensor import ShardTensor
    from tests.ops.test_knn import _split

    def shard(full, sizes, grad=False):
        lo = sum(sizes[:rank])
        leaf = full[lo:lo + sizes[rank]].to(dev).clone().requires_grad_(grad)
        return ShardTensor.from_local(leaf, sharding_shapes=list(sizes)), leaf

    ordered, sizes = _split(car[::4].double(), world, "geometric")
    lo, hi = sum(sizes[:rank]), sum(sizes[:rank + 1])
    pos, _ = shard(ordered, sizes)
    ei, g, vec = sharded_knn(pos, 8, loop=False, return_graph=True, return_edge_vec=True)
    ref = knn_reference(ordered, 8, loop=False)
    assert ei.device == dev and torch.equal(ei.cpu(), ref[:, (ref[1] >= lo) & (ref[1] < hi)]), "ShardTensor knn graph"
    vref = ordered[ref[0]] - ordered[ref[1]]
    torch.testing.assert_close(vec.full_tensor().cpu(), vref, rtol=0, atol=0)
    g = g.to(dev)
    torch.manual_seed(0)
    mlp = lambda i, o: torch.nn.Sequential(torch.nn.Linear(i, o), torch.nn.Tanh(), torch.nn.Linear(o, o))  # noqa: E731
    convs = torch.nn.ModuleList([pyg.EdgeConv(mlp(6, 16)), pyg.GINEConv(mlp(16, 16), edge_dim=3),
                                 pyg.GCNConv(16, 4)]).double().to(dev)
    feat = torch.sin(3 * ordered) + ordered.sum(1, keepdim=True)
    xs, xleaf = shard(feat, sizes, grad=True)
    h = torch.relu(ShardedConv(convs[0])(xs, g))
    h = torch.relu(ShardedConv(convs[1])(h, g, edge_attr=vec.detach()))
    out = ShardedConv(convs[2])(h, g)
    (out ** 2).sum().backward()
    all_reduce_gradients(convs)
    grads = [p.grad.clone() for p in convs.parameters()]
    convs.zero_grad()
    fx = feat.to(dev).requires_grad_(True)
    ref_d, vref_d = ref.to(dev), vref.to(dev)
    oref = convs[2](torch.relu(convs[1](torch.relu(convs[0](fx, ref_d)), ref_d, edge_attr=vref_d)), ref_d)
    (oref ** 2).sum().backward()
    out_local = out.to_local() if isinstance(out, ShardTensor) else out
    torch.testing.assert_close(out_local, oref[lo:hi].detach(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(xleaf.grad, fx.grad[lo:hi], rtol=1e-10, atol=1e-10)
    for a, p in zip(grads, convs.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-10, atol=1e-10)

    queries, qsizes = _split(car[::37][:1500].double(), world, "random", seed=2)
    qst, _ = shard(queries, qsizes)
    idx, dist = knn_search(pos, qst, 5, return_dists=True)
    tree = cKDTree(ordered.numpy())
    d_ref, i_ref = tree.query(queries.numpy(), k=5)
    assert idx.to_local().device == dev
    assert torch.equal(idx.full_tensor().cpu(), torch.from_numpy(i_ref)), "knn_search"
    torch.testing.assert_close(dist.full_tensor().cpu(), torch.from_numpy(d_ref), rtol=1e-15, atol=0)
    rq = float(d_ref[:, -1].mean())
    lists = tree.query_ball_point(queries.numpy(), rq)
    ridx = radius_search(pos, qst, rq).full_tensor().cpu()
    for q, row in enumerate(ridx.tolist()):
        assert sorted(j for j in row if j >= 0) == sorted(lists[q]), f"radius_search query {q}"
    return 4


def _shard_tensor_ops(rank, world, dev):
    import torch.nn.functional as F

    from meshshard.distributed import default_device_mesh, validation
    from tests.tensor._ops import test_attention as ta
    from tests.tensor._ops import test_grid as tg
    from tests.tensor._ops import test_norm as tn

    mesh = default_device_mesh()
    n = sum(tn.SIZES[world])
    nn = torch.nn
    tn._module_case(rank, world, mesh, nn.BatchNorm1d(3), (n, 3, 2), 0, device=dev)
    tn._module_case(rank, world, mesh, nn.BatchNorm1d(3), (n, 3, 2), 0, torch.float32, device=dev)
    tn._module_case(rank, world, mesh, nn.BatchNorm2d(3), (2, 3, n, 2), 2, device=dev)
    tn._module_case(rank, world, mesh, nn.GroupNorm(2, 4), (2, 4, n, 2), 2, torch.float32, device=dev)
    tn._module_case(rank, world, mesh, nn.LayerNorm([n, 3]), (2, n, 3), 1, device=dev)
    for dtype in (torch.float64, torch.float32):
        ta._sdpa_case(rank, world, mesh, dtype, device=dev)
        ta._sdpa_case(rank, world, mesh, dtype, device=dev, is_causal=True)
    boolean, additive = ta._masks(world)
    ta._sdpa_case(rank, world, mesh, torch.float64, device=dev, attn_mask=boolean.to(dev))
    ta._sdpa_case(rank, world, mesh, torch.float64, device=dev, attn_mask=additive.to(dev), scale=0.3)
    ta._sdpa_case(rank, world, mesh, torch.float64, device=dev, hk=1, enable_gqa=True, is_causal=True)
    count = 0
    with validation(False):
        for sizes in tg.SIZES[world]:
            for i, (name, (nd, (make, op))) in enumerate(tg.CASES.items()):
                for dtype in (torch.float64, torch.float32) if i % 3 == 0 else (torch.float64,):
                    tg._check_case(name, nd, make, op, sizes, dtype, rank, device=dev)
                    count += 1
    # extrema over the sharded dim and over all elements (values and global indices)
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor

    sizes = tn.SIZES[world]
    full = torch.randn(sum(sizes), 3, generator=torch.Generator().manual_seed(5), dtype=torch.float64).to(dev)
    st = ShardTensor.from_local(full[sum(sizes[:rank]):sum(sizes[:rank + 1])], mesh, (Shard(0),),
                                sharding_shapes={0: sizes})
    for got, want in ((st.max(), full.max()), (st.argmin(), full.argmin()), (torch.max(st, 0).values, full.max(0).values),
                      (torch.max(st, 0).indices, full.max(0).indices), (st.amin(0), full.amin(0))):
        got = got.full_tensor()
        assert got.device == dev and torch.equal(got, want), f"extrema: {got} vs {want}"
    return count + 5


def _partition_distributed(rank, world, dev, data_dir):
    # CUDA points in, the single-process partition of the concatenation out, on the points' device
    import meshshard as ms
    from meshshard.ops.partition import partition_distributed
    from tests.ops.test_partition import _bounds, _cases, _clouds, _owned_ids

    checked = 0
    for case, pts, w in _cases(_clouds(str(data_dir))):
        _, method, num_parts = case
        num_parts = world if num_parts == "world" else num_parts
        lo, hi = _bounds(pts.shape[0], world, rank)
        got = partition_distributed(torch.from_numpy(pts[lo:hi]).to(dev), num_parts, method,
                                    weights=None if w is None else torch.from_numpy(w[lo:hi]).to(dev))
        ref = ms.partition(pts, num_parts, method, weights=w, refine=False)
        ids = _owned_ids(ref, num_parts, world, rank)
        tensors = [got.points, got.global_ids, got.parts, got.assignment] + ([] if w is None else [got.weights])
        assert all(t.device == dev for t in tensors), f"partition_distributed {case}: results not on {dev}"
        assert torch.equal(got.assignment.cpu(), ref.assignment[lo:hi]), f"partition_distributed {case} rank {rank}"
        assert torch.equal(got.global_ids.cpu(), ids) and got.sizes == ref.sizes, f"partition_distributed {case}"
        assert torch.equal(got.points.cpu(), torch.from_numpy(pts)[ids]), f"partition_distributed {case} points"
        checked += 1
    return checked


def _check(rank, world, data_dir, device_type="cuda"):
    dev, data_dir = _device(device_type), Path(data_dir)
    return {
        "collectives": _collectives(rank, world, dev),
        "domain_parallel": _domain_parallel(rank, world, dev, data_dir),
        "grid, norm, attention cases": _shard_tensor_ops(rank, world, dev),
        "knn": _knn(rank, world, dev, data_dir),
        "partition_distributed": _partition_distributed(rank, world, dev, data_dir),
    }


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("backend,world", CONFIGS)
def test_cuda_paths_match_one_process(backend, world, data_dir):
    results = run_distributed(_check, world, args=(str(data_dir),), backend=backend, timeout=TIMEOUT)
    assert all(r == results[0] for r in results), results
    assert all(v > 0 for v in results[0].values()), results[0]
    print(f"{backend} x {world}: {results[0]}")
