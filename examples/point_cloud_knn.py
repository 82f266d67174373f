"""Sharded kNN graph + MeshGraphNet message passing on the DrivAer car-body point cloud.

    torchrun --nproc-per-node 2 examples/point_cloud_knn.py            # under torchrun
    python examples/point_cloud_knn.py --ranks 2 --check               # spawns 2 local ranks itself

Every rank takes its part of the cloud (k-d tree partition) as a ShardTensor ``pos``, builds the
exact kNN graph across ranks with ``sharded_knn(pos, k, return_graph=True)`` (queries near a part
boundary are answered by the ranks that own the candidates), runs
``DomainParallel(MeshGraphNet(...))(pos, g, edge_attr)`` on the resulting ShardedGraph and takes one
training step (``F.mse_loss`` of ShardTensors, ``backward``, ``step``; DomainParallel's hooks sum
the gradients). ``--check`` compares the owned outputs, the loss and the gradients with one process
running ``meshshard.knn_graph`` + MeshGraphNet on the whole cloud.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

DEFAULT = Path(os.environ.get("MESHSHARD_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--points", default=str(DEFAULT / "drivaer_body_points.npz"), help=".npz with an array `points` [N, 3]")
    p.add_argument("-k", type=int, default=8, help="neighbours per point")
    p.add_argument("--max-points", type=int, default=None, help="use only the first N points (faster)")
    p.add_argument("--hidden", type=int, default=32)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--ranks", type=int, default=2, help="ranks to spawn when not started by torchrun")
    p.add_argument("--check", action="store_true", help="compare with a single-process run on the whole cloud")
    return p.parse_args(argv)




def run_rank(rank, world, args):
    import numpy as np
    import torch
    import torch.nn.functional as F

    import meshshard as ms
    from meshshard.models import MeshGraphNet
    from meshshard.ops import sharded_knn
    from meshshard.tensor import ShardTensor

    points = np.load(args.points)["points"].astype(np.float64)
    if args.max_points:
        points = points[: args.max_points]
    center, scale = points.mean(0), points.std(0).max()
    points = (points - center) / scale
    part = ms.partition(points, world, method="kdtree")  # deterministic: the same on every rank
    owned = torch.as_tensor(points[part.part_nodes(rank).numpy()])  # this rank's points, in global-id order
    pos = ShardTensor.from_local(owned)  # [N, 3], Shard(0), uneven rows

    t0 = time.perf_counter()
    ei, g, vec = sharded_knn(pos, args.k, loop=False, return_graph=True, return_edge_vec=True)
    t_knn = time.perf_counter() - t0
    rel = vec.to_local()  # pos[neighbour] - pos[query] per edge into an owned point, as g.edge_index orders them
    edge_attr = torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1)
    target = ShardTensor.from_local(owned[:, :1] * owned[:, 2:3], pos.device_mesh, sharding_shapes={0: g.sizes})

    torch.manual_seed(0)  # the same initial weights on every rank (DomainParallel checks)
    model = ms.DomainParallel(MeshGraphNet(3, 4, 1, hidden=args.hidden, num_layers=args.layers).double())
    start = {k: v.clone() for k, v in model.module.state_dict().items()}
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    t0 = time.perf_counter()
    pred = model(pos, g, edge_attr)  # ShardTensor of the owned rows
    loss = F.mse_loss(pred, target)  # the whole cloud's loss, replicated
    loss.backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    opt.step()
    t_step = time.perf_counter() - t0
    out = dict(rank=rank, owned=g.num_owned, ghost=g.num_ghost, edges=int(ei.shape[1]), knn_s=t_knn, step_s=t_step,
               loss=float(loss.to_local().detach()), pred=pred.to_local().detach(), grads=grads,
               offset=int(part.offsets[rank]))
    if args.check and rank == 0:
        full = torch.as_tensor(points[part.perm.numpy()])  # global ids = ShardTensor order
        t0 = time.perf_counter()
        ei_ref = ms.knn_graph(full, args.k, loop=False)
        rel = full[ei_ref[0]] - full[ei_ref[1]]
        ref_model = MeshGraphNet(3, 4, 1, hidden=args.hidden, num_layers=args.layers).double()
        ref_model.load_state_dict(start)
        ref_pred = ref_model(full, ei_ref, torch.cat([rel, rel.norm(dim=1, keepdim=True)], 1))
        ref_loss = torch.nn.functional.mse_loss(ref_pred, (full[:, :1] * full[:, 2:3]))
        ref_loss.backward()
        out.update(ref_pred=ref_pred.detach(), ref_loss=float(ref_loss.detach()), ref_s=time.perf_counter() - t0,
                   ref_grads=torch.cat([p.grad.reshape(-1) for p in ref_model.parameters()]))
    return out


def _rank_entry(rank, world, args):
    return run_rank(rank, world, args)


def report(results, args):
    n = sum(r["owned"] for r in results)
    print(f"{n} points, k={args.k}, {len(results)} ranks; MeshGraphNet hidden={args.hidden} layers={args.layers} (float64)")
    for r in results:
        print(f"  rank {r['rank']}: {r['owned']} owned + {r['ghost']} ghost points, {r['edges']} kNN edges, "
              f"sharded_knn {r['knn_s']:.2f} s, forward+backward+step {r['step_s']:.2f} s")
    print(f"global loss {results[0]['loss']:.10f}")
    ref = results[0]
    if "ref_pred" in ref:
        fwd = max(float((r["pred"] - ref["ref_pred"][r["offset"]:r["offset"] + r["owned"]]).abs().max()) for r in results)
        grad = float((ref["grads"] - ref["ref_grads"]).abs().max() / ref["ref_grads"].abs().max())
        print(f"check vs 1 process ({ref['ref_s']:.2f} s): largest output difference {fwd:.3e}, "
              f"loss difference {abs(ref['loss'] - ref['ref_loss']):.3e}, relative gradient difference {grad:.3e}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        import meshshard as ms
        from meshshard.distributed import all_gather_object

        rank, world = ms.init_distributed()
        res = run_rank(rank, world, args)
        allres = all_gather_object(res)
        if rank == 0:
            report(allres, args)
        ms.destroy_distributed()
        return 0
    from meshshard.testing import run_distributed

    return report(run_distributed(_rank_entry, args.ranks, args=(args,), timeout=900), args)


if __name__ == "__main__":
    sys.exit(main())
