"""How a command (or an example script) reports a failure: once, not once per rank.

Under torchrun every rank runs the same command. An input error found by
:func:`meshshard.distributed.run_together` or :func:`~meshshard.distributed.agree` is raised on
every rank with the same message (a :class:`~meshshard.distributed.CollectiveMismatchError`), so
only rank 0 prints it; the other ranks exit quietly with the same exit status. An error that only
one rank raised (a bug, a failure of its own) is printed by that rank, prefixed with its rank; a
rank that stopped only because a peer died (:class:`~meshshard.distributed.RankLostError`) says so
in one line on rank 0, pointing at the failing rank's message, and stays quiet elsewhere.

Exit statuses: 2 for bad input (``ValueError``, ``TypeError``, ``FileNotFoundError``; the message
starts ``PROG: error:``), 130 when interrupted, 1 for anything else (then with the traceback).
"""
from __future__ import annotations

import os
import sys
import traceback
from typing import Callable, Optional, TextIO, Tuple

__all__ = ["exit_status", "report_failure", "run_and_report", "BAD_INPUT"]

#: exceptions that mean bad input (exit status 2, a message without traceback)
BAD_INPUT = (ValueError, TypeError, FileNotFoundError)


def exit_status(exc: BaseException) -> int:
    """The exit status for ``exc``: 130 interrupted, 2 bad input, 1 anything else.

    Args:
        exc: the exception that stopped the command.

    Returns:
        the status.
    """
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 2 if isinstance(exc, BAD_INPUT) else 1


def _rank_and_world() -> Tuple[int, int]:
    """This process's rank and the world size: from the process group if one is running, else from
    torchrun's variables (the group may already be destroyed when the error is reported)."""
    try:
        from meshshard.distributed import get_rank, get_world_size, is_initialized

        if is_initialized():
            return get_rank(), get_world_size()
    except ImportError:  # pragma: no cover - torch without distributed support
        pass
    try:
        return int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    except ValueError:
        return 0, 1


def _kind(exc: BaseException) -> str:
    """``"agreed"`` (raised alike on every rank), ``"lost"`` (a peer died) or ``"local"``."""
    from meshshard.distributed import CollectiveMismatchError, RankLostError

    seen, e = set(), exc
    while e is not None and id(e) not in seen:  # a command may wrap the agreed error in its own
        seen.add(id(e))
        if isinstance(e, RankLostError):
            return "lost"
        if isinstance(e, CollectiveMismatchError):
            return "agreed"
        e = e.__cause__
    return "local"


def report_failure(exc: BaseException, prog: str, *, file: Optional[TextIO] = None,
                   rank: Optional[int] = None, world: Optional[int] = None) -> int:
    """Print why ``prog`` stopped, on the one rank that should, and return the exit status.

    Args:
        exc: the exception.
        prog: the program's name, first word of the message (``"meshshard predict"``).
        file: where to print (default ``sys.stderr``).
        rank, world: this process's rank and the world size (default: the running process group's,
            else torchrun's ``RANK`` / ``WORLD_SIZE``, else 0 and 1).

    Returns:
        :func:`exit_status` of ``exc``, the same on every rank for an error raised on every rank.
    """
    file = sys.stderr if file is None else file
    if rank is None or world is None:
        r, w = _rank_and_world()
        rank, world = (r if rank is None else rank), (w if world is None else world)
    status = exit_status(exc)
    kind = _kind(exc) if world > 1 else "local"
    if kind == "agreed" and rank != 0:
        return status  # rank 0 tells every rank's story
    if kind == "lost":
        if rank == 0:
            print(f"{prog}: stopped: {exc}; the failing rank's own error is printed above", file=file, flush=True)
        return status
    who = f"rank {rank} of {world}: " if world > 1 and kind == "local" else ""
    if isinstance(exc, KeyboardInterrupt):
        print(f"{prog}: {who}interrupted", file=file, flush=True)
    elif status == 2:
        print(f"{prog}: {who}error: {exc}", file=file, flush=True)
    else:
        traceback.print_exception(exc, file=file)
        print(f"{prog}: {who}failed: {type(exc).__name__}: {exc}", file=file, flush=True)
    if world > 1 and kind == "agreed":
        print(f"{prog}: (every one of the {world} ranks stopped with this error and exit status {status}; "
              "it is printed once, by rank 0)", file=file, flush=True)
    return status


def run_and_report(fn: Callable[[], Optional[int]], prog: str) -> int:
    """Run ``fn`` and return its exit status, or report its failure with :func:`report_failure`.

    Args:
        fn: the command's body; returns its exit status (``None``: 0).
        prog: the program's name for the messages.

    Returns:
        ``fn()``'s status, or the failure's.
    """
    try:
        return int(fn() or 0)
    except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - every failure ends in one report
        return report_failure(exc, prog)
