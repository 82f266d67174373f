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

import logging
import threading
from typing import Optional

from numba import njit
from numba.core import event

__all__ = ["njit", "COMPILE_NOTICE", "NOTICE_AFTER_S"]

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

