"""Any model through one door: a U-Net on an image split in height, or a Transolver on a point cloud
split by a k-d tree partition, trained through ``DomainParallel`` and compared with one process.

    python examples/train_any_model.py --model unet --ranks 3            # spawns local gloo ranks
    python examples/train_any_model.py --model transolver --ranks 2
    torchrun --nproc-per-node 2 examples/train_any_model.py --model unet  # under torchrun

The models are written as their authors write them: plain ``torch.nn`` code, no meshshard call
inside. The script shards the inputs as ShardTensors, wraps the model in
``meshshard.DomainParallel`` and trains with the usual loop (``loss.backward(); opt.step()``); no
parameter needs special handling, including the Transolver's attention weights that act on slice
tokens replicated on every rank. It prints both loss curves and their largest difference.
"""
from __future__ import annotations

import argparse
import copy
import os

import torch
import torch.nn.functional as F
from torch import nn


class UNet(nn.Module):
    """A two-level 2-D U-Net: conv blocks with BatchNorm, max pooling, transposed convolution, skip."""

    def __init__(self, cin=2, cout=1, width=8):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True),
                                 nn.Conv2d(o, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))

        self.enc1, self.enc2, self.dec1 = block(cin, width), block(width, 2 * width), block(2 * width, width)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.out = nn.Conv2d(width, cout, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        return self.out(self.dec1(torch.cat([self.up(e2), e1], dim=1)))


class PhysicsAttention(nn.Module):
    """Transolver's attention: points -> slice tokens (a weighted sum over ALL points) -> attention
    among the tokens -> back to the points."""

    def __init__(self, dim, heads=2, slices=8):
        super().__init__()
        self.heads, self.dh = heads, dim // heads
        self.temperature = nn.Parameter(torch.full((1, heads, 1, 1), 0.5))
        self.in_x, self.in_fx = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.in_slice = nn.Linear(self.dh, slices)
        self.q, self.k, self.v = (nn.Linear(self.dh, self.dh, bias=False) for _ in range(3))
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        fx = self.in_fx(x).reshape(B, N, self.heads, self.dh).permute(0, 2, 1, 3)
        w = torch.softmax(self.in_slice(self.in_x(x).reshape(B, N, self.heads, self.dh).permute(0, 2, 1, 3))
                          / self.temperature, dim=-1)                                   # [B, H, N, G]
        tokens = torch.einsum("bhnc,bhng->bhgc", fx, w) / (w.sum(2) + 1e-5)[..., None]  # [B, H, G, C]
        q, k, v = self.q(tokens), self.k(tokens), self.v(tokens)
        tokens = torch.softmax(q @ k.transpose(-1, -2) * self.dh ** -0.5, dim=-1) @ v
        out = torch.einsum("bhgc,bhng->bhnc", tokens, w)
        return self.out(out.permute(0, 2, 1, 3).reshape(B, N, C))


class Transolver(nn.Module):
    def __init__(self, cin=3, cout=1, dim=16, depth=2):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(cin, dim), nn.GELU(), nn.Linear(dim, dim))
        self.blocks = nn.ModuleList([nn.ModuleList([nn.LayerNorm(dim), PhysicsAttention(dim), nn.LayerNorm(dim),
                                                    nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(),
                                                                  nn.Linear(2 * dim, dim))]) for _ in range(depth)])
        self.head = nn.Linear(dim, cout)

    def forward(self, x):
        h = self.embed(x)
        for ln1, attn, ln2, mlp in self.blocks:
            h = h + attn(ln1(h))
            h = h + mlp(ln2(h))
        return self.head(h)


def make_data(model: str, seed: int = 0):
    """The whole input and target, the dim to shard, and the split sizes for ``world`` ranks."""
    g = torch.Generator().manual_seed(seed)
    if model == "unet":
        yy, xx = torch.meshgrid(torch.linspace(0, 1, 24), torch.linspace(0, 1, 20), indexing="ij")
        x = torch.stack([torch.sin(6 * xx) * yy, torch.cos(5 * yy)])[None].double()
        y = (x[:, :1] * x[:, 1:] + 0.1 * torch.randn(1, 1, 24, 20, generator=g, dtype=torch.float64))
        return x, y, 2
    pts = torch.rand(300, 3, generator=g, dtype=torch.float64)
    y = (torch.sin(4 * pts[:, :1]) * pts[:, 1:2] + pts[:, 2:] ** 2)
    return pts[None], y[None], 1


def split_sizes(model: str, x, dim: int, world: int):
    """Uneven shard sizes: even-sized image strips (pooling by 2), k-d tree parts for points."""
    import meshshard as ms

    n = x.shape[dim]
    if model == "unet":
        sizes = [2 * ((n // 2) // world + (1 if r < (n // 2) % world else 0)) for r in range(world)]
        return sizes[::-1], None
    part = ms.partition(x[0], world, method="kdtree")
    return list(part.sizes), part.perm


def run_rank(rank: int, world: int, model_name: str, steps: int):
    import meshshard as ms
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor

    torch.manual_seed(0)
    model = (UNet() if model_name == "unet" else Transolver()).double()
    single = copy.deepcopy(model)
    x, y, dim = make_data(model_name)
    sizes, perm = split_sizes(model_name, x, dim, world)
    if perm is not None:  # points in partition order, so each rank's rows are one part
        x, y = x[:, perm], y[:, perm]
    mesh = default_device_mesh()
    off = sum(sizes[:rank])
    xs = ShardTensor.from_local(x.narrow(dim, off, sizes[rank]).clone(), mesh, (Shard(dim),), sharding_shapes="infer")
    ys = ShardTensor.from_local(y.narrow(dim, off, sizes[rank]).clone(), mesh, (Shard(dim),), sharding_shapes="infer")

    dp = ms.DomainParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    opt_single = torch.optim.Adam(single.parameters(), lr=3e-3)
    curves = []
    for _ in range(steps):
        loss = F.mse_loss(dp(xs), ys)        # the global loss, the same on every rank
        opt.zero_grad()
        loss.backward()                      # DomainParallel sums every gradient once
        opt.step()
        loss_single = F.mse_loss(single(x), y)
        opt_single.zero_grad()
        loss_single.backward()
        opt_single.step()
        curves.append((float(loss_single), float(loss.full_tensor())))
    return curves, sizes


def report(model_name: str, world: int, curves, sizes) -> None:
    print(f"{model_name}: {world} ranks, shard sizes {sizes}; float64, Adam")
    print(f"{'step':>4} {'1 process':>14} {f'{world} processes':>14} {'|difference|':>13}")
    for i, (a, b) in enumerate(curves):
        print(f"{i:>4} {a:14.8f} {b:14.8f} {abs(a - b):13.3e}")
    print(f"largest loss difference: {max(abs(a - b) for a, b in curves):.3e}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("unet", "transolver"), default="unet")
    p.add_argument("--ranks", type=int, default=2, help="ranks to spawn when not started by torchrun")
    p.add_argument("--steps", type=int, default=5)
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        import meshshard as ms

        ms.init_distributed()
        try:
            curves, sizes = run_rank(ms.get_rank(), ms.get_world_size(), args.model, args.steps)
            if ms.get_rank() == 0:
                report(args.model, ms.get_world_size(), curves, sizes)
        finally:
            ms.destroy_distributed()
        return
    from meshshard.testing import run_distributed

    results = run_distributed(run_rank, world_size=args.ranks, args=(args.model, args.steps), timeout=300)
    report(args.model, args.ranks, *results[0])


if __name__ == "__main__":
    main()
