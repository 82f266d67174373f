"""Losses on ShardTensor at 1-4 gloo ranks with uneven shards (one rank holds zero rows): every
reduction's value and the gradient of each rank's rows against the same loss on the whole tensor
in one process (float64 1e-10, float32 1e-5), targets as ShardTensors and as plain global tensors,
class weights' partial gradients, the relative L2 / max abs error metrics, and clear errors on
every rank for bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from meshshard.testing import run_distributed
from tests.tensor._helpers import expect_raises as _expect
from tests.tensor._ops._mesh2d import SPLIT_9_BY_6, check_on_dp_domain_mesh, check_split_in_two_dims

WORLD_SIZES = [1, 2, 3, 4]
TIMEOUT = 240
SIZES = {1: [9], 2: [0, 9], 3: [4, 0, 5], 4: [2, 3, 0, 4]}
TOLS = {torch.float64: 1e-10, torch.float32: 1e-5}


def _data(data_dir, n, dtype):
    """``n`` rows of the real DrivAer body points, standardised: ``[n, 3]``."""
    pts = np.load(f"{data_dir}/drivaer_body_points.npz")["points"][: n * 89 : 89].astype(np.float64)
    x = torch.from_numpy(pts)
    return ((x - x.mean(0)) / x.std(0)).to(dtype)


def _close(a, b, tol, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} vs {tuple(b.shape)}"
    assert torch.allclose(a, b, rtol=tol, atol=tol), f"{what}: max diff {(a - b).abs().max().item()}"


def _cases(p):
    """(name, loss(pred, target, weight, reduction), target, target is sharded, class weight or None);
    ``p`` is the whole ``[N, 3]`` prediction."""
    n = p.shape[0]
    t = torch.flip(p, [0]) * 0.7 + 0.1
    cls = (p.abs().argmax(1) + torch.arange(n)) % 3
    cls_ignored = cls.clone()
    cls_ignored[::4] = -7                                            # ignore_index rows, on several ranks
    probs = torch.softmax(t * 2, dim=1)
    elem_w = torch.linspace(0.2, 1.9, n * 3, dtype=p.dtype).reshape(n, 3)
    cw = torch.tensor([0.3, 1.0, 2.2], dtype=p.dtype)
    return [
        ("mse", lambda x, y, w, r: F.mse_loss(x, y, reduction=r), t, True, None),
        ("mse weighted", lambda x, y, w, r: F.mse_loss(x, y, reduction=r, weight=w), t, False, elem_w),
        ("l1", lambda x, y, w, r: F.l1_loss(x, y, reduction=r), t, False, None),
        ("l1 weighted", lambda x, y, w, r: F.l1_loss(x, y, reduction=r, weight=w), t, True, elem_w),
        ("huber weighted", lambda x, y, w, r: F.huber_loss(x, y, reduction=r, weight=w), t, False, elem_w),
        ("huber", lambda x, y, w, r: F.huber_loss(x, y, reduction=r, delta=0.5), t, True, None),
        ("smooth_l1", lambda x, y, w, r: F.smooth_l1_loss(x, y, reduction=r, beta=0.3), t, False, None),
        ("bce", lambda x, y, w, r: F.binary_cross_entropy(torch.sigmoid(x), y, reduction=r), torch.sigmoid(t), True,
         None),
        ("bce logits", lambda x, y, w, r: F.binary_cross_entropy_with_logits(
            x, y, reduction=r, pos_weight=torch.tensor([1.0, 2.0, 0.5], dtype=x.dtype)), torch.sigmoid(t), False, None),
        ("ce index", lambda x, y, w, r: F.cross_entropy(x, y, reduction=r), cls, True, None),
        ("ce weight ignore smooth", lambda x, y, w, r: F.cross_entropy(
            x, y, weight=w, ignore_index=-7, label_smoothing=0.1, reduction=r), cls_ignored, False, cw),
        ("ce probs weight smooth", lambda x, y, w, r: F.cross_entropy(x, y, weight=w, reduction=r, label_smoothing=0.05),
         probs, True, cw),
        ("nll weight ignore", lambda x, y, w, r: F.nll_loss(
            torch.log_softmax(x, dim=1), y, weight=w, ignore_index=-7, reduction=r), cls_ignored, True, cw),
    ]


def _check_losses(p_full, cases, sizes, mesh, rank, tol):
    from meshshard.distributed import Replicate, Shard, all_reduce
    from meshshard.tensor import ShardTensor

    off, n = sum(sizes[:rank]), sizes[rank]
    rows = {0: list(sizes)}
    for name, fn, t_full, t_sharded, w_full in cases:
        x = p_full[off:off + n].clone().requires_grad_()
        st = ShardTensor.from_local(x, mesh, (Shard(0),), sharding_shapes=rows)
        tgt = ShardTensor.from_local(t_full[off:off + n], mesh, (Shard(0),), sharding_shapes=rows) if t_sharded \
            else t_full
        for red in ("none", "mean", "sum"):
            what = f"{name} reduction={red}"
            x.grad = None
            learn_w = w_full is not None and w_full.dim() == 2   # torch: class weights get no gradient
            w = None if w_full is None else w_full.clone().requires_grad_(learn_w)
            out = fn(st, tgt, w, red)
            xr = p_full.clone().requires_grad_()
            wr = None if w_full is None else w_full.clone().requires_grad_(learn_w)
            ref = fn(xr, t_full, wr, red)
            assert isinstance(out, ShardTensor), what
            if red == "none":
                assert out.shard_sizes() == list(sizes), what
                g = torch.linspace(-1, 2, ref.numel(), dtype=ref.dtype).reshape(ref.shape)
                _close(out.to_local().detach(), ref.detach()[off:off + n], tol, what)
                (out.to_local() * g[off:off + n]).sum().backward()   # local rows: no collective needed
                (ref * g).sum().backward()
            else:
                assert all(isinstance(pl, Replicate) for pl in out.placements) and out.shape == (), what
                _close(out.to_local().detach(), ref.detach(), tol, what)
                assert abs(out.item() - ref.item()) <= tol * (1 + abs(ref.item())), what
                out.backward()
                ref.backward()
            _close(x.grad, xr.grad[off:off + n], tol, f"{what}: grad of this rank's rows")
            if learn_w and red != "none":
                # a plain weight used by every rank gets per-rank partial gradients (as in DDP)
                gw = w.grad.clone()
                all_reduce(gw, group=mesh.get_group(0))
                _close(gw, wr.grad, tol, f"{what}: all-reduced weight grad")


def _check_rows_not_first(p_full, sizes, mesh, rank, tol):
    """Class dim 1 with the points along a sharded dim 2: ``[B, C, N]`` input, ``[B, N]`` target."""
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor

    off, n = sum(sizes[:rank]), sizes[rank]
    inp = torch.stack([p_full.T, (p_full * p_full).T - 1])            # [2, 3, N]
    cls = torch.stack([p_full.argmax(1), p_full.argmin(1)])            # [2, N]
    for red in ("none", "mean", "sum"):
        x = inp[:, :, off:off + n].clone().requires_grad_()
        st = ShardTensor.from_local(x, mesh, (Shard(2),), sharding_shapes={0: list(sizes)})
        tgt = ShardTensor.from_local(cls[:, off:off + n], mesh, (Shard(1),), sharding_shapes={0: list(sizes)})
        out = F.cross_entropy(st, tgt, reduction=red, label_smoothing=0.2)
        xr = inp.clone().requires_grad_()
        ref = F.cross_entropy(xr, cls, reduction=red, label_smoothing=0.2)
        if red == "none":
            assert out.placements == (Shard(1),) and out.shard_sizes() == list(sizes)
            full = out.full_tensor()
            _close(full.detach(), ref.detach(), tol, "[B, C, N] none")
            full.sum().backward()
            ref.sum().backward()
        else:
            _close(out.to_local().detach(), ref.detach(), tol, f"[B, C, N] {red}")
            out.backward()
            ref.backward()
        _close(x.grad, xr.grad[:, :, off:off + n], tol, f"[B, C, N] {red} grad")


def _check_metrics(p_full, sizes, mesh, rank, tol):
    """relative_l2_error (value and row gradients) and max_abs_error against the whole tensor."""
    from meshshard.distributed import Replicate, Shard
    from meshshard.tensor import ShardTensor, max_abs_error, relative_l2_error

    off, n = sum(sizes[:rank]), sizes[rank]
    t_full = torch.flip(p_full, [0]) * 0.7 + 0.1
    x = p_full[off:off + n].clone().requires_grad_()
    st = ShardTensor.from_local(x, mesh, (Shard(0),), sharding_shapes={0: list(sizes)})
    tgt = ShardTensor.from_local(t_full[off:off + n], mesh, (Shard(0),), sharding_shapes={0: list(sizes)})
    xr = p_full.clone().requires_grad_()
    rel, rel_r = relative_l2_error(st, tgt), relative_l2_error(xr, t_full)
    torch.testing.assert_close(rel_r, (xr - t_full).norm() / t_full.norm())
    assert rel.placements == (Replicate(),)
    _close(rel.to_local().detach(), rel_r.detach(), tol, "relative L2")
    rel.backward()
    rel_r.backward()
    _close(x.grad, xr.grad[off:off + n], tol, "relative L2 grad")
    peak = max_abs_error(st, tgt)
    assert peak.placements == (Replicate(),) and not peak.requires_grad
    _close(peak.to_local(), (p_full - t_full).abs().max(), 0.0, "max abs error")
    _close(max_abs_error(st, t_full).to_local(), (p_full - t_full).abs().max(), 0.0, "max abs error, plain target")


def _check_bad_input(p_full, sizes, mesh, rank, world):
    from meshshard.distributed import Shard
    from meshshard.tensor import ShardTensor

    off, n = sum(sizes[:rank]), sizes[rank]
    rows = {0: list(sizes)}
    st = ShardTensor.from_local(p_full[off:off + n], mesh, (Shard(0),), sharding_shapes=rows)
    narrow = ShardTensor.from_local(p_full[off:off + n, :2], mesh, (Shard(0),), sharding_shapes=rows)
    _expect(ValueError, lambda: F.mse_loss(st, narrow), "target shape (", "differs")
    _expect(ValueError, lambda: F.l1_loss(st, p_full[:, :1]), "differs")
    _expect(ValueError, lambda: F.mse_loss(st, st, reduction="avg"), "reduction='avg'")
    _expect(ValueError, lambda: F.cross_entropy(st, torch.zeros(len(p_full) + 1, dtype=torch.long)),
            "class-index target of shape")
    cols = ShardTensor.from_local(p_full.T[:, off:off + n], mesh, (Shard(1),), sharding_shapes=rows)
    _expect(NotImplementedError, lambda: F.cross_entropy(cols, torch.zeros(3, dtype=torch.long)), "class dim")
    if world == 1:
        return
    moved = [sizes[-1]] + list(sizes[:-1])   # same rows, other shard boundaries
    other = ShardTensor.from_local(torch.zeros(moved[rank], 3, dtype=p_full.dtype), mesh, (Shard(0),),
                                   sharding_shapes={0: moved})
    # a target with the same placements and other boundaries is moved onto the input's rows (exact)
    _close(F.mse_loss(st, other).full_tensor(), F.mse_loss(p_full, torch.zeros_like(p_full)), 1e-10,
           "mse_loss with a target on other shard boundaries")
    idx_other = ShardTensor.from_local(torch.zeros(moved[rank], dtype=torch.long), mesh, (Shard(0),),
                                       sharding_shapes={0: moved})
    _expect(ValueError, lambda: F.nll_loss(st, idx_other), "target layout")
    # A class index out of range in the last rank's rows only: every rank raises, none hangs.
    bad = torch.zeros(len(p_full), dtype=torch.long)
    bad[-1] = 5
    if rank == world - 1:
        _expect(Exception, lambda: F.cross_entropy(st, bad), "")
    else:
        _expect(RuntimeError, lambda: F.cross_entropy(st, bad), f"failed on rank(s) [{world - 1}]")


def _rank_main(rank, world, data_dir):
    from meshshard.distributed import init_device_mesh

    mesh = init_device_mesh("cpu", (world,))
    sizes = SIZES[world]
    for dtype, tol in TOLS.items():
        p_full = _data(data_dir, sum(sizes), dtype)
        cases = _cases(p_full)
        if dtype == torch.float32:  # one case per loss kind keeps the spawned group short
            cases = [c for c in cases if c[0] in ("mse weighted", "huber", "bce logits", "ce weight ignore smooth")]
        _check_losses(p_full, cases, sizes, mesh, rank, tol)
        _check_rows_not_first(p_full, sizes, mesh, rank, tol)
    _check_metrics(_data(data_dir, sum(sizes), torch.float64), sizes, mesh, rank, TOLS[torch.float64])
    _check_bad_input(_data(data_dir, sum(sizes), torch.float64), sizes, mesh, rank, world)
    if world == 4:  # the same losses on a 2 x 2 (dp, domain) mesh
        g = torch.Generator().manual_seed(7)
        p, y = torch.randn(9, 3, generator=g, dtype=torch.float64), torch.randn(9, 3, generator=g, dtype=torch.float64)
        labels = torch.randint(0, 3, (9,), generator=g)
        check_on_dp_domain_mesh("mse_loss", F.mse_loss, [p, y], [2, 7])
        check_on_dp_domain_mesh("huber_loss sum", lambda a, b: F.huber_loss(a, b, reduction="sum"), [p, y], [6, 3])
        check_on_dp_domain_mesh("cross_entropy", F.cross_entropy, [p, labels], [0, 9])
    _check_split_in_two_dims(world)
    return True


def _check_split_in_two_dims(world):
    """Element-wise losses of an image split in height and width (two sharding mesh dims, uneven,
    empty shards); a class-index loss on such an image is refused on every rank."""
    from meshshard.distributed import Shard, init_device_mesh
    from meshshard.tensor import ShardTensor

    g = torch.Generator().manual_seed(11)
    img, tgt = torch.randn(2, 3, 9, 6, generator=g, dtype=torch.float64), torch.randn(2, 3, 9, 6, generator=g,
                                                                                          dtype=torch.float64)
    for mesh_shape, s0, s1 in SPLIT_9_BY_6.get(world, []):
        check_split_in_two_dims("mse_loss", F.mse_loss, img, [tgt], mesh_shape, (s0, s1))
        check_split_in_two_dims("l1_loss sum", lambda x, t: F.l1_loss(x, t, reduction="sum"), img, [tgt],
                                mesh_shape, (s0, s1))
        check_split_in_two_dims("huber_loss weighted", lambda x, t: F.huber_loss(x, t, weight=t.abs()), img, [tgt],
                                mesh_shape, (s0, s1))
    if world == 4:
        mesh = init_device_mesh("cpu", (2, 2))
        c0, c1 = mesh.get_local_rank(0), mesh.get_local_rank(1)
        x = ShardTensor.from_local(img[:, :, 4 * c0:4 + 5 * c0, 3 * c1:3 + 3 * c1].clone(), mesh, (Shard(2), Shard(3)))
        labels = torch.zeros(2, 9, 6, dtype=torch.long)
        _expect(NotImplementedError, lambda: F.cross_entropy(x, labels), "sharded on several mesh dims")


@pytest.mark.timeout(TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLD_SIZES)
def test_losses_match_whole_tensor(world, data_dir):
    assert run_distributed(_rank_main, world, args=(str(data_dir),), timeout=TIMEOUT) == [True] * world
