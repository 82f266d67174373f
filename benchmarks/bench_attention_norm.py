"""Ring attention and group_norm on sharded ShardTensors vs the same op in one process.

Every row runs forward + backward of one op at a size where the op dominates: ring attention
(``F.scaled_dot_product_attention``, q/k/v ``[1, H, L, 64]`` float32 sharded along the sequence) and
``F.group_norm`` (``[2, 64, L]`` float32 sharded along the points dim L, 8 groups). Each is timed at
W ranks (one thread each, the slowest rank, median of repeats) and divided by the same op on the
whole tensor in one process with one thread, measured in the same run (rank 0, while the other
ranks wait at a barrier), so "speed-up" = one-process time / sharded time.

Bytes: for attention, the bytes all ranks together sent through the ring (counted by
``meshshard.distributed.ring.ring_bytes_sent``, forward + backward) over the minimum: each rank
must receive every other rank's K/V once in forward and once in backward, and send its partial
dK/dV of every other rank's block once: ``3 (W - 1) |K/V|`` in all (the ring sends
``(3 W - 2) |K/V|``: dK/dV make one hop more, home). For group_norm, the moments all-gather: the
bytes the ranks send (forward and backward) over the bytes of the whole tensor.

Usage::

    python benchmarks/bench_attention_norm.py            # world sizes 2 and 4
    python benchmarks/bench_attention_norm.py --quick    # small sizes, well under a minute
"""
from __future__ import annotations

import argparse
import sys
import statistics
import time

import torch
import torch.nn.functional as F

import meshshard.distributed as msd
from meshshard.distributed import Shard, init_device_mesh
from meshshard.distributed.ring import ring_bytes_sent
from meshshard.tensor import ShardTensor
from meshshard.testing import run_distributed

HEADS, DIM, CHANNELS, GROUPS = 4, 64, 64, 8


def _sizes(n, world):
    """Uneven shards: rank r holds about (r + 1) / sum parts, the last takes the rest."""
    parts = [r + 1 for r in range(world)]
    sizes = [n * p // sum(parts) for p in parts]
    sizes[-1] += n - sum(sizes)
    return sizes


def _seconds(fn, repeats, sync=True):
    """Median seconds of ``fn``; ``sync``: every rank calls it, starting together."""
    fn()  # warm-up
    out = []
    for _ in range(repeats):
        if sync:
            msd.barrier()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _attention(rank, world, mesh, length, repeats):
    sizes = _sizes(length, world)
    gen = torch.Generator().manual_seed(rank)
    local = [torch.randn(1, HEADS, sizes[rank], DIM, generator=gen, requires_grad=True) for _ in range(3)]

    def sharded():
        q, k, v = (ShardTensor.from_local(t, mesh, (Shard(2),), sharding_shapes={0: sizes}) for t in local)
        F.scaled_dot_product_attention(q, k, v).to_local().sum().backward()

    ring_bytes_sent(reset=True)
    sharded()
    sent = ring_bytes_sent(reset=True)
    t = _seconds(sharded, repeats)
    minimum = 3 * (world - 1) * 2 * HEADS * DIM * 4 * length / world  # this rank's share, bytes
    base = None
    if rank == 0:
        full = [torch.randn(1, HEADS, length, DIM, requires_grad=True) for _ in range(3)]
        base = _seconds(lambda: F.scaled_dot_product_attention(*full).sum().backward(), repeats, False)
    msd.barrier()
    return t, base, sent, minimum


def _group_norm(rank, world, mesh, length, repeats):
    sizes = _sizes(length, world)
    x = torch.randn(2, CHANNELS, sizes[rank], requires_grad=True)
    norm = torch.nn.GroupNorm(GROUPS, CHANNELS)

    def sharded():
        norm(ShardTensor.from_local(x, mesh, (Shard(2),), sharding_shapes={0: sizes})).to_local().sum().backward()

    t = _seconds(sharded, repeats)
    stats = 3 * 2 * GROUPS * 4  # (count, mean, M2) per sample and group, float32
    sent = 2 * (world - 1) * stats  # all-gather forward, reduce-scatter backward
    base = None
    if rank == 0:
        full = torch.randn(2, CHANNELS, length, requires_grad=True)
        base = _seconds(lambda: F.group_norm(full, GROUPS).sum().backward(), repeats, False)
    msd.barrier()
    return t, base, sent, x.numel() * 4


def _rank(rank, world, att_len, gn_len, repeats):
    mesh = init_device_mesh("cpu", (world,))
    return {"attention": _attention(rank, world, mesh, att_len, repeats),
            "group_norm": _group_norm(rank, world, mesh, gn_len, repeats)}


def bench(quick: bool):
    """The attention and group_norm table (a section of ``bench_shard_ops.py`` too)."""
    att_len, gn_len, repeats = (512, 1 << 15, 3) if quick else (2048, 1 << 19, 5)
    print(f"\n## attention and group_norm\n\nattention: q/k/v [1, {HEADS}, {att_len}, {DIM}] float32; group_norm: "
          f"[2, {CHANNELS}, {gn_len}] float32, {GROUPS} groups; forward + backward, one thread per rank\n")
    print("| op | ranks | one process (s) | sharded (s) | speed-up | bytes sent (all ranks) | ratio |")
    print("|---|---|---|---|---|---|---|")
    for world in (2, 4):
        res = run_distributed(_rank, world, args=(att_len, gn_len, repeats), timeout=600)
        for op in ("attention", "group_norm"):
            t = max(r[op][0] for r in res)
            base = res[0][op][1]
            sent = sum(r[op][2] for r in res)
            ref = sum(r[op][3] for r in res)
            what = "ring minimum" if op == "attention" else "of the tensor"
            print(f"| {op} | {world} | {base:.4f} | {t:.4f} | {base / t:.2f} | {sent:,} | "
                  f"{sent / ref:.3g} ({what}) |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, 2 and 4 ranks, few repeats")
    bench(parser.parse_args().quick)


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
