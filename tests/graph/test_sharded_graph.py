"""ShardedGraph on 1-4 gloo ranks: layout, k-hop halo, exchange/gather forward and backward,
what exchange sends (only ghost rows, plan counts, no size exchange per call), from_global_edges,
loading parts (each rank reading only its own file), ShardTensor features, empty ranks, and bad
input raising on every rank (no hang)."""
import contextlib
from pathlib import Path

import pytest
import torch

from meshshard.testing import run_distributed
from tests.graph.graph_data import METHODS, knn_edges, load_graph, make_partition

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240


def _reach(edge_index, n, owned, hops):
    """Hop distance (or -1) of every node from ``owned`` along in-edges, by sparse matvecs."""
    a = torch.sparse_coo_tensor(edge_index.flip(0), torch.ones(edge_index.shape[1]), (n, n)).coalesce()
    dist = torch.full((n,), -1, dtype=torch.long)
    dist[owned] = 0
    front = torch.zeros(n)
    front[owned] = 1.0
    for h in range(1, hops + 1):
        hit = torch.sparse.mm(a, front.view(-1, 1)).view(-1) > 0
        new = hit & (dist < 0)
        dist[new] = h
        front = (dist >= 0).double().float()
    return dist


def _check_layout(g, ei, part, hops, rank):
    n = part.num_nodes
    assert torch.equal(g.owned_ids, part.part_nodes(rank))
    assert g.num_nodes == g.num_owned + g.num_ghost == g.global_ids.numel()
    dist = _reach(ei, n, g.owned_ids, hops)
    # Local nodes are exactly rings 0..hops; node_hop is the hop distance.
    assert torch.equal(torch.sort(g.global_ids).values, (dist >= 0).nonzero().view(-1))
    assert torch.equal(g.node_hop, dist[g.global_ids])
    # Ghosts grouped by owner (ascending), each at its row in the owner.
    assert torch.equal(g.ghost_owner, part.assignment[g.ghost_ids])
    assert bool((g.ghost_owner[1:] >= g.ghost_owner[:-1]).all())
    assert bool((g.ghost_owner != rank).all())
    assert torch.equal(g.ghost_owner_index, part.local_index()[g.ghost_ids])
    # Local edges are exactly the edges into rings 0..hops-1, mapped through global_ids / edge_ids.
    need = ((dist[ei[1]] >= 0) & (dist[ei[1]] < hops)).nonzero().view(-1)
    assert torch.equal(torch.sort(g.edge_ids).values, need)
    assert torch.equal(g.global_ids[g.edge_index], ei[:, g.edge_ids])
    tgt_hop = g.node_hop[g.edge_index[1]]
    for h in range(hops):
        assert bool((tgt_hop[g.edge_hop_ptr[h] : g.edge_hop_ptr[h + 1]] == h).all())
    # Plan: what we receive from q is what q sends us.
    assert g.recv_counts == torch.bincount(g.ghost_owner, minlength=g.world_size).tolist()
    assert [int(t.numel()) for t in g.send_index] == g.plan.send_counts[rank].tolist()


@contextlib.contextmanager
def _spy_collectives():
    """Record every torch.distributed call made while the block runs: (name, detail)."""
    import torch.distributed as dist

    import meshshard.distributed.autograd as msa
    import meshshard.distributed.comm as comm

    calls = []
    patched = []

    def wrap(owner, name):
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            if name == "all_to_all_single":
                inp = args[1]
                calls.append((name, tuple(inp.shape), list(kwargs["input_split_sizes"]), list(kwargs["output_split_sizes"])))
            else:
                calls.append((name,))
            return real(*args, **kwargs)

        setattr(owner, name, spy)
        patched.append((owner, name, real))

    for name in ("all_to_all_single", "all_gather", "all_gather_object", "all_reduce", "broadcast", "barrier",
                 "batch_isend_irecv", "isend", "irecv", "send", "recv", "gather", "scatter"):
        if hasattr(dist, name):
            wrap(dist, name)
    wrap(comm, "_all_gather_single")
    for name in ("isend_op", "irecv_op"):
        wrap(msa, name)
    try:
        yield calls
    finally:
        for owner, name, real in reversed(patched):
            setattr(owner, name, real)


def _check_exchange_traffic(g, x, rank, world):
    """exchange sends plan.num_send rows out and num_ghost rows in, in one all-to-all with the plan's
    split sizes; backward is the transposed one; nothing else crosses the wire (validation off),
    and with validation on only one small check whose size does not depend on the features."""
    from meshshard.distributed import validation

    plan = g.plan
    send = plan.send_counts[rank].tolist()
    recv = plan.send_counts[:, rank].tolist()
    assert sum(recv) == g.num_ghost and sum(send) == plan.num_send
    with validation(False):
        for feats in (3, 5):
            xo = x[g.owned_ids, :1].repeat(1, feats).clone().requires_grad_()
            with _spy_collectives() as fwd:
                xe = g.exchange(xo)
            assert fwd == [("all_to_all_single", (plan.num_send, feats), send, recv)], fwd
            with _spy_collectives() as bwd:
                xe.sum().backward()
            assert bwd == [("all_to_all_single", (g.num_ghost, feats), recv, send)], bwd
    shapes = []
    for feats in (3, 5):
        with _spy_collectives() as checked:
            g.exchange(x[g.owned_ids, :1].repeat(1, feats))
        data = [c for c in checked if len(c) == 4 and c[1][1:] == (feats,) and c[2] == send]
        other = [c for c in checked if c not in data]
        assert len(data) == 1 and len(other) == 1 and other[0][0] == "all_to_all_single", checked
        assert other[0][1][0] <= 64 * world, other  # a handful of integers per rank
        shapes.append(other[0][1])
    assert shapes[0] == shapes[1], shapes  # the check is a fixed-size vector of a few integers


def _graph_rank(rank, world, data_dir, parts_dir, bad_dir, own_dirs):
    import meshshard as ms
    from meshshard.distributed import CollectiveMismatchError
    from meshshard.partitioners import Partition

    ShardedGraph = ms.ShardedGraph
    pts, ei = load_graph(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    w = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    out = {}

    # -- from_partition with every method, halo depth 1 and 2 ------------------------------
    for method in METHODS:
        part = make_partition(pts, ei, world, method)
        for hops in (1, 2):
            g = ShardedGraph.from_partition(ei, part, halo_hops=hops)
            assert (g.rank, g.world_size, g.sizes) == (rank, world, part.sizes)
            assert torch.equal(g.offsets, part.offsets)
            _check_layout(g, ei, part, hops, rank)
            xo = x[g.owned_ids].clone().requires_grad_()
            xe = g.exchange(xo)
            assert torch.equal(xe, x[g.global_ids])
            (xe * w[g.global_ids]).sum().backward()
            out[(method, hops)] = (g.global_ids, xo.grad)
        if world > 1 and method == "hilbert":
            _check_exchange_traffic(g, x, rank, world)
        # Gather / all-gather return rows in original node order, and their gradients.
        xo = x[g.owned_ids].clone().requires_grad_()
        full = g.all_gather(xo)
        assert torch.equal(full, x)
        (full * w).sum().backward()
        assert torch.allclose(xo.grad, world * w[g.owned_ids], rtol=0, atol=1e-12)
        xo.grad = None
        got = g.gather(xo, dst=world - 1)
        if rank == world - 1:
            assert torch.equal(got, x)
            (got * w).sum().backward()
        else:
            assert got.shape == (0, 3)
            got.sum().backward()
        assert torch.equal(xo.grad, w[g.owned_ids])

    # -- from_global_edges (ShardTensor-order ids) equals from_partition, on a directed kNN graph
    for graph_name, edges, method in (("knn", knn_edges(pts, 6), "kdtree"), ("mesh", ei, "hilbert")):
        part = make_partition(pts, edges, world, method)
        new_id = torch.empty(n, dtype=torch.long)
        new_id[part.perm] = torch.arange(n)
        e2 = new_id[edges]
        owner = part.assignment[part.perm][e2[1]]
        order = torch.sort(owner, stable=True).indices
        e2 = e2[:, order]  # the global edge list = ranks' lists concatenated in rank order
        owner = owner[order]
        mine = e2[:, owner == rank]
        contiguous = Partition(part.assignment[part.perm], world)
        for hops in (1, 2, 3):
            g2 = ShardedGraph.from_global_edges(mine, part.sizes, halo_hops=hops)
            ref = ShardedGraph.from_partition(e2, contiguous, halo_hops=hops)
            for name in ("global_ids", "ghost_owner", "ghost_owner_index", "node_hop", "edge_hop_ptr"):
                assert torch.equal(getattr(g2, name), getattr(ref, name)), (graph_name, hops, name)
            assert torch.equal(g2.global_ids[g2.edge_index], e2[:, g2.edge_ids])
            assert torch.equal(torch.sort(g2.edge_ids).values, torch.sort(ref.edge_ids).values)
            assert torch.equal(g2.plan.send_counts, ref.plan.send_counts)
            xs = x[part.perm]
            assert torch.equal(g2.exchange(xs[g2.owned_ids]), xs[g2.global_ids])
            assert torch.equal(g2.all_gather(xs[g2.owned_ids]), xs)

    # -- each rank reads only its part from disk ------------------------------------------
    g3 = ShardedGraph.load(parts_dir)
    part = ms.Partition.load(Path(parts_dir) / "partition.pt")
    ref = ShardedGraph.from_partition(ei, part, halo_hops=2)
    for name in ("global_ids", "ghost_owner", "node_hop", "edge_index", "edge_ids", "edge_hop_ptr"):
        assert torch.equal(getattr(g3, name), getattr(ref, name)), name
    assert torch.equal(g3.node_data["x"], x[g3.global_ids])
    assert torch.equal(g3.exchange(x[g3.owned_ids]), x[g3.global_ids])
    assert torch.equal(g3.all_gather(x[g3.owned_ids]), x)

    # -- a rank holding only meta.json and its own part file ------------------------------
    g4 = ShardedGraph.load(own_dirs[rank])
    assert sorted(p.name for p in Path(own_dirs[rank]).iterdir()) == ["meta.json", f"part_{rank:04d}.pt"]
    assert torch.equal(g4.global_ids, g3.global_ids) and torch.equal(g4.edge_index, g3.edge_index)
    assert torch.equal(g4.exchange(x[g4.owned_ids]), x[g4.global_ids])
    assert torch.equal(g4.all_gather(x[g4.owned_ids]), x)

    # -- ShardTensor node features: exchange / gathers use the local shard, gradients reach it --
    from meshshard.tensor import ShardTensor

    mesh = ms.init_device_mesh("cpu", (world,))
    xo = x[g3.owned_ids].clone().requires_grad_()
    st = ShardTensor.from_local(xo, mesh, (ms.Shard(0),), sharding_shapes={0: [(s, 3) for s in g3.sizes]})
    xe = g3.exchange(st)
    assert type(xe) is torch.Tensor and torch.equal(xe, x[g3.global_ids])
    (xe * w[g3.global_ids]).sum().backward()
    grad_exchange = xo.grad.clone()
    xo.grad = None
    assert torch.equal(g3.all_gather(st), x)
    got = g3.gather(st, dst=0)
    assert torch.equal(got, x) if rank == 0 else got.shape == (0, 3)
    out["shardtensor"] = (g3.global_ids, grad_exchange)

    # -- empty ranks: a part with no owned node, and a 3-node graph on up to 4 ranks ---------
    if world >= 2:
        base = make_partition(pts, ei, world - 1, "kdtree").assignment if world > 2 else torch.zeros(n, dtype=torch.long)
        empty = Partition(base + (base >= 1).long(), world)  # rank 1 owns nothing
        for hops in (1, 2):
            ge = ShardedGraph.from_partition(ei, empty, halo_hops=hops)
            assert (ge.num_owned == 0) == (rank == 1)
            assert ge.num_ghost == 0 if rank == 1 else ge.num_ghost > 0 or world == 2
            _check_layout(ge, ei, empty, hops, rank)
            xo = x[ge.owned_ids].clone().requires_grad_()
            xe = ge.exchange(xo)
            assert torch.equal(xe, x[ge.global_ids])
            (xe * w[ge.global_ids]).sum().backward()
            out[("empty", hops)] = (ge.global_ids, xo.grad)
        assert torch.equal(ge.all_gather(x[ge.owned_ids]), x)
        got = ge.gather(x[ge.owned_ids], dst=1)  # the empty rank receives everything
        assert torch.equal(got, x) if rank == 1 else got.shape == (0, 3)
    path = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    tiny = Partition(torch.tensor([world - 1, 0, world - 1]), world)  # ranks 1..W-2 own nothing
    gt = ShardedGraph.from_partition(path, tiny, halo_hops=2)
    xt = torch.arange(3, dtype=torch.float64).view(3, 1) + 10
    assert torch.equal(gt.exchange(xt[gt.owned_ids]), xt[gt.global_ids])
    assert torch.equal(gt.all_gather(xt[gt.owned_ids]), xt)
    assert gt.num_owned == tiny.sizes[rank]

    # -- bad input: the same clear error on every rank, then the group still works ----------
    g = ShardedGraph.from_partition(ei, part, halo_hops=1)
    bad = ei.clone()
    if rank == 0:
        bad[0, 5] = n + 7
    with pytest.raises(ValueError, match="outside|rejected"):
        ShardedGraph.from_partition(bad, part)
    with pytest.raises(ValueError, match="parts|rejected"):
        ShardedGraph.from_partition(ei, Partition(part.assignment % world, world + 1))
    short = Partition(part.assignment[:-1], world)  # partition of N-1 nodes for an N-node graph
    with pytest.raises(ValueError, match="outside|rejected"):
        ShardedGraph.from_partition(ei, short)
    with pytest.raises(ValueError, match="owned rows"):
        g.exchange(torch.zeros(g.num_owned + 1, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="halo_hops|rejected"):
        ShardedGraph.from_partition(ei, part, halo_hops=0 if rank == world - 1 else 1)
    if world > 1:
        feats = 3 if rank == 0 else 4
        with pytest.raises(CollectiveMismatchError):
            g.exchange(torch.zeros(g.num_owned, feats, dtype=torch.float64))
        with pytest.raises(CollectiveMismatchError):
            g.exchange(torch.zeros(g.num_owned, 3, dtype=torch.float32 if rank == 1 else torch.float64))
        sizes = list(part.sizes)
        if rank == 1:
            sizes = sizes[::-1] if sizes != sizes[::-1] else [s + 1 for s in sizes]
        with pytest.raises(ValueError):
            ShardedGraph.from_global_edges(torch.zeros(2, 0, dtype=torch.long), sizes)
    lo, hi = int(part.offsets[rank]), int(part.offsets[rank + 1])
    tgt = torch.full((1,), hi if rank == world - 1 else lo)  # last rank: a target it does not own
    with pytest.raises(ValueError, match="targets|rejected|outside"):
        ShardedGraph.from_global_edges(torch.stack([torch.zeros(1, dtype=torch.long), tgt]), part.sizes)
    # one rank's part corrupt, or missing: every rank names that rank and the cause
    last = world - 1
    agreed = rf"ShardedGraph.load: invalid input on rank\(s\) \[{last}\] \(rank {last}: " if world > 1 else ""
    with pytest.raises(ValueError, match=agreed + "(ValueError: )?.*part_.*sha256 mismatch"):
        ShardedGraph.load(bad_dir)
    if world > 1:
        with pytest.raises(ValueError, match=agreed + f"FileNotFoundError: .*part_{last:04d}.pt not found"):
            ShardedGraph.load(own_dirs[0] if rank == last else own_dirs[rank])  # the last rank's part is not there
    assert torch.equal(g.exchange(x[g.owned_ids]), x[g.global_ids])  # not desynchronised
    return out


@pytest.mark.parametrize("world", WORLD_SIZES)
def test_sharded_graph(world, data_dir, tmp_path):
    import shutil

    import meshshard as ms
    from meshshard.graph import save_parts

    pts, ei = load_graph(data_dir, "naca0012_inviscid.su2")
    n = pts.shape[0]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    w = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    part = make_partition(pts, ei, world, "graph")
    parts_dir = save_parts(tmp_path / "parts", ei, part, node_data={"pos": pts, "x": x}, halo_hops=2, progress=False)
    bad_dir = save_parts(tmp_path / "bad", ei, part, halo_hops=1, progress=False)
    victim = bad_dir / f"part_{world - 1:04d}.pt"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))

    own_dirs = []  # rank r sees only meta.json and part_r: proves it reads nothing else
    for r in range(world):
        d = tmp_path / f"rank{r}"
        d.mkdir()
        shutil.copy(parts_dir / "meta.json", d)
        shutil.copy(parts_dir / f"part_{r:04d}.pt", d)
        own_dirs.append(str(d))

    results = run_distributed(_graph_rank, world, args=(str(data_dir), str(parts_dir), str(bad_dir), own_dirs),
                              timeout=TIMEOUT)
    # Exchange backward: a ghost's gradient is summed into its owner, as in a single process
    # where every rank's local rows are gathered from the whole tensor.
    for key in results[0]:
        ref = torch.zeros(n, 3, dtype=torch.float64)
        for r in range(world):
            gids, _ = results[r][key]
            ref.index_add_(0, gids, w[gids])
        for r in range(world):
            gids, grad = results[r][key]
            owned = gids[: grad.shape[0]]
            assert torch.allclose(grad, ref[owned], rtol=0, atol=1e-12), key
    assert ms.graph.verify_parts(parts_dir) == []
