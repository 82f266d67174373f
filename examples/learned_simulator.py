"""A learned simulator end to end, without downloads: generate transient cases, preprocess them into
2 parts, train MeshGraphNet on 2 ranks, roll it out sharded on a held-out case, and draw the
rollout as an animation and an error plot.

    python examples/learned_simulator.py --out sim_demo            # the whole path (a few minutes on 2 cores)
    python examples/learned_simulator.py --out sim_demo --quick    # tiny sizes: checks that the path runs

The same path with the command-line tools, after ``--generate-only`` wrote the cases::

    python examples/learned_simulator.py --out sim_demo --generate-only
    meshshard preprocess sim_demo/cases/train_*.pvd -k 2 -o sim_demo/data --state velocity concentration \\
        --node-type node_type
    torchrun --nproc-per-node 2 examples/train_simulator.py --data sim_demo/data --steps 600 --hidden 32 \\
        --layers 4 --lr 1e-3 --noise-std 0.003 --save sim_demo/sim.pt
    torchrun --nproc-per-node 2 -m meshshard rollout --checkpoint sim_demo/sim.pt sim_demo/cases/test.pvd \\
        -o sim_demo/rollout
    meshshard plot sim_demo/rollout/test.pvd --compare velocity --animate -o sim_demo/rollout.gif

The cases come from :func:`meshshard.datasets.synthetic.advection_diffusion_trajectory`: a scalar
``concentration`` and a ``velocity`` (a uniform stream with vortices) carried by the stream and
diffused on a jittered triangle mesh, boundary nodes held at their first values (node type 1).
Each case has its own random start (its seed); the held-out case ``test`` has a seed no training
case has. Training samples random steps of random cases with noise on the input state
(``examples/train_simulator.py`` in each of 2 spawned ranks); the rollout (``meshshard.models.rollout_to_files``,
what ``meshshard rollout`` runs, on 2 ranks) keeps the state sharded and moves only halos per step. Written under
``--out``: ``cases/``, ``data/``, ``sim.pt``, ``rollout/test.pvd`` (+ step files),
``rollout/test_rollout_error.png`` and ``rollout.gif``.
"""
from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent

# (full, --quick) sizes
SIZES = {
    "nodes": (900, 150), "time_steps": (40, 8), "cases": (6, 2), "train_steps": (600, 4), "hidden": (32, 8),
    "layers": (4, 2),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output folder (created)")
    p.add_argument("--quick", action="store_true", help="tiny sizes: the path runs in well under a minute")
    p.add_argument("--generate-only", action="store_true", help="write the cases and stop (for the CLI path)")
    p.add_argument("--nodes", type=int, default=None, help="mesh nodes (default 900; quick 150)")
    p.add_argument("--time-steps", type=int, default=None, help="steps per case (default 40; quick 8)")
    p.add_argument("--cases", type=int, default=None, help="training cases (default 6; quick 2)")
    p.add_argument("--train-steps", type=int, default=None, help="optimizer steps (default 600; quick 4)")
    p.add_argument("--hidden", type=int, default=None, help="latent width (default 32; quick 8)")
    p.add_argument("--layers", type=int, default=None, help="processor blocks (default 4; quick 2)")
    p.add_argument("--ranks", type=int, default=2, help="ranks of training and rollout (default 2)")
    p.add_argument("--noise-std", type=float, default=0.003, help="training noise on the input state")
    p.add_argument("--gif-dpi", type=int, default=60, help="resolution of the animation (default 60)")
    args = p.parse_args(argv)
    for key, (full, quick) in SIZES.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if args.ranks < 1 or args.cases < 1 or args.time_steps < 3:
        p.error("--ranks and --cases must be >= 1, --time-steps >= 3")
    return args


def _train_simulator():
    """examples/train_simulator.py as a module (it lives beside this file)."""
    spec = importlib.util.spec_from_file_location("train_simulator", EXAMPLES / "train_simulator.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_rank(rank, world, argv):
    """One training rank (spawned, process group started): examples/train_simulator.py's train()."""
    import contextlib
    import io

    example = _train_simulator()
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet) if rank else contextlib.nullcontext():
        return example.train(example.parse_args(argv))["loss"]


def _rollout_rank(rank, world, checkpoint, trajectory, out):
    """One rollout rank: the sharded rollout of ``meshshard rollout`` (each rank writes its pieces of the steps)."""
    from meshshard.models import rollout_to_files as rollout

    res = rollout(checkpoint, trajectory, out, progress=False, echo=lambda line: None)
    return {k: res[k] for k in ("pvd", "png", "rmse")} if rank == 0 else None


def generate(args, out: Path) -> dict:
    """Write the training cases and the held-out case as ``.pvd`` collections."""
    from meshshard.datasets.synthetic import advection_diffusion_trajectory, jittered_grid_mesh
    from meshshard.io import write_trajectory

    mesh = jittered_grid_mesh(args.nodes, aspect=2.0, jitter=0.2, seed=0)
    cases = out / "cases"
    train = [write_trajectory(advection_diffusion_trajectory(mesh, steps=args.time_steps, seed=i, name=f"train_{i}"),
                              cases / f"train_{i}.pvd") for i in range(args.cases)]
    test = write_trajectory(advection_diffusion_trajectory(mesh, steps=args.time_steps, seed=1000, name="test"),
                            cases / "test.pvd")
    return {"train": train, "test": test, "nodes": mesh.num_nodes}


def run(args) -> dict:
    """The whole path as ``args`` say (see the module docstring).

    Returns:
        ``{"cases", "loss", "rmse": {field: [steps + 1]}, "pvd", "png", "gif", "train_s", "total_s"}``
        (only ``"cases"`` with ``--generate-only``).
    """
    out = Path(args.out)
    t0 = time.perf_counter()
    made = generate(args, out)
    print(f"generated {len(made['train'])} training cases and a held-out case ({made['nodes']} nodes, "
          f"{args.time_steps} steps each) in {out / 'cases'}", flush=True)
    if args.generate_only:
        return {"cases": made}

    from meshshard.datasets import preprocess_trajectories
    from meshshard.testing import run_distributed
    from meshshard.viz import animate_field_comparison

    data = out / "data"
    preprocess_trajectories(made["train"], data, args.ranks, state=["velocity", "concentration"],
                            node_type="node_type")
    print(f"preprocessed into {args.ranks} parts per case: {data}", flush=True)

    ckpt = out / "sim.pt"
    train_argv = ["--data", str(data), "--steps", str(args.train_steps), "--hidden", str(args.hidden), "--layers",
                  str(args.layers), "--lr", "1e-3", "--noise-std", str(args.noise_std), "--save", str(ckpt),
                  "--save-every", str(args.train_steps)]
    t1 = time.perf_counter()
    losses = run_distributed(_train_rank, args.ranks, args=(train_argv,), timeout=3600)
    train_s = time.perf_counter() - t1
    print(f"trained {args.train_steps} steps on {args.ranks} ranks in {train_s:.0f} s: final loss "
          f"{losses[0]:.4g}, checkpoint {ckpt}", flush=True)

    res = run_distributed(_rollout_rank, args.ranks, args=(str(ckpt), str(made["test"]), str(out / "rollout")),
                          timeout=3600)[0]
    rmse = res["rmse"]
    steps = len(next(iter(rmse.values())))
    picks = sorted({1, steps // 4, steps // 2, steps - 1} - {0})
    print(f"rolled out {steps - 1} steps on {args.ranks} ranks from step 0 of the held-out case: RMSE "
          + "; ".join(f"{key} " + ", ".join(f"step {k} {rmse[key][k]:.3g}" for k in picks) for key in rmse), flush=True)

    gif = out / "rollout.gif"
    animate_field_comparison(res["pvd"], "velocity", gif, dpi=args.gif_dpi, progress=False)
    total_s = time.perf_counter() - t0
    print(f"wrote {res['pvd']}, {res['png']} and {gif} ({total_s:.0f} s in all)", flush=True)
    return dict(res, cases=made, loss=losses[0], gif=gif, train_s=train_s, total_s=total_s)


def main(argv=None) -> int:
    run(parse_args(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
