"""Run compiled computations beside the calling thread.

The refinement's kernels are compiled with ``nogil=True``, so a :class:`Concurrent` thread runs them
on another CPU while the caller goes on (a geometric start, say); a :class:`Handoff` passes it a value
the caller computes meanwhile. Results do not depend on the
timing: the thread computes on its own arrays and the caller waits for them. With one usable CPU,
or with ``MESHSHARD_THREADS=1`` in the environment, the computation runs in the caller, when its
result is first asked for.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

__all__ = ["Concurrent", "Handoff", "second_cpu"]


def second_cpu() -> bool:
    """Whether a second thread can run beside this one: two usable CPUs, and ``MESHSHARD_THREADS``
    (if set) above 1."""
    limit = os.environ.get("MESHSHARD_THREADS", "").strip()
    if limit:
        try:
            if int(limit) < 2:
                return False
        except ValueError:
            raise ValueError(f"MESHSHARD_THREADS must be an integer, got {limit!r}") from None
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # not Linux
        return (os.cpu_count() or 1) > 1


class Concurrent:
    """``fn(*args)`` started on a thread now (see :func:`second_cpu`); :meth:`result` waits for it.

    An exception in ``fn`` is raised again by :meth:`result`. If the caller never asks, the thread
    still finishes on its own (it is a daemon and holds nothing the caller needs).
    """

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        self._fn, self._args = fn, args
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False
        self._thread = None
        if second_cpu():
            self._thread = threading.Thread(target=self._run, name="meshshard-refine", daemon=True)
            self._thread.start()

    @property
    def threaded(self) -> bool:
        """Whether ``fn`` runs on a thread (else it runs in :meth:`result`)."""
        return self._thread is not None

    def _run(self) -> None:
        try:
            self._value = self._fn(*self._args)
        except BaseException as err:  # handed to the caller by result()
            self._error = err
        self._done = True

    def result(self) -> Any:
        """The value of ``fn(*args)``, computed here if no thread was started."""
        if self._thread is None and not self._done:
            self._run()
        elif self._thread is not None:
            self._thread.join()
        self._fn = self._args = None  # free the inputs
        if self._error is not None:
            raise self._error
        return self._value


class Handoff:
    """A value the caller puts once and a :class:`Concurrent` computation waits for (:meth:`get`).

    Put it on every path, errors included (put ``None``): a thread waiting in :meth:`get` would otherwise wait
    forever. With no thread the computation runs when its result is asked for, after the put.
    """

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._value: Any = None

    def put(self, value: Any) -> None:
        """Hand ``value`` over (once) and wake whoever waits in :meth:`get`."""
        self._value = value
        self._ready.set()

    def get(self) -> Any:
        """The value put, waiting for it."""
        self._ready.wait()
        return self._value

    def ready(self) -> bool:
        """Whether a value was put (:meth:`get` would not wait)."""
        return self._ready.is_set()
