"""Any model through DomainParallel: per-rank peak memory and step time of a U-Net and a Transolver
at P = 2 and 4 against one process.

    python benchmarks/bench_models.py --quick          # image 128 x 128, 12k points: a short smoke run
    python benchmarks/bench_models.py                  # image 256 x 256, 40k points (activations dominate)
    python benchmarks/bench_models.py --size 1024 --points 400000 --worlds 1,2,4,8

The models are those of ``examples/train_any_model.py``, written as their authors write them: a
two-level 2-D U-Net (BatchNorm in training mode, max pooling, transposed convolution, skip) on one
image split along its height (and, at P = 4, also in height and width on a 2 x 2 mesh), and a
two-block Transolver (Physics-Attention over slice tokens replicated on every rank) on a random
point cloud split by a k-d tree partition. One float32 training step is ``F.mse_loss`` of
``DomainParallel(model)(x)`` against the target, ``backward()`` (DomainParallel sums the
gradients) and an Adam step. The baseline is the plain model on the whole input in one process,
measured in the same run, in the same kind of spawned process.

Memory, per rank: the growth of the resident set during the timed steps, i.e. the peak RSS
(Linux VmHWM, reset through ``/proc/self/clear_refs`` right before the steps) minus the RSS just
before them, after a warm-up step (so Adam's state and the communication buffers already exist and
are not counted), ``gc.collect()`` and ``malloc_trim``. It counts everything the step allocates:
activations, gradients, temporaries, the rows fetched from neighbours, gloo's buffers. The ranks run
with ``MALLOC_MMAP_THRESHOLD_=131072`` so that large CPU tensors are mmapped and freed pages leave
the RSS at once. ``resource.getrusage`` reports the same peak but cannot be reset, so it would hide
a step's peak behind the warm-up's; torch's profiler counts only torch's allocations (not gloo's
or the allocator's overhead) and slows the step. The figure is the worst rank's peak divided by
the one-process peak (target <= 1/P + 0.1). Time: seconds per step of the slowest rank, over the
one-process time; all ranks share the machine's cores (``--cores``), so with fewer cores than
ranks the ratio shows overheads, not speed-ups. The last column is the relative difference of the
first step's loss from the one-process loss (the runs compute the same function).
"""
from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _memory import malloc_trim, reset_hwm, status_kb  # noqa: E402


def _even_split(n: int, parts: int, multiple: int = 1):
    """``n`` rows in ``parts`` near-equal shares, each a multiple of ``multiple``."""
    units = n // multiple
    return [multiple * (units // parts + (1 if r < units % parts else 0)) for r in range(parts)]


def _measure(step, cfg, barrier):
    """Warm up, then time ``cfg['steps']`` steps and measure the RSS growth during them."""
    first = step()
    for _ in range(cfg["warmup"] - 1):
        step()
    gc.collect()
    malloc_trim()
    barrier()
    rss0 = status_kb("VmRSS")
    hwm_ok = reset_hwm()
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        step()
    seconds = (time.perf_counter() - t0) / cfg["steps"]
    peak = (status_kb("VmHWM") - rss0) * 1024 if hwm_ok else float("nan")
    barrier()
    return dict(loss=first, seconds=seconds, peak=peak)


def _unet_case(rank, world, layout, cfg):
    """One U-Net measurement: ``layout`` is "whole" (one process, plain model), "height" or "2x2"."""
    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor
    from train_any_model import UNet

    n = cfg["size"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, n, n, generator=g)
    y = torch.randn(1, 1, n, n, generator=g)
    torch.manual_seed(0)
    model = UNet(2, 1, cfg["width"])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if layout == "whole":
        net, barrier = model, (lambda: None)
    else:
        if layout == "2x2":
            mesh = ms.init_device_mesh("cpu", (2, 2))
            coords, placements = [mesh.get_local_rank(0), mesh.get_local_rank(1)], (Shard(2), Shard(3))
            splits = [_even_split(n, 2, 2), _even_split(n, 2, 2)]
        else:
            mesh = default_device_mesh()
            coords, placements, splits = [rank], (Shard(2),), [_even_split(n, world, 2)]
        for dim, (c, sizes) in enumerate(zip(coords, splits)):
            x = x.narrow(2 + dim, sum(sizes[:c]), sizes[c])
            y = y.narrow(2 + dim, sum(sizes[:c]), sizes[c])
        x = ShardTensor.from_local(x.contiguous(), mesh, placements, sharding_shapes="infer")
        y = ShardTensor.from_local(y.contiguous(), mesh, placements, sharding_shapes="infer")
        net, barrier = ms.DomainParallel(model, mesh=mesh), ms.distributed.barrier

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(net(x), y)
        loss.backward()
        opt.step()
        return float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach())

    return _measure(step, cfg, barrier)


def _transolver_case(rank, world, perm, sizes, cfg):
    """One Transolver measurement; ``perm is None``: one process, plain model, whole cloud."""
    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.distributed import Shard, default_device_mesh
    from meshshard.tensor import ShardTensor
    from train_any_model import Transolver

    g = torch.Generator().manual_seed(1)
    pts = torch.rand(cfg["points"], 3, generator=g)
    y = (torch.sin(4 * pts[:, :1]) * pts[:, 1:2] + pts[:, 2:] ** 2)
    torch.manual_seed(0)
    model = Transolver(3, 1, cfg["dim"], 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    if perm is None:
        x, t, net, barrier = pts[None], y[None], model, (lambda: None)
    else:
        mesh = default_device_mesh()
        mine = perm[sum(sizes[:rank]):sum(sizes[:rank + 1])]
        x = ShardTensor.from_local(pts[mine][None], mesh, (Shard(1),), sharding_shapes="infer")
        t = ShardTensor.from_local(y[mine][None], mesh, (Shard(1),), sharding_shapes="infer")
        net, barrier = ms.DomainParallel(model), ms.distributed.barrier
    del pts, y

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.mse_loss(net(x), t)
        loss.backward()
        opt.step()
        return float((loss.full_tensor() if hasattr(loss, "full_tensor") else loss).detach())

    return _measure(step, cfg, barrier)


def _rank(rank, world, perm, sizes, cfg):
    torch.set_num_threads(max(1, cfg["cores"] // world))
    out = {}
    if world == 1:
        out["unet whole"] = _unet_case(rank, world, "whole", cfg)
        out["transolver whole"] = _transolver_case(rank, world, None, None, cfg)
        return out
    out["unet height"] = _unet_case(rank, world, "height", cfg)
    if world == 4:
        out["unet 2x2"] = _unet_case(rank, world, "2x2", cfg)
    out["transolver kdtree"] = _transolver_case(rank, world, perm, sizes, cfg)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="image 128 x 128, 12k points: a short smoke run")
    p.add_argument("--size", type=int, default=None, help="image side (default 256; quick 128), a multiple of 4")
    p.add_argument("--width", type=int, default=16, help="U-Net channels at full resolution")
    p.add_argument("--points", type=int, default=None, help="Transolver points (default 40000; quick 12000)")
    p.add_argument("--dim", type=int, default=64, help="Transolver width")
    p.add_argument("--worlds", default="1,2,4", help="world sizes; the first must be 1 (the baseline)")
    p.add_argument("--steps", type=int, default=None, help="timed steps after the warm-up (default 2; quick 1)")
    p.add_argument("--cores", type=int, default=os.cpu_count() or 1, help="threads shared by the ranks")
    args = p.parse_args(argv)
    cfg = dict(size=128, points=12000, warmup=1, steps=1) if args.quick else \
        dict(size=256, points=40000, warmup=1, steps=2)
    for k in ("size", "points", "steps"):
        if getattr(args, k) is not None:
            cfg[k] = getattr(args, k)
    cfg.update(width=args.width, dim=args.dim, cores=args.cores)
    worlds = [int(w) for w in args.worlds.split(",")]
    if worlds[0] != 1 or cfg["size"] % 4:
        p.error("--worlds must start with 1 and --size be a multiple of 4")
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")  # inherited by the spawned ranks

    import meshshard as ms
    from meshshard.testing import run_distributed

    pts = torch.rand(cfg["points"], 3, generator=torch.Generator().manual_seed(1))
    print(f"U-Net (width {cfg['width']}) on a {cfg['size']} x {cfg['size']} image, Transolver (width {cfg['dim']}, "
          f"2 blocks) on {cfg['points']:,} random points; float32, Adam; {cfg['cores']} cores shared by the ranks; "
          f"{cfg['steps']} timed step(s) after {cfg['warmup']} warm-up", flush=True)
    results = {}
    for world in worlds:
        part = ms.partition(pts, world, method="kdtree") if world > 1 else None
        perm, sizes = (part.perm, list(part.sizes)) if part is not None else (None, None)
        t0 = time.perf_counter()
        results[world] = run_distributed(_rank, world, args=(perm, sizes, cfg), timeout=3600)
        print(f"  P={world}: done in {time.perf_counter() - t0:.1f} s", flush=True)

    print()
    print("| model | split | P | peak step memory (worst rank) | fraction of one process | target 1/P+0.1 | "
          "within target | s/step | time / one process | loss vs one process |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model, base_key, keys in (("U-Net", "unet whole", [("height", "unet height"), ("height x width (2 x 2)",
                                                                                      "unet 2x2")]),
                                  ("Transolver", "transolver whole", [("k-d tree", "transolver kdtree")])):
        base = results[1][0][base_key]
        print(f"| {model} | one process (whole input) | 1 | {base['peak'] / 2**20:.1f} MiB | 1.000 | - | - | "
              f"{base['seconds']:.3f} | 1.00 | - |")
        for world in worlds[1:]:
            for split, key in keys:
                if key not in results[world][0]:
                    continue
                res = [r[key] for r in results[world]]
                peak, sec = max(r["peak"] for r in res), max(r["seconds"] for r in res)
                diff = abs(res[0]["loss"] - base["loss"]) / abs(base["loss"])
                frac = peak / base["peak"]
                print(f"| {model} | {split} | {world} | {peak / 2**20:.1f} MiB | {frac:.3f} | {1 / world + 0.1:.3f} | "
                      f"{'yes' if frac <= 1 / world + 0.1 else 'no'} | {sec:.3f} | {sec / base['seconds']:.2f} | "
                      f"{diff:.1e} |")
    print()
    print(f"Threads: the one process runs with {cfg['cores']} thread(s), each of P ranks with "
          f"max(1, {cfg['cores']} // P). On a machine whose cores other jobs share, the time ratios reflect that "
          "load as much as the method; the memory fractions do not depend on it.")
    return 0


if __name__ == "__main__":
    import _results  # this folder is on sys.path when the script runs

    sys.exit(_results.run(main, __file__))
