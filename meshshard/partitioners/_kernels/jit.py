"""numba's ``njit`` for the partitioners' kernels, and a notice while they compile for long.

The kernels compile on first use and are cached on disk (``cache=True``). A first compilation is long
(``python benchmarks/bench_partition.py --only compile`` times it), and nothing else is printed meanwhile. So when a
partitioner kernel's compilation has run for :data:`NOTICE_AFTER_S` seconds, one line is logged on the ``meshshard``
logger (level WARNING: Python prints it to stderr when logging is not configured), once per
process. Loading the cache compiles nothing, and the short compilations of a new type signature
in a warm cache finish before the notice is due, so those stay quiet. Silence it with
``logging.getLogger("meshshard").setLevel(logging.ERROR)``.
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading
from typing import Callable, Dict, Optional, Tuple

import numpy as np
from numba import njit, typeof, types
from numba.core import event

__all__ = ["njit", "any_layout", "COMPILE_NOTICE", "NOTICE_AFTER_S"]

COMPILE_NOTICE = ("meshshard: numba is compiling the partitioning kernels for this machine (a first use can take "
                  "minutes; later runs load them from the disk cache)")
#: seconds a compilation runs before :data:`COMPILE_NOTICE` is logged (0: at its start)
NOTICE_AFTER_S = 3.0

_logger = logging.getLogger("meshshard")
_announced = False


def _announce() -> None:
    global _announced
    if not _announced:
        _announced = True
        _logger.warning(COMPILE_NOTICE)


def _is_partitioner_kernel(ev: event.Event) -> bool:
    func = getattr(ev.data.get("dispatcher"), "py_func", None)
    return getattr(func, "__module__", "").startswith("meshshard.partitioners.")


class _SlowCompileNotice(event.Listener):
    """Logs :data:`COMPILE_NOTICE` once a partitioner kernel's compilation (the outermost one: a kernel
    compiles the kernels it calls inside its own) has run for :data:`NOTICE_AFTER_S` seconds. numba
    compiles under one global lock, so these events never interleave."""

    def __init__(self) -> None:
        self.depth = 0
        self.timer: Optional[threading.Timer] = None

    def on_start(self, ev: event.Event) -> None:
        if not _is_partitioner_kernel(ev):
            return
        self.depth += 1
        if self.depth > 1 or _announced:
            return
        if NOTICE_AFTER_S <= 0:
            _announce()
            return
        self.timer = threading.Timer(NOTICE_AFTER_S, _announce)
        self.timer.daemon = True
        self.timer.start()

    def on_end(self, ev: event.Event) -> None:
        if not _is_partitioner_kernel(ev):
            return
        self.depth -= 1
        if self.depth == 0 and self.timer is not None:
            self.timer.cancel()
            self.timer = None


_listener = _SlowCompileNotice()
event.register("numba:compile", _listener)


def _arg_key(arg) -> Tuple:
    """What decides numba's type of one argument (for the arrays: dtype, dimensions, layout, writability)."""
    if isinstance(arg, np.ndarray):
        return (arg.dtype.str, arg.ndim, arg.flags.c_contiguous, arg.flags.writeable)
    return (type(arg),)


def any_layout(kernel, *params: str) -> Callable:
    """``kernel`` called with the array arguments named ``params`` typed as read-only arrays of any layout.

    numba compiles a kernel once per distinct argument type, and a contiguous array and a strided view (such
    as the zero-stride edge weights of an unweighted graph, beside the contiguous weights of its coarse
    levels) are distinct types: the same kernel would be compiled twice for the same work. Through this
    wrapper both take the one compilation for a read-only array of any layout (loaded from the disk cache like
    any other); the other arguments keep their own types.

    Args:
        kernel: a numba dispatcher (``njit``), called with every argument positional.
        params: names of its array parameters to type for any layout; the kernel must not write to them.

    Returns:
        A function of the kernel's arguments that returns the kernel's result (its docstring is the kernel's).
    """
    names = list(inspect.signature(kernel.py_func).parameters)
    loose = frozenset(names.index(p) for p in params)
    entries: Dict[Tuple, Callable] = {}

    @functools.wraps(kernel.py_func)
    def call(*args):
        key = tuple(_arg_key(a) for a in args)
        entry = entries.get(key)
        if entry is None:
            if len(args) != len(names):
                raise TypeError(f"{kernel.py_func.__name__} takes {len(names)} positional arguments, got {len(args)}")
            sig = tuple(types.Array(typeof(a).dtype, a.ndim, "A", readonly=True) if i in loose else typeof(a)
                        for i, a in enumerate(args))
            entry = entries[key] = kernel.compile(sig)
        return entry(*args)

    call.kernel = kernel
    return call
