"""train_step on a sharded graph when one rank goes wrong: bad rows or a NaN on that rank only
raise on EVERY rank, naming the rank and the cause, before any parameter changes; the group then
still trains, and a DomainParallel-wrapped model takes the same step with no explicit gradient
all-reduce (one spawned group for every check). A bare model goes through DomainParallel for the
step (no hooks left behind) and equals one process, also on a sub-group's graph."""
import copy

import pytest
import torch

from meshshard.testing import run_distributed

WORLD = 3


def _grid(side: int = 6):
    ids = torch.arange(side * side).view(side, side)
    right = torch.stack([ids[:, :-1].reshape(-1), ids[:, 1:].reshape(-1)])
    down = torch.stack([ids[:-1].reshape(-1), ids[1:].reshape(-1)])
    return side * side, torch.cat([right, down, right.flip(0), down.flip(0)], 1)


def _faulty_rank(rank, world):
    from meshshard.distributed import CollectiveMismatchError, all_gather_into_tensor
    from meshshard.graph import ShardedGraph
    from meshshard.models import MeshGraphNet
    from meshshard.models.training import train_step
    from meshshard.partitioners import Partition

    n, ei = _grid()
    g = ShardedGraph.from_partition(ei, Partition(torch.arange(n) * world // n, world))
    gen = torch.Generator().manual_seed(0)
    x_all, y_all = torch.randn(n, 3, generator=gen, dtype=torch.float64), torch.randn(n, 1, generator=gen, dtype=torch.float64)
    x, y = x_all[g.owned_ids], y_all[g.owned_ids]
    e = torch.ones(g.edge_index.shape[1], 2, dtype=torch.float64)
    model = MeshGraphNet(3, 2, 1, hidden=8, num_layers=2).double()
    model.broadcast_parameters(src=0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]

    y_nan = y.clone()
    if rank == 1:
        y_nan[0, 0] = float("nan")
    with pytest.raises(CollectiveMismatchError,
                       match=r"invalid input on rank\(s\) \[1\] \(rank 1: FloatingPointError: non-finite loss: y has 1 NaN/inf"):
        train_step(model, opt, x, e, y_nan, graph=g)
    x_short = x[:-1] if rank == 2 else x
    with pytest.raises(CollectiveMismatchError, match=r"rank\(s\) \[2\] \(rank 2: ValueError: x has \d+ rows, expected"):
        train_step(model, opt, x_short, e, y, graph=g)
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters())), "a failed step changed parameters"

    import meshshard as ms
    from meshshard.tensor import ShardTensor

    dp = ms.DomainParallel(copy.deepcopy(model))
    dp_opt = torch.optim.Adam(dp.parameters(), lr=1e-3)
    with pytest.raises(CollectiveMismatchError, match=r"rank\(s\) \[1\] .*y has 1 NaN/inf"):
        train_step(dp, dp_opt, x, e, y_nan, graph=g)
    with pytest.raises(ValueError, match="built with exchange='auto'"):
        train_step(dp, dp_opt, x, e, y, graph=g, exchange="once")

    seen, hooked = [], []
    watch = model.register_forward_pre_hook(  # during the step: DomainParallel's gradient hooks are on
        lambda *_: hooked.append(all(p._post_accumulate_grad_hooks for p in model.parameters())))
    loss = train_step(model, opt, x, e, y, graph=g, before_step=lambda l: seen.append(float(l)))
    watch.remove()
    # y as a ShardTensor (as ShardedMeshDataset hands it out); the hooks sum the gradients once
    y_st = ShardTensor.from_local(y, sharding_shapes={0: g.sizes})
    dp_loss = train_step(dp, dp_opt, x, e, y_st, graph=g)
    assert abs(dp_loss - loss) <= 1e-12 * abs(loss)
    assert all(torch.allclose(a, b, rtol=0, atol=1e-12) for a, b in zip(dp.module.parameters(), model.parameters()))
    assert seen == [loss]
    losses = all_gather_into_tensor(torch.tensor([loss], dtype=torch.float64)).view(-1)
    assert bool((losses == losses[0]).all()) and torch.isfinite(losses).all()
    # a bare model is wrapped in DomainParallel for the step, and its gradient hooks come off again
    assert hooked == [True] and not any(p._post_accumulate_grad_hooks for p in model.parameters())
    return loss


def _subgroup_rank(rank, world):
    """Ranks 0 and 1 train on a graph of their sub-group with a bare model and plain rows; rank 2 idles."""
    from meshshard.distributed import new_group
    from meshshard.graph import ShardedGraph
    from meshshard.models import MeshGraphNet
    from meshshard.models.training import train_step
    from meshshard.partitioners import Partition

    sub, everyone = new_group([0, 1]), new_group([0, 1, 2])
    n, ei = _grid(5)
    gen = torch.Generator().manual_seed(1)
    x_all, y_all = torch.randn(n, 3, generator=gen, dtype=torch.float64), torch.randn(n, 1, generator=gen, dtype=torch.float64)
    e_all = torch.randn(ei.shape[1], 2, generator=gen, dtype=torch.float64)
    torch.manual_seed(0)
    ref = MeshGraphNet(3, 2, 1, hidden=8, num_layers=2).double()
    model = copy.deepcopy(ref)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    ref_losses = [train_step(ref, ref_opt, x_all, e_all, y_all, edge_index=ei) for _ in range(3)]
    if rank >= 2:
        return None
    part = Partition((torch.arange(n) * 3 // n).clamp(max=1), 2)  # uneven: 2/3 and 1/3 of the rows
    g = ShardedGraph.from_partition(ei, part, group=sub)
    owned = g.owned_ids
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = [train_step(model, opt, x_all[owned], e_all[g.edge_ids], y_all[owned], graph=g) for _ in range(2)]
    # group= is deprecated: the step runs over the graph's group, and another group is refused
    with pytest.warns(DeprecationWarning, match="group"):
        losses.append(train_step(model, opt, x_all[owned], e_all[g.edge_ids], y_all[owned], graph=g, group=sub))
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not the graph's group"):
        train_step(model, opt, x_all[owned], e_all[g.edge_ids], y_all[owned], graph=g, group=everyone)
    assert max(abs(a - b) / abs(b) for a, b in zip(losses, ref_losses)) <= 1e-10, (losses, ref_losses)
    for a, b in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    return losses


@pytest.mark.timeout(180)
def test_bare_model_on_a_subgroup_graph_equals_one_process():
    out = run_distributed(_subgroup_rank, WORLD, timeout=150)
    assert out[2] is None and out[0] == out[1]


@pytest.mark.timeout(180)
def test_one_faulty_rank_fails_every_rank_alike():
    losses = run_distributed(_faulty_rank, WORLD, timeout=150)
    assert len(set(losses)) == 1


def test_single_process_nan_loss_raises():
    from meshshard.models import MeshGraphNet
    from meshshard.models.training import train_step

    n, ei = _grid(3)
    model = MeshGraphNet(3, 2, 1, hidden=8, num_layers=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, e, y = torch.randn(n, 3), torch.ones(ei.shape[1], 2), torch.randn(n, 1)
    x[2, 1] = float("inf")
    with pytest.raises(FloatingPointError, match="x has 1 NaN/inf"):
        train_step(model, opt, x, e, y, edge_index=ei)
