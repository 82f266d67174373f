"""Uneven collectives and ShardTensor in one script, checked against the whole tensor.

    torchrun --nproc-per-node 3 examples/distributed_core.py     # under torchrun (gloo on CPU, NCCL on GPU)
    python examples/distributed_core.py --ranks 3                # spawns 3 local gloo ranks itself

Rank ``r`` owns ``r + 1`` rows of a ``[N, F]`` tensor (rank 0 of a 4-rank run may own 0 rows with
``--empty-rank``). The script runs every variable-size collective and the main ShardTensor
operations, with gradients, and compares each result with the same computation on the whole tensor
in one process. It prints one line per check and ``all checks passed`` at the end.
"""
from __future__ import annotations

import argparse
import os

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=3, help="ranks to spawn when not started by torchrun")
    p.add_argument("--features", type=int, default=4)
    p.add_argument("--empty-rank", action="store_true", help="rank 0 owns no row")
    return p.parse_args(argv)


def run_rank(rank: int, world: int, features: int, empty_rank: bool):
    import meshshard as ms
    from meshshard.distributed import Shard, Replicate
    from meshshard.ops import all_gather_v, gather_v, indexed_all_to_all_v, scatter_v

    torch.manual_seed(0)  # the same "whole" tensor on every rank, for the reference only
    sizes = [0 if (empty_rank and r == 0) else r + 1 for r in range(world)]
    n = sum(sizes)
    full = torch.randn(n, features, dtype=torch.float64)
    start = sum(sizes[:rank])
    lines = []

    def check(name, got, want):
        err = float((got.detach() - want).abs().max()) if want.numel() else 0.0
        if err > 1e-12:
            raise AssertionError(f"rank {rank}: {name} differs from the whole-tensor result by {err:.3g}")
        lines.append(f"{name:<42} max |diff| {err:.1e}")

    # --- collectives: forward and backward against the whole tensor --------------------------
    x = full[start:start + sizes[rank]].clone().requires_grad_(True)
    y = all_gather_v(x, sizes, dim=0)  # [N, F] on every rank
    check("all_gather_v forward", y, full)
    (y * torch.arange(n, dtype=y.dtype)[:, None]).sum().backward()  # backward: reduce-scatter-v
    check("all_gather_v backward (reduce-scatter-v)", x.grad,
          world * torch.arange(start, start + sizes[rank], dtype=y.dtype)[:, None].expand_as(x))

    g = gather_v(x.detach(), sizes, dim=0, dst=0)  # full on rank 0, [0, F] elsewhere
    check("gather_v on rank 0 / empty elsewhere", g, full if rank == 0 else full[:0])
    s = scatter_v(full if rank == 0 else full[:0], sizes, dim=0, src=0)
    check("scatter_v", s, full[start:start + sizes[rank]])

    # every rank sends its first row to every rank (duplicates allowed; zero rows from an empty rank)
    idx = [torch.zeros(min(1, sizes[rank]), dtype=torch.long) for _ in range(world)]
    mat = [[min(1, sizes[i])] * world for i in range(world)]
    recv = indexed_all_to_all_v(x, idx, mat, dim=0)
    firsts = torch.stack([full[sum(sizes[:i])] for i in range(world) if sizes[i]])
    check("indexed_all_to_all_v", recv, firsts)

    # --- ShardTensor: uneven rows, shapes inferred on CPU too ---------------------------------
    local = x.detach().clone().requires_grad_(True)
    st = ms.ShardTensor.from_local(local, placements=[Shard(0)])
    check("ShardTensor.full_tensor", st.full_tensor(), full)
    assert st.shard_sizes() == sizes and st.offsets() == start
    lin = torch.nn.Linear(features, 3, dtype=torch.float64)  # same weights on every rank (seeded)
    loss = torch.nn.functional.gelu(lin(st)).mean()  # row-wise ops keep the uneven layout;
    loss.backward()                                    # mean divides by the global row count
    full_req = full.clone().requires_grad_(True)
    ref_loss = torch.nn.functional.gelu(lin(full_req)).mean()
    ref_loss.backward()
    check("Linear + gelu + mean over uneven rows", loss.full_tensor(), ref_loss.detach())
    check("gradient of the input rows", local.grad, full_req.grad[start:start + sizes[rank]])

    # Shard(0) -> Replicate -> Shard(1), and a rebalance onto another uneven layout
    rep = st.redistribute(placements=[Replicate()])
    check("redistribute Shard(0) -> Replicate", rep.to_local(), full)
    cols = st.redistribute(placements=[Shard(1)])
    check("redistribute Shard(0) -> Shard(1)", cols.full_tensor(), full)
    new_sizes = list(reversed(sizes))
    moved = st.redistribute(placements=[Shard(0)], sharding_shapes={0: [(m, features) for m in new_sizes]})
    assert moved.shard_sizes() == new_sizes
    check("rebalance onto reversed sizes", moved.to_local(),
          full[sum(new_sizes[:rank]):sum(new_sizes[:rank + 1])])

    # elementwise ops between other shard boundaries: moved's rows go onto st's boundaries first
    both = st + moved
    assert both.shard_sizes() == sizes
    check("st + moved (other boundaries, rebalanced)", both.full_tensor(), full + full)
    return lines


def _torchrun_main(args):
    import meshshard as ms

    ms.init_distributed()
    try:
        lines = run_rank(ms.get_rank(), ms.get_world_size(), args.features, args.empty_rank)
        if ms.get_rank() == 0:
            print("\n".join(lines))
            print(f"all checks passed on {ms.get_world_size()} ranks")
    finally:
        ms.destroy_distributed()


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _torchrun_main(args)
    from meshshard.testing import run_distributed

    results = run_distributed(run_rank, world_size=args.ranks, args=(args.features, args.empty_rank), timeout=120)
    print("\n".join(results[0]))
    print(f"all checks passed on {args.ranks} ranks")


if __name__ == "__main__":
    main()
