"""The ``meshshard`` command.

Each sub-command lives in its own module ``meshshard/cli/<name>.py`` that defines ``HELP`` (one
line), ``add_arguments(parser)`` and ``run(args) -> int``. Modules are imported only when their
command runs, so ``meshshard --help`` stays fast. Options every command takes (``-q/--quiet``) are
defined once, in :func:`common_parser`.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import os
import sys
from typing import Iterator, List, Optional

from meshshard.cli._report import BAD_INPUT, report_failure, run_and_report

__all__ = ["main", "build_parser", "common_parser", "COMMANDS", "DOCS_EPILOG", "report_failure", "run_and_report"]

COMMANDS = {
    "partition": "split a mesh or point cloud into shards and write them (format: docs/format.md)",
    "preprocess": "turn a dataset of meshes with fields, or trajectories (--state), into sharded training data",
    "info": "show the sizes and quality report of a shard folder and verify its checksums, or what a mesh file holds",
    "plot": "draw a partition (cells coloured by part, ghost nodes marked, part sizes) or a point field",
    "predict": "apply a trained model to meshes or a preprocessed dataset; write VTU files with the predicted fields",
    "rollout": "roll a learned simulator forward on a trajectory; write a .pvd of predictions and errors per step",
    "demo": "partition a real CFD mesh, train MeshGraphNet sharded vs. single-process, compare",
}

# Paths relative to the repository root; tests/test_docs_links.py checks that they exist.
DOCS_EPILOG = "design: docs/design.md; on-disk format: docs/format.md"


def common_parser() -> argparse.ArgumentParser:
    """The options every command takes (a parent parser): ``-q/--quiet``.

    ``-q`` hides progress bars; the command still prints what it wrote or its result.
    """
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress bars (what was written, or the result, is still printed)")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser (commands only; each command's options are added when it runs)."""
    from meshshard import __version__

    parser = argparse.ArgumentParser(
        prog="meshshard",
        description="Domain decomposition of meshes and point clouds for PyTorch.",
        epilog=DOCS_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"meshshard {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, help_text in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=f"meshshard.cli.{name}")
        # Arguments are added only for the command being run (and for `COMMAND --help`).
    return parser


@contextlib.contextmanager
def logs_above_progress_bars() -> Iterator[None]:
    """Route the ``meshshard`` logger through ``tqdm.write`` while a command runs, so a line it logs
    (the numba compilation notice, say) starts on a line of its own above the progress bars instead of
    after a bar's text."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm(loggers=[logging.getLogger("meshshard")]):
        yield


def main(argv: Optional[List[str]] = None) -> int:
    """Run ``meshshard COMMAND ...``.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).

    Returns:
        the exit status: 0 on success, 1 for a damaged shard folder (``info``), 2 for bad input
        (the message, starting ``meshshard COMMAND: error:``, goes to stderr), 130 when interrupted.
        Under torchrun an error raised alike on every rank is printed once, by rank 0, and every
        rank returns the same status (:mod:`meshshard.cli._report`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0] not in COMMANDS:
        args = parser.parse_args(argv)
        parser.print_help()
        return 0 if not argv else 2
    name = argv[0]
    module = importlib.import_module(f"meshshard.cli.{name}")
    cmd_parser = argparse.ArgumentParser(prog=f"meshshard {name}", description=getattr(module, "HELP", COMMANDS[name]),
                                         parents=[common_parser()], epilog=DOCS_EPILOG,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
    module.add_arguments(cmd_parser)
    args = cmd_parser.parse_args(argv[1:])
    try:
        with logs_above_progress_bars():
            return int(module.run(args) or 0)
    except (*BAD_INPUT, KeyboardInterrupt) as exc:
        return report_failure(exc, f"meshshard {name}")
    except Exception as exc:  # noqa: BLE001 - under torchrun, one report instead of a traceback per rank
        if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
            return report_failure(exc, f"meshshard {name}")
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
