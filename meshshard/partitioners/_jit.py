"""numba's ``njit`` for the partitioners' kernels, and a notice when they compile.

The kernels compile on first use and are cached on disk (``cache=True``). The first compilation
takes about a minute and a half on one core (the first calls of all five methods took 86-91 s on
2 shared CPU cores), during which nothing else is printed, so the first compilation of a
partitioner kernel in a process logs one line on the ``meshshard`` logger (level WARNING: Python
prints it to stderr when logging is not configured). Loading the cache fires no compilation, so
later processes stay quiet. Silence it with ``logging.getLogger("meshshard").setLevel(logging.ERROR)``.
"""
from __future__ import annotations

import logging
import threading

from numba import njit
from numba.core import event

__all__ = ["njit", "COMPILE_NOTICE"]

COMPILE_NOTICE = ("meshshard: numba is compiling the partitioning kernels for this machine (first use only, "
                  "about 1-2 minutes on one core; they are cached on disk afterwards)")

_logger = logging.getLogger("meshshard")
_lock = threading.Lock()
_announced = False


class _FirstCompileNotice(event.Listener):
    """Logs :data:`COMPILE_NOTICE` when the first ``meshshard.partitioners`` kernel of this process starts compiling."""

    def on_start(self, ev: event.Event) -> None:
        global _announced
        if _announced:
            return
        func = getattr(ev.data.get("dispatcher"), "py_func", None)
        if not getattr(func, "__module__", "").startswith("meshshard.partitioners."):
            return
        with _lock:
            if _announced:
                return
            _announced = True
        _logger.warning(COMPILE_NOTICE)

    def on_end(self, ev: event.Event) -> None:
        pass


event.register("numba:compile", _FirstCompileNotice())
