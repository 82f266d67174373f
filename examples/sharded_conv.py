"""The ShardTensor tutorial's dot-product and convolution examples with meshshard's names.

    torchrun --nproc-per-node 2 examples/sharded_conv.py     # under torchrun (gloo on CPU, NCCL on GPU)
    python examples/sharded_conv.py --ranks 2                # spawns local gloo ranks itself

1. Dot product: ``torch.dot`` is not a built-in ShardTensor op; a handler registered with
   ``ShardTensor.register_function_handler`` computes the local dot product and all-reduces it.
2. Convolution: an image ``[1, C, H, W]`` is scattered from rank 0 along its height (uneven
   ``torch.chunk`` layout when H does not divide) and an unmodified ``nn.Conv2d`` runs on it; the
   output, the loss, the input gradient (sharded like the input) and the all-reduced weight
   gradients equal the single-device ones. Prints the largest differences and
   ``all checks passed on W ranks``.
"""
from __future__ import annotations

import argparse
import os

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", type=int, default=2, help="ranks to spawn when not started by torchrun")
    p.add_argument("--size", type=int, default=61, help="image height and width")
    p.add_argument("--channels", type=int, default=8)
    return p.parse_args(argv)


def sharded_dot(func, types, args, kwargs):
    """``torch.dot`` of two ShardTensors with the same layout: local dot, then a sum over ranks."""
    from meshshard.distributed import Replicate
    from meshshard.distributed.autograd import all_reduce_sum
    from meshshard.tensor import ShardTensor

    x, y = args[:2]
    if tuple(x.placements) != tuple(y.placements) or x.shard_sizes() != y.shard_sizes():
        raise NotImplementedError("torch.dot: both vectors must have the same sharding")
    local = all_reduce_sum(torch.dot(x.to_local(), y.to_local()), group=x.device_mesh.get_group())
    return ShardTensor.from_local(local, x.device_mesh, (Replicate(),))


def run_rank(rank: int, world: int, size: int, channels: int):
    from meshshard.distributed import Shard, all_reduce, default_device_mesh
    from meshshard.tensor import ShardTensor, scatter_tensor

    mesh = default_device_mesh()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    lines = []

    def diff(name, got, want):
        err = float((got.detach() - want.detach()).abs().max())
        scale = float(want.detach().abs().max()) or 1.0
        if err > 1e-5 * scale:
            raise AssertionError(f"rank {rank}: {name} differs from one device by {err:.3g}")
        lines.append(f"{name:<40} max |diff| {err:.1e}")

    # --- 1. dot product with a user handler ----------------------------------------------------
    torch.manual_seed(0)
    a, b = torch.randn(1001, device=dev), torch.randn(1001, device=dev)
    ShardTensor.register_function_handler(torch.dot, sharded_dot)
    a_st = scatter_tensor(a if rank == 0 else None, 0, mesh, (Shard(0),))
    b_st = scatter_tensor(b if rank == 0 else None, 0, mesh, (Shard(0),))
    diff("dot product", torch.dot(a_st, b_st).full_tensor(), torch.dot(a, b))

    # --- 2. Conv2d on an image sharded along its height ----------------------------------------
    torch.manual_seed(1)
    image = torch.randn(1, 3, size, size, device=dev)
    conv = torch.nn.Conv2d(3, channels, kernel_size=3, padding=1).to(dev)

    x = image.clone().requires_grad_()
    out = conv(x)
    loss = out.pow(2).mean()
    loss.backward()
    want_w, want_b = conv.weight.grad.clone(), conv.bias.grad.clone()
    conv.zero_grad()

    x_st = scatter_tensor(image if rank == 0 else None, 0, mesh, (Shard(2),), requires_grad=True)
    out_st = conv(x_st)  # nn.Conv2d unmodified: the halo exchange happens inside F.conv2d
    loss_st = out_st.pow(2).mean()
    loss_st.backward()
    diff("conv2d output", out_st.full_tensor(), out)
    diff("loss", loss_st.full_tensor(), loss)
    assert x_st.grad.placements == x_st.placements and x_st.grad.shard_sizes() == x_st.shard_sizes()
    diff("input gradient (sharded like the input)", x_st.grad.full_tensor(), x.grad)
    for name, p, want in (("weight gradient (all-reduced)", conv.weight, want_w), ("bias gradient (all-reduced)", conv.bias, want_b)):
        g = p.grad.clone()
        all_reduce(g)  # weights are replicated: every rank holds its partial sum, as in DDP
        diff(name, g, want)
    lines.append(f"image rows per rank {x_st.shard_sizes()}, output rows per rank {out_st.shard_sizes()}")
    return lines


def _torchrun_main(args):
    import meshshard as ms

    ms.init_distributed()
    try:
        lines = run_rank(ms.get_rank(), ms.get_world_size(), args.size, args.channels)
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

    results = run_distributed(run_rank, world_size=args.ranks, args=(args.size, args.channels), timeout=120)
    print("\n".join(results[0]))
    print(f"all checks passed on {args.ranks} ranks")


if __name__ == "__main__":
    main()
