"""More models through ``DomainParallel`` (written as their authors write them, ``tests/ops/_models.py``,
no meshshard call inside) equal one process on the whole input: the output, the global loss, every
parameter's gradient after ``loss.backward()`` and the parameters after one Adam step (float64,
1e-10; the float32 case takes an SGD step at 1e-5, see ``test_domain_parallel_models.py``).

One spawned group per world size (1-4) runs every case of that size:

* a 2-D U-Net on an image split in height AND width, ``(Shard(2), Shard(3))`` on a 2 x 2 mesh from
  ``init_device_mesh("cpu", (2, 2))`` (uneven on both dims), passed as ``DomainParallel(model,
  mesh=mesh2d)``; a 1 x 1 mesh at one rank;
* a Point Transformer (vector attention over kNN neighbourhoods) on DrivAer body points split by a
  k-d tree partition: the neighbour ids come from :func:`meshshard.ops.knn.sharded_knn` on the
  sharded points (global ids), and the model gathers neighbour rows with ``feat[idx.view(-1), :]``
  on ShardTensors (rows fetched from their owners); at 4 ranks one shard is empty;
* a DiT (adaLN modulation from a conditioning vector, natten's ``na2d`` in ``[B, H, W, heads,
  dim]``, MLP) on a grid split along its height (1-D mesh) and in height and width (2 x 2 mesh),
  the conditioning vector a plain tensor or a Replicate ShardTensor;
* MeshGraphNet on a ``ShardedGraph`` with Adam over two steps and ``F.mse_loss`` on the
  ShardTensor output (``test_domain_parallel.py`` checks it with SGD and a local loss);
* models mixing graph and point layers: a graph model's output ShardTensor fed to a second
  ``DomainParallel`` holding a global-token branch (``dp_head(dp_gnn(x, g))``), and one model
  chaining kNN vector attention with Transolver slice attention.
"""
import pytest
import torch

from meshshard.testing import run_distributed
from tests.ops.test_domain_parallel_models import _close, _points, _split

TIMEOUT = 300


def _compare(model, ref, out, out_ref, loss, loss_ref, tol, what):
    full = out.full_tensor() if hasattr(out, "full_tensor") else out
    _close(full.detach(), out_ref.detach(), tol, f"{what}: output")
    _close(loss.full_tensor().detach(), loss_ref.detach(), tol, f"{what}: loss")
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        assert p.grad is not None, f"{what}: {name} got no gradient"
        _close(p.grad, q.grad, tol, f"{what}: grad of {name}")


def _after_step(model, ref, tol, what):
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters()):
        _close(p.detach(), q.detach(), tol, f"{what}: {name} after the step")
    for (name, b), (_, c) in zip(model.named_buffers(), ref.named_buffers()):
        if b.is_floating_point():
            _close(b, c, tol, f"{what}: buffer {name}")


def _optimizers(model, ref, dtype):
    # Adam in float64; float32 takes SGD (Adam moves a weight by about lr * sign(gradient), so a
    # gradient component near zero whose float32 rounding differs would flip the step)
    kind = torch.optim.Adam if dtype == torch.float64 else torch.optim.SGD
    return kind(model.parameters(), lr=1e-2), kind(ref.parameters(), lr=1e-2)


def _train_matches(make_model, data, dtype, tol, what, steps=1, mesh=None):
    """``steps`` steps of model + MSE + optimizer through DomainParallel equal the same in one process.

    ``data(dtype) -> (whole inputs, sharded inputs, whole target, sharded target)``."""
    import copy

    import torch.nn.functional as F

    import meshshard as ms

    torch.manual_seed(0)
    model = make_model().to(dtype)
    ref = copy.deepcopy(model)
    dp = ms.DomainParallel(model, mesh=mesh)
    opt, opt_ref = _optimizers(model, ref, dtype)
    args, sargs, y, ys = data(dtype)
    for step in range(steps):
        out_ref = ref(*args)
        loss_ref = F.mse_loss(out_ref, y)
        opt_ref.zero_grad()
        loss_ref.backward()
        out = dp(*sargs)
        loss = F.mse_loss(out, ys)
        opt.zero_grad()
        loss.backward()
        _compare(model, ref, out, out_ref, loss, loss_ref, tol, f"{what} step {step}")
        opt.step()
        opt_ref.step()
        _after_step(model, ref, tol, f"{what} step {step}")


# --------------------------------------------------------------------------- a) U-Net, 2-D mesh
def _unet_2d_mesh(world):
    """The U-Net on an image split in height and width: 2 x 2 mesh at 4 ranks, 1 x 1 at one."""
    import meshshard as ms
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor
    from tests.ops._models import UNet2d

    shape = (2, 2) if world == 4 else (1, 1)
    mesh2d = ms.init_device_mesh("cpu", shape)
    hs, ws = ([8, 6], [6, 4]) if world == 4 else ([14], [10])  # uneven, even sizes (pooling by 2)
    ch, cw = mesh2d.get_local_rank(0), mesh2d.get_local_rank(1)
    gen = torch.Generator().manual_seed(3)
    img, target = torch.randn(2, 2, 14, 10, generator=gen), torch.randn(2, 1, 14, 10, generator=gen)

    def shard(t):
        local = _split(_split(t, 2, hs, ch), 3, ws, cw)
        return ShardTensor.from_local(local, mesh2d, (Shard(2), Shard(3)), sharding_shapes="infer")

    def data(dtype):
        x, y = img.to(dtype), target.to(dtype)
        return (x,), (shard(x),), y, shard(y)

    what = f"U-Net split in height and width on a {shape} mesh"
    _train_matches(lambda: UNet2d(2, 1), data, torch.float64, 1e-10, what, steps=2, mesh=mesh2d)
    if world == 4:
        _train_matches(lambda: UNet2d(2, 1), data, torch.float32, 1e-5, what + " float32", mesh=mesh2d)


# --------------------------------------------------------------------------- b) point transformer
def _knn_inputs(data_dir, world, rank, k, n=60):
    """Points in k-d tree part order, features, targets and the kNN ids: whole, and as ShardTensors
    with the ids from ``sharded_knn`` on the sharded points."""
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.ops.knn import knn_reference, sharded_knn
    from meshshard.tensor import ShardTensor

    mesh = default_device_mesh()
    pts, sizes = _points(data_dir, n, world, empty_last=world == 4)
    feat = torch.stack([torch.sin(3 * pts[:, 0]), pts[:, 1] * pts[:, 2]], -1)
    y = torch.stack([torch.cos(2 * pts[:, 1]) * pts[:, 2], pts[:, 0] ** 2], -1)

    def shard(t):
        return ShardTensor.from_local(_split(t, 0, sizes, rank), mesh, (Shard(0),), sharding_shapes="infer")

    ps = shard(pts)
    edge_index = sharded_knn(ps, k)  # [2, n_r * k] global ids: row 0 neighbour, row 1 query, nearest first
    idx = ShardTensor.from_local(edge_index[0].view(-1, k), mesh, (Shard(0),), sharding_shapes="infer")
    idx_ref = knn_reference(pts, k)[0].view(-1, k)
    assert torch.equal(idx.full_tensor(), idx_ref), "sharded_knn differs from one process"

    def data(dtype):
        return (pts.to(dtype), feat.to(dtype), idx_ref), (shard(pts.to(dtype)), shard(feat.to(dtype)), idx), \
            y.to(dtype), shard(y.to(dtype))

    return data, idx


def _point_transformer(data_dir, world, rank):
    from tests.ops._models import PointTransformer

    k = 5
    data, idx = _knn_inputs(data_dir, world, rank, k)
    _train_matches(lambda: PointTransformer(2, 2, nsample=k), data, torch.float64, 1e-10,
                   f"Point Transformer on kNN neighbourhoods at {world} ranks")
    # x[idx] with the 2-d kNN ids on sharded rows (as many point codes gather neighbours): rows by global id
    inputs = data(torch.float64)
    whole, sharded = inputs[0][1], inputs[1][1]
    got = sharded[idx]
    want = whole[idx.full_tensor() if hasattr(idx, "full_tensor") else idx]
    assert torch.equal(got.full_tensor(), want), "x[idx] with a 2-d index differs from one process"


# --------------------------------------------------------------------------- c) DiT with na2d
def _dit(world, rank):
    """The DiT on a grid split along its height (1-D mesh) or, at 4 ranks, in height and width."""
    import meshshard as ms
    from meshshard.distributed import Replicate, Shard, default_device_mesh
    from meshshard.tensor import ShardTensor
    from tests.ops._models import DiT

    gen = torch.Generator().manual_seed(5)
    x, c, y = torch.randn(2, 9, 8, 3, generator=gen), torch.randn(2, 4, generator=gen), \
        torch.randn(2, 9, 8, 2, generator=gen)
    if world == 4:
        mesh = ms.init_device_mesh("cpu", (2, 2))
        hs, ws = [6, 3], [3, 5]
        ch, cw = mesh.get_local_rank(0), mesh.get_local_rank(1)
        placements = (Shard(1), Shard(2))

        def local(t):
            return _split(_split(t, 1, hs, ch), 2, ws, cw)
    else:
        mesh = default_device_mesh()
        hs = {1: [9], 2: [6, 3], 3: [4, 2, 3]}[world]
        placements = (Shard(1),)

        def local(t):
            return _split(t, 1, hs, rank)

    for replicated_c in ([False, True] if world == 4 else [world == 3]):
        def data(dtype):
            xs, ys = (ShardTensor.from_local(local(t.to(dtype)), mesh, placements, sharding_shapes="infer")
                      for t in (x, y))
            cc = c.to(dtype)
            # the conditioning vector: a plain tensor (promoted to Replicate) or a Replicate ShardTensor
            cs = ShardTensor.from_local(cc, mesh, tuple(Replicate() for _ in placements)) if replicated_c else cc
            return (x.to(dtype), cc), (xs, cs), y.to(dtype), ys

        what = f"DiT with na2d, grid {placements} at {world} ranks, conditioning " + \
            ("a Replicate ShardTensor" if replicated_c else "a plain tensor")
        _train_matches(lambda: DiT(3, 2, 4), data, torch.float64, 1e-10, what, mesh=mesh)


# --------------------------------------------------------------------------- d) MeshGraphNet
def _graph(data_dir, world, halo_hops):
    import meshshard as ms

    mesh = ms.read_mesh(data_dir / "naca0012_inviscid.su2")
    pos, ei = torch.as_tensor(mesh.points, dtype=torch.float64), mesh.edge_index()
    part = ms.partition(pos, world, method="kdtree", edge_index=ei, refine=False)
    g = ms.ShardedGraph.from_partition(ei, part, halo_hops=halo_hops)
    gen = torch.Generator().manual_seed(9)
    n, e = pos.shape[0], ei.shape[1]
    x, ea, y = torch.randn(n, 4, generator=gen, dtype=torch.float64), \
        torch.randn(e, 3, generator=gen, dtype=torch.float64), torch.randn(n, 2, generator=gen, dtype=torch.float64)
    return g, ei, x, ea, y


def _meshgraphnet(data_dir, world):
    """MeshGraphNet, Adam over two steps, the loss on the ShardTensor output."""
    import copy

    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.models import MeshGraphNet
    from meshshard.tensor import ShardTensor

    halo = 2 if world == 3 else 1  # one exchange per call, or one per layer
    g, ei, x, ea, y = _graph(data_dir, world, halo)
    torch.manual_seed(0)
    model = MeshGraphNet(4, 3, 2, hidden=8, num_layers=2, mlp_layers=1).double()
    ref = copy.deepcopy(model)
    dp = ms.DomainParallel(model)
    opt, opt_ref = _optimizers(model, ref, torch.float64)
    ys = ShardTensor.from_local(y[g.owned_ids], sharding_shapes=list(g.sizes))
    what = f"MeshGraphNet halo_hops={halo} at {world} ranks"
    for step in range(2):
        out_ref = ref(x, ei, edge_attr=ea)
        loss_ref = F.mse_loss(out_ref, y)
        opt_ref.zero_grad()
        loss_ref.backward()
        out = dp(x[g.owned_ids], g, edge_attr=ea)
        loss = F.mse_loss(out, ys)
        opt.zero_grad()
        loss.backward()
        _compare(model, ref, out.to_local(), out_ref[g.owned_ids], loss, loss_ref, 1e-10, f"{what} step {step}")
        opt.step()
        opt_ref.step()
        _after_step(model, ref, 1e-10, f"{what} step {step}")


# --------------------------------------------------------------------------- e) graph + point layers
def _graph_then_global_token(data_dir, world):
    """A GNN then a global-token branch over all nodes: ``dp_head(dp_gnn(x, g))``, Adam."""
    import copy

    import torch.nn.functional as F
    from torch_geometric.nn.models import GraphSAGE

    import meshshard as ms
    from meshshard.tensor import ShardTensor
    from tests.ops._models import GlobalTokenHead

    g, ei, x, _, y = _graph(data_dir, world, 1)
    torch.manual_seed(0)
    gnn, head = GraphSAGE(4, 8, 2, 8).double(), GlobalTokenHead(8, 2).double()
    gnn_ref, head_ref = copy.deepcopy(gnn), copy.deepcopy(head)
    dp_gnn, dp_head = ms.DomainParallel(gnn), ms.DomainParallel(head)
    model, ref = torch.nn.ModuleList([gnn, head]), torch.nn.ModuleList([gnn_ref, head_ref])
    opt, opt_ref = _optimizers(model, ref, torch.float64)
    ys = ShardTensor.from_local(y[g.owned_ids], sharding_shapes=list(g.sizes))
    out_ref = head_ref(gnn_ref(x, ei))
    loss_ref = F.mse_loss(out_ref, y)
    loss_ref.backward()
    out = dp_head(dp_gnn(x[g.owned_ids], g))
    loss = F.mse_loss(out, ys)
    loss.backward()
    what = f"GraphSAGE then a global token at {world} ranks"
    _compare(model, ref, out.to_local(), out_ref[g.owned_ids], loss, loss_ref, 1e-10, what)
    opt.step()
    opt_ref.step()
    _after_step(model, ref, 1e-10, what)


def _knn_then_slices(data_dir, world, rank):
    """One model: kNN vector attention (neighbour gather) then Transolver slice attention."""
    from tests.ops._models import KnnThenSlices

    k = 4
    data, _ = _knn_inputs(data_dir, world, rank, k, n=50)
    _train_matches(lambda: KnnThenSlices(2, 2, nsample=k), data, torch.float64, 1e-10,
                   f"kNN vector attention then slice attention at {world} ranks")


def _rank_main(rank, world, data_dir):
    import warnings

    from meshshard.tensor import PromotionWarning

    warnings.simplefilter("ignore", PromotionWarning)  # the DiT's plain conditioning vector, on purpose
    torch.set_num_threads(1)
    done = []
    if world in (1, 4):
        _unet_2d_mesh(world)
        done.append("unet")
    _point_transformer(data_dir, world, rank)
    done.append("point transformer")
    _dit(world, rank)
    done.append("dit")
    if world in (1, 2, 3):
        _meshgraphnet(data_dir, world)
        done.append("meshgraphnet")
    if world in (1, 2):
        _graph_then_global_token(data_dir, world)
        done.append("gnn + token")
    if world in (1, 3):
        _knn_then_slices(data_dir, world, rank)
        done.append("knn + slices")
    return done


EXPECTED = {1: ["unet", "point transformer", "dit", "meshgraphnet", "gnn + token", "knn + slices"],
            2: ["point transformer", "dit", "meshgraphnet", "gnn + token"],
            3: ["point transformer", "dit", "meshgraphnet", "knn + slices"],
            4: ["unet", "point transformer", "dit"]}


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_more_models_through_domain_parallel_equal_one_process(world, data_dir):
    results = run_distributed(_rank_main, world_size=world, args=(data_dir,), timeout=TIMEOUT)
    assert results == [EXPECTED[world]] * world
