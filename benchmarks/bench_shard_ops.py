"""ShardTensor op families at sizes where the op dominates: sharded time at 2 and 4 ranks vs one
process, and bytes moved vs the halo minimum.

conv2d section: ``nn.Conv2d(C, C, 3, padding=1)`` forward + backward on ``[B, C, H, W]`` float32
sharded along H (uneven when H does not divide). The baseline is the same layer on the whole
tensor in one process, timed in the same run; every rank and the baseline use one thread, so the
speedup is what domain parallelism gives per core (on a GPU machine: per GPU). "bytes moved" counts
what the all-to-alls of one forward + backward actually send (off-rank rows only, measured by
wrapping the exchange); "halo minimum" is what a halo scheme that keeps the fetched window from
forward to backward must move: one row of ``B*C*W`` floats across each of the ``W - 1`` shard
boundaries in each direction, forward and backward. meshshard's convolution fetches the halo rows
once more in backward instead of keeping the window alive (it saves only the rank's own rows, as
torch's convolution saves its input), so it moves 1.5 times that minimum.

attention_norm section (from ``bench_attention_norm.py``): ring attention
(``F.scaled_dot_product_attention`` sharded along the sequence) and ``group_norm`` sharded along
the points, same one-process baseline and bytes sent against the ring minimum.

Usage::

    python benchmarks/bench_shard_ops.py            # [2, 32, 256, 256], 2 and 4 ranks
    python benchmarks/bench_shard_ops.py --quick    # [1, 8, 64, 64], a few seconds on an idle machine
"""
from __future__ import annotations

import argparse
import sys
import math
import statistics
import time

import torch

import bench_attention_norm  # this folder is on sys.path when the script runs
import meshshard.distributed as msd
from meshshard.testing import run_distributed


def _step(conv, x):
    out = conv(x)
    (out * out).mean().backward()


def _time(fn, repeats, sync=None):
    """Median seconds of ``fn`` over ``repeats`` calls after one warm-up (``sync``: barrier first)."""
    fn()
    times = []
    for _ in range(repeats):
        if sync:
            sync()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _conv_rank(rank, world, shape, repeats):
    from meshshard.distributed import Shard
    from meshshard.distributed import autograd as ag
    from meshshard.tensor import ShardTensor

    b, c, h, w = shape
    sizes = [h // world + (r < h % world) for r in range(world)]
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(c, c, 3, padding=1)
    local = torch.randn(b, c, sizes[rank], w).requires_grad_()
    sent = [0]
    exchange = ag._exchange

    def counting(front, send, recv, group):
        row_bytes = math.prod(front.shape[1:]) * front.element_size()
        sent[0] += sum(n for i, n in enumerate(send) if i != rank) * row_bytes
        return exchange(front, send, recv, group)

    def step():
        x = ShardTensor.from_local(local, msd.default_device_mesh(), (Shard(2),), sharding_shapes=sizes)
        _step(conv, x)

    t = _time(step, repeats, msd.barrier)
    ag._exchange = counting
    try:
        step()
    finally:
        ag._exchange = exchange
    return t, sent[0]


def bench_conv2d(quick: bool):
    shape = (1, 8, 64, 64) if quick else (2, 32, 256, 256)
    repeats = 2 if quick else 5
    torch.set_num_threads(1)
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(shape[1], shape[1], 3, padding=1)
    x = torch.randn(shape).requires_grad_()
    t_one = _time(lambda: _step(conv, x), repeats)
    print(f"\n## conv2d: nn.Conv2d({shape[1]}, {shape[1]}, 3, padding=1) forward + backward on {list(shape)} "
          "float32, sharded along H\n")
    print("| ranks | one process (ms) | sharded, slowest rank (ms) | speedup | bytes moved | halo minimum | moved / minimum |")
    print("|---|---|---|---|---|---|---|")
    for world in (2, 4):
        res = run_distributed(_conv_rank, world, args=(shape, repeats), timeout=600)
        t = max(r[0] for r in res)
        moved = sum(r[1] for r in res)
        minimum = 2 * 2 * (world - 1) * shape[0] * shape[1] * shape[3] * 4
        print(f"| {world} | {t_one * 1e3:.1f} | {t * 1e3:.1f} | {t_one / t:.2f} | {moved:,} | {minimum:,} | "
              f"{moved / minimum:.2f} |")


sections = {"conv2d": bench_conv2d, "attention_norm": bench_attention_norm.bench}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    p.add_argument("--only", default=",".join(sections), help=f"comma-separated sections of {sorted(sections)}")
    args = p.parse_args(argv)
    for name in args.only.split(","):
        if name not in sections:
            raise SystemExit(f"unknown section {name!r}; choose from {sorted(sections)}")
        sections[name](args.quick)


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
