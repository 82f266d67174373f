"""``meshshard rollout``: roll a learned simulator forward from a step of a trajectory and compare.

The command's options and its run; the work is :func:`meshshard.models.rollout_to_files` (its
module documents what is written to ``OUT/`` on one process and under torchrun).
"""
from __future__ import annotations

import argparse

from meshshard.cli._mesh_cmd import torchrun_device
from meshshard.models.rollout_files import rollout_to_files

HELP = ("roll a learned simulator (a checkpoint of examples/train_simulator.py) forward from a step of a "
        "trajectory; write OUT/<name>.pvd with <field>_pred and <field>_error per step, and the error plot")

__all__ = ["HELP", "add_arguments", "run", "rollout"]

#: the library function this command runs (:func:`meshshard.models.rollout_to_files`)
rollout = rollout_to_files


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add this command's options to ``parser``.

    Args:
        parser: the command's ``argparse`` parser.
    """
    from meshshard.cli._mesh_cmd import METHODS

    parser.add_argument("trajectory", metavar="TRAJ",
                        help="a trajectory: CASE.pvd, an XDMF time series, a folder of numbered step files, or a "
                             "MeshGraphNets dataset folder (--split, --index)")
    parser.add_argument("--checkpoint", required=True, metavar="CKPT",
                        help="simulator checkpoint written by examples/train_simulator.py --save")
    parser.add_argument("-o", "--out", required=True, help="output folder")
    parser.add_argument("--steps", type=int, default=None, metavar="N",
                        help="model applications (default: to the last step of the trajectory)")
    parser.add_argument("--start", type=int, default=0, metavar="S", help="the true step to start from (default 0)")
    parser.add_argument("--index", type=int, default=0, help="trajectory of a MeshGraphNets split (default 0)")
    parser.add_argument("--split", default="train", help="MeshGraphNets split (default train)")
    parser.add_argument("-m", "--method", default="kdtree", choices=METHODS,
                        help="partitioner under torchrun (default kdtree)")
    parser.add_argument("--seed", type=int, default=0, help="partitioner seed")
    parser.add_argument("--dtype", default=None, choices=["float32", "float64"],
                        help="compute dtype (default: the checkpoint's)")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                        help="auto: cuda when available (NCCL under torchrun), else cpu (gloo)")


def run(args: argparse.Namespace) -> int:
    """Start the process group when launched by torchrun, roll out, print the errors.

    Args:
        args: the parsed options.

    Returns:
        the exit status (0).
    """
    with torchrun_device(args.device) as device:
        rollout(args.checkpoint, args.trajectory, args.out, steps=args.steps, start=args.start, index=args.index,
                split=args.split, method=args.method, seed=args.seed, dtype=args.dtype, device=device,
                progress=not args.quiet)
    return 0
