"""Train MeshGraphNet as a learned simulator (Pfaff et al., 2021) on preprocessed trajectories, one
process per part.

    meshshard preprocess case.pvd -k 2 -o data --state velocity pressure --node-type node_type
    torchrun --nproc-per-node 2 examples/train_simulator.py --data data --steps 1000 --noise-std 0.02
    meshshard rollout --checkpoint sim.pt case.pvd -o rollout
    torchrun --nproc-per-node 8 examples/train_simulator.py --data data --domain-size 2 --batch-size 2

Each optimizer step draws ``world / domain-size x --batch-size`` pairs (trajectory, step t) at
random (a function of ``--seed`` and the step, so every rank draws the same pairs and ``--resume``
continues with the pairs of an uninterrupted run); pair j goes to data group j % groups. The model
takes the state at t plus Gaussian noise (``--noise-std``, in field units, on the nodes that evolve
only, as the paper does), the static features and the one-hot node type, and predicts the
normalised increment from that noisy state to the state at t + 1. The loss is the mean squared
error over the nodes whose type evolves (``--loss-node-types``, default the interior type 0 when
the dataset has node types; boundary nodes take their values from the truth in a rollout) and is
averaged over the step's pairs.

The flags shared with examples/train_meshgraphnet.py mean the same there and here (``--data``,
``--steps``, ``--hidden``, ``--layers``, ``--dtype``, ``--check``, ``--save``, ``--resume``,
``--domain-size``, ``--batch-size``, ``--amp``). The model is ``meshshard.DomainParallel
(MeshGraphNet(...))`` on ShardTensors of each rank's owned rows; ``F.mse_loss(pred, y, weight=w)``
is the loss of the whole mesh. ``--check`` runs a single-process reference on rank 0 on the whole
trajectories (assembled from the parts): at every step, with the sharded model's current weights,
the same pairs and the same noise, it compares the loss and every parameter gradient, prints one
verdict line per step, and exits 1 if a step fails. ``--save`` writes a simulator checkpoint
(:func:`meshshard.models.simulator_checkpoint`: weights, model configuration, the state / feature
specs, node types, statistics of states and increments) that ``meshshard rollout`` applies.
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from pathlib import Path

import torch

# --check tolerances, as examples/train_meshgraphnet.py's (relative loss, largest gradient difference
# relative to the largest reference gradient)
TOLERANCE = {"float32": {"loss": 1e-5, "grad": 1e-4}, "float64": {"loss": 1e-10, "grad": 1e-10},
             "bf16": {"loss": 5e-3, "grad": 0.5}}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder written by `meshshard preprocess ... --state ...`")
    p.add_argument("--steps", type=int, default=100, help="optimizer steps")
    p.add_argument("--hidden", type=int, default=128, help="latent width (paper: 128)")
    p.add_argument("--layers", type=int, default=15, help="processor blocks (paper: 15)")
    p.add_argument("--mlp-layers", type=int, default=2, help="hidden layers per MLP (paper: 2)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: cuda when available (NCCL), else cpu (gloo)")
    p.add_argument("--exchange", default="auto", choices=["auto", "per_layer", "once"],
                   help="halo exchange per layer, or once with a dataset preprocessed with --halo-hops >= --layers")
    p.add_argument("--save", default=None, help="checkpoint file (written atomically by rank 0)")
    p.add_argument("--save-every", type=int, default=50, help="steps between checkpoints")
    p.add_argument("--resume", action="store_true", help="continue from --save if it exists")
    p.add_argument("--check", action="store_true",
                   help="compare with a single-process reference on rank 0 (loss and gradients every step, at the "
                        "same weights, pairs and noise); exits 1 on a failure (tolerances as train_meshgraphnet.py)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights, the pairs drawn and the noise")
    p.add_argument("--domain-size", type=int, default=None,
                   help="ranks sharing one trajectory (= the dataset's parts; must divide the world size). "
                        "Default: every rank")
    p.add_argument("--batch-size", type=int, default=1, help="pairs (trajectory, t) per data group per step")
    p.add_argument("--amp", default="none", choices=["none", "bf16"],
                   help="bf16: forward pass under torch.autocast in bfloat16, loss in float32 (needs --dtype float32)")
    p.add_argument("--noise-std", type=float, default=0.0,
                   help="standard deviation of the Gaussian noise on the input state, in field units (paper: 0.02 "
                        "for the cylinder flow velocity)")
    p.add_argument("--loss-node-types", type=int, nargs="+", default=None, metavar="CODE",
                   help="node type codes that evolve: the loss is taken on them, noise added to them, and a rollout "
                        "moves only them (default: 0 when the dataset has node types, else every node)")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.domain_size is not None and args.domain_size < 1:
        p.error(f"--domain-size must be >= 1, got {args.domain_size}")
    if args.amp == "bf16" and args.dtype != "float32":
        p.error("--amp bf16 needs --dtype float32 (autocast leaves float64 operations in float64)")
    if args.noise_std < 0:
        p.error(f"--noise-std must be >= 0, got {args.noise_std}")
    return args


def flat_grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _use_cuda(args) -> bool:
    return args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())


def _pair_inputs(spec, state, features, node_type, t, noise):
    """(noisy input x_in, normalised target y, loss weights w) of one pair on these rows."""
    mask = spec.evolving(node_type)[:, None]
    cur = state[t] + noise * mask
    x_in = spec.node_inputs(cur, features, node_type)
    y = spec.target(state[t + 1], cur)
    return x_in, y, mask.expand_as(y).to(y.dtype)


def train(args) -> dict:
    """Train in the running process group (or one process) as ``args`` say.

    Args:
        args: the parsed command line (:func:`parse_args`).

    Returns:
        ``{"loss", "failed", "worst", "checked", "losses"}`` (the check on rank 0 only).
    """
    import torch.nn.functional as F
    from tqdm.auto import tqdm

    import meshshard as ms
    from meshshard._fileutil import atomic_torch_save
    from meshshard.datasets import ShardedTrajectoryDataset, load_trajectory_whole
    from meshshard.distributed import all_reduce, barrier, get_backend, init_device_mesh
    from meshshard.models import (MeshGraphNet, SimulatorSpec, draw_training_steps, simulator_checkpoint,
                                  training_noise)

    use_cuda = _use_cuda(args)
    rank, world = ms.get_rank(), ms.get_world_size()
    device = torch.device("cuda", torch.cuda.current_device()) if use_cuda else torch.device("cpu")
    dtype = getattr(torch, args.dtype)
    domain = args.domain_size or world
    if world % domain:
        raise ValueError(f"--domain-size {domain} does not divide the {world} ranks; use a divisor of {world}")
    groups = world // domain
    if groups == 1:
        mesh = domain_group = data_group = None
        data_rank = 0
    else:
        mesh = init_device_mesh(device.type, (groups, domain), mesh_dim_names=("data", "domain"))
        domain_group, data_group = mesh.get_group("domain"), mesh.get_group("data")
        data_rank = mesh.get_local_rank("data")
    torch.manual_seed(args.seed)

    ds = ShardedTrajectoryDataset(args.data, group=domain_group, dtype=dtype)
    spec = SimulatorSpec.from_dataset(ds, evolving_types=args.loss_node_types, noise_std=args.noise_std)
    config = dict(hidden=args.hidden, num_layers=args.layers, mlp_layers=args.mlp_layers)
    net = MeshGraphNet(spec.num_node_inputs, spec.num_edge_features, spec.num_state, **config).to(device=device,
                                                                                                   dtype=dtype)
    net.broadcast_parameters(src=0)
    model = ms.DomainParallel(net, mesh=mesh, exchange=args.exchange)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    start = 0
    if args.resume and args.save and Path(args.save).exists():
        state = torch.load(args.save, map_location=device, weights_only=True)
        model.module.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = int(state["step"])
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.amp == "bf16" \
        else contextlib.nullcontext
    num_steps = [ds.num_steps(i) for i in range(len(ds))]
    num_nodes = [int(s["num_nodes"]) for s in ds.meta["samples"]]
    if rank == 0:
        print(f"{ds} | backend {get_backend() or 'none (1 process)'} on {device} | {groups} data group(s) x "
              f"{domain} domain rank(s), {args.batch_size} pair(s) per group per step | MeshGraphNet "
              f"hidden={args.hidden} layers={args.layers} | evolving node types "
              f"{spec.evolving_types or 'all'} | noise std {args.noise_std:g}"
              f"{' | amp bf16' if args.amp == 'bf16' else ''} | steps {start}..{args.steps}", flush=True)

    # this rank's part of every trajectory, on the device (every rank of a domain group reads in the same order)
    shards = []
    for i in range(len(ds)):
        s = ds[i]
        s.graph.to(device)
        shards.append((s, s.state.to(device), s.features.to(device), s.node_type.to(device),
                       spec.edge_inputs(s.edge_attr.to(device))))

    ref = None
    if args.check and rank == 0:
        ref_model = MeshGraphNet(spec.num_node_inputs, spec.num_edge_features, spec.num_state, **config).to(
            device=device, dtype=dtype)
        whole = []
        for i in range(len(ds)):
            w = load_trajectory_whole(args.data, i)
            feats = w.get("features", torch.zeros(num_nodes[i], 0))
            types = w.get("node_type", torch.zeros(num_nodes[i], dtype=torch.long))
            whole.append((w["state"].to(device, dtype), feats.to(device, dtype), types.to(device),
                          w["edge_index"].to(device), spec.edge_inputs(w["edge_attr"].to(device, dtype))))
        ref = (ref_model, whole)
    precision = "bf16" if args.amp == "bf16" else args.dtype
    tol = TOLERANCE[precision]
    worst = {"loss": 0.0, "grad": 0.0}
    failed, checked, losses = [], [], {}
    bar = tqdm(range(start, args.steps), disable=rank != 0, desc="train", unit="step")

    def check(step: int, pairs, loss: float) -> None:
        ref_model, whole = ref
        ref_model.load_state_dict(model.module.state_dict())
        ref_model.zero_grad(set_to_none=True)
        ref_loss = 0.0
        for j, (i, t) in enumerate(pairs):
            state, feats, types, ei, e_in = whole[i]
            noise = training_noise(args.seed, step, j, num_nodes[i], spec.num_state, args.noise_std, dtype).to(device)
            x_in, y, w = _pair_inputs(spec, state, feats, types, t, noise)
            ref_loss = ref_loss + F.mse_loss(ref_model(x_in, ei, e_in), y, weight=w) * (1.0 / len(pairs))
        ref_loss.backward()
        gs, gr = flat_grads(model.module), flat_grads(ref_model)
        rv = float(ref_loss.detach())
        d_loss = abs(loss - rv) / max(abs(rv), 1e-30)
        d_grad = float((gs - gr).abs().max() / gr.abs().max().clamp_min(1e-30))
        ok = d_loss <= tol["loss"] and d_grad <= tol["grad"]
        worst["loss"], worst["grad"] = max(worst["loss"], d_loss), max(worst["grad"], d_grad)
        checked.append(step)
        if not ok:
            failed.append(step)
        bar.write(f"step {step}: loss {loss:.17g} (reference {rv:.17g}), relative difference of loss {d_loss:.3e} "
                  f"(tol {tol['loss']:g}), of gradients {d_grad:.3e} (tol {tol['grad']:g}): {'pass' if ok else 'FAIL'}")

    t0 = time.perf_counter()
    loss = float("nan")
    for step in bar:
        pairs = draw_training_steps(args.seed, step, groups * args.batch_size, num_steps)
        mine = [(j, p) for j, p in enumerate(pairs) if j % groups == data_rank]
        opt.zero_grad(set_to_none=True)
        loss_t = torch.zeros(1, dtype=torch.float64, device=device)
        for k, (j, (i, t)) in enumerate(mine):
            s, state, feats, types, e_in = shards[i]
            noise = training_noise(args.seed, step, j, num_nodes[i], spec.num_state, args.noise_std, dtype)
            x_in, y, w = _pair_inputs(spec, state, feats, types, t, noise[s.owned_ids].to(device))
            x_st, y_st, w_st = (ds.shard_tensor(v, s) for v in (x_in, y, w))
            with model.no_sync() if k < len(mine) - 1 else contextlib.nullcontext():
                with autocast():
                    pred = model(x_st, s.graph, e_in)
                loss_st = F.mse_loss(pred.to(y.dtype), y_st, weight=w_st) * (1.0 / len(pairs))
                loss_st.backward()
            loss_t += loss_st.to_local().detach().double()
        if groups > 1:
            all_reduce(loss_t, group=data_group)
        loss = float(loss_t)
        if not math.isfinite(loss):
            raise FloatingPointError(f"step {step}: the loss is {loss}; lower --lr or check the data")
        losses[step] = loss
        if ref is not None:
            check(step, pairs, loss)
        opt.step()
        if rank == 0:
            bar.set_postfix(loss=f"{loss:.5g}")
        if args.save and ((step + 1) % args.save_every == 0 or step + 1 == args.steps):
            if rank == 0:
                atomic_torch_save(simulator_checkpoint(model, spec, optimizer=opt, step=step + 1,
                                                       rng=torch.get_rng_state(), args=vars(args)), args.save)
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
    return {"loss": loss, "failed": failed, "worst": worst, "checked": checked, "losses": losses}


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
            ms.destroy_distributed(barrier=finished)
        return 1 if result["failed"] else 0

    return run_and_report(run, "train_simulator.py")


if __name__ == "__main__":
    sys.exit(main())
