"""Train MeshGraphNet on a preprocessed, sharded mesh dataset with one process per part.

    meshshard preprocess cases/*.vtu -k 2 -o data --features "velocity[0,1]" --targets pressure
    torchrun --nproc-per-node 2 examples/train_meshgraphnet.py --data data --steps 100
    torchrun --nproc-per-node 8 examples/train_meshgraphnet.py --data data --domain-size 2 --batch-size 2

The loop reads like single-process PyG code: the model is ``meshshard.DomainParallel(MeshGraphNet(...))``,
the dataset's ``x`` and ``y`` are ShardTensors of each rank's owned rows, ``F.mse_loss(pred, y)`` is the
loss of the whole mesh, and ``loss.backward(); opt.step()`` keeps the replicas equal (DomainParallel's
backward hooks sum the gradients over ranks). CPU runs use gloo, GPU runs (``--device cuda``, one GPU
per rank) NCCL. Each rank reads only its own part of its own samples.

Data x domain parallel: ``--domain-size S`` puts the N ranks on a 2-D ``("data", "domain")`` mesh of
N/S data groups of S ranks (a dataset preprocessed into S parts is read as it is; another number of
parts is merged or split on load). The S ranks of a group
share one sample (domain parallel); the groups take different samples (data parallel). Each step
takes the next N/S x ``--batch-size`` samples in order (an epoch's last step takes what is left,
possibly fewer) and sample i goes to data group i % (N/S), so a group always meets the same samples.
Every sample's loss is scaled by 1 / (samples in the step) and the gradients are summed over all N
ranks: the step's gradient is that of the mean loss over its samples. A group with no sample in a
short step joins the gradient reduction with zeros. ``--domain-size N`` (the default) is plain domain
parallel, ``--domain-size 1`` plain data parallel.

``--amp bf16`` runs the forward pass under ``torch.autocast`` in bfloat16 (CPU and CUDA) and the
loss in float32 (as autocast computes ``mse_loss``); parameters, gradients and the optimizer stay float32.

Rank 0 shows a progress bar with the step's loss and writes checkpoints atomically (``--save``: the
inner MeshGraphNet's state dict ``model.module.state_dict()``, optimizer, step and RNG state, so
``--resume`` continues with exactly the losses an uninterrupted run has). ``--check`` also runs a
single-process reference on the whole meshes on rank 0: at every step it takes the sharded model's
current weights, computes the mean loss of the step's samples and every parameter gradient, prints
one line per step with both differences and a pass/fail verdict against the tolerances below, and
exits with status 1 if any step fails (each step's sharding error is measured on its own, not
rounding amplified by many optimizer steps; ``meshshard demo`` compares whole loss curves). With
``--amp bf16`` the reference is float32 without autocast, so the check measures bfloat16's error.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from pathlib import Path

import torch


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder written by `meshshard preprocess`")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps (samples are cycled)")
    p.add_argument("--hidden", type=int, default=128, help="latent width (paper: 128)")
    p.add_argument("--layers", type=int, default=15, help="processor blocks (paper: 15)")
    p.add_argument("--mlp-layers", type=int, default=2, help="hidden layers per MLP (paper: 2)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: cuda when available (NCCL), else cpu (gloo)")
    p.add_argument("--exchange", default="auto", choices=["auto", "per_layer", "once"],
                   help="halo exchange per layer, or once with a dataset preprocessed with --halo-hops >= --layers")
    p.add_argument("--activation-checkpointing", action="store_true", help="recompute blocks in backward (less memory)")
    p.add_argument("--save", default=None, help="checkpoint file (written atomically by rank 0)")
    p.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --save if it exists")
    p.add_argument("--check", action="store_true",
                   help="compare with a single-process reference on rank 0 (loss and gradients every step, "
                        "at the same weights); prints pass/fail per step and exits 1 on a failure "
                        "(tolerances: float32 loss 1e-5, gradients 1e-4; float64 both 1e-10, relative; "
                        "--amp bf16 against float32: loss 5e-3, gradients 0.5)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--domain-size", type=int, default=None,
                   help="ranks sharing one sample (must divide the world size; the dataset's parts are merged or split "
                        "on load when they are not as many); the "
                        "world size / domain size groups take different samples. Default: every rank")
    p.add_argument("--batch-size", type=int, default=1, help="samples per data group per step")
    p.add_argument("--amp", default="none", choices=["none", "bf16"],
                   help="bf16: forward pass under torch.autocast in bfloat16, loss in float32 (needs --dtype float32)")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.domain_size is not None and args.domain_size < 1:
        p.error(f"--domain-size must be >= 1, got {args.domain_size}")
    if args.amp == "bf16" and args.dtype != "float32":
        p.error("--amp bf16 needs --dtype float32 (autocast leaves float64 operations in float64)")
    return args


# --check tolerances: relative difference of the loss, and largest gradient difference relative
# to the largest reference gradient. float32: sums over ranks round differently from one process
# (about 1e-7 per operation, grown through the layers); float64 leaves only that rounding at 1e-16.
# bf16 (--amp, against the float32 reference): bfloat16 keeps 8 significant bits, and the gradients
# of the LayerNorm weights, sums over every edge of bf16 products, differ from float32 by up to their
# own size, in one process as much as sharded. So the bf16 check catches gross errors (a lost or
# doubled reduction moves gradients by ~1), not sharding rounding: float64 shows exactness.
TOLERANCE = {"float32": {"loss": 1e-5, "grad": 1e-4}, "float64": {"loss": 1e-10, "grad": 1e-10},
             "bf16": {"loss": 5e-3, "grad": 0.5}}


def flat_grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def step_samples(step: int, num_samples: int, groups: int, batch: int) -> range:
    """Indices of the samples that optimizer step ``step`` takes: the next ``groups * batch`` in
    order, and at the end of an epoch what is left (sample ``i`` goes to data group ``i % groups``)."""
    per_step = groups * batch
    k = step % math.ceil(num_samples / per_step)
    return range(k * per_step, min((k + 1) * per_step, num_samples))


def _use_cuda(args) -> bool:
    return args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())


def train(args) -> dict:
    """Train in the running process group (or one process) as ``args`` say.

    Args:
        args: the parsed command line (:func:`parse_args`).

    Returns:
        ``{"loss": the last step's loss, "failed": steps whose --check failed, "worst": largest
        --check differences {"loss", "grad"}, "checked": steps checked}`` (the check on rank 0 only).
    """
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    import meshshard as ms
    from meshshard._fileutil import atomic_torch_save
    from meshshard.datasets import MeshDataset, ShardedMeshDataset, model_inputs
    from meshshard.distributed import all_reduce, barrier, get_backend, init_device_mesh
    from meshshard.models import MeshGraphNet, training_checkpoint

    use_cuda = _use_cuda(args)
    rank, world = ms.get_rank(), ms.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype)
    domain = args.domain_size or world
    if world % domain:
        raise ValueError(f"--domain-size {domain} does not divide the {world} ranks; use a divisor of {world}")
    groups = world // domain
    if groups == 1:  # domain parallel only (and one process without a group): the world is the domain group
        mesh = domain_group = data_group = None
        data_rank = 0
    else:
        mesh = init_device_mesh(device.type, (groups, domain), mesh_dim_names=("data", "domain"))
        domain_group, data_group = mesh.get_group("domain"), mesh.get_group("data")
        data_rank = mesh.get_local_rank("data")
    torch.manual_seed(args.seed)

    ds = ShardedMeshDataset(args.data, group=domain_group, dtype=dtype)
    net = MeshGraphNet(ds.num_node_features, ds.num_edge_features, ds.num_targets, hidden=args.hidden,
                       num_layers=args.layers, mlp_layers=args.mlp_layers,
                       checkpoint=args.activation_checkpointing).to(device=device, dtype=dtype)
    net.broadcast_parameters(src=0)  # replicas start equal (DomainParallel checks it)
    model = ms.DomainParallel(net, mesh=mesh, exchange=args.exchange)  # 2-D mesh: gradients summed over all ranks
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = 0
    if args.resume and args.save and Path(args.save).exists():
        state = torch.load(args.save, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng"].cpu())
        start = int(state["step"])
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.amp == "bf16" \
        else contextlib.nullcontext
    if rank == 0:
        print(f"{ds} | backend {get_backend() or 'none (1 process)'} on {device} | {groups} data group(s) x "
              f"{domain} domain rank(s), {args.batch_size} sample(s) per group per step | MeshGraphNet "
              f"hidden={args.hidden} layers={args.layers} | {sum(p.numel() for p in model.parameters())} parameters"
              f"{' | amp bf16' if args.amp == 'bf16' else ''} | steps {start}..{args.steps}", flush=True)

    # This group's samples (this rank's part only), moved to the device once.
    samples = {}
    for i in range(data_rank, len(ds), groups):
        s = ds[i]
        x, e, y = (t.to(device) for t in ds.model_inputs(s))
        samples[i] = (s.graph.to(device), x, e, y)

    ref = None
    if args.check and rank == 0:
        # The reference: the whole mesh of every sample in one process; it gets the weights of the
        # sharded model before every step.
        files = [s["source"] for s in ds.meta["samples"]]
        full = MeshDataset(files, ds.meta["features"], ds.meta["targets"], node_types=ds.node_types,
                           stats=ds.stats, dtype=dtype, knn=int(ds.meta["knn"]))
        ref_model = MeshGraphNet(ds.num_node_features, ds.num_edge_features, ds.num_targets, hidden=args.hidden,
                                 num_layers=args.layers, mlp_layers=args.mlp_layers).to(device=device, dtype=dtype)
        # preprocess rounded the fields to the stored dtype; round the reference's alike, or a
        # float32 dataset trained with --dtype float64 would differ from it by ~1e-7
        stored = getattr(torch, str(ds.meta.get("dtype", "float64")))
        ref_data = []
        for i in range(len(full)):
            d = full[i]
            for key in ("x", "y", "edge_attr"):
                d[key] = d[key].to(stored).to(dtype)
            ref_data.append(tuple(t.to(device) for t in (*model_inputs(d, ds.stats), d.edge_index)))
        ref = (ref_model, ref_data)
    precision = "bf16" if args.amp == "bf16" else args.dtype
    tol = TOLERANCE[precision]
    worst = {"loss": 0.0, "grad": 0.0}
    failed, checked = [], []
    bar = tqdm(range(start, args.steps), disable=rank != 0, desc="train", unit="step")

    def check(step: int, batch: range, loss: float) -> None:
        """Rank 0: the mean loss of the step's samples and its gradients on the whole meshes, at the
        weights this step started from."""
        ref_model, ref_data = ref
        ref_model.load_state_dict(model.module.state_dict())
        ref_model.zero_grad(set_to_none=True)
        ref_loss = 0.0
        for i in batch:
            rx, re_, ry, rei = ref_data[i]
            ref_loss = ref_loss + F.mse_loss(ref_model(rx, rei, re_), ry) * (1.0 / len(batch))
        ref_loss.backward()
        gs, gr = flat_grads(model.module), flat_grads(ref_model)
        lv, rv = loss, float(ref_loss.detach())
        d_loss = abs(lv - rv) / max(abs(rv), 1e-30)
        d_grad = float((gs - gr).abs().max() / gr.abs().max().clamp_min(1e-30))
        ok = d_loss <= tol["loss"] and d_grad <= tol["grad"]
        worst["loss"], worst["grad"] = max(worst["loss"], d_loss), max(worst["grad"], d_grad)
        checked.append(step)
        if not ok:
            failed.append(step)
        bar.write(f"step {step}: loss {lv:.17g} (reference {rv:.17g}), relative difference of loss {d_loss:.3e} "
                  f"(tol {tol['loss']:g}), of gradients {d_grad:.3e} (tol {tol['grad']:g}): {'pass' if ok else 'FAIL'}")

    t0 = time.perf_counter()
    loss = float("nan")
    for step in bar:
        batch = step_samples(step, len(ds), groups, args.batch_size)
        mine = [i for i in batch if i % groups == data_rank]
        opt.zero_grad(set_to_none=True)
        loss_t = torch.zeros(1, dtype=torch.float64, device=device)
        for j, i in enumerate(mine):
            g, x, e, y = samples[i]
            # Only the last backward of the step reduces the gradients (the earlier ones accumulate).
            with model.no_sync() if j < len(mine) - 1 else contextlib.nullcontext():
                with autocast():
                    pred = model(x, g, e)  # ShardTensor of the owned rows
                # The loss in the parameters' precision, as autocast computes mse_loss.
                loss_st = F.mse_loss(pred.to(y.dtype), y) * (1.0 / len(batch))  # this sample's share of the step's mean
                loss_st.backward()
            loss_t += loss_st.to_local().detach().double()
        if not mine:  # no sample for this group in a short last step: its zero gradients join the reduction
            model.reduce_gradients()
        if groups > 1:
            all_reduce(loss_t, group=data_group)  # each domain group holds its samples' sum
        loss = float(loss_t)
        if not math.isfinite(loss):  # the same value on every rank: all stop together, before the step
            raise FloatingPointError(f"step {step}: the loss is {loss}; lower --lr or check the data")
        if ref is not None:
            check(step, batch, loss)
        opt.step()
        if rank == 0:
            bar.set_postfix(loss=f"{loss:.5g}")
        if args.save and ((step + 1) % args.save_every == 0 or step + 1 == args.steps):
            if rank == 0:
                atomic_torch_save(training_checkpoint(model, ds, optimizer=opt, step=step + 1, rng=torch.get_rng_state(),
                                                      args=vars(args)), args.save)
                bar.write(f"saved checkpoint {args.save} (step {step + 1})", file=sys.stdout)
            barrier()
    bar.close()
    if rank == 0:
        n = max(args.steps - start, 0)
        print(f"final loss {loss:.6g} after {args.steps} steps "
              f"({(time.perf_counter() - t0) / max(n, 1):.3f} s/step on {world} rank(s))", flush=True)
        if ref is not None:
            verdict = f"FAIL at steps {failed}" if failed else "PASS"
            print(f"check vs single process: largest relative difference of loss {worst['loss']:.3e}, "
                  f"of parameter gradients {worst['grad']:.3e} over {n} steps: {verdict} "
                  f"(tolerances {precision}: loss {tol['loss']:g}, gradients {tol['grad']:g})", flush=True)
    return {"loss": loss, "failed": failed, "worst": worst, "checked": checked}


def main(argv=None) -> int:
    args = parse_args(argv)
    import meshshard as ms
    from meshshard.cli import run_and_report

    def run() -> int:
        ms.init_distributed(backend="nccl" if _use_cuda(args) else "gloo")
        finished = False
        try:
            result = train(args)
            finished = True
        finally:
            ms.destroy_distributed(barrier=finished)  # after a failure, peers may be gone
        return 1 if result["failed"] else 0

    # under torchrun, an error every rank raised (a dataset of 2 parts on 3 ranks) is printed once, by rank 0
    return run_and_report(run, "train_meshgraphnet.py")


if __name__ == "__main__":
    sys.exit(main())
